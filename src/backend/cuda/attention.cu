/* RoPE, the KV cache store, and causal GQA attention over an f32, bf16 or fp8 (e4m3 + per-row scale) cache.
 * Variants:
 *   0  rope_rotate_half      one thread per (token, head, rotary pair)
 *   1  attention_split4<E,F> one block of 4 warps per (token, q-head); warp w takes keys w, w+4, ...
 *                            with an online softmax, the 4 partial results merged in shared memory;
 *                            lane l holds dims l + 32e (E = ceil(Dh/32) ≤ 8); F the KV format. Serves
 *                            decode (T = 1) and prefill (T > 1) alike.
 *   2  kv_store_rows<F>      one warp per (token, kv head): amax by warp reduction (fp8), then the row
 *                            rounded to nearest even as the CPU backend does */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

__global__ void rope_rotate_half(float *x /* [T][H][Dh] */, int T, int H, int Dh, int R, float theta, int pos0) {
    const int half = R / 2;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * H * half) return;
    const int i = (int)(idx % half), h = (int)(idx / half % H), t = (int)(idx / half / H);
    /* as transformers computes it in f32: inv_freq = 1 / theta^(2i/R); angle = pos · inv_freq */
    const float inv = 1.0f / powf(theta, (float)(2 * i) / (float)R);
    const float ang = (float)(pos0 + t) * inv, c = cosf(ang), s = sinf(ang);
    float *v = x + ((size_t)t * H + h) * Dh;
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x1 * c + x0 * s;
}

void qrt_cuda_rope(float *x, int T, int H, int Dh, int R, double theta, int pos0) {
    const size_t n = (size_t)T * H * (R / 2);
    if (!n) return;
    rope_rotate_half<<<qrt_grid(n, 256), 256>>>(x, T, H, Dh, R, (float)theta, pos0);
    QRT_CUDA_LAUNCHED();
}

/* Element d of cache row `row` widened to f32. */
template <int F>
__device__ __forceinline__ float kv_load(const void *base, const float *scales, size_t row, int Dh, int d) {
    if (F == QRT_KV_F32) return reinterpret_cast<const float *>(base)[row * Dh + d];
    if (F == QRT_KV_BF16) return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t *>(base)[row * Dh + d] << 16);
    __nv_fp8_e4m3 e;
    e.__x = reinterpret_cast<const __nv_fp8_storage_t *>(base)[row * Dh + d];
    return (float)e * scales[row];
}

template <int F>
__global__ void kv_store_rows(const float *x /* [T][Hkv][Dh] */, int T, int pos0, int Hkv, int Dh, void *cache,
                              float *scales /* [C][Hkv] or NULL */) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= T * Hkv) return;
    const int t = warp / Hkv, h = warp % Hkv;
    const float *src = x + (size_t)warp * Dh;
    const size_t row = (size_t)(pos0 + t) * Hkv + h;
    if (F == QRT_KV_F32) {
        for (int d = lane; d < Dh; d += 32) reinterpret_cast<float *>(cache)[row * Dh + d] = src[d];
    } else if (F == QRT_KV_BF16) {
        for (int d = lane; d < Dh; d += 32)
            reinterpret_cast<__nv_bfloat16 *>(cache)[row * Dh + d] = __float2bfloat16_rn(src[d]);
    } else {
        float amax = 0.0f;
        for (int d = lane; d < Dh; d += 32) amax = fmaxf(amax, fabsf(src[d]));
        for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int d = lane; d < Dh; d += 32)
            reinterpret_cast<__nv_fp8_storage_t *>(cache)[row * Dh + d] =
                __nv_cvt_float_to_fp8(src[d] / sc, __NV_SATFINITE, __NV_E4M3);
        if (lane == 0) scales[row] = sc;
    }
}

void qrt_cuda_kv_store(const qrt_kv *kv, const float *k, const float *v, int T, int pos0, int Hkv, int Dh) {
    const unsigned threads = 128, blocks = qrt_grid((size_t)T * Hkv * 32, threads);
    switch (kv->fmt) {
    case QRT_KV_F32:
        kv_store_rows<QRT_KV_F32><<<blocks, threads>>>(k, T, pos0, Hkv, Dh, kv->k, NULL);
        kv_store_rows<QRT_KV_F32><<<blocks, threads>>>(v, T, pos0, Hkv, Dh, kv->v, NULL);
        break;
    case QRT_KV_BF16:
        kv_store_rows<QRT_KV_BF16><<<blocks, threads>>>(k, T, pos0, Hkv, Dh, kv->k, NULL);
        kv_store_rows<QRT_KV_BF16><<<blocks, threads>>>(v, T, pos0, Hkv, Dh, kv->v, NULL);
        break;
    default:
        kv_store_rows<QRT_KV_FP8><<<blocks, threads>>>(k, T, pos0, Hkv, Dh, kv->k, kv->ks);
        kv_store_rows<QRT_KV_FP8><<<blocks, threads>>>(v, T, pos0, Hkv, Dh, kv->v, kv->vs);
    }
    QRT_CUDA_LAUNCHED();
}

template <int E, int F>
__global__ void __launch_bounds__(128) attention_split4(const float *q /* [T][Hq][Dh] */, qrt_kv kv, int pos0, int Hq,
                                                        int Hkv, int Dh, float *out /* [T][Hq][Dh] */) {
    __shared__ float part_m[4], part_l[4];
    __shared__ float part_o[4][E * 32];
    const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = h / (Hq / Hkv), n = pos0 + t + 1; /* q-head h reads kv-head h // group; causal */
    const float scale = 1.0f / sqrtf((float)Dh);
    const float *qv = q + ((size_t)t * Hq + h) * Dh;
    float qr[E], o[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int d = lane + 32 * e;
        qr[e] = d < Dh ? qv[d] : 0.0f;
        o[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = warp; j < n; j += 4) {
        const size_t row = (size_t)j * Hkv + g;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int d = lane + 32 * e;
            if (d < Dh) s = fmaf(qr[e], kv_load<F>(kv.k, kv.ks, row, Dh, d), s);
        }
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int d = lane + 32 * e;
            o[e] = o[e] * corr + (d < Dh ? p * kv_load<F>(kv.v, kv.vs, row, Dh, d) : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) part_m[warp] = m, part_l[warp] = l;
#pragma unroll
    for (int e = 0; e < E; e++) part_o[warp][lane + 32 * e] = o[e];
    __syncthreads();
    if (warp == 0) {
        float M = fmaxf(fmaxf(part_m[0], part_m[1]), fmaxf(part_m[2], part_m[3])); /* finite: key 0 is warp 0's */
        float f[4], L = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            f[w] = part_l[w] > 0.0f ? expf(part_m[w] - M) : 0.0f; /* a warp without keys has m = -inf, l = 0 */
            L += part_l[w] * f[w];
        }
        float *dst = out + ((size_t)t * Hq + h) * Dh;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int d = lane + 32 * e;
            float acc = 0.0f;
#pragma unroll
            for (int w = 0; w < 4; w++) acc += part_o[w][d] * f[w];
            if (d < Dh) dst[d] = acc / L;
        }
    }
}

template <int F>
static void launch_attention(const float *q, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    dim3 grid(Hq, T);
    const int E = (Dh + 31) / 32;
    if (E <= 1) attention_split4<1, F><<<grid, 128>>>(q, *kv, pos0, Hq, Hkv, Dh, out);
    else if (E <= 2) attention_split4<2, F><<<grid, 128>>>(q, *kv, pos0, Hq, Hkv, Dh, out);
    else if (E <= 4) attention_split4<4, F><<<grid, 128>>>(q, *kv, pos0, Hq, Hkv, Dh, out);
    else attention_split4<8, F><<<grid, 128>>>(q, *kv, pos0, Hq, Hkv, Dh, out);
}

void qrt_cuda_attention(const float *q, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    QRT_ASSERT(Hkv > 0 && Hq % Hkv == 0 && Dh > 0 && Dh <= 256 && T > 0);
    if (kv->fmt == QRT_KV_F32) launch_attention<QRT_KV_F32>(q, kv, T, pos0, Hq, Hkv, Dh, out);
    else if (kv->fmt == QRT_KV_BF16) launch_attention<QRT_KV_BF16>(q, kv, T, pos0, Hq, Hkv, Dh, out);
    else launch_attention<QRT_KV_FP8>(q, kv, T, pos0, Hq, Hkv, Dh, out);
    QRT_CUDA_LAUNCHED();
}
