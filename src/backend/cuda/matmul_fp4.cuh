/* NVFP4 (W4A16) matmul on the tensor cores: what every kernel family shares (matmul_fp4_*.cu include this file).
 *
 * Why tensor cores at batch 1: a scalar kernel spends one f32 FMA per (element, token) on top of the E2M1 decode, so
 * its cost grows with M. Here the decoded weights are the A operand of mma.sync m16n8k16 (f16 in, f32 out): one warp
 * computes a 16-row tile against 8 tokens at once, so the FMA cost no longer grows with M (up to 8 per n8 tile, 16 per
 * pass).
 *
 * Device layout (qrt_cuda_nvfp4_to_blocks, matmul_fp4_layout.cu): the weights are rearranged into slice blocks: for
 * each 16-row tile and each 512-element slice of K, 4608 contiguous bytes holding the tile's codes (each 32-bit word's
 * 8 codes moved to where the decode masks them out: fp4_pack_word) and the e4m3 scales of that slice, in the order
 * the warp's lanes read them, so each load instruction of a warp reads 512 contiguous bytes (read row-major, a lane's
 * 16-byte chunks sat 64 bytes apart and every 32-byte sector was fetched twice). Tiles are padded with zero rows,
 * slices with zero columns; x beyond K reads as 0.
 *
 * Exactness. x is not rounded to f16: each 512-element slice of a token is scaled by a power of two (its max
 * magnitude lands in [2^14, 2^15)) and split into hi = f16(x') and lo = f16(x' − hi), ~22 significant bits;
 * each k-step runs the mma twice (hi, then lo). The weight operand is exact in f16: an E2M1 code's sign and
 * magnitude bits masked into f16 bit positions read as the value × 2^-14 (fp4_decode_word; the layout stores each
 * 32-bit word's codes where those masks find them), multiplied by its e4m3 block scale with __hmul2, which is exact
 * (an integer times 2^-24 with ≤ 6 significant bits, at most 6 · 448 · 2^-14). The 2^-14 is undone once at the end
 * (y = acc · 2^14 · scale2). NaN in x propagates; a slice holding ±Inf gives NaN (hi − hi in the lo split) where an
 * f32 dot product could give ±Inf.
 *
 * Order (shared by every variant, so a row's result is the same bits for any T and either of them):
 * - a row is cut into slices of 512 elements (16 chunks of 32); in slice s, lane c (0..3) of a quad owns chunks
 *   4c..4c+3; "chunk step" q (0..3) covers chunk 4c+q of each of the 4 lanes; its 8 k-steps i take elements
 *   4i..4i+3 of those chunks (in the mma's k slots 2c, 2c+1, 2c+8, 2c+9 as e0 e2 | e1 e3);
 * - x_hi and x_lo of a token are two B columns of the same mma (an n8 tile holds 4 tokens: column 2j = token j's hi,
 *   2j + 1 its lo), so one mma per k-step serves both (half the mma count on one token). Per chunk step q and token:
 *   hi_q = Σ_i mma(A_i, x_hi), lo_q = Σ_i mma(A_i, x_lo), from 0 (the four chains interleaved k-step by k-step,
 *   which hides the mma latency and does not change any chain);
 *   e_q = hi_q + lo_q; p_s = ((e_0 + e_1) + (e_2 + e_3)) · 2^e(t,s); y = ((p_0 + p_1) + p_2 + ...) · 2^14 · scale2,
 *   slices in order. A split-K variant sums the same p_s in the same order (after a barrier, or in the warp that
 *   completes a split tile), so splitting never changes a bit.
 * A tensor-core dot product of one (row, B column) uses only that row and that column, so n8-tile position, M and
 * the variant do not change it (checked bit for bit by test_cuda_ops).
 *
 * x fragments, made per call by fp4_prep_x (layout at fp4_prep_x): per (token, slice, q, i, c) the pairs
 * hi(x e0, x e2), hi(x e1, x e3), lo(...), lo(...) of elements s·512 + (4c+q)·32 + 4i + 0..3; xscale [T][S] = 2^e,
 * the factor that undoes the slice's scaling. Elements past K are 0. */

#ifndef QRT_MATMUL_FP4_CUH
#define QRT_MATMUL_FP4_CUH
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "util/common.h"
}

#define FP4_SLICE 512 /* elements of a row per slice: 16 chunks of 32, 4 per lane of a quad */
#define FP4_CODE_BYTES (16 * FP4_SLICE / 2)           /* codes of one (16-row tile, slice): 4096 */
#define FP4_BLOCK_BYTES (FP4_CODE_BYTES + 16 * FP4_SLICE / 16) /* + its e4m3 scales: the slice block, 4608 */

/* One warp's share of the x preparation, token row xrow [K], slice s, in two steps so that a warp can put the loads
 * of several slices in flight before it waits on the first (one L2 round trip instead of one per slice).
 * Load: lane (i = lane / 4, c = lane % 4) reads v[q][e] = x[s·512 + (4c+q)·32 + 4i + e], 0 past K. Volatile, so the
 * compiler keeps these loads ahead of the weight copies a kernel issues next (asm volatile too). */
__device__ __forceinline__ float4 ld_x16(const float *p) {
    float4 r;
    asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void fp4_prep_load(const float *xrow /* [K] */, int64_t K, int64_t s, int lane,
                                              float (&v)[4][4]) {
    const int c = lane & 3, i = lane >> 2;
    const bool vec = ((uintptr_t)xrow & 15) == 0; /* K % 16 == 0: a group of 4 is in bounds or all past K */
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int64_t k0 = s * FP4_SLICE + (4 * c + q) * 32 + 4 * i;
        if (vec) {
            const float4 f = k0 < K ? ld_x16(xrow + k0) : make_float4(0, 0, 0, 0);
            v[q][0] = f.x, v[q][1] = f.y, v[q][2] = f.z, v[q][3] = f.w;
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) v[q][e] = k0 + e < K ? xrow[k0 + e] : 0.0f;
        }
    }
}
/* The power of two `up` that puts a largest magnitude m in [2^14, 2^15), so that hi = f16(x · up) stays normal and
 * lo = f16(x · up − hi) keeps ~11 more bits, and down = 1 / up (both 1 for m = 0, ±Inf or above 3e38). The exponent
 * straight from the bits: frexpf's for a normal m (E - 126), and below 2^-100 the clamp decides anyway. */
__device__ __forceinline__ void fp4_pow2_scale(float m, float &up, float &down) {
    up = 1.0f;
    down = 1.0f;
    if (m > 0.0f && m <= 3.0e38f) {
        int ex = (int)(__float_as_uint(m) >> 23) - 126;
        ex = ex < -100 ? -100 : ex;
        up = __uint_as_float((uint32_t)(127 + 15 - ex) << 23);
        down = __uint_as_float((uint32_t)(127 + ex - 15) << 23);
    }
}
/* Convert: the fragment entry (q, i, c) for q = 0..3, u[q]; down = 2^e, the factor that undoes the slice's scaling.
 * Every lane of the warp must call it (a warp max). */
__device__ __forceinline__ void fp4_prep_convert(const float (&v)[4][4], uint4 (&u)[4], float &down) {
    float m = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int e = 0; e < 4; e++) m = fmaxf(m, fabsf(v[q][e]));
    m = warp_max(m);
    float up;
    fp4_pow2_scale(m, up, down);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        __half h[4], l[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float xs = v[q][e] * up;
            h[e] = __float2half_rn(xs);
            l[e] = __float2half_rn(xs - __half2float(h[e]));
        }
        __half2 p0 = __halves2half2(h[0], h[2]), p1 = __halves2half2(h[1], h[3]);
        __half2 p2 = __halves2half2(l[0], l[2]), p3 = __halves2half2(l[1], l[3]);
        u[q].x = *reinterpret_cast<uint32_t *>(&p0), u[q].y = *reinterpret_cast<uint32_t *>(&p1);
        u[q].z = *reinterpret_cast<uint32_t *>(&p2), u[q].w = *reinterpret_cast<uint32_t *>(&p3);
    }
}


/* The same for one token inside a GEMV block, into shared memory (no separate launch): the compact layout
 * xs [S][32 (q·8 + i)][4 c] uint4 (one token: every lane of a quad column reads the same entry) and xsc [S]. Warp w
 * takes slices w, w + W, ... (W warps), B of them per round with all their loads in flight at once (down_proj: 34
 * slices over 12 warps, one L2 round trip instead of three). after_loads() runs once per warp, after the first round's
 * loads are issued and before they are waited on: a kernel starts its weight copies there, behind x's loads rather
 * than ahead of them. Every thread of the block must call it (it ends with a barrier). */
#define FP4_PREP_BATCH 3   /* B of the 4-warp kernels */
#define FP4_PREP_SLICES 36 /* the ring kernels' B covers this many slices in one round (down_proj has 34) */
template <int B = FP4_PREP_BATCH, typename F>
__device__ __forceinline__ void fp4_prep_block(const float *x /* [K] */, int64_t K, int64_t S, uint4 *xs, float *xsc,
                                               F after_loads) {
    const int lane = threadIdx.x & 31, c = lane & 3, i = lane >> 2;
    const int64_t W = blockDim.x >> 5;
    bool first = true;
    for (int64_t s0 = threadIdx.x >> 5; first || s0 < S; s0 += B * W) {
        float v[B][4][4];
#pragma unroll
        for (int b = 0; b < B; b++)
            if (s0 + b * W < S) fp4_prep_load(x, K, s0 + b * W, lane, v[b]);
        if (first) after_loads();
        first = false;
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int64_t s = s0 + b * W;
            if (s >= S) break;
            uint4 u[4];
            float down;
            fp4_prep_convert(v[b], u, down);
#pragma unroll
            for (int q = 0; q < 4; q++) xs[(s * 32 + q * 8 + i) * 4 + c] = u[q];
            if (lane == 0) xsc[s] = down;
        }
    }
    __syncthreads();
}

/* 8 E2M1 codes of one 32-bit word of the device layout → 4 f16x2 of value × 2^-14, the A-fragment pairs
 * o[0] = (e0, e2), o[1] = (e1, e3), o[2] = (e4, e6), o[3] = (e5, e7). A code's magnitude bits eem at f16 bits 11..9
 * (exponent ee, mantissa m: ee = 0 lands on the f16 subnormals exactly as on E2M1's) and its sign at bit 15 read as
 * value × 2^-14, so each pair is a mask FP4_F16_BITS of the word moved into place. Why this layout: the previous
 * one (nibbles as stored, moved into e4m3 bytes and widened by the hardware convert) spent ~10 ALU instructions per
 * word, and the ALU pipe was the busiest (ncu, gate+up at T=1: 56% of its peak). Here: 6 ALU + 3 IMAD. o[0] is the
 * mask alone, o[1] the word shifted by 3; no third shift fits beside them (the four source sets cannot tile the word),
 * so o[2] and o[3] take their magnitude and sign bits from two shifts at once, as a product with 2^a + 2^b of the
 * pre-masked word (the two shifted copies never overlap, so nothing carries). fp4_pack_word is the inverse. */
#define FP4_F16_BITS 0x8E008E00u /* sign 15, magnitude 11..9 of both halves */
#define FP4_SRC2 0x20382038u    /* o[2]: magnitude at 5..3 (× 2^6), sign at 13 (× 2^2), in both halves */
#define FP4_SRC3 0x40074007u    /* o[3]: magnitude at 2..0 (× 2^9), sign at 14 (× 2^1) */
#define FP4_DECODE_UNDO 16384.0f /* 2^14: what the decoded values are short of */
__device__ __forceinline__ void fp4_decode_word(uint32_t w, uint32_t (&o)[4]) {
    o[0] = w & FP4_F16_BITS;
    o[1] = (w << 3) & FP4_F16_BITS;
    o[2] = ((w & FP4_SRC2) * ((1u << 6) + (1u << 2))) & FP4_F16_BITS;
    o[3] = ((w & FP4_SRC3) * ((1u << 9) + (1u << 1))) & FP4_F16_BITS;
}
/* Stored nibbles (nibble j = element j: sign bit 3, magnitude 2..0) → the word fp4_decode_word reads: element of
 * pair p, half hh (0 low, 1 high) has its magnitude at mag_at[p] + 16·hh and its sign at sign_at[p] + 16·hh. */
__device__ __forceinline__ uint32_t fp4_pack_word(uint32_t nibbles) {
    const int elem[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, mag_at[4] = {9, 6, 3, 0}, sign_at[4] = {15, 12, 13, 14};
    uint32_t w = 0;
    for (int p = 0; p < 4; p++)
        for (int hh = 0; hh < 2; hh++) {
            const uint32_t code = (nibbles >> (4 * elem[p][hh])) & 15u;
            w |= (code & 7u) << (mag_at[p] + 16 * hh);
            w |= (code >> 3) << (sign_at[p] + 16 * hh);
        }
    return w;
}
/* Two e4m3 values → f16x2, from the high or the low 16 bits of a register: the convert reads the half directly
 * (no shift). The hardware convert needs sm_89; below it (sm_80/86/87) the same values by arithmetic (every e4m3
 * value is exact in f16, so both give the same bits; NaN stays NaN). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
__device__ __forceinline__ uint32_t e4m3x2_hi_to_h2(uint32_t four) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo16, hi16;\n\tmov.b32 {lo16, hi16}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, hi16;\n\t}"
        : "=r"(r)
        : "r"(four));
    return r;
}
__device__ __forceinline__ uint32_t e4m3x2_lo_to_h2(uint32_t four) {
    uint32_t r;
    asm("{\n\t.reg .b16 lo16, hi16;\n\tmov.b32 {lo16, hi16}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo16;\n\t}"
        : "=r"(r)
        : "r"(four));
    return r;
}
#else
__device__ __forceinline__ __half e4m3_to_half(uint32_t b /* low 8 bits */) {
    const uint32_t e = (b >> 3) & 15, m = b & 7;
    float v = e == 15 && m == 7 ? __int_as_float(0x7fc00000) /* e4m3's only NaN */
              : e ? ldexpf((float)(8 + m), (int)e - 10)   /* 2^(e-7) · (1 + m/8) */
                  : (float)m * 0x1p-9f;                     /* subnormal: m · 2^-9 */
    if (b & 0x80) v = -v;
    return __float2half_rn(v);
}
__device__ __forceinline__ uint32_t e4m3x2_to_h2(uint32_t two /* low 16 bits: element 0, then 1 */) {
    __half2 h = __halves2half2(e4m3_to_half(two & 0xff), e4m3_to_half((two >> 8) & 0xff));
    return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t e4m3x2_hi_to_h2(uint32_t four) { return e4m3x2_to_h2(four >> 16); }
__device__ __forceinline__ uint32_t e4m3x2_lo_to_h2(uint32_t four) { return e4m3x2_to_h2(four & 0xffff); }

#endif
__device__ __forceinline__ uint32_t hmul2_u(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}

/* The codes and scales of one slice for one lane: chunks 4c..4c+3 of rows g (ca, sa) and g+8 (cb, sb);
 * sa.x holds the scale pairs of chunks 0 (low 16 bits) and 1, sa.y those of chunks 2 and 3. */
struct fp4_slice_regs {
    uint4 ca[4], cb[4];
    uint2 sa, sb;
};
#define FP4_BLOCK_U4 (FP4_BLOCK_BYTES / 16) /* a slice block in 16-byte units: 256 of codes, 32 of scales */
/* Weight loads: read once, so not allocated in L1 (kept for x), and first to leave the L2 (l2_evict_first), so that
 * what later launches read again (x, the KV cache, the GDN states, kernel code) is less often pushed out by the
 * ~15 GB of weights a token streams. volatile, because the mma asm is volatile too: the compiler then keeps all of a
 * slice's loads ahead of its first mma; with plain loads it sank them between the chunk steps to save registers, and a
 * warp waited out the memory latency four times per slice. */
__device__ __forceinline__ uint64_t l2_evict_first(void) {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy)); /* pure: computed once per kernel */
    return policy;
}
__device__ __forceinline__ uint4 ld_stream16(const uint4 *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(l2_evict_first()));
    return r;
}
/* The slice block of one (tile, slice) in the slice-block layout ("Device layouts", top of file): lane l's codes of row
 * half h, chunk step q at uint4 (h·4 + q)·32 + l; its scales at uint4 256 + l (row g in the low 8 bytes, g+8 in the
 * high). Every load instruction of a warp reads 512 contiguous bytes, and a lane reads only its own 9 uint4 (so a
 * lane can copy them to shared memory and read them back without waiting for the others). From global memory
 * (streamed, GLOBAL) or from a warp's shared-memory copy. */
template <bool GLOBAL>
__device__ __forceinline__ void fp4_load_slice(fp4_slice_regs &r, const uint4 *block, int lane) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        r.ca[q] = GLOBAL ? ld_stream16(block + q * 32 + lane) : block[q * 32 + lane];
        r.cb[q] = GLOBAL ? ld_stream16(block + (4 + q) * 32 + lane) : block[(4 + q) * 32 + lane];
    }
    const uint4 sc = GLOBAL ? ld_stream16(block + 256 + lane) : block[256 + lane];
    r.sa = make_uint2(sc.x, sc.y), r.sb = make_uint2(sc.z, sc.w);
}

__device__ __forceinline__ uint32_t u4_word(const uint4 &u, int w) {
    return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w;
}

/* The e4m3 scale pair (blocks 0, 1) of chunk step q as f16x2, from a row's scale words (sa or sb of fp4_slice_regs). */
__device__ __forceinline__ uint32_t fp4_chunk_scales(const uint2 &s, int q) {
    const uint32_t two = q < 2 ? s.x : s.y;
    return q & 1 ? e4m3x2_hi_to_h2(two) : e4m3x2_lo_to_h2(two);
}
/* The A fragment of k-step (wi, h) of one chunk step from its decoded words (oa: row g, ob: row g+8) and the chunk's
 * scales: rows g, g+8, elements e0 e2 (a0, a1) and e1 e3 (a2, a3), each times its word's block scale (elements
 * 8 wi..8 wi+7, in both halves). */
__device__ __forceinline__ void fp4_kstep_a(const uint32_t (&oa)[4], const uint32_t (&ob)[4], uint32_t sha,
                                            uint32_t shb, int wi, int h, uint32_t (&a)[4]) {
    const uint32_t sca = __byte_perm(sha, 0, wi < 2 ? 0x1010 : 0x3232);
    const uint32_t scb = __byte_perm(shb, 0, wi < 2 ? 0x1010 : 0x3232);
    a[0] = hmul2_u(oa[2 * h], sca), a[1] = hmul2_u(ob[2 * h], scb);
    a[2] = hmul2_u(oa[2 * h + 1], sca), a[3] = hmul2_u(ob[2 * h + 1], scb);
}

/* One slice of one lane: p[nt][r] (rows g, g+8 of token 4·nt + c of the pass) = ((e0 + e1) + (e2 + e3)) · 2^e with
 * e_q = hi_q + lo_q, the two D columns of that token after chunk step q's mma chain. xf_s: this lane's B half-entry
 * (its token, its part, this slice, q 0, i 0) per token tile, in global memory (entries 64 uint2 apart), XSH, in a
 * shared-memory copy of that layout (mma_gemm), or, SX, in the block's one-token copy (8 apart); xsc: 2^e of its
 * token. The four chains are independent and interleaved k-step
 * by k-step, so the tensor pipe always has 4·NT chains to alternate between instead of waiting out one chain's
 * latency. */
template <int NT, bool SX, bool XSH = false>
__device__ __forceinline__ void fp4_slice_mma(const fp4_slice_regs &cur, const uint2 *const (&xf_s)[NT],
                                              const float (&xsc)[NT], float (&p)[NT][2]) {
    uint32_t sha[4], shb[4]; /* scales of chunk step q, rows g and g+8 */
#pragma unroll
    for (int q = 0; q < 4; q++) sha[q] = fp4_chunk_scales(cur.sa, q), shb[q] = fp4_chunk_scales(cur.sb, q);
    float d[4][NT][4];
#pragma unroll
    for (int q = 0; q < 4; q++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) d[q][nt][e] = 0.0f;
#pragma unroll
    for (int wi = 0; wi < 4; wi++) {
        uint32_t oa[4][4], ob[4][4]; /* [q][pair]: rows g, g+8 */
#pragma unroll
        for (int q = 0; q < 4; q++) {
            fp4_decode_word(u4_word(cur.ca[q], wi), oa[q]);
            fp4_decode_word(u4_word(cur.cb[q], wi), ob[q]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int i = 2 * wi + h;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                uint32_t a[4];
                fp4_kstep_a(oa[q], ob[q], sha[q], shb[q], wi, h, a);
                uint2 bnext = make_uint2(0, 0);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint2 b;
                    if (SX) b = xf_s[nt][(q * 8 + i) * 8];
                    else if (NT == 1) b = XSH ? xf_s[nt][(q * 8 + i) * 64] : __ldg(xf_s[nt] + (q * 8 + i) * 64);
                    else if (nt % 2 == 0) { /* tiles nt and nt + 1 share one 16-byte entry */
                        const uint4 *e = reinterpret_cast<const uint4 *>(xf_s[nt] + (q * 8 + i) * 64);
                        const uint4 b2 = XSH ? *e : __ldg(e);
                        b = make_uint2(b2.x, b2.y);
                        bnext = make_uint2(b2.z, b2.w);
                    } else b = bnext;
                    mma_f16_16816(d[q][nt], a, b.x, b.y); /* hi and lo columns at once */
                }
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int e = 2 * r; /* D columns 2c (hi) and 2c + 1 (lo) of row g + 8r */
            p[nt][r] = (((d[0][nt][e] + d[0][nt][e + 1]) + (d[1][nt][e] + d[1][nt][e + 1])) +
                        ((d[2][nt][e] + d[2][nt][e + 1]) + (d[3][nt][e] + d[3][nt][e + 1]))) *
                       xsc[nt];
        }
}

/* Chunk step Q of fp4_slice_mma alone, one token (SX): this lane's e_Q for rows g, g + 8 (the hi + lo sum of chunk step
 * Q's mma chain), from the step's codes (ca, cb: cur.ca[Q], cur.cb[Q]) and the slice's scales. p = ((e_0 + e_1) +
 * (e_2 + e_3)) · xsc then has fp4_slice_mma's bits: the chain runs its k-steps in the same order. */
template <int Q>
__device__ __forceinline__ void fp4_chunk_e(const uint4 &ca, const uint4 &cb, const uint4 &sc, const uint2 *xf_s,
                                            float (&e)[2]) {
    const uint32_t sha = fp4_chunk_scales(make_uint2(sc.x, sc.y), Q), shb = fp4_chunk_scales(make_uint2(sc.z, sc.w), Q);
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int wi = 0; wi < 4; wi++) {
        uint32_t oa[4], ob[4];
        fp4_decode_word(u4_word(ca, wi), oa);
        fp4_decode_word(u4_word(cb, wi), ob);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint2 b = xf_s[(Q * 8 + 2 * wi + h) * 8];
            uint32_t a[4];
            fp4_kstep_a(oa, ob, sha, shb, wi, h, a);
            mma_f16_16816(d, a, b.x, b.y);
        }
    }
    e[0] = d[0] + d[1], e[1] = d[2] + d[3];
}

/* The weights one launch covers: one linear, or the parts of a fused group (matmul_group) whose tiles lie one after
 * another in one allocation (a tile never spans two parts). Each row keeps its part's scale2 and is written to its
 * part's output; its reduction is unchanged, so a fused launch gives the same bits as one launch per part. */
/* A paired gate|up group (prepare_group, "paired layout" at the end of the file) is one segment of 8-row pairs:
 * tile i holds gate rows 8i..8i+7 in its rows 0..7 and up rows 8i..8i+7 in rows 8..15, so the lane that sums row g
 * also sums row g + 8, and can write both (FP4_PAIR) or silu(gate) · up (FP4_PAIR_SWIGLU). */
enum { FP4_PARTS = 0, FP4_PAIR = 1, FP4_PAIR_SWIGLU = 2 };
typedef struct {
    int count, pair;                       /* pair: FP4_PARTS, or a paired group (count 1, parts 0 and 1 below) */
    int64_t tile_begin[QRT_GROUP_MAX + 1]; /* first tile of each part; tile_begin[count] = tiles in all */
    int64_t rows[QRT_GROUP_MAX];           /* N of each part */
    float scale2[QRT_GROUP_MAX];
    float *y[QRT_GROUP_MAX];               /* [T][rows[i]] */
} fp4_segments;
/* One linear (its rows, scale2, output y [T][N]) as a single segment. */
static inline fp4_segments fp4_one_segment(const qrt_linear *W, float *y) {
    fp4_segments seg;
    memset(&seg, 0, sizeof seg);
    seg.count = 1;
    seg.tile_begin[1] = (W->n + 15) / 16;
    seg.rows[0] = W->n;
    seg.scale2[0] = W->scale2;
    seg.y[0] = y;
    return seg;
}
/* Every kernel takes its segments as a __grid_constant__ parameter, read in place from the parameter bank. As a plain
 * by-value struct indexed at run time (tile_begin[count], a tile's part) it was copied by every thread into local
 * memory at the kernel's start (128 bytes of local loads and stores per thread); scripts/test.sh checks that no
 * NVFP4 kernel uses local memory. */

/* Where a tile's rows go: its part's output, rows and scale2 (paired: part 0's for rows g, part 1's for g + 8). */
typedef struct {
    int64_t N, row0; /* rows of the part; the tile's first row within it */
    float f;         /* FP4_DECODE_UNDO · scale2: undoes the decode's 2^-14 and applies the tensor scale */
    float *y;
    int pair;
    float f1; /* paired: up's */
    float *y1;
} fp4_tile_out;
__device__ __forceinline__ fp4_tile_out fp4_tile_target(const fp4_segments &seg, int64_t tile) {
    if (seg.pair != FP4_PARTS)
        return fp4_tile_out{seg.rows[0], tile * 8, FP4_DECODE_UNDO * seg.scale2[0], seg.y[0], seg.pair,
                            FP4_DECODE_UNDO * seg.scale2[1], seg.y[1]};
    int p = 0;
#pragma unroll
    for (int i = 1; i < QRT_GROUP_MAX; i++)
        if (i < seg.count && tile >= seg.tile_begin[i]) p = i;
    return fp4_tile_out{seg.rows[p], (tile - seg.tile_begin[p]) * 16, FP4_DECODE_UNDO * seg.scale2[p], seg.y[p],
                        FP4_PARTS, 0.0f, NULL};
}

/* Where a kernel reads x: the fragments fp4_prep_x made in global memory (any T), or, for one token, the block's
 * own shared copy (fp4_prep_block). */
struct fp4_xsrc {
    const uint4 *xf;     /* [ceil(T/8)][S][4][8][32], or shared [S][32][4] */
    const float *xscale; /* [T][S], or shared [S] */
};

/* This lane's B half-entry base (slice 0, q 0, i 0) for each token tile of the pass starting at t0: B column g of a
 * tile is part g & 1 (hi, lo) of token 4·nt + g / 2. SX (one token): that half of the token's entry c; tokens 1..3
 * of the tile (absent) read token 0's. Global: the tile's half of lane's entry (fp4_prep_x). Columns of tokens past
 * T read stale or zero entries: B column n only feeds D column n, and those columns are never stored. */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_x_lanes(const fp4_xsrc &xs, int64_t S, int T, int t0, int lane,
                                            const uint2 *(&xf_lane)[NT]) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int tile0 = t0 + 4 * nt; /* first token of the tile: a multiple of 4 */
        if (!SX && tile0 >= T) tile0 = (T - 1) / 8 * 8 + 4 * (nt & 1); /* past the last group: read one that exists */
        const uint4 *entry = SX ? xs.xf + c : xs.xf + (int64_t)(tile0 / 8) * S * 1024 + lane;
        xf_lane[nt] = reinterpret_cast<const uint2 *>(entry) + (SX ? g & 1 : tile0 / 4 % 2);
    }
}
/* The half-entries of slice s, and the 2^e of this lane's D token (0 past T). */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_x_slice(const uint2 *const (&xf_lane)[NT], const fp4_xsrc &xs, int64_t S, int T,
                                            int t0, int64_t s, int lane, const uint2 *(&xf_s)[NT], float (&xsc)[NT]) {
    const int c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xf_s[nt] = xf_lane[nt] + s * (SX ? 256 : 2048);
        const int tok = t0 + 4 * nt + c;
        xsc[nt] = tok >= T ? 0.0f : SX ? xs.xscale[s] : __ldg(xs.xscale + (size_t)tok * S + s);
    }
}

/* Slice s of a tile (its slice blocks tile_blocks) for this lane: loaded into registers, then its p (fp4_slice_mma). */
template <int NT, bool SX>
__device__ __forceinline__ void fp4_slice_p(const uint8_t *tile_blocks, int64_t s, const uint2 *const (&xf_lane)[NT],
                                            const fp4_xsrc &xs, int64_t S, int T, int t0, int lane,
                                            float (&p)[NT][2]) {
    fp4_slice_regs cur;
    fp4_load_slice<true>(cur, reinterpret_cast<const uint4 *>(tile_blocks + (size_t)s * FP4_BLOCK_BYTES), lane);
    const uint2 *xf_s[NT];
    float xsc[NT];
    fp4_x_slice<NT, SX>(xf_lane, xs, S, T, t0, s, lane, xf_s, xsc);
    fp4_slice_mma<NT, SX>(cur, xf_s, xsc, p);
}

/* y for this lane's sums: rows row0 + g (+8) of token t0 + 4 nt + c. PAIR: a paired group's launch (a template
 * parameter, so the other launches keep their code and registers). */
template <int NT, bool PAIR>
__device__ __forceinline__ void fp4_store(const fp4_tile_out &o, int T, int t0, int lane, const float (&acc)[NT][2]) {
    const int g = lane >> 2, c = lane & 3;
    if (PAIR) { /* row g: gate row row0 + g; row g + 8: the same row of up */
        const int64_t row = o.row0 + g;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int tok = t0 + 4 * nt + c;
            if (row >= o.N || tok >= T) continue;
            const float gate = acc[nt][0] * o.f, up = acc[nt][1] * o.f1; /* what the unpaired stores hold */
            const size_t at = (size_t)tok * o.N + row;
            if (o.pair == FP4_PAIR_SWIGLU) o.y[at] = silu_f(gate) * up; /* qrt_cuda_swiglu's expression */
            else o.y[at] = gate, o.y1[at] = up;
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t row = o.row0 + g + 8 * r;
                const int tok = t0 + 4 * nt + c;
                if (row < o.N && tok < T) o.y[(size_t)tok * o.N + row] = acc[nt][r] * o.f;
            }
    }
}

/* This lane's 9 uint4 of a slice block into L2 (no registers held): what mma_w1 and mma_k4_sx ask for while their
 * x loads are in flight, so their first weight loads hit L2. */
__device__ __forceinline__ void fp4_prefetch_slice(const uint8_t *block, int lane) {
    const uint4 *p = reinterpret_cast<const uint4 *>(block) + lane;
#pragma unroll
    for (int j = 0; j < 9; j++) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p + j * 32));
}

/* A block's one-token x copy in shared memory: [S][32][4] uint4 of fragments and [S] f32 scales. */
__host__ __device__ static inline size_t fp4_sx_bytes(int64_t S) {
    return (size_t)S * (128 * sizeof(uint4) + sizeof(float));
}
/* The shared memory of a ring kernel's block (mma_il, mma_cl, mma_ck): WPB rings of D slice blocks, then SX's x copy. */
__host__ __device__ static inline size_t fp4_ring_smem(int WPB, int D, bool SX, int64_t S) {
    return (size_t)WPB * D * FP4_BLOCK_BYTES + (SX ? fp4_sx_bytes(S) : 0);
}
/* Dynamic shared memory above 48 KB needs the kernel's opt-in, once per size. False (nothing set) when smem is more
 * than a block may opt in to. */
template <typename K> static bool fp4_smem_opt_in(K kernel, size_t smem, size_t &granted) {
    if (smem <= granted || smem <= 48 * 1024) return true;
    if (smem > (size_t)smem_per_block_optin()) return false;
    QRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    granted = smem;
    return true;
}
/* The grid of a ring kernel: how many blocks (cl = 1) or clusters of cl blocks of `kernel` (threads each, smem bytes
 * of dynamic shared memory) fit on the GPU at once, at most `most`; 0 when not one fits. The calculator's answer is
 * kept per kernel (in the caller's static) for the last smem it was asked about. */
typedef struct {
    size_t granted, smem;
    int resident; /* blocks or clusters on the GPU at once */
} fp4_occupancy;
template <typename F>
static int64_t fp4_resident(F kernel, int threads, size_t smem, int cl, fp4_occupancy &o, int64_t most) {
    if (!fp4_smem_opt_in(kernel, smem, o.granted)) return 0;
    if (smem != o.smem) {
        if (cl == 1) {
            int per_sm = 0;
            QRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
            o.resident = per_sm * sm_count();
        } else {
            cudaLaunchAttribute cluster = qrt_cluster_attr(cl);
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3((unsigned)(cl * sm_count())), cfg.blockDim = dim3((unsigned)threads);
            cfg.dynamicSmemBytes = smem, cfg.attrs = &cluster, cfg.numAttrs = 1;
            QRT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&o.resident, kernel, &cfg));
        }
        o.smem = smem;
    }
    return QRT_MIN((int64_t)o.resident, most);
}

/* The variants the autotuner chooses between (matmul_fp4.cu names them; the tune cache stores the names, so the indices
 * may change when one is added or removed). */
enum {
    FP4_W1, FP4_K4, FP4_K4_SX, FP4_GEMM, FP4_IL12X2, FP4_CL12X2,
    FP4_CK8X2E, FP4_CK12X2, FP4_CK8X2EH, FP4_CK12X2EH, FP4_CK12X2EHT, FP4_VARIANTS
};

/* ---- what the dispatch (matmul_fp4.cu) hands a kernel family -----------------------------------------------------
 * One launch over the segments. xs holds fp4_prep_x's fragments, or {NULL, NULL} on one token when the kernel makes
 * its own copy of x in shared memory (SX). A family that returns false did not launch (its grid does not fit this GPU
 * or shape, or it serves only some T): the dispatch then runs mma_w1, which gives the same bits. */
struct fp4_launch {
    const uint8_t *blocks; /* [tiles][S][FP4_BLOCK_BYTES] */
    const fp4_segments *seg;
    fp4_xsrc xs;
    const float *x; /* [T][K] */
    int64_t K, S;   /* S: slices per row */
    int T;
};
static inline bool fp4_sx(const fp4_launch &a) { return a.xs.xf == NULL; }
static inline bool fp4_paired(const fp4_launch &a) { return a.seg->pair != FP4_PARTS; }

void fp4_run_w1(const fp4_launch &a);   /* matmul_fp4_w1k.cu: any T */
void fp4_run_k4(const fp4_launch &a);   /* matmul_fp4_w1k.cu: any T */
bool fp4_run_il(const fp4_launch &a);   /* matmul_fp4_il.cu: any T */
bool fp4_run_cl(const fp4_launch &a);   /* matmul_fp4_cl.cu: T = 1, sm_90 */
bool fp4_run_gemm(const fp4_launch &a); /* matmul_fp4_gemm.cu: T >= 16 */
/* The prefill kernel mma_pf over the segments at any T (matmul_fp4_prefill.cu): form 1 x as f16 hi + lo, 2 as f16. */
void fp4_run_prefill(const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T, int form);
/* mma_ck's configurations (matmul_fp4_ck.cu: T = 1, sm_90); fits: whether its cluster sums fit beside its rings for
 * an N x K weight when the clusters fill the GPU. */
enum { FP4_CK_8X2E, FP4_CK_12X2, FP4_CK_8X2EH, FP4_CK_12X2EH, FP4_CK_12X2EHT, FP4_CK_CONFIGS };
bool fp4_run_ck(const fp4_launch &a, int config);
bool fp4_ck_fits(int config, int64_t N, int64_t K);


/* Variant v (< FP4_VARIANTS) over the segments (matmul_fp4.cu). */
void fp4_launch_variant(int v, const uint8_t *blocks, const fp4_segments &seg, int64_t K, const float *x, int T);
/* Which parts of a group are fused (NVFP4 with the first such part's K) and their first tiles; returns the fused count
 * and writes the total tiles to tile_begin[count] (matmul_fp4_layout.cu). */
int fp4_group_layout(const qrt_linear_group *g, int in_fused[QRT_GROUP_MAX], int64_t tile_begin[QRT_GROUP_MAX + 1],
                     int64_t *K_out);

#endif
