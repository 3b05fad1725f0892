/* Matmul y [T][N] = x [T][K] · Wᵀ for every weight format, and the NVFP4 autotuner.
 *
 * Variants (dense = BF16/F16/F32, picked by T; NVFP4 = W4A16, picked by measurement):
 *   dense 0  dense_gemv<fmt, TT>   T ≤ 16: one warp per row, TT tokens share each 16-byte weight load;
 *                                  x first copied into lane order (permute_x_lanes) for coalesced loads
 *   dense 1  dense_tiled<fmt>      T > 16: 8 warps × 4 rows per block, 16-token x tile in shared memory
 *   (every NVFP4 variant reads x in lane order too: permute_x_lanes runs first, inside the timed call)
 *   nvfp4 0  warp_row              one warp per row, 4 warps per block, 4 16-byte loads in flight per lane
 *   nvfp4 1  warp_2rows            one warp per 2 rows (x loaded once for both), 4 warps per block
 *   nvfp4 2  warp_4rows            one warp per 4 rows, 2 warps per block (≤ 4 tokens per pass)
 *   nvfp4 3  splitk4               4 warps split one row's K (tall-skinny: few rows, long K)
 *
 * Batch invariance. Every kernel of a format reduces a row in one fixed order, so a row's result does not
 * depend on T, on the token's place in the batch, or on the variant (the tests check this bit for bit):
 * - dense: the row is cut into 16-byte chunks (8 BF16/F16 or 4 F32 elements); chunk c belongs to lane
 *   c % 32, which sums its chunks in increasing c, each chunk's elements in order with fmaf; the 32 lane
 *   sums are added by the xor butterfly of warp_sum.
 * - NVFP4: the row is cut into 16-byte code vectors (32 elements, two e4m3 scale blocks of 16); vector v
 *   belongs to virtual lane v % 128, which sums its vectors in increasing v. A vector adds, per scale
 *   block, (Σ code·x in a fixed element order) · scale with fmaf. Virtual lanes l, l+32, l+64, l+96 are
 *   combined as (a0 + a1) + (a2 + a3), then the 32 results by warp_sum, then times scale2. A warp-per-row
 *   variant keeps the four virtual lanes in four accumulators per lane; splitk4 gives each warp one.
 * The CPU backend uses another (also fixed) order, so CPU and GPU agree to rounding, not bit for bit.
 *
 * Device layouts (prepare_linear): dense rows padded with zeros to 16 bytes; NVFP4 rows padded to 32
 * elements (codes and scales zero), so every row starts 16-byte aligned. x beyond K reads as 0. */
#include <string.h>
#include <sys/stat.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

/* ---- activations in lane order --------------------------------------------------------------------
 * A GEMV lane reads the x elements of its own weight chunk: with x row-major, the 32 lanes of a warp read
 * 32 addresses one chunk apart, 32 cache lines per load instruction (measured: NVFP4 at 12% of the read
 * bandwidth, bound by L1 wavefronts). So x is first copied into lane order: chunks of CE elements, in
 * groups of 32 chunks (one per lane); inside a group, quad q (4 floats) of lane l sits at (q·32 + l)·4.
 * A warp's float4 load of quad q is then 512 contiguous bytes. Elements past K are written as 0.
 * xp: [T][G][CE/4][32][4] floats, G = ceil(K / (32·CE)). */
__global__ void permute_x_lanes(const float *x /* [T][K] */, int64_t K, int T, int CE, int64_t G,
                                float4 *xp /* [T][G][CE/4][32] */) {
    const int64_t quads = (int64_t)T * G * (CE / 4) * 32;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const int lane = (int)(i % 32);
        const int64_t q = i / 32 % (CE / 4), g = i / 32 / (CE / 4) % G, t = i / 32 / (CE / 4) / G;
        const int64_t k0 = (g * 32 + lane) * CE + q * 4;
        const float *src = x + t * K;
        float4 v;
        v.x = k0 + 0 < K ? src[k0 + 0] : 0.0f;
        v.y = k0 + 1 < K ? src[k0 + 1] : 0.0f;
        v.z = k0 + 2 < K ? src[k0 + 2] : 0.0f;
        v.w = k0 + 3 < K ? src[k0 + 3] : 0.0f;
        xp[i] = v;
    }
}

/* One lane-order buffer, grown on demand; every op runs on the one default stream, so it is never in use
 * by two kernels at once. */
static float4 *xp_buf = NULL;
static size_t xp_cap = 0; /* float4s */

static const float4 *permute_x(const float *x, int64_t K, int T, int CE, int64_t *G_out) {
    const int64_t G = (K + 32 * CE - 1) / (32 * CE);
    const size_t quads = (size_t)T * G * (CE / 4) * 32;
    if (quads > xp_cap) {
        if (xp_buf) QRT_CUDA_CHECK(cudaFree(xp_buf));
        xp_cap = quads < ((size_t)1 << 18) ? ((size_t)1 << 18) : quads;
        QRT_CUDA_CHECK(cudaMalloc(&xp_buf, xp_cap * sizeof(float4)));
    }
    size_t blocks = (quads + 255) / 256;
    permute_x_lanes<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(x, K, T, CE, G, xp_buf);
    QRT_CUDA_LAUNCHED();
    *G_out = G;
    return xp_buf;
}

/* ---- dense (BF16 / F16 / F32) --------------------------------------------------------------------- */

template <int FMT> struct dense_traits;
template <> struct dense_traits<QRT_WF_BF16> { enum { CE = 8, ES = 2 }; };
template <> struct dense_traits<QRT_WF_F16> { enum { CE = 8, ES = 2 }; };
template <> struct dense_traits<QRT_WF_F32> { enum { CE = 4, ES = 4 }; };

/* The CE elements of chunk c of a padded weight row, widened to f32. */
template <int FMT>
__device__ __forceinline__ void load_w_chunk(const uint8_t *row /* [Kp] elements */, int64_t c,
                                             float *w /* [CE] */) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(row) + c);
    uint32_t words[4] = {u.x, u.y, u.z, u.w};
    if (FMT == QRT_WF_F32) {
#pragma unroll
        for (int j = 0; j < 4; j++) w[j] = __uint_as_float(words[j]);
    } else if (FMT == QRT_WF_BF16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w[2 * j] = __uint_as_float(words[j] << 16);
            w[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 h = *reinterpret_cast<__half2 *>(&words[j]);
            float2 f = __half22float2(h);
            w[2 * j] = f.x;
            w[2 * j + 1] = f.y;
        }
    }
}

template <int FMT, int TT>
__global__ void __launch_bounds__(128) dense_gemv(const uint8_t *W /* [N][Kp] */, int64_t N, int64_t Kp,
                                                  const float4 *xp /* [T][G][CE/4][32] lane order */, int64_t G,
                                                  int T, float *y /* [T][N] */) {
    constexpr int CE = dense_traits<FMT>::CE, ES = dense_traits<FMT>::ES;
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= N) return;
    const uint8_t *wrow = W + row * Kp * ES;
    const int64_t nchunks = Kp / CE;
    for (int t0 = 0; t0 < T; t0 += TT) {
        float acc[TT];
#pragma unroll
        for (int tt = 0; tt < TT; tt++) acc[tt] = 0.0f;
#pragma unroll 4
        for (int64_t c = lane; c < nchunks; c += 32) {
            float w[CE];
            load_w_chunk<FMT>(wrow, c, w);
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                if (t0 + tt >= T) break;
                const float4 *xq = xp + (((int64_t)(t0 + tt) * G + c / 32) * (CE / 4)) * 32 + lane;
#pragma unroll
                for (int j = 0; j < CE; j += 4) {
                    const float4 f = __ldg(xq + (j / 4) * 32);
                    acc[tt] = fmaf(w[j], f.x, acc[tt]);
                    acc[tt] = fmaf(w[j + 1], f.y, acc[tt]);
                    acc[tt] = fmaf(w[j + 2], f.z, acc[tt]);
                    acc[tt] = fmaf(w[j + 3], f.w, acc[tt]);
                }
            }
        }
#pragma unroll
        for (int tt = 0; tt < TT; tt++) {
            float s = warp_sum(acc[tt]);
            if (lane == 0 && t0 + tt < T) y[(size_t)(t0 + tt) * N + row] = s;
        }
    }
}

#define TILED_ROWS_PER_WARP 4
#define TILED_WARPS 8
#define TILED_TOKENS 16

template <int FMT>
__global__ void __launch_bounds__(TILED_WARPS * 32) dense_tiled(const uint8_t *W /* [N][Kp] */, int64_t N, int64_t K,
                                                                int64_t Kp, const float *x /* [T][K] */, int T,
                                                                float *y /* [T][N] */) {
    constexpr int CE = dense_traits<FMT>::CE, ES = dense_traits<FMT>::ES, SLAB = 32 * CE;
    /* +4: keeps 16-byte alignment of every row and staggers the rows over the banks */
    __shared__ __align__(16) float xs[TILED_TOKENS][SLAB + 4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row0 = ((int64_t)blockIdx.x * TILED_WARPS + warp) * TILED_ROWS_PER_WARP;
    const int t0 = blockIdx.y * TILED_TOKENS;
    const int64_t nchunks = Kp / CE;
    float acc[TILED_ROWS_PER_WARP][TILED_TOKENS];
#pragma unroll
    for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) acc[r][tt] = 0.0f;
    for (int64_t slab = 0; slab < nchunks; slab += 32) {
        __syncthreads(); /* the previous slab's reads are done */
        for (int i = threadIdx.x; i < TILED_TOKENS * SLAB; i += TILED_WARPS * 32) {
            int tt = i / SLAB, kk = i % SLAB;
            int64_t k = slab * CE + kk;
            xs[tt][kk] = (t0 + tt < T && k < K) ? x[(size_t)(t0 + tt) * K + k] : 0.0f;
        }
        __syncthreads();
        const int64_t c = slab + lane;
        if (c >= nchunks) continue; /* such a lane owns no chunk here, as in dense_gemv */
        float w[TILED_ROWS_PER_WARP][CE];
#pragma unroll
        for (int r = 0; r < TILED_ROWS_PER_WARP; r++) {
            if (row0 + r < N) load_w_chunk<FMT>(W + (row0 + r) * Kp * ES, c, w[r]);
            else
#pragma unroll
                for (int j = 0; j < CE; j++) w[r][j] = 0.0f;
        }
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) {
            float xv[CE];
#pragma unroll
            for (int j = 0; j < CE; j += 4) {
                float4 f = *reinterpret_cast<const float4 *>(&xs[tt][lane * CE + j]);
                xv[j] = f.x, xv[j + 1] = f.y, xv[j + 2] = f.z, xv[j + 3] = f.w;
            }
#pragma unroll
            for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
                for (int j = 0; j < CE; j++) acc[r][tt] = fmaf(w[r][j], xv[j], acc[r][tt]);
        }
    }
#pragma unroll
    for (int r = 0; r < TILED_ROWS_PER_WARP; r++)
#pragma unroll
        for (int tt = 0; tt < TILED_TOKENS; tt++) {
            float s = warp_sum(acc[r][tt]);
            if (lane == 0 && row0 + r < N && t0 + tt < T) y[(size_t)(t0 + tt) * N + row0 + r] = s;
        }
}

template <int FMT> static void launch_dense(const qrt_linear *W, const float *x, int T, float *y) {
    const int64_t N = W->n, K = W->k, Kp = qrt_dense_row_elems(FMT, K);
    const uint8_t *w = (const uint8_t *)W->data;
    if (T <= 16) {
        int64_t G;
        const float4 *xp = permute_x(x, K, T, dense_traits<FMT>::CE, &G);
        unsigned grid = qrt_grid((size_t)N, 4);
        if (T == 1) dense_gemv<FMT, 1><<<grid, 128>>>(w, N, Kp, xp, G, T, y);
        else if (T == 2) dense_gemv<FMT, 2><<<grid, 128>>>(w, N, Kp, xp, G, T, y);
        else if (T <= 4) dense_gemv<FMT, 4><<<grid, 128>>>(w, N, Kp, xp, G, T, y);
        else if (T <= 8) dense_gemv<FMT, 8><<<grid, 128>>>(w, N, Kp, xp, G, T, y);
        else dense_gemv<FMT, 16><<<grid, 128>>>(w, N, Kp, xp, G, T, y);
    } else {
        dim3 grid(qrt_grid((size_t)N, TILED_WARPS * TILED_ROWS_PER_WARP), qrt_grid((size_t)T, TILED_TOKENS));
        dense_tiled<FMT><<<grid, TILED_WARPS * 32>>>(w, N, K, Kp, x, T, y);
    }
    QRT_CUDA_LAUNCHED();
}

/* ---- NVFP4 W4A16 ---------------------------------------------------------------------------------- */

/* e4m3 block scale → f32, times 2^14: the E2M1 decode below yields code values × 2^-14. */
__device__ __forceinline__ float2 fp4_scales(uint16_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    float2 f = __half22float2(*reinterpret_cast<__half2 *>(&h));
    f.x *= 16384.0f;
    f.y *= 16384.0f;
    return f;
}

/* The 8 E2M1 codes of a 32-bit word (nibble n = element n, low nibble first) as f32 × 2^-14, in the order
 * e0 e2 e1 e3 e4 e6 e5 e7. An E2M1 code s·eem placed as f16 bits s at 15 and eem at 11..9 is exactly
 * its value × 2^-14 (e = 0 lands on the f16 subnormals, which hold 0 and 0.5 × 2^-14). */
__device__ __forceinline__ void fp4_decode_word(uint32_t w, float *out /* [8] */) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        uint32_t p = __byte_perm(w, 0, half ? 0x4342 : 0x4140); /* bytes b, 0, b+1, 0 */
        uint32_t lo = ((p << 9) & 0x0E000E00u) | ((p << 12) & 0x80008000u);
        uint32_t hi = ((p << 5) & 0x0E000E00u) | ((p << 8) & 0x80008000u);
        float2 a = __half22float2(*reinterpret_cast<__half2 *>(&lo));
        float2 b = __half22float2(*reinterpret_cast<__half2 *>(&hi));
        out[4 * half + 0] = a.x, out[4 * half + 1] = a.y, out[4 * half + 2] = b.x, out[4 * half + 3] = b.y;
    }
}
/* Element index (within the word) of each decoded value above. */
__device__ __forceinline__ int fp4_elem(int i) { return (i & 4) | ((i & 1) << 1) | ((i >> 1) & 1); }

/* acc += one 32-element vector's dot with one token's x (the order every NVFP4 variant shares).
 * xq: the vector's quad 0 in lane order (quad j at xq[32 j]). */
__device__ __forceinline__ float fp4_vec_dot(const float *w /* [32] decoded, word order */, float2 sc,
                                             const float4 *xq, int blocks /* 1 or 2 scale blocks inside K */,
                                             float acc) {
#pragma unroll
    for (int b = 0; b < 2; b++) {
        if (b >= blocks) break;
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const float4 x0 = __ldg(xq + 32 * (b * 4 + q * 2));
            const float4 x1 = __ldg(xq + 32 * (b * 4 + q * 2 + 1));
            const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) s = fmaf(w[b * 16 + q * 8 + i], xs[fp4_elem(i)], s);
        }
        acc = fmaf(s, b ? sc.y : sc.x, acc);
    }
    return acc;
}

__device__ __forceinline__ void fp4_decode_vec(uint4 c, float *w /* [32] */) {
    fp4_decode_word(c.x, w);
    fp4_decode_word(c.y, w + 8);
    fp4_decode_word(c.z, w + 16);
    fp4_decode_word(c.w, w + 24);
}

/* Warp-per-row variants: RPW rows per warp, WARPS warps per block, TT tokens per pass. Lane l handles
 * vectors l + 32·j + 128·m; j (0..3) is its virtual-lane slot, kept in acc[..][j]. */
template <int TT, int RPW, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) fp4_rows(const uint8_t *codes /* [N][Kp/2] */,
                                                       const uint8_t *scales /* [N][Kp/16] */, float scale2,
                                                       int64_t N, int64_t K,
                                                       const float4 *xp /* [T][G][8][32] lane order */, int64_t G,
                                                       int T, float *y /* [T][N] */) {
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5)) * RPW;
    if (row0 >= N) return;
    const int64_t Kp = (K + 31) / 32 * 32, nvec = Kp / 32;
    for (int t0 = 0; t0 < T; t0 += TT) {
        float acc[RPW][TT][4];
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int tt = 0; tt < TT; tt++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[r][tt][j] = 0.0f;
        for (int64_t base = lane; base < nvec; base += 128) {
            uint4 c[RPW][4];
            uint16_t s[RPW][4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t v = base + 32 * j;
#pragma unroll
                for (int r = 0; r < RPW; r++) {
                    const int64_t row = row0 + r < N ? row0 + r : N - 1; /* rows past N: computed, not stored */
                    if (v < nvec) {
                        c[r][j] = __ldg(reinterpret_cast<const uint4 *>(codes + row * (Kp / 2)) + v);
                        s[r][j] = __ldg(reinterpret_cast<const uint16_t *>(scales + row * (Kp / 16)) + v);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t v = base + 32 * j;
                if (v >= nvec) break;
                const int blocks = v * 32 + 16 < K ? 2 : 1;
#pragma unroll
                for (int r = 0; r < RPW; r++) {
                    float w[32];
                    fp4_decode_vec(c[r][j], w);
                    const float2 sc = fp4_scales(s[r][j]);
#pragma unroll
                    for (int tt = 0; tt < TT; tt++) {
                        if (t0 + tt >= T) break;
                        acc[r][tt][j] = fp4_vec_dot(w, sc, xp + ((int64_t)(t0 + tt) * G + v / 32) * 256 + v % 32,
                                                    blocks, acc[r][tt][j]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RPW; r++)
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                float p = (acc[r][tt][0] + acc[r][tt][1]) + (acc[r][tt][2] + acc[r][tt][3]);
                p = warp_sum(p);
                if (lane == 0 && row0 + r < N && t0 + tt < T) y[(size_t)(t0 + tt) * N + row0 + r] = p * scale2;
            }
    }
}

/* Split-K: one row per block of 4 warps; warp w is virtual lanes 32w..32w+31 (vectors 32w + lane + 128m). */
template <int TT>
__global__ void __launch_bounds__(128) fp4_splitk4(const uint8_t *codes /* [N][Kp/2] */,
                                                   const uint8_t *scales /* [N][Kp/16] */, float scale2, int64_t N,
                                                   int64_t K, const float4 *xp /* [T][G][8][32] lane order */,
                                                   int64_t G, int T, float *y /* [T][N] */) {
    __shared__ float part[4][TT][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = blockIdx.x;
    const int64_t Kp = (K + 31) / 32 * 32, nvec = Kp / 32;
    const uint4 *crow = reinterpret_cast<const uint4 *>(codes + row * (Kp / 2));
    const uint16_t *srow = reinterpret_cast<const uint16_t *>(scales + row * (Kp / 16));
    for (int t0 = 0; t0 < T; t0 += TT) {
        float acc[TT];
#pragma unroll
        for (int tt = 0; tt < TT; tt++) acc[tt] = 0.0f;
        for (int64_t base = 32 * warp + lane; base < nvec; base += 2 * 128) {
            uint4 c[2];
            uint16_t s[2];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int64_t v = base + 128 * m;
                if (v < nvec) c[m] = __ldg(crow + v), s[m] = __ldg(srow + v);
            }
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int64_t v = base + 128 * m;
                if (v >= nvec) break;
                float w[32];
                fp4_decode_vec(c[m], w);
                const float2 sc = fp4_scales(s[m]);
                const int blocks = v * 32 + 16 < K ? 2 : 1;
#pragma unroll
                for (int tt = 0; tt < TT; tt++) {
                    if (t0 + tt >= T) break;
                    acc[tt] = fp4_vec_dot(w, sc, xp + ((int64_t)(t0 + tt) * G + v / 32) * 256 + v % 32, blocks,
                                          acc[tt]);
                }
            }
        }
        __syncthreads(); /* the previous pass's reads of part are done */
#pragma unroll
        for (int tt = 0; tt < TT; tt++) part[warp][tt][lane] = acc[tt];
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int tt = 0; tt < TT; tt++) {
                float p = (part[0][tt][lane] + part[1][tt][lane]) + (part[2][tt][lane] + part[3][tt][lane]);
                p = warp_sum(p);
                if (lane == 0 && t0 + tt < T) y[(size_t)(t0 + tt) * N + row] = p * scale2;
            }
        }
    }
}

static const char *const fp4_variant_names[] = {"warp_row", "warp_2rows", "warp_4rows", "splitk4"};
#define FP4_VARIANTS 4

/* Tokens per pass: the whole call when it fits the variant's registers, else its largest group. */
static int fp4_tokens_per_pass(int v, int T) {
    int cap = v == 2 ? 4 : 8;
    int tt = 1;
    while (tt < T && tt < cap) tt *= 2;
    return tt;
}

template <int TT, int RPW, int WARPS>
static void launch_rows(const qrt_linear *W, const float4 *xp, int64_t G, int T, float *y) {
    unsigned grid = qrt_grid((size_t)W->n, RPW * WARPS);
    fp4_rows<TT, RPW, WARPS><<<grid, WARPS * 32>>>((const uint8_t *)W->data, (const uint8_t *)W->scales, W->scale2,
                                                   W->n, W->k, xp, G, T, y);
}

template <int TT> static void launch_fp4_tt(int v, const qrt_linear *W, const float4 *xp, int64_t G, int T, float *y) {
    switch (v) {
    case 0: launch_rows<TT, 1, 4>(W, xp, G, T, y); break;
    case 1: launch_rows<TT, 2, 4>(W, xp, G, T, y); break;
    case 2: launch_rows<(TT > 4 ? 4 : TT), 4, 2>(W, xp, G, T, y); break;
    default:
        fp4_splitk4<TT><<<(unsigned)W->n, 128>>>((const uint8_t *)W->data, (const uint8_t *)W->scales, W->scale2,
                                                W->n, W->k, xp, G, T, y);
    }
}

extern "C" int qrt_nvfp4_variant_count(void) { return FP4_VARIANTS; }
extern "C" const char *qrt_nvfp4_variant_name(int v) { return v >= 0 && v < FP4_VARIANTS ? fp4_variant_names[v] : "?"; }

extern "C" void qrt_nvfp4_matmul_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    QRT_ASSERT(W->fmt == QRT_WF_NVFP4 && v >= 0 && v < FP4_VARIANTS && T >= 1);
    int64_t G;
    const float4 *xp = permute_x(x, W->k, T, 32, &G);
    switch (fp4_tokens_per_pass(v, T)) {
    case 1: launch_fp4_tt<1>(v, W, xp, G, T, y); break;
    case 2: launch_fp4_tt<2>(v, W, xp, G, T, y); break;
    case 4: launch_fp4_tt<4>(v, W, xp, G, T, y); break;
    default: launch_fp4_tt<8>(v, W, xp, G, T, y); break;
    }
    QRT_CUDA_LAUNCHED();
}

/* ---- NVFP4 autotune: measured choice per (N, K, T), cached in memory and in a file per device ------- */

typedef struct {
    int64_t n, k;
    int t, variant;
} tune_entry;

#define TUNE_MAX 512
static tune_entry tune_table[TUNE_MAX];
static int tune_count = 0, tune_loaded = 0;
static char tune_path[1536];

/* $QRT_CACHE_DIR, else $XDG_CACHE_HOME/qwenrt, else $HOME/.cache/qwenrt; file named after the device. */
static void tune_file_init(void) {
    tune_loaded = 1;
    char dir[768];
    const char *e;
    if ((e = getenv("QRT_CACHE_DIR")) && *e) snprintf(dir, sizeof dir, "%s", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e) snprintf(dir, sizeof dir, "%s/qwenrt", e);
    else if ((e = getenv("HOME")) && *e) {
        char parent[700];
        snprintf(parent, sizeof parent, "%s/.cache", e);
        mkdir(parent, 0755);
        snprintf(dir, sizeof dir, "%s/qwenrt", parent);
    } else return;
    mkdir(dir, 0755);
    cudaDeviceProp p;
    QRT_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    char name[sizeof p.name];
    snprintf(name, sizeof name, "%s", p.name);
    for (char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
    snprintf(tune_path, sizeof tune_path, "%s/nvfp4-tune-%s-sm%d%d-v%d.txt", dir, name, p.major, p.minor,
             FP4_VARIANTS);
    FILE *f = fopen(tune_path, "r");
    if (!f) return;
    long long n, k;
    int t, v;
    while (tune_count < TUNE_MAX && fscanf(f, "%lld %lld %d %d", &n, &k, &t, &v) == 4)
        if (v >= 0 && v < FP4_VARIANTS) tune_table[tune_count++] = (tune_entry){n, k, t, v};
    fclose(f);
}

static float time_variant(int v, const qrt_linear *W, const float *x, int T, float *y) {
    cudaEvent_t a, b;
    QRT_CUDA_CHECK(cudaEventCreate(&a));
    QRT_CUDA_CHECK(cudaEventCreate(&b));
    qrt_nvfp4_matmul_variant(v, W, x, T, y); /* warmup */
    float ms[5];
    for (int r = 0; r < 5; r++) {
        QRT_CUDA_CHECK(cudaEventRecord(a, 0));
        qrt_nvfp4_matmul_variant(v, W, x, T, y);
        QRT_CUDA_CHECK(cudaEventRecord(b, 0));
        QRT_CUDA_CHECK(cudaEventSynchronize(b));
        QRT_CUDA_CHECK(cudaEventElapsedTime(&ms[r], a, b));
    }
    QRT_CUDA_CHECK(cudaEventDestroy(a));
    QRT_CUDA_CHECK(cudaEventDestroy(b));
    for (int i = 1; i < 5; i++) /* insertion sort; median = ms[2] */
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            float t = ms[j];
            ms[j] = ms[j - 1], ms[j - 1] = t;
        }
    return ms[2];
}

static int forced_variant(void) {
    static int forced = -2;
    if (forced == -2) {
        const char *e = getenv("QRT_NVFP4_VARIANT");
        forced = -1;
        if (e && *e) {
            for (int v = 0; v < FP4_VARIANTS; v++)
                if (!strcmp(e, fp4_variant_names[v])) forced = v;
            if (forced < 0) {
                char *end;
                long v = strtol(e, &end, 10);
                if (!*end && v >= 0 && v < FP4_VARIANTS) forced = (int)v;
            }
            if (forced < 0) fprintf(stderr, "qwenrt: QRT_NVFP4_VARIANT=%s is not a variant; autotuning\n", e);
        }
    }
    return forced;
}

extern "C" int qrt_nvfp4_pick(const qrt_linear *W, int T) {
    int forced = forced_variant();
    if (forced >= 0) return forced;
    if (!tune_loaded) tune_file_init();
    for (int i = 0; i < tune_count; i++)
        if (tune_table[i].n == W->n && tune_table[i].k == W->k && tune_table[i].t == T) return tune_table[i].variant;
    /* Time on scratch activations (random, never zeros), so the caller's buffers are untouched. */
    float *x = NULL, *y = NULL;
    QRT_CUDA_CHECK(cudaMalloc(&x, sizeof(float) * (size_t)T * W->k));
    QRT_CUDA_CHECK(cudaMalloc(&y, sizeof(float) * (size_t)T * W->n));
    qrt_cuda_fill_random_f32(x, (size_t)T * W->k, 12345, -1.0f, 1.0f);
    int best = 0;
    float best_ms = 1e30f;
    for (int v = 0; v < FP4_VARIANTS; v++) {
        float ms = time_variant(v, W, x, T, y);
        if (ms < best_ms) best_ms = ms, best = v;
    }
    QRT_CUDA_CHECK(cudaFree(x));
    QRT_CUDA_CHECK(cudaFree(y));
    if (tune_count < TUNE_MAX) tune_table[tune_count++] = (tune_entry){W->n, W->k, T, best};
    if (tune_path[0]) {
        FILE *f = fopen(tune_path, "a");
        if (f) {
            fprintf(f, "%lld %lld %d %d\n", (long long)W->n, (long long)W->k, T, best);
            fclose(f);
        }
    }
    return best;
}

/* ---- the op ------------------------------------------------------------------------------------------ */

void qrt_cuda_matmul(const qrt_linear *W, const float *x, int T, float *y) {
    switch (W->fmt) {
    case QRT_WF_BF16: launch_dense<QRT_WF_BF16>(W, x, T, y); break;
    case QRT_WF_F16: launch_dense<QRT_WF_F16>(W, x, T, y); break;
    case QRT_WF_F32: launch_dense<QRT_WF_F32>(W, x, T, y); break;
    case QRT_WF_NVFP4: qrt_nvfp4_matmul_variant(qrt_nvfp4_pick(W, T), W, x, T, y); break;
    default: QRT_ASSERT(!"weight format without a CUDA matmul (prepare_linear refuses it)");
    }
}
