/* NVFP4 device layouts: a weight's row-major codes and scales → slice blocks (prepare_linear, tilebench); the NVFP4
 * parts of a group in one allocation (prepare_group), and a gate|up pair interleaved by 8-row halves. The layout itself
 * is described in matmul_fp4.cuh. */
#include "backend/cuda/matmul_fp4.cuh"

/* One thread per 16-byte code chunk or 8-byte scale group of a slice block. rows: [N][K/2] codes and [N][K/16]
 * scales as stored; chunks past K and rows past N (the last tile's padding) become zero. */
__global__ void fp4_to_blocks(const uint8_t *codes /* [N][K/2] */, const uint8_t *scales /* [N][K/16] */, int64_t N,
                              int64_t K, int64_t S, uint8_t *blocks /* [tiles][S][FP4_BLOCK_BYTES] */) {
    const int64_t per_block = 8 * 32 + 2 * 32; /* code chunks, then scale groups */
    const int64_t total = (N + 15) / 16 * S * per_block;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = i % per_block, bs = i / per_block, s = bs % S, tile = bs / S;
        uint8_t *dst = blocks + bs * FP4_BLOCK_BYTES;
        if (j < 8 * 32) { /* code chunk: row half h, chunk step q, lane l */
            const int l = (int)(j % 32), q = (int)(j / 32 % 4), h = (int)(j / 128), g = l >> 2, c = l & 3;
            const int64_t row = tile * 16 + g + 8 * h, k0 = s * FP4_SLICE + (4 * c + q) * 32; /* 32 elements */
            uint4 v = make_uint4(0, 0, 0, 0);
            if (row < N && k0 + 32 <= K && K % 32 == 0) { /* the common case: one aligned 16-byte load */
                v = *reinterpret_cast<const uint4 *>(codes + row * (K / 2) + k0 / 2);
            } else if (row < N) {
                uint8_t *vb = reinterpret_cast<uint8_t *>(&v);
                for (int b = 0; b < 16 && k0 + 2 * b < K; b++) vb[b] = codes[row * (K / 2) + k0 / 2 + b];
            }
            v = make_uint4(fp4_pack_word(v.x), fp4_pack_word(v.y), fp4_pack_word(v.z), fp4_pack_word(v.w));
            *reinterpret_cast<uint4 *>(dst + j * 16) = v;
        } else { /* scale group: row half h, lane l: the 8 scales of chunks 4c..4c+3, at lane l's 16 bytes */
            const int64_t e = j - 8 * 32;
            const int l = (int)(e % 32), h = (int)(e / 32), g = l >> 2, c = l & 3;
            const int64_t row = tile * 16 + g + 8 * h, b0 = (s * FP4_SLICE + 4 * c * 32) / 16; /* first block */
            uint2 v = make_uint2(0, 0);
            if (row < N && (b0 + 8) * 16 <= K && K % 128 == 0) { /* one aligned 8-byte load */
                v = *reinterpret_cast<const uint2 *>(scales + row * (K / 16) + b0);
            } else if (row < N) {
                uint8_t *vb = reinterpret_cast<uint8_t *>(&v);
                for (int b = 0; b < 8 && (b0 + b) * 16 < K; b++) vb[b] = scales[row * (K / 16) + b0 + b];
            }
            *reinterpret_cast<uint2 *>(dst + FP4_CODE_BYTES + l * 16 + h * 8) = v;
        }
    }
}

extern "C" size_t qrt_nvfp4_device_bytes(int64_t n, int64_t k) {
    return (size_t)((n + 15) / 16) * (size_t)(qrt_nvfp4_row_elems(k) / FP4_SLICE) * FP4_BLOCK_BYTES;
}

/* Device memory for a weight's layout (slice blocks, a fused group, a gate|up pair): on failure QRT_ERR_MEMORY naming
 * the weight and what the bytes were for, with the CUDA error cleared. */
static qrt_status fp4_layout_alloc(uint8_t **p, size_t bytes, const char *name, const char *what) {
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) return QRT_OK;
    cudaGetLastError();
    return qrt_fail(QRT_ERR_MEMORY, "%s: cudaMalloc of %.1f MB for %s failed: %s", name ? name : "?", bytes / 1e6, what,
                    cudaGetErrorString(e));
}

extern "C" qrt_status qrt_cuda_nvfp4_to_blocks(qrt_linear *w) {
    const int64_t S = qrt_nvfp4_row_elems(w->k) / FP4_SLICE;
    const size_t bytes = qrt_nvfp4_device_bytes(w->n, w->k);
    uint8_t *blocks = NULL;
    QRT_TRY(fp4_layout_alloc(&blocks, bytes, w->name, "the NVFP4 weight"));
    const size_t threads = bytes / FP4_BLOCK_BYTES * (8 * 32 + 2 * 32);
    fp4_to_blocks<<<(unsigned)QRT_MIN(qrt_grid(threads, 256), 65536u), 256>>>(
        (const uint8_t *)w->data, (const uint8_t *)w->scales, w->n, w->k, S, blocks);
    QRT_CUDA_LAUNCHED();
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->data)));
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->scales)));
    w->data = blocks;
    w->scales = NULL;
    return QRT_OK;
}

/* ---- fused groups ------------------------------------------------------------------------------------
 * The NVFP4 parts of a group (in part order) are laid out in one allocation: the slice blocks of each part's tiles,
 * one part after another (a part's last tile is zero-padded, so a tile never spans two parts). Each part's data
 * points into it, so it still runs alone with the layout prepare_linear gives. */

int fp4_group_layout(const qrt_linear_group *g, int in_fused[QRT_GROUP_MAX], int64_t tile_begin[QRT_GROUP_MAX + 1],
                     int64_t *K_out) {
    int count = 0;
    int64_t K = -1, tiles = 0;
    for (int i = 0; i < g->n; i++) {
        const qrt_linear *w = g->part[i];
        in_fused[i] = w->fmt == QRT_WF_NVFP4 && (K < 0 || w->k == K);
        if (!in_fused[i]) continue;
        K = w->k;
        tile_begin[count++] = tiles;
        tiles += (w->n + 15) / 16;
    }
    tile_begin[count] = tiles;
    *K_out = K;
    return count;
}

/* ---- paired layout of a gate|up group --------------------------------------------------------------
 * Pair tile i, slice s, from the two parts' slice blocks: its row half 0 is half i % 2 of gate tile i / 2, its row
 * half 1 the same half of up tile i / 2; each lane's scale uint4 takes that half's 8 bytes from each (a slice block's
 * layout: fp4_load_slice in matmul_fp4.cuh). One thread per uint4 of the result. */
__global__ void fp4_pair_blocks(const uint4 *gate /* [tiles][S][288] */, const uint4 *up, int64_t pair_tiles,
                                int64_t S, uint4 *out /* [pair_tiles][S][288] */) {
    const int64_t n = pair_tiles * S * FP4_BLOCK_U4;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = idx % FP4_BLOCK_U4, ts = idx / FP4_BLOCK_U4, s = ts % S, i = ts / S;
        const int half = (int)(i & 1);
        const int64_t src = ((i / 2) * S + s) * FP4_BLOCK_U4; /* the (tile i / 2, s) block of either part */
        uint4 v;
        if (j < 128) v = gate[src + half * 128 + j];
        else if (j < 256) v = up[src + half * 128 + (j - 128)];
        else {
            const uint4 a = gate[src + j], b = up[src + j];
            v = half ? make_uint4(a.z, a.w, b.z, b.w) : make_uint4(a.x, a.y, b.x, b.y);
        }
        out[idx] = v;
    }
}

/* A swiglu group of two NVFP4 parts of one shape, laid out in pairs: true when done (g->fused holds it, both parts
 * point into it with scales set to it, the mark that they no longer run alone). */
static qrt_status fp4_prepare_pair(qrt_linear_group *g, bool *done) {
    *done = false;
    qrt_linear *gate = g->part[0], *up = g->n == 2 ? g->part[1] : NULL;
    if (!g->swiglu || !up || gate->fmt != QRT_WF_NVFP4 || up->fmt != QRT_WF_NVFP4 || gate->n != up->n ||
        gate->k != up->k)
        return QRT_OK;
    const int64_t S = qrt_nvfp4_row_elems(gate->k) / FP4_SLICE, pair_tiles = 2 * ((gate->n + 15) / 16);
    uint8_t *paired = NULL;
    QRT_TRY(fp4_layout_alloc(&paired, 2 * qrt_nvfp4_device_bytes(gate->n, gate->k), gate->name,
                             "the paired gate|up projections"));
    fp4_pair_blocks<<<qrt_grid((size_t)pair_tiles * S * FP4_BLOCK_U4, 256), 256>>>(
        (const uint4 *)gate->data, (const uint4 *)up->data, pair_tiles, S, (uint4 *)paired);
    QRT_CUDA_LAUNCHED();
    QRT_CUDA_CHECK(cudaDeviceSynchronize());
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(gate->data)));
    QRT_CUDA_CHECK(cudaFree(const_cast<void *>(up->data)));
    gate->data = up->data = gate->scales = up->scales = paired;
    g->fused = paired;
    g->paired = 1;
    *done = true;
    return QRT_OK;
}

qrt_status qrt_cuda_prepare_group(qrt_linear_group *g) {
    g->fused = NULL;
    g->paired = 0;
    bool paired = false;
    QRT_TRY(fp4_prepare_pair(g, &paired));
    if (paired) return QRT_OK;
    int in_fused[QRT_GROUP_MAX];
    int64_t tile_begin[QRT_GROUP_MAX + 1], K;
    const int count = fp4_group_layout(g, in_fused, tile_begin, &K);
    if (count < 2) return QRT_OK; /* nothing to fuse: the parts run one by one */
    const size_t tile_bytes = (size_t)(qrt_nvfp4_row_elems(K) / FP4_SLICE) * FP4_BLOCK_BYTES;
    const size_t bytes = (size_t)tile_begin[count] * tile_bytes;
    uint8_t *fused = NULL;
    QRT_TRY(fp4_layout_alloc(&fused, bytes, g->part[0]->name, "the fused projections"));
    for (int i = 0, j = 0; i < g->n; i++) {
        if (!in_fused[i]) continue;
        qrt_linear *w = g->part[i];
        uint8_t *dst = fused + (size_t)tile_begin[j++] * tile_bytes;
        QRT_CUDA_CHECK(cudaMemcpy(dst, w->data, qrt_nvfp4_device_bytes(w->n, w->k), cudaMemcpyDeviceToDevice));
        /* prepare_linear's copy is no longer needed: the part now reads its tiles in the fused allocation */
        QRT_CUDA_CHECK(cudaFree(const_cast<void *>(w->data)));
        w->data = dst;
    }
    g->fused = fused;
    return QRT_OK;
}

