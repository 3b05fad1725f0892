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
 *   2  attention_merge<TC>    one block of 32·ceil(Dh/32) threads per (token, q-head) with more than one chunk:
 *                             thread d folds dim d of the chunks in the order 0, 1, ... and applies the gate (TC:
 *                             variant 4's chunks, else variant 1's).
 *   3  attention_tc<Dh,F,TL>  prefill (T > QRT_ATTN_SPLIT_MAX_T) with bf16 and fp8 caches at Dh 32/64/128/256, on
 *                             tensor cores (mma.sync m16n8k16 bf16, sm_80+): one block of a warp per 16 query rows
 *                             per (row tile, kv head); the rows are the G = Hq/Hkv heads of one kv head times the
 *                             call's tokens, so each key tile of the cache is read once for all of them (fp8 at its
 *                             byte size, widened in shared memory), and each block runs over all of its keys: no
 *                             T x T buffer, no scratch. Online softmax in f32. Two tilings TL (fa_precise, fa_fast):
 *                             64 rows, 32-key tiles, q and p as two bf16 terms each (16 significant bits); or 128
 *                             rows, 64-key tiles, one term each, from QRT_CUDA_ATTN_FAST_MIN_T tokens at Dh 256.
 *   4  attention_dec<Dh,F>    decode and verify (T ≤ QRT_ATTN_SPLIT_MAX_T), same caches and arithmetic: one block of
 *                             4 warps per (16 query rows, kv head, key chunk), the chunks fixed key ranges
 *                             (fa_chunk_of) merged by variant 2; the warps split each 64-key stage 16 keys apiece
 *                             and fold their partials at the end, so the 6 rows of a decoded token keep all four
 *                             warps computing.
 * Chunks of variant 1: the token at position p attends to n = p + 1 keys, cut into chunks of att_chunk_keys(n) =
 * max(32, ceil(n / 64)) keys (at most 64 chunks). The cut depends only on n, never on T or on the call's other
 * tokens, so a token's output is bit-identical whether it is computed alone, in a verify batch or in a prefill piece.
 * Variant 4's chunks are fixed key ranges, so a token's chunks depend only on its position too; the prefill (variant
 * 3) folds the keys in another order and may differ from decode in the last bits.
 * Recorded into a CUDA graph, all the kernels read the position from the step slot (backend.cu) instead of
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
#define ATT_MERGE_BATCH 24 /* chunk outputs a thread of attention_merge loads at once */

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

/* Key chunks of the split path, fixed by key position alone: 16 chunks of 64 keys, then 32 of 256, 64 of 1024, 32 of
 * 4096 and 16 of 16384 (467,968 keys in 160 chunks). Short contexts get small chunks (blocks enough to fill the GPU),
 * long ones big chunks (few partial outputs to write and merge for each row). */
#define FA_TIERS 5
#define FA_MAX_CHUNKS 160
#define FA_MAX_KEYS 467968
__host__ __device__ static inline int fa_tier_len(int i) {
    return i == 0 ? 64 : i == 1 ? 256 : i == 2 ? 1024 : i == 3 ? 4096 : 16384;
}
__host__ __device__ static inline int fa_tier_count(int i) {
    return i == 0 ? 16 : i == 1 ? 32 : i == 2 ? 64 : i == 3 ? 32 : 16;
}

/* The chunk holding key j < FA_MAX_KEYS. */
__host__ __device__ static inline int fa_chunk_of(int j) {
    int c = 0, start = 0;
    for (int i = 0; i < FA_TIERS - 1; i++) {
        const int end = start + fa_tier_len(i) * fa_tier_count(i);
        if (j < end) return c + (j - start) / fa_tier_len(i);
        c += fa_tier_count(i), start = end;
    }
    return c + (j - start) / fa_tier_len(FA_TIERS - 1);
}
/* Chunks of a token that attends to n ≥ 1 keys (monotonic in n). */
__host__ __device__ static inline int fa_chunks(int n) { return fa_chunk_of(n - 1) + 1; }
/* Keys [*j0, *j1) of chunk c. */
__host__ __device__ static inline void fa_chunk_keys(int c, int *j0, int *j1) {
    int first = 0, start = 0;
    for (int i = 0; i < FA_TIERS; i++) {
        if (c < first + fa_tier_count(i) || i == FA_TIERS - 1) {
            *j0 = start + (c - first) * fa_tier_len(i), *j1 = *j0 + fa_tier_len(i);
            return;
        }
        start += fa_tier_len(i) * fa_tier_count(i), first += fa_tier_count(i);
    }
}


/* tokens per split launch of variant 4: bounds the scratch; a 27B verify of K + 1 ≤ 8 tokens is one launch */
#define FA_SLICE 8

/* Scratch layout for `slice` tokens (tl = token within the slice) of up to maxc chunks each: the chunk outputs
 * [slice][Hq][maxc][Dh], then each chunk's (max, sum) [slice][Hq][maxc][2]. Variant 1 uses (ATT_SLICE,
 * ATT_MAX_CHUNKS), variant 4 (FA_SLICE, FA_MAX_CHUNKS). */
__device__ static inline size_t att_o_at(int tl, int h, int c, int Hq, int Dh, int maxc) {
    return (((size_t)tl * Hq + h) * maxc + c) * Dh;
}
__device__ static inline size_t att_ml_at(int tl, int h, int c, int Hq, int Dh, int maxc, int slice) {
    return (size_t)slice * Hq * maxc * Dh + (((size_t)tl * Hq + h) * maxc + c) * 2;
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
    /* causal: keys 0..pos */
    const int n = (pos_dev ? *pos_dev : pos0) + t + 1, len = att_chunk_keys(n), nch = (n + len - 1) / len;
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
     * time a warp waited out a memory round trip per key. The arithmetic per key and its order are unchanged. */
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
    float *po = part + att_o_at(tl, h, c, Hq, Dh, ATT_MAX_CHUNKS), *dst = out + ((size_t)t * Hq + h) * Dh;
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
        float *ml = part + att_ml_at(tl, h, c, Hq, Dh, ATT_MAX_CHUNKS, ATT_SLICE);
        ml[0] = M, ml[1] = L;
    }
}

/* Block (h, tl): the chunks of token t0 + tl, q-head h, folded in chunk order; TC: variant 4's chunks and scratch
 * layout, else variant 1's. Thread d < Dh folds dim d. A warp per (token, head) waited out a round trip per 8 chunks
 * (24 us per call at 32768 keys, 72 chunks); here a thread has ATT_MERGE_BATCH loads in flight and a block's
 * loads of one chunk are one coalesced row. The chunk weights are made once, in shared memory. */
template <int TC>
__global__ void __launch_bounds__(ATT_MAX_DH) attention_merge(const float *qg /* [T][Hq][2·Dh] */, const int *pos_dev,
                                                             int pos0, int t0, int Hq, int Dh,
                                                             float *out /* [T][Hq][Dh] */,
                                                             const float *part /* scratch, att_o_at / att_ml_at */) {
    constexpr int MAXC = TC ? FA_MAX_CHUNKS : ATT_MAX_CHUNKS, SLICE = TC ? FA_SLICE : ATT_SLICE;
    constexpr int R = (MAXC + 31) / 32; /* chunks per lane of warp 0 */
    __shared__ float fs[MAXC], ls[MAXC]; /* chunk c's weight exp(m_c - M) and sum */
    pdl_start();
    const int h = blockIdx.x, tl = blockIdx.y, t = t0 + tl, d = threadIdx.x;
    const int n = (pos_dev ? *pos_dev : pos0) + t + 1, nch = TC ? fa_chunks(n) : att_chunks(n);
    if (nch == 1) return; /* the chunk kernel wrote it */
    if (d < 32) {
        float mc[R], M = -INFINITY;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int c = d + 32 * r;
            mc[r] = c < nch ? part[att_ml_at(tl, h, c, Hq, Dh, MAXC, SLICE)] : -INFINITY;
            M = fmaxf(M, mc[r]);
        }
        M = warp_max(M);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int c = d + 32 * r;
            if (c < nch) fs[c] = expf(mc[r] - M), ls[c] = part[att_ml_at(tl, h, c, Hq, Dh, MAXC, SLICE) + 1];
        }
    }
    __syncthreads();
    if (d >= Dh) return;
    float L = 0.0f, acc = 0.0f;
    for (int c0 = 0; c0 < nch; c0 += ATT_MERGE_BATCH) {
        float po[ATT_MERGE_BATCH];
#pragma unroll
        for (int b = 0; b < ATT_MERGE_BATCH; b++)
            po[b] = c0 + b < nch ? part[att_o_at(tl, h, c0 + b, Hq, Dh, MAXC) + d] : 0.0f;
#pragma unroll
        for (int b = 0; b < ATT_MERGE_BATCH; b++) {
            const int c = c0 + b;
            if (c >= nch) break;
            L += ls[c] * fs[c];
            acc += po[b] * fs[c];
        }
    }
    const float gate = qg[((size_t)t * Hq + h) * 2 * Dh + Dh + d];
    out[((size_t)t * Hq + h) * Dh + d] = acc / L * sigmoid_f(gate);
}

/* ---- tensor-core attention (bf16 and fp8 caches) ------------------------------------------------------- */

#define FD_KT 16    /* decode (attention_dec): keys per warp and stage; a block's 16 rows, its 4 warps on 4 key runs */
#define FD_WARPS 4
#define FA_STAGES 3 /* tiles in shared memory: the one in use and two in flight */

/* Shared memory of a block of ROWS query rows reading KEYS keys per stage: the queries as two bf16 terms (hi + lo, 16
 * significant bits), then per stage the key and value tiles; fp8 adds the raw tiles' scales and one widened bf16 tile
 * pair. Rows are Dh + 8 elements apart: the 16 bytes of padding shift consecutive rows by 4 banks, so ldmatrix's 8
 * row addresses hit distinct banks. */
template <int DH, int ROWS, int KEYS, int QT = 2, int STAGES = FA_STAGES> struct fa_layout {
    static constexpr int P = DH + 8;                                   /* bf16 row pitch */
    static constexpr size_t q = 0;                                     /* [QT][ROWS][P] bf16: hi, lo */
    static constexpr size_t tiles = q + QT * ROWS * P * 2;                 /* bf16: [stage][k|v][KEYS][P] */
    static constexpr size_t bf16_bytes = tiles + STAGES * 2 * KEYS * P * 2; /* the bf16 cache's total */
    static constexpr size_t raw = tiles;                                /* fp8: [stage][k|v][KEYS][DH] bytes */
    static constexpr size_t scales = raw + STAGES * 2 * KEYS * DH;      /* fp8: [stage][k|v][KEYS] f32 */
    static constexpr size_t wide = scales + STAGES * 2 * KEYS * 4;      /* fp8: [k|v][KEYS][P] bf16 */
    static constexpr size_t fp8_bytes = wide + 2 * KEYS * P * 2;
    static constexpr size_t bytes(int F) { return F == QRT_KV_BF16 ? bf16_bytes : fp8_bytes; }
};
/* A prefill tiling of attention_tc: ROWS query rows per block, 16 per warp (row r of a KV group is token r / G, head
 * g·G + r % G), KT keys per tile, STAGES tiles in shared memory, q and p as TWO ? hi + lo : hi. */
template <int ROWS_, int KT_, int STAGES_, bool TWO_> struct fa_tiling {
    static constexpr int ROWS = ROWS_, KT = KT_, STAGES = STAGES_, THREADS = ROWS / 16 * 32;
    static constexpr bool TWO = TWO_;
    template <int DH> using layout = fa_layout<DH, ROWS, KT, TWO ? 2 : 1, STAGES>;
};

static_assert(fa_layout<256, 16, FD_KT * FD_WARPS>::bf16_bytes <= 227 * 1024 &&
                  fa_layout<256, 64, 32>::bf16_bytes <= 227 * 1024,
              "a block's shared memory at Dh 256 (an sm_90 block has at most 227 KiB)");

/* 16 (or 4) bytes from global to shared without registers; ok = 0 writes zeros and reads nothing. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* Four e4m3 codes (byte i = element i) as four bf16 (exact: e4m3 fits bf16) */
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t four) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(four & 0xffff), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(four >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    return make_uint2(bf16x2_bits(__floats2bfloat162_rn(a.x, a.y)), bf16x2_bits(__floats2bfloat162_rn(b.x, b.y)));
}

/* Keys jt .. jt + KEYS - 1 (those at or past j1 read nothing and are zeros) of kv head g into one stage at st (the
 * stage's bf16 tiles [k|v][KEYS][P], or the fp8 codes [k|v][KEYS][DH] and their scales at sc [k|v][KEYS]), one
 * commit group; the block's 128 threads each issue their share. */
template <int DH, int F, int KEYS>
__device__ __forceinline__ void fa_issue(uint8_t *st, float *sc, const qrt_kv &kv, int g, int Hkv, int jt, int j1) {
    constexpr int P = DH + 8;
    constexpr int EB = F == QRT_KV_BF16 ? 2 : 1, CH = DH * EB / 16; /* element bytes, 16-byte pieces per row */
    constexpr int DP = F == QRT_KV_BF16 ? 2 * P : DH;                 /* the stage's row pitch in bytes */
    for (int e = threadIdx.x; e < KEYS * CH; e += blockDim.x) {
        const int kr = e / CH, ch = e % CH, j = jt + kr;
        const bool ok = j < j1;
        const size_t at = ((size_t)(ok ? j : 0) * Hkv + g) * DH * EB + ch * 16;
        cp_async16(st + kr * DP + ch * 16, reinterpret_cast<const uint8_t *>(kv.k) + at, ok);
        cp_async16(st + (KEYS + kr) * DP + ch * 16, reinterpret_cast<const uint8_t *>(kv.v) + at, ok);
    }
    if (F == QRT_KV_FP8)
        for (int e = threadIdx.x; e < 2 * KEYS; e += blockDim.x) {
            const int kr = e % KEYS, j = jt + kr;
            const bool ok = j < j1;
            cp_async4(sc + e, (e < KEYS ? kv.ks : kv.vs) + (size_t)(ok ? j : 0) * Hkv + g, ok);
        }
    cp_async_commit();
}

/* An fp8 stage's codes [k|v][KEYS][DH] widened to bf16 [k|v][KEYS][P] by the block (the scales are applied to the
 * products). */
template <int DH, int KEYS>
__device__ __forceinline__ void fa_widen(const uint8_t *raw, __nv_bfloat16 *wide) {
    constexpr int P = DH + 8;
    for (int e = threadIdx.x; e < 2 * KEYS * DH / 4; e += blockDim.x) {
        const int kr = e / (DH / 4), d = 4 * (e % (DH / 4));
        *reinterpret_cast<uint2 *>(wide + kr * P + d) =
            e4m3x4_to_bf16x4(*reinterpret_cast<const uint32_t *>(raw + kr * DH + d));
    }
}

/* The block's queries (rows r0 .. r0 + ROWS - 1 of kv head g's Ts·G; rows past them are zeros) into shared memory as
 * hi + lo: qs [2][ROWS][P] (TWO false: hi alone, qs [ROWS][P]). */
template <int DH, int ROWS, bool TWO = true>
__device__ __forceinline__ void fa_load_q(const float *qg, __nv_bfloat16 *qs, int r0, int rows, int t0, int G, int g,
                                          int Hq) {
    constexpr int P = DH + 8;
    for (int e = threadIdx.x; e < ROWS * DH / 2; e += blockDim.x) {
        const int r = e / (DH / 2), d = 2 * (e % (DH / 2)), rr = r0 + r;
        float2 x = make_float2(0.0f, 0.0f);
        if (rr < rows)
            x = *reinterpret_cast<const float2 *>(qg + ((size_t)(t0 + rr / G) * Hq + g * G + rr % G) * 2 * DH + d);
        uint32_t hi, lo;
        split_bf16x2(x.x, x.y, hi, lo);
        *reinterpret_cast<uint32_t *>(qs + r * P + d) = hi;
        if (TWO) *reinterpret_cast<uint32_t *>(qs + (ROWS + r) * P + d) = lo;
    }
}

/* One warp's online-softmax step over NK (16 or 32) keys jt .. jt + NK - 1 for its 16 rows: S = Q·Kᵀ (q as hi + lo,
 * so two mma per step), the softmax update in f32, O += P·V (p as hi + lo); TWO false: q and p as hi alone (one bf16
 * term, 8 significant bits, as the bf16 cache's k and v: half the mma). qw: this lane's ldmatrix address in q's
 * hi rows, the lo rows qlo elements on; kt, vt: the keys and values [NK][P] bf16; ksc, vsc: fp8 scales (else
 * unused); rpos: positions of this lane's rows lane/4 and lane/4 + 8 (-1: none). A key past a row's position enters
 * as p = 0 (the tile's max and the rescale skip it, and a zero product leaves the accumulator's bits), so a row's
 * bits depend only on its own query, its position and the keys, in key order. */
template <int DH, int F, int NK, bool TWO = true>
__device__ __forceinline__ void fa_step(const __nv_bfloat16 *qw, int qlo, const __nv_bfloat16 *kt,
                                        const __nv_bfloat16 *vt, const float *ksc, const float *vsc, int jt,
                                        const int (&rpos)[2], float (&o)[DH / 8][4], float (&m)[2], float (&l)[2]) {
    constexpr int P = DH + 8, NT = NK / 8; /* n-tiles of 8 keys */
    const int lane = threadIdx.x & 31, quad = lane & 3;
    const float scale = 1.0f / sqrtf((float)DH);
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++) {
        uint32_t ah[4], al[4];
        ldsm_x4(ah, qw + kk * 16);
        if (TWO) ldsm_x4(al, qw + qlo + kk * 16);
#pragma unroll
        for (int np = 0; np < NK / 16; np++) {
            uint32_t b[4];
            ldsm_x4(b, kt + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(s[2 * np], ah, b[0], b[1]);
            if (TWO) mma_bf16_16816(s[2 * np], al, b[0], b[1]);
            mma_bf16_16816(s[2 * np + 1], ah, b[2], b[3]);
            if (TWO) mma_bf16_16816(s[2 * np + 1], al, b[2], b[3]);
        }
    }
    /* online softmax; element (n, e) is row lane/4 + 8·(e >> 1), key jt + 8n + 2·quad + (e & 1) */
    float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int kr = 8 * n + 2 * quad + (e & 1);
            float x = s[n][e] * scale;
            if (F == QRT_KV_FP8) x = s[n][e] * ksc[kr] * scale;
            x = jt + kr <= rpos[e >> 1] ? x : -INFINITY;
            s[n][e] = x;
            mt[e >> 1] = fmaxf(mt[e >> 1], x);
        }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
        mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
        const float mn = fmaxf(m[h], mt[h]);
        corr[h] = mn == -INFINITY ? 1.0f : expf(m[h] - mn); /* no key yet: nothing to rescale */
        m[h] = mn;
        l[h] *= corr[h];
    }
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - m[e >> 1]);
            l[e >> 1] += p;
            s[n][e] = F == QRT_KV_FP8 ? p * vsc[8 * n + 2 * quad + (e & 1)] : p;
        }
#pragma unroll
    for (int n = 0; n < DH / 8; n++)
        o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
    /* O += P·V: P's accumulator layout is the A operand's, two n-tiles of 8 keys per 16-key step */
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++) {
        uint32_t ph[4], pl[4];
        split_bf16x2(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
        split_bf16x2(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
        split_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
        split_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
        const __nv_bfloat16 *vrow = vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + (lane >> 4) * 8;
#pragma unroll
        for (int nd = 0; nd < DH / 16; nd++) {
            uint32_t b[4];
            ldsm_x4_trans(b, vrow + nd * 16);
            mma_bf16_16816(o[2 * nd], ph, b[0], b[1]);
            if (TWO) mma_bf16_16816(o[2 * nd], pl, b[0], b[1]);
            mma_bf16_16816(o[2 * nd + 1], ph, b[2], b[3]);
            if (TWO) mma_bf16_16816(o[2 * nd + 1], pl, b[2], b[3]);
        }
    }
}

/* Positions of this lane's rows lane/4 and lane/4 + 8 of the 16 from wr0 (-1: past the call's rows, no key visible) */
__device__ __forceinline__ void fa_row_pos(int (&rpos)[2], int wr0, int rows, int pos, int G) {
    for (int h = 0; h < 2; h++) {
        const int rr = wr0 + ((threadIdx.x & 31) >> 2) + 8 * h;
        rpos[h] = rr < rows ? pos + rr / G : -1;
    }
}

/* Prefill (T > QRT_ATTN_SPLIT_MAX_T). Block (row tile, kv head g): TL::ROWS rows of tokens 0 .. T - 1, one tile of
 * 16 per warp, against every key up to the block's last token in TL::KT-key tiles, written gated: no scratch, no
 * merge. The tiles with the most keys go first. TL::TWO: q and p as hi + lo (fa_step), else one bf16 term each. */
template <int DH, int F, typename TL>
__global__ void __launch_bounds__(TL::THREADS, 1)
    attention_tc(const float *qg /* [T][Hq][2·Dh] */, qrt_kv kv, const int *pos_dev, int pos0, int T, int Hq,
                 int Hkv, float *out /* [T][Hq][Dh] */) {
    using L = typename TL::template layout<DH>;
    constexpr int ROWS = TL::ROWS, KT = TL::KT, NS = TL::STAGES;
    constexpr bool TWO = TL::TWO;
    constexpr int P = L::P, DP = F == QRT_KV_BF16 ? 2 * P : DH; /* the stage's row pitch in bytes */
    pdl_start();
    extern __shared__ __align__(16) uint8_t fa_sm[];
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(fa_sm + L::q);
    const int G = Hq / Hkv, g = blockIdx.y, rows = T * G, pos = pos_dev ? *pos_dev : pos0;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * ROWS;
    const int kend = pos + (min(rows, r0 + ROWS) - 1) / G + 1; /* keys the block's last token sees */
    const int ntiles = (kend + KT - 1) / KT;
    auto issue = [&](int i) {
        if (i >= ntiles) return cp_async_commit();
        const int st = i % NS;
        fa_issue<DH, F, KT>(fa_sm + (F == QRT_KV_BF16 ? L::tiles : L::raw) + (size_t)st * 2 * KT * DP,
                            reinterpret_cast<float *>(fa_sm + L::scales) + st * 2 * KT, kv, g, Hkv, i * KT, kend);
    };
    for (int i = 0; i < NS - 1; i++) issue(i);
    fa_load_q<DH, ROWS, TWO>(qg, qs, r0, rows, 0, G, g, Hq);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, quad = lane & 3;
    const int wr0 = r0 + warp * 16;  /* the warp's first row */
    const bool active = wr0 < rows; /* uniform over the warp */
    int rpos[2];
    fa_row_pos(rpos, wr0, rows, pos, G);
    float o[DH / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DH / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const __nv_bfloat16 *qw = qs + (warp * 16 + (lane & 15)) * P + (lane >> 4) * 8;

    for (int i = 0; i < ntiles; i++) {
        const int st = i % NS;
        issue(i + NS - 1); /* into the stage tile i - 1 used */
        cp_async_wait<NS - 1>();
        __syncthreads();
        const __nv_bfloat16 *kt =
            reinterpret_cast<const __nv_bfloat16 *>(fa_sm + L::tiles) + (size_t)st * 2 * KT * P;
        const float *ksc = reinterpret_cast<const float *>(fa_sm + L::scales) + st * 2 * KT;
        if (F == QRT_KV_FP8) {
            kt = reinterpret_cast<const __nv_bfloat16 *>(fa_sm + L::wide);
            fa_widen<DH, KT>(fa_sm + L::raw + (size_t)st * 2 * KT * DH, const_cast<__nv_bfloat16 *>(kt));
            __syncthreads();
        }
        if (active)
            fa_step<DH, F, KT, TWO>(qw, ROWS * P, kt, kt + KT * P, ksc, ksc + KT, i * KT, rpos, o, m, l);
        __syncthreads(); /* its stage is refilled next */
    }
    if (!active) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* the 4 lanes of a row add the same pairs: the same bits */
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int rr = wr0 + (lane >> 2) + 8 * h;
        if (rr >= rows) continue;
        const int t = rr / G, head = g * G + rr % G;
        const float *gate = qg + ((size_t)t * Hq + head) * 2 * DH + DH;
        float *dst = out + ((size_t)t * Hq + head) * DH;
#pragma unroll
        for (int n = 0; n < DH / 8; n++) {
            const int d = 8 * n + 2 * quad;
            dst[d] = o[n][2 * h] / sum * sigmoid_f(gate[d]);
            dst[d + 1] = o[n][2 * h + 1] / sum * sigmoid_f(gate[d + 1]);
        }
    }
}

/* Decode and verify (T ≤ QRT_ATTN_SPLIT_MAX_T). Block (16-row tile, kv head g, chunk c): rows of tokens t0 .. (Ts of
 * them) against the keys of chunk c (fa_chunk_keys), 64 per stage; warp w takes keys 16w .. 16w + 15 of every stage
 * with its own online softmax, so all four warps compute where a 64-row block had one real warp in decode (6 rows:
 * the G query heads of one token). The warps' partials are folded in the order 0..3 through shared memory; a row
 * whose token has one chunk is written gated, the others leave (max, sum, unnormalised output) in the scratch for
 * attention_merge. Each row's arithmetic depends only on its query, its position and the keys, so a token gets the
 * same bits alone or in a verify batch. */
template <int DH, int F>
__global__ void __launch_bounds__(128, 1)
    attention_dec(const float *qg /* [T][Hq][2·Dh] */, qrt_kv kv, const int *pos_dev, int pos0, int t0, int Ts,
                  int Hq, int Hkv, float *out /* [T][Hq][Dh] */, float *part /* scratch, att_o_at / att_ml_at */) {
    constexpr int KEYS = FD_KT * FD_WARPS;
    using L = fa_layout<DH, 16, KEYS>;
    constexpr int P = L::P, DP = F == QRT_KV_BF16 ? 2 * P : DH; /* the stage's row pitch in bytes */
    constexpr int WP = DH + 8; /* the partials' row pitch in floats: a quad's rows 8 banks apart */
    static_assert(FD_WARPS * 16 * (WP + 2) * 4 <= L::wide - L::tiles, "the warps' partials reuse the stages");
    pdl_start();
    extern __shared__ __align__(16) uint8_t fa_sm[];
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(fa_sm + L::q);
    const int G = Hq / Hkv, g = blockIdx.y, rows = Ts * G, c = blockIdx.z, r0 = blockIdx.x * 16;
    const int pos = (pos_dev ? *pos_dev : pos0) + t0;            /* token t0's position */
    const int kend = pos + (min(rows, r0 + 16) - 1) / G + 1;      /* keys the block's last token sees */
    if (c >= fa_chunks(kend)) return;
    int j0, j1;
    fa_chunk_keys(c, &j0, &j1); /* a multiple of KEYS long: no stage spans two chunks */
    j1 = min(j1, kend);
    const int nst = (j1 - j0 + KEYS - 1) / KEYS;
    auto issue = [&](int i) {
        if (i >= nst) return cp_async_commit();
        const int st = i % FA_STAGES;
        fa_issue<DH, F, KEYS>(fa_sm + (F == QRT_KV_BF16 ? L::tiles : L::raw) + (size_t)st * 2 * KEYS * DP,
                              reinterpret_cast<float *>(fa_sm + L::scales) + st * 2 * KEYS, kv, g, Hkv,
                              j0 + i * KEYS, j1);
    };
    for (int i = 0; i < FA_STAGES - 1; i++) issue(i);
    fa_load_q<DH, 16>(qg, qs, r0, rows, t0, G, g, Hq);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, quad = lane & 3;
    int rpos[2];
    fa_row_pos(rpos, r0, rows, pos, G);
    float o[DH / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DH / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const __nv_bfloat16 *qw = qs + (lane & 15) * P + (lane >> 4) * 8;

    for (int i = 0; i < nst; i++) {
        const int st = i % FA_STAGES;
        issue(i + FA_STAGES - 1); /* into the stage stage i - 1 used */
        cp_async_wait<FA_STAGES - 1>();
        __syncthreads();
        const __nv_bfloat16 *kt = reinterpret_cast<const __nv_bfloat16 *>(fa_sm + L::tiles) + (size_t)st * 2 * KEYS * P;
        const float *ksc = reinterpret_cast<const float *>(fa_sm + L::scales) + st * 2 * KEYS;
        if (F == QRT_KV_FP8) {
            kt = reinterpret_cast<const __nv_bfloat16 *>(fa_sm + L::wide);
            fa_widen<DH, KEYS>(fa_sm + L::raw + (size_t)st * 2 * KEYS * DH, const_cast<__nv_bfloat16 *>(kt));
            __syncthreads();
        }
        const int w0 = warp * FD_KT; /* the warp's first key in the stage */
        fa_step<DH, F, FD_KT>(qw, 16 * P, kt + w0 * P, kt + (KEYS + w0) * P, ksc + w0, ksc + KEYS + w0,
                              j0 + i * KEYS + w0, rpos, o, m, l);
        __syncthreads(); /* its stage is refilled next */
    }

    /* the warps' partials into the stages' memory: wo [FD_WARPS][16][WP], wml [FD_WARPS][16] (max, sum) */
    cp_async_wait<0>();
    __syncthreads();
    float *wo = reinterpret_cast<float *>(fa_sm + L::tiles), *wml = wo + FD_WARPS * 16 * WP;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* the 4 lanes of a row add the same pairs: the same bits */
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int r = (lane >> 2) + 8 * h;
        float *wr = wo + (warp * 16 + r) * WP;
#pragma unroll
        for (int n = 0; n < DH / 8; n++)
            *reinterpret_cast<float2 *>(wr + 8 * n + 2 * quad) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
        if (quad == 0) wml[(warp * 16 + r) * 2] = m[h], wml[(warp * 16 + r) * 2 + 1] = sum;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * DH; e += blockDim.x) {
        const int r = e / DH, d = e % DH, rr = r0 + r;
        if (rr >= rows) break; /* e grows with r */
        const int t = rr / G, head = g * G + rr % G, nch = fa_chunks(pos + rr / G + 1);
        if (c >= nch) continue; /* this token's keys end before the chunk */
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) M = fmaxf(M, wml[(w * 16 + r) * 2]);
        float sum = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) { /* a warp that saw no key of the row has max -inf: weight 0 */
            const float f = expf(wml[(w * 16 + r) * 2] - M);
            sum += wml[(w * 16 + r) * 2 + 1] * f;
            acc += wo[(w * 16 + r) * WP + d] * f;
        }
        if (nch == 1) {
            const float gate = qg[((size_t)(t0 + t) * Hq + head) * 2 * DH + DH + d];
            out[((size_t)(t0 + t) * Hq + head) * DH + d] = acc / sum * sigmoid_f(gate);
        } else {
            part[att_o_at(t, head, c, Hq, DH, FA_MAX_CHUNKS) + d] = acc;
            if (d == 0) {
                float *ml = part + att_ml_at(t, head, c, Hq, DH, FA_MAX_CHUNKS, FA_SLICE);
                ml[0] = M, ml[1] = sum;
            }
        }
    }
}

/* The chunk scratch, for the slices of variants 1 and 4 at the largest Hq·Dh seen. It is made at the first
 * attention call, which is a prefill's (the first forward of a session), so the decode loop allocates nothing; a
 * later model with larger heads replaces it (cudaFree waits for the kernels that use the old one; graphs recorded
 * with the old one are retired by the epoch). */
static void *att_part = NULL;
static size_t att_part_bytes = 0;

static float *attention_scratch(int Hq, int Dh) {
    const size_t need = (size_t)Hq * (Dh + 2) * QRT_MAX(ATT_SLICE * ATT_MAX_CHUNKS, FA_SLICE * FA_MAX_CHUNKS);
    return static_cast<float *>(qrt_cuda_grow(&att_part, &att_part_bytes, need * sizeof(float)));
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
        QRT_LAUNCH((attention_merge<0>), dim3(Hq, Ts), 32 * QRT_CEIL_DIV(Dh, 32), 0, qg, pd, pos0, t0, Hq, Dh, out,
                   part);
    }
}

/* The prefill's two tilings. Precise: 64 rows, 32-key tiles, 3 stages, q and p as hi + lo (16 significant bits).
 * Fast: 128 rows (8 warps), 64-key tiles, 2 stages, q and p as one bf16 term each (the precision of the bf16 cache's
 * own k and v): each key tile is read once for twice the rows, a barrier pair per 64 keys, half the mma. On an H100,
 * all-NVFP4 27B, 8192-token prefill: attention 174 -> 94 ms (docs/benchmarks.md). The fast one runs from
 * QRT_CUDA_ATTN_FAST_MIN_T tokens (shorter prefills spend ~2% of their TTFT here and keep the precise one's bits);
 * QRT_ATTN_PREFILL_TWO=1 takes the precise one at every length, =0 the fast one (read at every prefill call, a few
 * per layer and piece, so one process can run both: tests/test_cuda_ops.c). The fast one is built for Dh 256 only
 * (the one shape measured); where its 203 KiB of shared memory cannot be had, the precise one runs. */
using fa_precise = fa_tiling<64, 32, 3, true>;
using fa_fast = fa_tiling<128, 64, 2, false>;

static bool attention_prefill_fast(int T) {
    const char *e = getenv("QRT_ATTN_PREFILL_TWO");
    if (e && !strcmp(e, "1")) return false;
    return T >= QRT_CUDA_ATTN_FAST_MIN_T || (e && !strcmp(e, "0"));
}

template <int DH, int F, typename TL>
static bool launch_tc_tiling(const float *qg, const qrt_kv *kv, const int *pd, int T, int pos0, int Hq, int Hkv,
                             float *out) {
    constexpr size_t smem = TL::template layout<DH>::bytes(F);
    static int asked = 0; /* one per instantiation */
    if (!smem_allow(attention_tc<DH, F, TL>, smem, &asked)) return false;
    const dim3 grid(QRT_CEIL_DIV(T * (Hq / Hkv), TL::ROWS), Hkv, 1);
    QRT_LAUNCH((attention_tc<DH, F, TL>), grid, TL::THREADS, smem, qg, *kv, pd, pos0, T, Hq, Hkv, out);
    return true;
}

/* Variants 3 and 4. Up to QRT_ATTN_SPLIT_MAX_T tokens (decode, a verify): attention_dec over the chunks of
 * fa_chunk_of, in slices of FA_SLICE tokens, merged by attention_merge<1>: a token's chunks and their order depend
 * only on its position. Longer calls (prefill pieces): attention_tc, each row tile over all its keys in one block: no
 * scratch, no merge. Recorded, the split grid covers the chunks of every position below max_pos, as in variant 1. */
template <int DH, int F>
static bool launch_attention_tc(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, float *out) {
    constexpr size_t smem_tc = fa_precise::layout<DH>::bytes(F);
    constexpr size_t smem_dec = fa_layout<DH, 16, FD_KT * FD_WARPS>::bytes(F);
    static int asked_dec = 0; /* one per instantiation */
    /* the variant depends only on the device and the shape: the precise tiling and attention_dec both fit, or
     * neither runs */
    if (smem_tc > (size_t)smem_per_block_optin() || !smem_allow(attention_dec<DH, F>, smem_dec, &asked_dec))
        return false;
    float *part = attention_scratch(Hq, DH); /* at the first call, a prefill's, even where that one needs none */
    int max_pos = 0;
    const int *pd = qrt_cuda_graph_pos(&max_pos);
    const int keys = pd ? max_pos : pos0 + T, G = Hq / Hkv;
    if (keys > FA_MAX_KEYS) {
        fprintf(stderr, "qwenrt: attention over %d keys: the CUDA attention takes at most %d; use a smaller context "
                        "(--ctx)\n", keys, FA_MAX_KEYS);
        abort();
    }
    if (T > QRT_ATTN_SPLIT_MAX_T) { /* decode never reads the environment */
        bool fast = false;
        if constexpr (DH == 256) /* the measured shape (the Qwen3.5/3.6 models') */
            fast = attention_prefill_fast(T) && launch_tc_tiling<DH, F, fa_fast>(qg, kv, pd, T, pos0, Hq, Hkv, out);
        if (!fast) launch_tc_tiling<DH, F, fa_precise>(qg, kv, pd, T, pos0, Hq, Hkv, out);
        return true;
    }
    for (int t0 = 0; t0 < T; t0 += FA_SLICE) {
        const int Ts = QRT_MIN(FA_SLICE, T - t0), nch = fa_chunks(pd ? max_pos : pos0 + t0 + Ts); /* the last token's */
        const dim3 grid(QRT_CEIL_DIV(Ts * G, 16), Hkv, nch);
        QRT_LAUNCH((attention_dec<DH, F>), grid, 128, smem_dec, qg, *kv, pd, pos0, t0, Ts, Hq, Hkv, out, part);
        if (nch > 1)
            QRT_LAUNCH((attention_merge<1>), dim3(Hq, Ts), 32 * QRT_CEIL_DIV(DH, 32), 0, qg, pd, pos0, t0, Hq, DH, out,
                       part);
    }
    return true;
}

/* Variants 3 and 4 for a bf16 or fp8 cache and Dh of 32, 64, 128 or 256; 0, launching nothing, when they do not apply
 * (another Dh, or a device whose blocks cannot have their shared memory: at the 27B's Dh 256 attention_dec asks for
 * 215 KiB, attention_tc 165). The choice depends only on the device and the shape, so decode and verify always take
 * the same variant. */
template <int F>
static int attention_tc_fmt(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    if (Dh == 256) return launch_attention_tc<256, F>(qg, kv, T, pos0, Hq, Hkv, out);
    if (Dh == 128) return launch_attention_tc<128, F>(qg, kv, T, pos0, Hq, Hkv, out);
    if (Dh == 64) return launch_attention_tc<64, F>(qg, kv, T, pos0, Hq, Hkv, out);
    if (Dh == 32) return launch_attention_tc<32, F>(qg, kv, T, pos0, Hq, Hkv, out);
    return 0;
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
    else if (kv->fmt == QRT_KV_BF16) {
        if (!attention_tc_fmt<QRT_KV_BF16>(qg, kv, T, pos0, Hq, Hkv, Dh, out))
            launch_attention_fmt<QRT_KV_BF16>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    } else if (!attention_tc_fmt<QRT_KV_FP8>(qg, kv, T, pos0, Hq, Hkv, Dh, out)) {
        launch_attention_fmt<QRT_KV_FP8>(qg, kv, T, pos0, Hq, Hkv, Dh, out);
    }
}
