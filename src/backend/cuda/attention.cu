/* The attention layer's non-GEMM work: per-token preparation (q/k RMSNorm, RoPE, the KV cache store in f32, bf16
 * or fp8 = e4m3 + per-row scale) and causal GQA attention with its sigmoid output gate.
 * Variants:
 *   0  attn_prep_rows<F>      one block of 128 threads per (token, row), the rows being the Hq queries, the Hkv keys
 *                             and the Hkv values. A query or key row is RMS-normed into shared memory (block_sum at
 *                             128 threads: the order rmsnorm_rows uses for Dh ≤ 2048) and rotated there; a query
 *                             goes back in place, a key into the cache; a value row goes to the cache as it is (fp8:
 *                             amax by block max, then round to nearest even as the CPU backend does). One launch
 *                             for what split_rows, two rmsnorms, two ropes and kv_store did, with their arithmetic.
 *   1  attention_chunk<E,F>   one block of 4 warps per (token, q-head, key chunk); warp w takes keys j0 + w,
 *                             j0 + w + 4, ... of its chunk with an online softmax, the 4 partial results merged in
 *                             shared memory; lane l holds dims l + 32e (E = ceil(Dh/32) ≤ 8); F the KV format. A token
 *                             whose keys are one chunk writes its gated output directly; otherwise the chunk's
 *                             (max, sum, unnormalised output) goes to a scratch slot.
 *   2  attention_merge<E>     one warp per (token, q-head) with more than one chunk: folds the chunks in the order
 *                             0, 1, ... and applies the gate.
 * Chunks: the token at position p attends to n = p + 1 keys, cut into chunks of att_chunk_keys(n) = max(32,
 * ceil(n / 64)) keys (at most 64 chunks). The cut depends only on n, never on T or on the call's other tokens, so
 * a token's output is bit-identical whether it is computed alone, in a verify batch or in a prefill piece.
 * Recorded into a CUDA graph, all three kernels read the position from the step slot (backend.cu) instead of
 * their pos0 argument, and the chunk grid is sized for the session's longest context, so one graph serves every
 * position with the same bits. */
#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define ATT_MAX_DH 256
#define ATT_CHUNK_KEYS 32 /* a context of up to this many keys is one chunk: no scratch, no merge */
#define ATT_MAX_CHUNKS 64
#define ATT_SLICE 16      /* tokens per chunk + merge launch pair: bounds the scratch */
#define ATT_AHEAD 4       /* keys a warp of attention_chunk has in flight */
#define ATT_MERGE_BATCH 8 /* chunk outputs attention_merge loads at once */

__host__ __device__ static inline int att_chunk_keys(int n) {
    const int k = (n + ATT_MAX_CHUNKS - 1) / ATT_MAX_CHUNKS;
    return k > ATT_CHUNK_KEYS ? k : ATT_CHUNK_KEYS;
}
/* every chunk c < att_chunks(n) starts below n, so none is empty. Not monotonic in n (2048 keys are 64 chunks of
 * 32, 2049 are 63 of 33): a launch takes the most over its tokens (att_chunks_max). */
__host__ __device__ static inline int att_chunks(int n) { return (n + att_chunk_keys(n) - 1) / att_chunk_keys(n); }

/* The most chunks any token t0..t0+T-1 of a call at pos0 has. */
static int att_chunks_max(int pos0, int t0, int T) {
    int most = 1;
    for (int t = t0; t < t0 + T; t++) most = QRT_MAX(most, att_chunks(pos0 + t + 1));
    return most;
}

/* Scratch layout for ATT_SLICE tokens (tl = token within the slice): the chunk outputs [ATT_SLICE][Hq][64][Dh],
 * then each chunk's (max, sum) [ATT_SLICE][Hq][64][2]. */
__device__ static inline size_t att_o_at(int tl, int h, int c, int Hq, int Dh) {
    return (((size_t)tl * Hq + h) * ATT_MAX_CHUNKS + c) * Dh;
}
__device__ static inline size_t att_ml_at(int tl, int h, int c, int Hq, int Dh) {
    return (size_t)ATT_SLICE * Hq * ATT_MAX_CHUNKS * Dh + (((size_t)tl * Hq + h) * ATT_MAX_CHUNKS + c) * 2;
}

/* ---- preparation ---------------------------------------------------------------------------------------- */

/* row = rmsnorm(x) · w, then rotate-half RoPE of its first R dims at position pos, in shared memory. The
 * arithmetic is rmsnorm_rows' followed by the old rope kernel's, so the values are the same bits. */
__device__ static void norm_rotate(const float *x /* [Dh] */, const float *w /* [Dh] */, int Dh, float eps, int R,
                                   float theta, int pos, float *row /* [Dh] shared */, float *scratch) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < Dh; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)Dh + eps);
    for (int i = threadIdx.x; i < Dh; i += blockDim.x) row[i] = x[i] * inv * w[i];
    __syncthreads();
    const int half = R / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        /* as transformers computes it in f32: inv_freq = 1 / theta^(2i/R); angle = pos · inv_freq */
        const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)R);
        const float ang = (float)pos * inv_freq, c = cosf(ang), s = sinf(ang);
        const float x0 = row[i], x1 = row[i + half];
        row[i] = x0 * c - x1 * s;
        row[i + half] = x1 * c + x0 * s;
    }
    __syncthreads();
}

/* Cache row crow ([C][Hkv] order) of keys or values from the f32 row in shared memory. */
template <int F>
__device__ static void kv_put(void *cache, float *scales /* [C][Hkv] or NULL */, size_t crow, int Dh,
                              const float *row /* [Dh] shared */, float *scratch) {
    if (F == QRT_KV_F32) {
        for (int d = threadIdx.x; d < Dh; d += blockDim.x) reinterpret_cast<float *>(cache)[crow * Dh + d] = row[d];
    } else if (F == QRT_KV_BF16) {
        for (int d = threadIdx.x; d < Dh; d += blockDim.x)
            reinterpret_cast<__nv_bfloat16 *>(cache)[crow * Dh + d] = __float2bfloat16_rn(row[d]);
    } else {
        float amax = 0.0f;
        for (int d = threadIdx.x; d < Dh; d += blockDim.x) amax = fmaxf(amax, fabsf(row[d]));
        amax = block_max(amax, scratch); /* max is exact in any order */
        const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int d = threadIdx.x; d < Dh; d += blockDim.x)
            reinterpret_cast<__nv_fp8_storage_t *>(cache)[crow * Dh + d] =
                __nv_cvt_float_to_fp8(row[d] / sc, __NV_SATFINITE, __NV_E4M3);
        if (threadIdx.x == 0) scales[crow] = sc;
    }
}

/* Block (r, t): r < Hq the query of head r, then the Hkv keys, then the Hkv values, of token t. Every branch is
 * uniform over the block, so the barriers inside them are safe. pos_dev, when not NULL (a recorded graph), holds
 * the position in place of pos0. */
template <int F>
__global__ void __launch_bounds__(128) attn_prep_rows(float *qg /* [T][Hq][2·Dh] */, const float *k /* [T][Hkv][Dh] */,
                                                      const float *v /* [T][Hkv][Dh] */, const float *q_norm /* [Dh] */,
                                                      const float *k_norm /* [Dh] */, float eps, qrt_kv kv,
                                                      const int *pos_dev, int pos0, int Hq, int Hkv, int Dh, int R,
                                                      float theta) {
    pdl_start();
    __shared__ float row[ATT_MAX_DH];
    __shared__ float scratch[32];
    const int r = blockIdx.x, t = blockIdx.y, pos = (pos_dev ? *pos_dev : pos0) + t;
    if (r < Hq) {
        float *q = qg + ((size_t)t * Hq + r) * 2 * Dh; /* the query half of [query | gate] */
        norm_rotate(q, q_norm, Dh, eps, R, theta, pos, row, scratch);
        for (int d = threadIdx.x; d < Dh; d += blockDim.x) q[d] = row[d];
        return;
    }
    const int is_key = r < Hq + Hkv, g = is_key ? r - Hq : r - Hq - Hkv;
    const float *src = (is_key ? k : v) + ((size_t)t * Hkv + g) * Dh;
    if (is_key) {
        norm_rotate(src, k_norm, Dh, eps, R, theta, pos, row, scratch);
    } else {
        for (int d = threadIdx.x; d < Dh; d += blockDim.x) row[d] = src[d];
        __syncthreads();
    }
    kv_put<F>(is_key ? kv.k : kv.v, is_key ? kv.ks : kv.vs, (size_t)pos * Hkv + g, Dh, row, scratch);
}

void qrt_cuda_attn_prep(float *qg, const float *k, const float *v, const float *q_norm, const float *k_norm, float eps,
                        const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta) {
    QRT_ASSERT(T > 0 && Hkv > 0 && Dh > 0 && Dh <= ATT_MAX_DH && R >= 0 && R <= Dh);
    const dim3 grid(Hq + 2 * Hkv, T);
    const float th = (float)theta;
    int max_pos;
    const int *pd = qrt_cuda_graph_pos(&max_pos);
    decltype(&attn_prep_rows<QRT_KV_F32>) prep = kv->fmt == QRT_KV_F32    ? attn_prep_rows<QRT_KV_F32>
                                                 : kv->fmt == QRT_KV_BF16 ? attn_prep_rows<QRT_KV_BF16>
                                                                          : attn_prep_rows<QRT_KV_FP8>;
    QRT_LAUNCH(prep, grid, 128, 0, qg, k, v, q_norm, k_norm, eps, *kv, pd, pos0, Hq, Hkv, Dh, R, th);
}

/* ---- attention ------------------------------------------------------------------------------------------ */

/* Element d of cache row `row` widened to f32. */
template <int F>
__device__ __forceinline__ float kv_load(const void *base, const float *scales, size_t row, int Dh, int d) {
    if (F == QRT_KV_F32) return reinterpret_cast<const float *>(base)[row * Dh + d];
    if (F == QRT_KV_BF16) return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t *>(base)[row * Dh + d] << 16);
    __nv_fp8_e4m3 e;
    e.__x = reinterpret_cast<const __nv_fp8_storage_t *>(base)[row * Dh + d];
    return (float)e * scales[row];
}

/* Block (h, tl, c): chunk c of token t0 + tl's keys for q-head h. pos_dev: as in attn_prep_rows. */
template <int E, int F>
__global__ void __launch_bounds__(128) attention_chunk(const float *qg /* [T][Hq][2·Dh] */, qrt_kv kv,
                                                       const int *pos_dev, int pos0, int t0, int Hq, int Hkv, int Dh,
                                                       float *out /* [T][Hq][Dh] */,
                                                       float *part /* scratch, att_o_at / att_ml_at */) {
    pdl_start();
    __shared__ float part_m[4], part_l[4];
    __shared__ float part_o[4][E * 32];
    const int h = blockIdx.x, tl = blockIdx.y, c = blockIdx.z, t = t0 + tl;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = (pos_dev ? *pos_dev : pos0) + t + 1, len = att_chunk_keys(n), nch = (n + len - 1) / len; /* causal: keys 0..pos */
    if (c >= nch) return; /* the whole block: this token has fewer chunks than the call's last one */
    const int j0 = c * len, j1 = min(n, j0 + len);
    const int g = h / (Hq / Hkv); /* q-head h reads kv-head h // group */
    const float scale = 1.0f / sqrtf((float)Dh);
    const float *qv = qg + ((size_t)t * Hq + h) * 2 * Dh, *gate = qv + Dh;
    float qr[E], o[E], gv[E]; /* the gate too, now: read after the keys it cost one more round trip */
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int d = lane + 32 * e;
        qr[e] = d < Dh ? qv[d] : 0.0f;
        gv[e] = d < Dh && nch == 1 && warp == 0 ? gate[d] : 0.0f;
        o[e] = 0.0f;
    }
    /* Keys j0 + warp + 4i in order, each loaded ATT_AHEAD keys before its turn: with one key's rows in flight at a
     * time a warp waited out a memory round trip per key (ncu, H200, ctx 128: 22.6 µs per layer). The arithmetic
     * per key and its order are unchanged. */
    float kb[ATT_AHEAD][E], vb[ATT_AHEAD][E];
    auto load_key = [&](int j, float (&kr)[E], float (&vr)[E]) {
        const size_t row = (size_t)j * Hkv + g;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int d = lane + 32 * e;
            kr[e] = d < Dh ? kv_load<F>(kv.k, kv.ks, row, Dh, d) : 0.0f;
            vr[e] = d < Dh ? kv_load<F>(kv.v, kv.vs, row, Dh, d) : 0.0f;
        }
    };
#pragma unroll
    for (int i = 0; i < ATT_AHEAD; i++)
        if (j0 + warp + 4 * i < j1) load_key(j0 + warp + 4 * i, kb[i], vb[i]);
    float m = -INFINITY, l = 0.0f;
    for (int jb = j0 + warp; jb < j1; jb += 4 * ATT_AHEAD) {
#pragma unroll
        for (int i = 0; i < ATT_AHEAD; i++) {
            const int j = jb + 4 * i;
            if (j >= j1) break;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++)
                if (lane + 32 * e < Dh) s = fmaf(qr[e], kb[i][e], s);
            s = warp_sum(s) * scale;
            const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
            l = l * corr + p;
#pragma unroll
            for (int e = 0; e < E; e++) o[e] = o[e] * corr + (lane + 32 * e < Dh ? p * vb[i][e] : 0.0f);
            m = m_new;
            if (j + 4 * ATT_AHEAD < j1) load_key(j + 4 * ATT_AHEAD, kb[i], vb[i]);
        }
    }
    if (lane == 0) part_m[warp] = m, part_l[warp] = l;
#pragma unroll
    for (int e = 0; e < E; e++) part_o[warp][lane + 32 * e] = o[e];
    __syncthreads();
    if (warp != 0) return;
    const float M = fmaxf(fmaxf(part_m[0], part_m[1]), fmaxf(part_m[2], part_m[3])); /* finite: key j0 is warp 0's */
    float f[4], L = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        f[w] = part_l[w] > 0.0f ? expf(part_m[w] - M) : 0.0f; /* a warp without keys has m = -inf, l = 0 */
        L += part_l[w] * f[w];
    }
    float *po = part + att_o_at(tl, h, c, Hq, Dh), *dst = out + ((size_t)t * Hq + h) * Dh;
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int d = lane + 32 * e;
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) acc += part_o[w][d] * f[w];
        if (d >= Dh) continue;
        if (nch == 1) dst[d] = acc / L * sigmoid_f(gv[e]);
        else po[d] = acc;
    }
    if (nch > 1 && lane == 0) {
        float *ml = part + att_ml_at(tl, h, c, Hq, Dh);
        ml[0] = M, ml[1] = L;
    }
}

/* Block (h, tl): the chunks of token t0 + tl, q-head h, folded in chunk order. */
template <int E>
__global__ void __launch_bounds__(32) attention_merge(const float *qg /* [T][Hq][2·Dh] */, const int *pos_dev, int pos0,
                                                      int t0, int Hq, int Dh, float *out /* [T][Hq][Dh] */,
                                                      const float *part /* scratch, att_o_at / att_ml_at */) {
    pdl_start();
    const int h = blockIdx.x, tl = blockIdx.y, t = t0 + tl, lane = threadIdx.x;
    const int nch = att_chunks((pos_dev ? *pos_dev : pos0) + t + 1);
    if (nch == 1) return; /* attention_chunk wrote it */
    /* Every load issued before it is needed (a loop over the chunks waited out a round trip per chunk, twice: ncu,
     * H200, ctx 128: 7.6 µs). Lane c holds chunk c's and c + 32's (max, sum); the sums and outputs are still folded in
     * chunk order, so the bits are the loop's. */
    const float *gate = qg + ((size_t)t * Hq + h) * 2 * Dh + Dh;
    float gv[E];
#pragma unroll
    for (int e = 0; e < E; e++) gv[e] = lane + 32 * e < Dh ? gate[lane + 32 * e] : 0.0f;
    float mc[2], lc[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int c = lane + 32 * r;
        const float *ml = part + att_ml_at(tl, h, c < nch ? c : 0, Hq, Dh);
        mc[r] = c < nch ? ml[0] : -INFINITY;
        lc[r] = c < nch ? ml[1] : 0.0f;
    }
    const float M = warp_max(fmaxf(mc[0], mc[1]));
    const float fc[2] = {expf(mc[0] - M), expf(mc[1] - M)};
    float L = 0.0f, acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) acc[e] = 0.0f;
    for (int c0 = 0; c0 < nch; c0 += ATT_MERGE_BATCH) {
        float po[ATT_MERGE_BATCH][E];
#pragma unroll
        for (int b = 0; b < ATT_MERGE_BATCH; b++) {
            const float *pc = part + att_o_at(tl, h, c0 + b < nch ? c0 + b : 0, Hq, Dh);
#pragma unroll
            for (int e = 0; e < E; e++) po[b][e] = c0 + b < nch && lane + 32 * e < Dh ? pc[lane + 32 * e] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < ATT_MERGE_BATCH; b++) {
            const int c = c0 + b;
            if (c >= nch) break;
            const float f = __shfl_sync(0xffffffffu, c < 32 ? fc[0] : fc[1], c & 31);
            const float lsum = __shfl_sync(0xffffffffu, c < 32 ? lc[0] : lc[1], c & 31);
            L += lsum * f;
#pragma unroll
            for (int e = 0; e < E; e++)
                if (lane + 32 * e < Dh) acc[e] += po[b][e] * f;
        }
    }
    float *dst = out + ((size_t)t * Hq + h) * Dh;
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int d = lane + 32 * e;
        if (d < Dh) dst[d] = acc[e] / L * sigmoid_f(gv[e]);
    }
}

/* The chunk scratch, for ATT_SLICE tokens of the largest Hq·Dh seen. It is made at the first attention call,
 * which is a prefill's (the first forward of a session), so the decode loop allocates nothing; a later model
 * with larger heads replaces it (cudaFree waits for the kernels that use the old one; graphs recorded with the
 * old one are retired by the epoch). */
static float *att_part = NULL;
static size_t att_part_floats = 0;

static float *attention_scratch(int Hq, int Dh) {
    const size_t need = (size_t)ATT_SLICE * Hq * ATT_MAX_CHUNKS * (Dh + 2);
    if (need > att_part_floats) {
        if (att_part) QRT_CUDA_CHECK(cudaFree(att_part));
        QRT_CUDA_CHECK(cudaMalloc(&att_part, need * sizeof(float)));
        att_part_floats = need;
        qrt_cuda_scratch_moved();
    }
    return att_part;
}

/* The most chunks of any token of a recorded call, whose positions are only known to be below max_pos: every
 * n ≤ max_pos has at most min(64, ceil(max_pos / 32)) chunks (ceil(n / 32) up to 2048 keys, never more than 64
 * after), and n = min(max_pos, 2048) reaches it. The blocks past a token's own count exit at once. */
static int att_chunks_bound(int max_pos) {
    return QRT_MIN(ATT_MAX_CHUNKS, (QRT_MAX(max_pos, 1) + ATT_CHUNK_KEYS - 1) / ATT_CHUNK_KEYS);
}

/* Recorded (pos_dev from the step slot), the grid covers every position below max_pos and the kernels take the
 * position from the slot; a token computes the same chunks either way (they depend only on its n), so the
 * recorded call's results are the plain call's bits. */
template <int E, int F>
static void launch_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    float *part = attention_scratch(Hq, Dh);
    int max_pos = 0;
    const int *pd = qrt_cuda_graph_pos(&max_pos);
    if (pd ? att_chunks_bound(max_pos) == 1 : att_chunks_max(pos0, 0, T) == 1) {
        /* every token's keys are one chunk: one launch, no merge */
        QRT_LAUNCH(attention_chunk<E, F>, dim3(Hq, T, 1), 128, 0, qg, *kv, pd, pos0, 0, Hq, Hkv, Dh, out, part);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += ATT_SLICE) {
        const int Ts = QRT_MIN(ATT_SLICE, T - t0);
        const dim3 grid(Hq, Ts, pd ? att_chunks_bound(max_pos) : att_chunks_max(pos0, t0, Ts));
        QRT_LAUNCH(attention_chunk<E, F>, grid, 128, 0, qg, *kv, pd, pos0, t0, Hq, Hkv, Dh, out, part);
        QRT_LAUNCH(attention_merge<E>, dim3(Hq, Ts), 32, 0, qg, pd, pos0, t0, Hq, Dh, out, part);
    }
}

template <int F>
static void launch_attention_fmt(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh,
                                 float *out) {
    const int E = (Dh + 31) / 32;
    if (E <= 1) launch_attention<1, F>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    else if (E <= 2) launch_attention<2, F>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    else if (E <= 4) launch_attention<4, F>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    else launch_attention<8, F>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
}

void qrt_cuda_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    QRT_ASSERT(Hkv > 0 && Hq % Hkv == 0 && Dh > 0 && Dh <= ATT_MAX_DH && T > 0);
    if (kv->fmt == QRT_KV_F32) launch_attention_fmt<QRT_KV_F32>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    else if (kv->fmt == QRT_KV_BF16) launch_attention_fmt<QRT_KV_BF16>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    else launch_attention_fmt<QRT_KV_FP8>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
}
