/* The model (immutable after load) and the session (one sequence's mutable state). */
#ifndef QRT_MODEL_H
#define QRT_MODEL_H
#include "backend/backend.h"
#include "io/config.h"
#include "model/weights.h"

/* Largest T one forward call runs at once; longer inputs are processed in pieces of this size, so every
 * scratch buffer is sized once when the session is made. A multiple of the GDN chunk (64). */
#define QRT_MAX_T 256

typedef struct {
    /* Gated DeltaNet (kind LINEAR) */
    qrt_linear in_qkv;   /* [2·Hk·Dk + Hv·Dv, D]: rows q | k | v */
    qrt_linear in_z;     /* [Hv·Dv, D] */
    qrt_linear in_a;     /* [Hv, D] */
    qrt_linear in_b;     /* [Hv, D] */
    qrt_linear out;      /* [D, Hv·Dv] */
    float *conv_w;       /* [conv_dim][Ck] */
    float *A_log;        /* [Hv] */
    float *dt_bias;      /* [Hv] */
    float *gdn_norm;     /* [Dv], plain w */
    /* gated attention (kind FULL) */
    qrt_linear q;        /* [Hq·2·Dh, D]: per head query Dh | gate Dh */
    qrt_linear k, v;     /* [Hkv·Dh, D] */
    qrt_linear o;        /* [D, Hq·Dh] */
    float *q_norm, *k_norm; /* [Dh], 1 + w */
    /* both kinds */
    float *in_norm, *post_norm; /* [D], 1 + w */
    qrt_linear gate, up; /* [F, D] */
    qrt_linear down;     /* [D, F] */
} qrt_layer;

struct qrt_model {
    qrt_config cfg;
    qrt_checkpoint ck;
    const qrt_backend *be;
    qrt_linear embed;    /* [V, D] */
    qrt_linear lm_head;  /* [V, D]; the embedding when tied */
    float *final_norm;   /* [D], 1 + w */
    qrt_layer *layers;   /* [L] */
    float *vectors;      /* one backend allocation holding every f32 vector above */
    int conv_dim;        /* 2·Hk·Dk + Hv·Dv */
};

/* Scratch for one forward piece of up to QRT_MAX_T tokens; one allocation, carved at session creation. */
typedef struct {
    float *h;        /* [T][D] residual stream */
    float *x;        /* [T][D] normed input of a block */
    float *y;        /* [T][D] block output */
    float *mixed;    /* [T][conv_dim] in_proj_qkv output (pre-conv) */
    float *conv;     /* [T][conv_dim] after conv + SiLU: q | k | v */
    float *z;        /* [T][Hv·Dv] */
    float *a, *b;    /* [T][Hv] */
    float *core;     /* [T][Hv·Dv] GDN output, then normed */
    float *qg;       /* [T][Hq·2·Dh] q_proj output */
    float *aq;       /* [T][Hq·Dh] query */
    float *agate;    /* [T][Hq·Dh] gate */
    float *ak, *av;  /* [T][Hkv·Dh] */
    float *attn;     /* [T][Hq·Dh] */
    float *mg, *mu;  /* [T][F] gate, up */
    float *hrow;     /* [D] final-normed row for a logits request */
    float *logits;   /* [V] logits of that row, before download */
} qrt_scratch;

struct qrt_session {
    qrt_model *m;
    int32_t max_ctx;   /* C */
    int32_t pos;       /* tokens consumed */
    float **kv_k;      /* [L] → [C][Hkv][Dh] (NULL for LINEAR layers) */
    float **kv_v;      /* [L] → [C][Hkv][Dh] */
    float **gdn_S;     /* [L] → [Hv][Dk][Dv] (NULL for FULL layers) */
    float **conv_state;/* [L] → [Ck-1][conv_dim] */
    qrt_scratch sc;
    void *arena;       /* one backend allocation holding all of the above */
};
/* Bytes one decoded token moves, by kind. */
typedef struct {
    uint64_t weights;    /* matmul weights read (embedding: one row) */
    uint64_t vectors;    /* norms, conv taps, GDN scalars (f32 copies) */
    uint64_t state;      /* GDN recurrent + conv state, read and written */
    uint64_t kv_per_ctx; /* KV cache read per token of context (f32 cache on the CPU) */
} qrt_token_bytes;

void qrt_model_bytes(const qrt_model *m, qrt_token_bytes *b);
int32_t qrt_argmax(const float *x, int32_t n); /* first index of the largest value */
#endif
