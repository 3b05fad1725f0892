/* The CPU backend: the reference every other backend is checked against. f32 accumulation, OpenMP over
 * independent rows/heads. Every reduction runs in a fixed order that does not depend on T or on the thread
 * count, so a row's result is the same whether it is computed alone or in a batch. The hot loops (matmul,
 * attention, chunked GDN) are built twice, for AVX2 and for the baseline x86-64 (target_clones, chosen at load
 * time); vectors only ever hold independent sums and products are never fused into FMAs, so both builds give the
 * same bits. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_quant.h"
#include "io/dtype.h"
#include "io/quant_encode.h"
#include "util/argmax.h"
#include "util/common.h"

void qrt_cpu_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

/* Below this many multiply-adds an op runs on one thread: waking the team costs more than it saves. */
#define PARALLEL_MIN_WORK (1 << 14)

static void *cpu_alloc(size_t bytes) { return qrt_alloc_aligned(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static qrt_status cpu_prepare_linear(qrt_linear *w) { return QRT_OK; }

static void cpu_embed(const qrt_linear *E, const int32_t *ids, int T, float *out) {
    for (int t = 0; t < T; t++) qrt_cpu_row_to_f32(E, ids[t], 0, E->k, out + (size_t)t * E->k);
}

/* ---- matmul -------------------------------------------------------------------------------------- */

/* The dot product of a weight row and a token's activations has one summation order, whatever T and the tiling:
 * eight partial sums, lane l summing the products at k ≡ l (mod 8) in increasing k, then combined in a fixed tree.
 * So a token's result is the same computed alone (decode) or with others (a verify, a prefill piece). The eight
 * lanes are one vector of the compiler's vector extension, a product then a sum per lane (never fused: that
 * would change the bits), which the compiler maps onto whatever SIMD width the target has. */
typedef float v8 __attribute__((vector_size(32)));
/* the same vector read from any float address (activations and weight blocks are not 32-byte aligned) */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LOAD8(p) ((v8)(*(const v8u *)(p)))

/* A K block of MM_R weight rows is widened to f32 once and then serves every token of the call (up to MM_TB),
 * MM_T tokens at a time with all MM_R × MM_T partial-sum vectors in registers. */
#define MM_KB 512 /* a multiple of 16 (NVFP4 groups) and of 8 (the lanes) */
#define MM_TB 256
#define MM_R 2
#define MM_T 4

/* acc[t][r] += lane products of rows w[r][0..kv) and tokens x[t][0..kv), kv a multiple of 8. nr and nt are
 * constants at each call, so the tile's vectors stay in registers. */
static inline __attribute__((always_inline)) void mm_tile(const float *w /* [nr][MM_KB] */, const float *x,
                                                         size_t ldx /* x: [nt][ldx] */, int kv, int nr, int nt,
                                                         v8 acc[][MM_R] /* [nt][MM_R] */) {
    v8 a[MM_T][MM_R];
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) a[t][r] = acc[t][r];
    for (int j = 0; j < kv; j += 8) {
        v8 xv[MM_T];
        for (int t = 0; t < nt; t++) xv[t] = LOAD8(x + t * ldx + j);
        for (int r = 0; r < nr; r++) {
            const v8 wv = LOAD8(w + r * MM_KB + j);
            for (int t = 0; t < nt; t++) a[t][r] += wv * xv[t];
        }
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) acc[t][r] = a[t][r];
}

/* Tiles of nr rows over tokens [0, tn): MM_T at a time, then the rest one by one. */
static inline __attribute__((always_inline)) void mm_tiles(const float *w, const float *x, size_t ldx, int kv,
                                                          int nr, int tn, v8 acc[][MM_R]) {
    int t = 0;
    for (; t + MM_T <= tn; t += MM_T) mm_tile(w, x + t * ldx, ldx, kv, nr, MM_T, acc + t);
    for (; t < tn; t++) mm_tile(w, x + t * ldx, ldx, kv, nr, 1, acc + t);
}

/* Rows r0 .. r0+nr (nr ≤ MM_R) of y = x · Wᵀ for all T tokens. */
__attribute__((target_clones("avx2", "default"))) static void matmul_rows(const qrt_linear *W, int64_t r0, int nr,
                                                                          const float *x, int T, float *y) {
    const int64_t K = W->k;
    float wbuf[MM_R][MM_KB];
    v8 acc[MM_TB][MM_R];
    for (int t0 = 0; t0 < T; t0 += MM_TB) {
        const int tn = QRT_MIN(MM_TB, T - t0);
        const float *xt = x + (size_t)t0 * K;
        memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < K; k0 += MM_KB) {
            const int kn = (int)QRT_MIN(MM_KB, K - k0), kv = kn & ~7;
            for (int r = 0; r < nr; r++) qrt_cpu_row_to_f32(W, r0 + r, k0, kn, wbuf[r]);
            if (nr == MM_R) mm_tiles(wbuf[0], xt + k0, (size_t)K, kv, MM_R, tn, acc);
            else mm_tiles(wbuf[0], xt + k0, (size_t)K, kv, 1, tn, acc);
            for (int t = 0; t < tn; t++) /* K's last, partial group of 8: lane j mod 8, as in the vector loop */
                for (int r = 0; r < nr; r++) {
                    float *a = (float *)&acc[t][r];
                    for (int j = kv; j < kn; j++) a[j & 7] += wbuf[r][j] * xt[(size_t)t * K + k0 + j];
                }
        }
        for (int t = 0; t < tn; t++)
            for (int r = 0; r < nr; r++) {
                const float *a = (const float *)&acc[t][r];
                y[(size_t)(t0 + t) * W->n + r0 + r] =
                    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
            }
    }
}

static void cpu_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    const int64_t N = W->n, groups = QRT_CEIL_DIV(N, MM_R);
#pragma omp parallel for schedule(static) if (N * W->k * T >= PARALLEL_MIN_WORK)
    for (int64_t g = 0; g < groups; g++) matmul_rows(W, g * MM_R, (int)QRT_MIN(MM_R, N - g * MM_R), x, T, y);
}

/* Nothing to lay out: the CPU reads each part in place. */
static qrt_status cpu_prepare_group(qrt_linear_group *g) {
    g->fused = NULL;
    return QRT_OK;
}

/* The parts one by one: exactly matmul on each, so the results are those of the ungrouped calls. */
static void cpu_matmul_group(const qrt_linear_group *g, const float *x, int T, float *const *y) {
    for (int i = 0; i < g->n; i++) cpu_matmul(g->part[i], x, T, y[i]);
}

/* One row of n; may run in place (y == x). */
static void rmsnorm_row(const float *x, const float *w, int n, float eps, float *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

static void cpu_rmsnorm(const float *x, const float *w, int rows, int n, float eps, float *y) {
#pragma omp parallel for schedule(static) if ((int64_t)rows * n >= PARALLEL_MIN_WORK)
    for (int r = 0; r < rows; r++) rmsnorm_row(x + (size_t)r * n, w, n, eps, y + (size_t)r * n);
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static void cpu_rmsnorm_gated(const float *x, const float *z, const float *w, int rows, int n, float eps, float *y) {
#pragma omp parallel for schedule(static) if ((int64_t)rows * n >= PARALLEL_MIN_WORK)
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n, *zr = z + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(ss / n) + eps);
        for (int i = 0; i < n; i++) yr[i] = w[i] * (xr[i] * inv) * silu(zr[i]);
    }
}

static void cpu_conv1d_silu(const float *x, float *state, const float *w, int T, int ch, int Ck, float *y) {
    const int S = Ck - 1;
#pragma omp parallel for schedule(static) if ((int64_t)ch * T * Ck >= PARALLEL_MIN_WORK)
    for (int c = 0; c < ch; c++) {
        /* window[0..S) = state (oldest first), then the T inputs of this channel */
        float hist[16];
        for (int j = 0; j < S; j++) hist[j] = state[(size_t)j * ch + c];
        for (int t = 0; t < T; t++) {
            float xt = x[(size_t)t * ch + c], acc = 0;
            for (int j = 0; j < S; j++) acc += w[(size_t)c * Ck + j] * hist[j];
            acc += w[(size_t)c * Ck + S] * xt;
            y[(size_t)t * ch + c] = silu(acc);
            for (int j = 0; j + 1 < S; j++) hist[j] = hist[j + 1];
            if (S) hist[S - 1] = xt;
        }
        for (int j = 0; j < S; j++) state[(size_t)j * ch + c] = hist[j];
    }
}

/* ---- Gated DeltaNet ------------------------------------------------------------------------------- */

static void l2norm_scaled(const float *x, int n, float scale, float *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)ss + 1e-6f); /* eps inside the sum, as FLA / transformers */
    for (int i = 0; i < n; i++) y[i] = x[i] * inv * scale;
}

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#define GDN_MAX_D 1024
#define GDN_C 64

/* Token t of head j: normalised q (scaled by 1/sqrt(Dk)), k, and the decay g and step β. */
typedef struct {
    const float *qkv, *a, *b, *A_log, *dt_bias;
    int Hk, Hv, Dk, Dv;
    size_t row; /* floats per token in qkv */
} gdn_in;

static const float *gdn_q(const gdn_in *in, int t, int kh) { return in->qkv + t * in->row + (size_t)kh * in->Dk; }
static const float *gdn_k(const gdn_in *in, int t, int kh) {
    return gdn_q(in, t, kh) + (size_t)in->Hk * in->Dk;
}
static const float *gdn_v(const gdn_in *in, int t, int j) {
    return in->qkv + t * in->row + 2 * (size_t)in->Hk * in->Dk + (size_t)j * in->Dv;
}

static void gdn_token(const gdn_in *in, int t, int j, float *q, float *k, float *g, float *beta) {
    int kh = j / (in->Hv / in->Hk); /* v-head j reads k-head j // (Hv/Hk): grouped, not tiled */
    l2norm_scaled(gdn_q(in, t, kh), in->Dk, 1.0f / sqrtf((float)in->Dk), q);
    l2norm_scaled(gdn_k(in, t, kh), in->Dk, 1.0f, k);
    float a = in->a[(size_t)t * in->Hv + j], b = in->b[(size_t)t * in->Hv + j];
    *g = -expf(in->A_log[j]) * softplus(a + in->dt_bias[j]);
    *beta = sigmoid(b);
}

/* S ← S·e^g; δ = β(v − Sᵀk); S ← S + k δᵀ; o = Sᵀq. S is [Dk][Dv]. */
static void gdn_recurrent_head(const gdn_in *in, int j, int T, float *S, float *o) {
    const int Dk = in->Dk, Dv = in->Dv;
    float q[GDN_MAX_D], k[GDN_MAX_D], delta[GDN_MAX_D];
    for (int t = 0; t < T; t++) {
        float g, beta;
        gdn_token(in, t, j, q, k, &g, &beta);
        const float *v = gdn_v(in, t, j);
        float decay = expf(g);
        for (int i = 0; i < Dk * Dv; i++) S[i] *= decay;
        for (int c = 0; c < Dv; c++) delta[c] = 0;
        for (int i = 0; i < Dk; i++)
            for (int c = 0; c < Dv; c++) delta[c] += S[i * Dv + c] * k[i];
        for (int c = 0; c < Dv; c++) delta[c] = beta * (v[c] - delta[c]);
        for (int i = 0; i < Dk; i++)
            for (int c = 0; c < Dv; c++) S[i * Dv + c] += k[i] * delta[c];
        float *out = o + ((size_t)t * in->Hv + j) * Dv;
        for (int c = 0; c < Dv; c++) out[c] = 0;
        for (int i = 0; i < Dk; i++)
            for (int c = 0; c < Dv; c++) out[c] += S[i * Dv + c] * q[i];
    }
}

/* Chunked form (HF torch_chunk_gated_delta_rule), chunks of 64 with zero padding:
 *   A = strict_lower(β k kᵀ ⊙ e^{γi−γj}); U = (I+A)⁻¹(βV); W = (I+A)⁻¹(β e^γ K)
 *   V' = U − W S; O = (e^γ Q) S + tril(Q Kᵀ ⊙ e^{γi−γj}) V'; S ← e^{γ_last} S + (e^{γ_last−γ} K)ᵀ V'
 * ws holds this head's chunk workspace (gdn_chunk_ws_floats). */
__attribute__((target_clones("avx2", "default"))) static void gdn_chunk_head(const gdn_in *in, int j, int T, float *S,
                                                                             float *o, float *ws) {
    const int Dk = in->Dk, Dv = in->Dv, C = GDN_C;
    float *Q = ws, *K = Q + C * Dk, *U = K + C * Dk, *W = U + C * Dv, *A = W + C * Dk, *P = A + C * C,
          *Vn = P + C * C, *gam = Vn + C * Dv, *beta = gam + C, *ovec = beta + C;
    for (int c0 = 0; c0 < T; c0 += C) {
        int n = QRT_MIN(C, T - c0);
        float cum = 0;
        for (int i = 0; i < C; i++) {
            float g = 0, b = 0;
            if (i < n) gdn_token(in, c0 + i, j, Q + i * Dk, K + i * Dk, &g, &b);
            else {
                memset(Q + i * Dk, 0, sizeof(float) * Dk);
                memset(K + i * Dk, 0, sizeof(float) * Dk);
            }
            cum += g;
            gam[i] = cum;
            beta[i] = b;
            for (int c = 0; c < Dv; c++) U[i * Dv + c] = i < n ? b * gdn_v(in, c0 + i, j)[c] : 0;
            float eg = expf(gam[i]);
            for (int d = 0; d < Dk; d++) W[i * Dk + d] = b * eg * K[i * Dk + d];
        }
        for (int i = 0; i < C; i++)
            for (int jj = 0; jj < C; jj++) {
                float kk = 0, qk = 0;
                if (jj <= i) {
                    for (int d = 0; d < Dk; d++) {
                        kk += K[i * Dk + d] * K[jj * Dk + d];
                        qk += Q[i * Dk + d] * K[jj * Dk + d];
                    }
                }
                float dec = jj <= i ? expf(gam[i] - gam[jj]) : 0;
                A[i * C + jj] = jj < i ? beta[i] * kk * dec : 0;
                P[i * C + jj] = qk * dec;
            }
        /* forward substitution: rows of U and W become (I+A)⁻¹ applied to them */
        for (int i = 1; i < C; i++)
            for (int jj = 0; jj < i; jj++) {
                float aij = A[i * C + jj];
                if (aij == 0) continue;
                for (int c = 0; c < Dv; c++) U[i * Dv + c] -= aij * U[jj * Dv + c];
                for (int d = 0; d < Dk; d++) W[i * Dk + d] -= aij * W[jj * Dk + d];
            }
        /* V' = U − W S */
        for (int i = 0; i < C; i++) {
            float *acc = Vn + i * Dv;
            memset(acc, 0, sizeof(float) * Dv);
            for (int d = 0; d < Dk; d++) {
                const float w = W[i * Dk + d], *Sd = S + d * Dv;
                for (int c = 0; c < Dv; c++) acc[c] += w * Sd[c];
            }
            for (int c = 0; c < Dv; c++) acc[c] = U[i * Dv + c] - acc[c];
        }
        /* O = (e^γ Q) S + P V' */
        for (int i = 0; i < n; i++) {
            float eg = expf(gam[i]), *inter = ovec, *intra = ovec + Dv;
            float *out = o + ((size_t)(c0 + i) * in->Hv + j) * Dv;
            memset(ovec, 0, sizeof(float) * 2 * Dv);
            for (int d = 0; d < Dk; d++) {
                const float qd = Q[i * Dk + d], *Sd = S + d * Dv;
                for (int c = 0; c < Dv; c++) inter[c] += qd * Sd[c];
            }
            for (int jj = 0; jj <= i; jj++) {
                const float pij = P[i * C + jj], *Vj = Vn + jj * Dv;
                for (int c = 0; c < Dv; c++) intra[c] += pij * Vj[c];
            }
            for (int c = 0; c < Dv; c++) out[c] = eg * inter[c] + intra[c];
        }
        /* S ← e^{γ_last} S + (e^{γ_last − γ} K)ᵀ V' */
        float glast = gam[C - 1], elast = expf(glast);
        for (int i = 0; i < C; i++) gam[i] = expf(glast - gam[i]); /* γ is not needed past here */
        for (int d = 0; d < Dk; d++) {
            float *acc = ovec;
            memset(acc, 0, sizeof(float) * Dv);
            for (int i = 0; i < C; i++) {
                const float w = gam[i] * K[i * Dk + d], *Vi = Vn + i * Dv;
                for (int c = 0; c < Dv; c++) acc[c] += w * Vi[c];
            }
            for (int c = 0; c < Dv; c++) S[d * Dv + c] = elast * S[d * Dv + c] + acc[c];
        }
    }
}

static size_t gdn_chunk_ws_floats(int Dk, int Dv) {
    const size_t C = GDN_C;
    return C * Dk * 3 + C * Dv * 2 + C * C * 2 + 2 * C + 2 * (size_t)Dv;
}

static void gdn_core(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                     float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, float *o) {
    QRT_ASSERT(Dk <= GDN_MAX_D && Dv <= GDN_MAX_D);
    gdn_in in = {qkv, a, b, A_log, dt_bias, Hk, Hv, Dk, Dv, 2 * (size_t)Hk * Dk + (size_t)Hv * Dv};
    size_t wsn = gdn_chunk_ws_floats(Dk, Dv);
#pragma omp parallel if ((int64_t)T * Hv * Dk * Dv >= PARALLEL_MIN_WORK)
    {
        /* prefill only; if the workspace cannot be had, the recurrence computes the same function */
        float *ws = chunked ? malloc(sizeof(float) * wsn) : NULL;
#pragma omp for schedule(static)
        for (int j = 0; j < Hv; j++) {
            float *Sj = S + (size_t)j * Dk * Dv;
            if (ws) gdn_chunk_head(&in, j, T, Sj, o, ws);
            else gdn_recurrent_head(&in, j, T, Sj, o);
        }
        free(ws);
    }
}

/* The recurrence (or chunked form), then the gated norm of each head's output: literally the two former ops. */
static void cpu_gdn(const float *qkv, const float *a, const float *b, const float *A_log, const float *dt_bias,
                    const float *S_in, float *S, int T, int Hk, int Hv, int Dk, int Dv, int chunked, const float *z,
                    const float *norm_w, float eps, float *o) {
    if (S_in != S) memcpy(S, S_in, sizeof(float) * (size_t)Hv * Dk * Dv);
    gdn_core(qkv, a, b, A_log, dt_bias, S, T, Hk, Hv, Dk, Dv, chunked, o);
    cpu_rmsnorm_gated(o, z, norm_w, T * Hv, Dv, eps, o);
}

/* ---- RoPE ---------------------------------------------------------------------------------------- */

/* Rotate-half RoPE of one head's first R dims at position pos. */
static void rope_row(float *v, int R, double theta, int pos) {
    const int half = R / 2;
    const float p = (float)pos;
    for (int i = 0; i < half; i++) {
        /* as transformers computes it in f32: inv_freq = 1 / theta^(2i/R); angle = pos · inv_freq */
        float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)R);
        float ang = p * inv, c = cosf(ang), s = sinf(ang);
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x1 * c + x0 * s;
    }
}

/* ---- KV cache ------------------------------------------------------------------------------------ */

static void kv_store_row(int fmt, const float *x, int Dh, void *dst, float *scale) {
    if (fmt == QRT_KV_F32) {
        memcpy(dst, x, sizeof(float) * (size_t)Dh);
    } else if (fmt == QRT_KV_BF16) {
        uint16_t *d = dst;
        for (int i = 0; i < Dh; i++) d[i] = qrt_f32_to_bf16(x[i]);
    } else {
        float amax = 0;
        for (int i = 0; i < Dh; i++) amax = fmaxf(amax, fabsf(x[i]));
        float s = amax > 0 ? amax / 448.0f : 1.0f;
        uint8_t *d = dst;
        for (int i = 0; i < Dh; i++) d[i] = qrt_e4m3_encode(x[i] / s);
        *scale = s;
    }
}

static void kv_load_row(int fmt, const void *src, float scale, int Dh, float *x) {
    if (fmt == QRT_KV_F32) {
        memcpy(x, src, sizeof(float) * (size_t)Dh);
    } else if (fmt == QRT_KV_BF16) {
        const uint16_t *d = src;
        for (int i = 0; i < Dh; i++) x[i] = qrt_bf16_to_f32(d[i]);
    } else {
        const uint8_t *d = src;
        for (int i = 0; i < Dh; i++) x[i] = qrt_e4m3_lut[d[i]] * scale;
    }
}

/* Row `row` ([C][Hkv] order) of the cache's keys (values = 0) or values (values = 1) from f32 x [Dh]. */
static void kv_store(const qrt_kv *kv, int values, size_t row, const float *x, int Dh) {
    const size_t es = qrt_kv_elem_bytes(kv->fmt);
    float *scales = values ? kv->vs : kv->ks;
    kv_store_row(kv->fmt, x, Dh, (uint8_t *)(values ? kv->v : kv->k) + row * Dh * es, scales ? &scales[row] : NULL);
}

/* q_norm + RoPE of every query (in place), k_norm + RoPE of every key, then the keys and values into the cache. */
static void cpu_attn_prep(float *qg, const float *k, const float *v, const float *q_norm, const float *k_norm,
                          float eps, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, int R, double theta) {
    QRT_ASSERT(Dh <= GDN_MAX_D);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < Hq; h++) {
            float *q = qg + ((size_t)t * Hq + h) * 2 * Dh; /* [query | gate] */
            rmsnorm_row(q, q_norm, Dh, eps, q);
            rope_row(q, R, theta, pos0 + t);
        }
        for (int g = 0; g < Hkv; g++) {
            const size_t src = ((size_t)t * Hkv + g) * Dh, row = (size_t)(pos0 + t) * Hkv + g;
            float kr[GDN_MAX_D];
            rmsnorm_row(k + src, k_norm, Dh, eps, kr);
            rope_row(kr, R, theta, pos0 + t);
            kv_store(kv, 0, row, kr, Dh);
            kv_store(kv, 1, row, v + src, Dh);
        }
    }
}

/* Cache row j of kv head g (keys or values) widened to f32. */
static void kv_row(const qrt_kv *kv, int values, int j, int g, int Hkv, int Dh, float *x) {
    const size_t row = (size_t)j * Hkv + g, es = qrt_kv_elem_bytes(kv->fmt);
    const void *src = (const uint8_t *)(values ? kv->v : kv->k) + row * Dh * es;
    const float *scales = values ? kv->vs : kv->ks;
    kv_load_row(kv->fmt, src, scales ? scales[row] : 1.0f, Dh, x);
}

/* ---- attention and elementwise ------------------------------------------------------------------- */

/* Attention runs over blocks of queries that share a kv head (a head group × some tokens) and over tiles of
 * ATT_KT keys, each tile read from the cache once for the whole block: no T × T buffer, and the cache is read once
 * per block instead of once per query. A query's arithmetic is the same in any block (so decode, a verify and a
 * prefill agree bit for bit): its score with key j is q·k_j summed over d in order, and the softmax takes two passes
 * (the max of the scores, then e^(s − max), their sum and the weighted values in key order). The block's queries
 * are transposed so that 8 of them are one vector, each lane its own query's sum: 8 scores at once, nothing
 * reordered. */
#define ATT_KT 16    /* keys per tile */
#define ATT_BLOCK 16 /* queries per block: consecutive (token, head of the group) pairs */

typedef struct {
    const qrt_kv *kv;
    int Hkv, Dh;
    float scale;
} att_shape;

/* Where the f32 key (values = 0) or value rows [Dh] of keys j0 .. j0+kn of kv head g are: in the cache itself (f32)
 * or widened into buf [ATT_KT][Dh]. */
static void att_rows(const att_shape *a, int values, int g, int j0, int kn, float *buf, const float **rows) {
    const qrt_kv *kv = a->kv;
    for (int jj = 0; jj < kn; jj++) {
        if (kv->fmt == QRT_KV_F32) {
            rows[jj] = (const float *)(values ? kv->v : kv->k) + ((size_t)(j0 + jj) * a->Hkv + g) * a->Dh;
        } else {
            kv_row(kv, values, j0 + jj, g, a->Hkv, a->Dh, buf + (size_t)jj * a->Dh);
            rows[jj] = buf + (size_t)jj * a->Dh;
        }
    }
}

/* s[jj][i] = q_i · k[jj] for the tile's kn keys and the nv·8 transposed queries qt [Dh][nv·8], each lane summed
 * over d in order. Four keys × two query vectors at a time keep eight independent sums in registers. */
static inline __attribute__((always_inline)) void att_scores(const float *qt, int nv, const float *const *k, int kn,
                                                            int Dh, float *s /* [ATT_KT][nv·8] */) {
    const int ld = nv * 8;
    for (int j0 = 0; j0 < kn; j0 += 4) {
        const int jn = QRT_MIN(4, kn - j0);
        const float *kr[4];
        for (int jj = 0; jj < 4; jj++) kr[jj] = k[j0 + QRT_MIN(jj, jn - 1)]; /* past kn: a repeat, not stored */
        for (int v0 = 0; v0 < nv; v0 += 2) {
            const int two = v0 + 1 < nv;
            v8 acc[4][2];
            for (int jj = 0; jj < 4; jj++) acc[jj][0] = acc[jj][1] = (v8){0};
            for (int d = 0; d < Dh; d++) {
                const v8 q0 = LOAD8(qt + (size_t)d * ld + v0 * 8);
                const v8 q1 = two ? LOAD8(qt + (size_t)d * ld + v0 * 8 + 8) : q0;
                for (int jj = 0; jj < 4; jj++) {
                    const float kd = kr[jj][d];
                    acc[jj][0] += kd * q0;
                    acc[jj][1] += kd * q1;
                }
            }
            for (int jj = 0; jj < jn; jj++) {
                memcpy(s + (size_t)(j0 + jj) * ld + v0 * 8, &acc[jj][0], sizeof(v8));
                if (two) memcpy(s + (size_t)(j0 + jj) * ld + v0 * 8 + 8, &acc[jj][1], sizeof(v8));
            }
        }
    }
}

/* o[0..Dh) += Σ_jj p[jj] · v[jj][0..Dh), each element summed in jj order. */
static inline __attribute__((always_inline)) void att_accumulate(float *o, const float *p, const float *const *v,
                                                                int kn, int Dh) {
    int d = 0;
    for (; d + 32 <= Dh; d += 32) {
        v8 o0 = LOAD8(o + d), o1 = LOAD8(o + d + 8), o2 = LOAD8(o + d + 16), o3 = LOAD8(o + d + 24);
        for (int jj = 0; jj < kn; jj++) {
            const float *vj = v[jj] + d;
            o0 += p[jj] * LOAD8(vj), o1 += p[jj] * LOAD8(vj + 8);
            o2 += p[jj] * LOAD8(vj + 16), o3 += p[jj] * LOAD8(vj + 24);
        }
        memcpy(o + d, &o0, sizeof o0), memcpy(o + d + 8, &o1, sizeof o1);
        memcpy(o + d + 16, &o2, sizeof o2), memcpy(o + d + 24, &o3, sizeof o3);
    }
    for (; d < Dh; d++)
        for (int jj = 0; jj < kn; jj++) o[d] += p[jj] * v[jj][d];
}

static inline float max_keep(float m, float x) { return x > m ? x : m; } /* fmaxf where m is never NaN */

/* Workspace of one block (on the stack: at most 200 KB, at Dh = 1024). */
typedef struct {
    float qt[GDN_MAX_D * ATT_BLOCK]; /* the queries transposed, [Dh][nv·8] */
    float s[ATT_KT * ATT_BLOCK];     /* a tile's scores, [ATT_KT][nv·8] */
    float kbuf[ATT_KT * GDN_MAX_D], vbuf[ATT_KT * GDN_MAX_D]; /* a tile widened from bf16 / fp8 */
    float mx[ATT_BLOCK], sum[ATT_BLOCK];
} att_ws;

/* One block of nq queries q[i] ([Dh]) seeing n[i] keys each (causal); o[i] ([Dh]) gets the unnormalised output and
 * ws->sum[i] its softmax denominator. The second pass needs the first pass's scores again: kept in keep (room for
 * every key: [max n][8·⌈nq/8⌉]) when the caller has one, else computed again (the same bits either way). */
__attribute__((target_clones("avx2", "default"))) static void att_block(const att_shape *a, int g,
                                                                        const float *const *q, const int *n, int nq,
                                                                        float *const *o, att_ws *ws, float *keep) {
    const int Dh = a->Dh, nv = QRT_CEIL_DIV(nq, 8), ld = nv * 8;
    int nmax = 0;
    for (int i = 0; i < nq; i++) nmax = QRT_MAX(nmax, n[i]), ws->mx[i] = -INFINITY, ws->sum[i] = 0;
    for (int d = 0; d < Dh; d++)
        for (int i = 0; i < ld; i++) ws->qt[(size_t)d * ld + i] = i < nq ? q[i][d] : 0;
    for (int i = 0; i < nq; i++) memset(o[i], 0, sizeof(float) * (size_t)Dh);
    for (int pass = 0; pass < 2; pass++)
        for (int j0 = 0; j0 < nmax; j0 += ATT_KT) {
            const int kn = QRT_MIN(ATT_KT, nmax - j0);
            const float *krow[ATT_KT], *vrow[ATT_KT];
            float *s = keep ? keep + (size_t)j0 * ld : ws->s; /* [kn][ld] */
            if (!pass || !keep) {
                att_rows(a, 0, g, j0, kn, ws->kbuf, krow);
                att_scores(ws->qt, nv, krow, kn, Dh, s);
            }
            if (pass) att_rows(a, 1, g, j0, kn, ws->vbuf, vrow);
            for (int i = 0; i < nq; i++) {
                const int valid = QRT_MIN(kn, n[i] - j0); /* keys of this tile the query may see */
                float m = ws->mx[i], p[ATT_KT], sum = ws->sum[i]; /* locals: o[i] might alias ws for the compiler */
                if (!pass) {
                    for (int jj = 0; jj < valid; jj++) m = max_keep(m, s[jj * ld + i] * a->scale);
                    ws->mx[i] = m;
                    continue;
                }
                for (int jj = 0; jj < valid; jj++) p[jj] = expf(s[jj * ld + i] * a->scale - m);
                for (int jj = 0; jj < valid; jj++) sum += p[jj];
                ws->sum[i] = sum;
                att_accumulate(o[i], p, vrow, valid, Dh);
            }
        }
}

/* Above this many queries per call (a prefill piece, never a decode step or a verify: those stay free of
 * allocations) each thread allocates room to keep a block's scores between the two passes. */
#define ATT_KEEP_MIN_T QRT_GRAPH_MAX_T

static void cpu_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    const int group = Hq / Hkv, blocks = QRT_CEIL_DIV(T * group, ATT_BLOCK);
    const att_shape a = {kv, Hkv, Dh, 1.0f / sqrtf((float)Dh)};
    QRT_ASSERT(Dh <= GDN_MAX_D);
#pragma omp parallel if ((int64_t)T * Hq * (pos0 + T) * Dh >= PARALLEL_MIN_WORK)
    {
        /* without it (allocation failed or a short call) the scores are computed twice: the same bits */
        float *keep = T > ATT_KEEP_MIN_T ? malloc(sizeof(float) * ATT_BLOCK * (size_t)(pos0 + T)) : NULL;
#pragma omp for collapse(2) schedule(dynamic)
        for (int g = 0; g < Hkv; g++)
            for (int b = 0; b < blocks; b++) {
                att_ws ws;
                const float *q[ATT_BLOCK];
                float *o[ATT_BLOCK];
                int n[ATT_BLOCK], nq = 0;
                for (int e = b * ATT_BLOCK; e < QRT_MIN(T * group, (b + 1) * ATT_BLOCK); e++, nq++) {
                    const int t = e / group, h = g * group + e % group; /* q-head h reads kv head h / group */
                    q[nq] = qg + ((size_t)t * Hq + h) * 2 * Dh;            /* [query | gate] */
                    o[nq] = out + ((size_t)t * Hq + h) * Dh;
                    n[nq] = pos0 + t + 1; /* causal */
                }
                att_block(&a, g, q, n, nq, o, &ws, keep);
                for (int i = 0; i < nq; i++) {
                    const float *gate = q[i] + Dh;
                    for (int d = 0; d < Dh; d++) o[i][d] = o[i][d] / ws.sum[i] * sigmoid(gate[d]);
                }
            }
        free(keep);
    }
}

static void cpu_swiglu(const float *g, const float *u, size_t n, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = silu(g[i]) * u[i];
}

static void cpu_add(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void cpu_argmax(const float *x, int rows, int n, int32_t *out) {
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * n;
        out[r] = qrt_all_finite(row, (size_t)n) ? qrt_argmax(row, n) : QRT_PICK_NONFINITE;
    }
}

/* Literally add then rmsnorm: the reference the fused GPU kernel must reproduce. */
static void cpu_add_rmsnorm(float *h, const float *y, const float *w, int rows, int n, float eps, float *x) {
    cpu_add(h, y, (size_t)rows * n);
    cpu_rmsnorm(h, w, rows, n, eps, x);
}

static size_t cpu_mem_available(void) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
}

static const qrt_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .mem_available = cpu_mem_available,
    .prefill_piece = 256,
    .prepare_linear = cpu_prepare_linear,
    .prepare_group = cpu_prepare_group,
    .embed = cpu_embed,
    .matmul = cpu_matmul,
    .matmul_group = cpu_matmul_group,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .conv1d_silu = cpu_conv1d_silu,
    .gdn = cpu_gdn,
    .attn_prep = cpu_attn_prep,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .argmax = cpu_argmax,
};

const qrt_backend *qrt_backend_cpu(void) { return &cpu_backend; }
