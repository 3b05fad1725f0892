/* The CPU backend: the reference every other backend is checked against. Plain loops, f32 accumulation,
 * OpenMP over independent rows/heads. Every reduction runs in a fixed order that does not depend on T or
 * on the thread count, so a row's result is the same whether it is computed alone or in a batch. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/quant_encode.h"
#include "backend/cpu/cpu_quant.h"

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

/* Dot products of one weight row with T activation rows. K is walked in blocks (the row widened to f32
 * once per block); eight interleaved partial sums per token, combined in a fixed tree. */
#define MM_KB 512
#define MM_TB 64
static void matmul_row(const qrt_linear *W, int64_t r, const float *x, int T, float *y) {
    const int64_t K = W->k;
    float wbuf[MM_KB];
    for (int t0 = 0; t0 < T; t0 += MM_TB) {
        int tn = QRT_MIN(MM_TB, T - t0);
        float acc[MM_TB][8];
        memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < K; k0 += MM_KB) {
            int64_t kn = QRT_MIN(MM_KB, K - k0);
            qrt_cpu_row_to_f32(W, r, k0, kn, wbuf); /* MM_KB is a multiple of 16 */
            for (int t = 0; t < tn; t++) {
                const float *xr = x + (size_t)(t0 + t) * K + k0;
                float *a = acc[t];
                for (int64_t j = 0; j < kn; j++) a[(k0 + j) & 7] += wbuf[j] * xr[j];
            }
        }
        for (int t = 0; t < tn; t++) {
            const float *a = acc[t];
            y[(size_t)(t0 + t) * W->n + r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        }
    }
}

static void cpu_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    const int64_t N = W->n;
#pragma omp parallel for schedule(static) if (N * W->k * T >= PARALLEL_MIN_WORK)
    for (int64_t r = 0; r < N; r++) matmul_row(W, r, x, T, y);
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
static void gdn_chunk_head(const gdn_in *in, int j, int T, float *S, float *o, float *ws) {
    const int Dk = in->Dk, Dv = in->Dv, C = GDN_C;
    float *Q = ws, *K = Q + C * Dk, *U = K + C * Dk, *W = U + C * Dv, *A = W + C * Dk, *P = A + C * C,
          *Vn = P + C * C, *gam = Vn + C * Dv, *beta = gam + C;
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
        for (int i = 0; i < C; i++)
            for (int c = 0; c < Dv; c++) {
                float acc = 0;
                for (int d = 0; d < Dk; d++) acc += W[i * Dk + d] * S[d * Dv + c];
                Vn[i * Dv + c] = U[i * Dv + c] - acc;
            }
        /* O = (e^γ Q) S + P V' */
        for (int i = 0; i < n; i++) {
            float eg = expf(gam[i]);
            float *out = o + ((size_t)(c0 + i) * in->Hv + j) * Dv;
            for (int c = 0; c < Dv; c++) {
                float inter = 0, intra = 0;
                for (int d = 0; d < Dk; d++) inter += Q[i * Dk + d] * S[d * Dv + c];
                for (int jj = 0; jj <= i; jj++) intra += P[i * C + jj] * Vn[jj * Dv + c];
                out[c] = eg * inter + intra;
            }
        }
        /* S ← e^{γ_last} S + (e^{γ_last − γ} K)ᵀ V' */
        float glast = gam[C - 1], elast = expf(glast);
        for (int d = 0; d < Dk; d++)
            for (int c = 0; c < Dv; c++) {
                float acc = 0;
                for (int i = 0; i < C; i++) acc += expf(glast - gam[i]) * K[i * Dk + d] * Vn[i * Dv + c];
                S[d * Dv + c] = elast * S[d * Dv + c] + acc;
            }
    }
}

static size_t gdn_chunk_ws_floats(int Dk, int Dv) {
    const size_t C = GDN_C;
    return C * Dk * 3 + C * Dv * 2 + C * C * 2 + 2 * C;
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

static void cpu_attention(const float *qg, const qrt_kv *kv, int T, int pos0, int Hq, int Hkv, int Dh, float *out) {
    const float scale = 1.0f / sqrtf((float)Dh);
    const int group = Hq / Hkv;
    QRT_ASSERT(Dh <= GDN_MAX_D);
#pragma omp parallel for collapse(2) schedule(dynamic) if ((int64_t)T * Hq * (pos0 + T) * Dh >= PARALLEL_MIN_WORK)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            const float *qv = qg + ((size_t)t * Hq + h) * 2 * Dh, *gate = qv + Dh; /* [query | gate] */
            const int g = h / group, n = pos0 + t + 1; /* q-head h reads kv-head h // group; causal */
            float kr[GDN_MAX_D], vr[GDN_MAX_D];
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                kv_row(kv, 0, j, g, Hkv, Dh, kr);
                float s = 0;
                for (int d = 0; d < Dh; d++) s += qv[d] * kr[d];
                mx = fmaxf(mx, s * scale);
            }
            float *o = out + ((size_t)t * Hq + h) * Dh;
            for (int d = 0; d < Dh; d++) o[d] = 0;
            float sum = 0;
            for (int j = 0; j < n; j++) {
                kv_row(kv, 0, j, g, Hkv, Dh, kr);
                kv_row(kv, 1, j, g, Hkv, Dh, vr);
                float s = 0;
                for (int d = 0; d < Dh; d++) s += qv[d] * kr[d];
                float p = expf(s * scale - mx);
                sum += p;
                for (int d = 0; d < Dh; d++) o[d] += p * vr[d];
            }
            for (int d = 0; d < Dh; d++) o[d] = o[d] / sum * sigmoid(gate[d]);
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
