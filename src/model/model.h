/* The model (immutable after load) and the session (one sequence's mutable state). */
#ifndef QRT_MODEL_H
#define QRT_MODEL_H
#include "backend/backend.h"
#include "io/config.h"
#include "model/weights.h"

/* Largest T one forward call may run at once (the bound of the host arrays sized per piece). A session runs long
 * inputs in pieces of s->piece ≤ min(m->prefill_piece, max_ctx) ≤ QRT_MAX_T tokens (shorter where memory is short:
 * session.c), so every scratch buffer is sized once when the session is made. A multiple of the GDN chunk (64). */
#define QRT_MAX_T 8192

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
    /* The projections of the block input x, run as one matmul_group each (parts point into this layer):
     * LINEAR: in_qkv, in_z, in_b, in_a; FULL: q, k, v. mlp_in: gate, up. Made by qrt_layer_prepare_groups. */
    qrt_linear_group mixer_in, mlp_in;
} qrt_layer;

/* Fill l's groups from its linears (already through prepare_linear) and hand them to be->prepare_group. */
qrt_status qrt_layer_prepare_groups(const qrt_backend *be, qrt_layer *l);

/* The MTP head (docs/model.md §3): one full-attention decoder layer behind a projection of
 * [norm(embedding), norm(hidden)]; it shares the main model's embedding and lm_head. */
typedef struct {
    int present;            /* mtp.* tensors found */
    qrt_linear fc;          /* [D, 2D]: columns 0..D-1 take the normed embedding, D..2D-1 the normed hidden */
    float *norm_emb;        /* [D], 1 + w (pre_fc_norm_embedding) */
    float *norm_hidden;     /* [D], 1 + w (pre_fc_norm_hidden) */
    float *norm_out;        /* [D], 1 + w (mtp.norm) */
    qrt_layer layer;        /* mtp.layers.0, kind FULL */
    qrt_linear draft_head;  /* [V, D] an NVFP4 copy of lm_head for the draft steps (qrt_model_make_draft_head);
                             * data NULL: they read lm_head */
} qrt_mtp;

struct qrt_model {
    qrt_config cfg;
    qrt_checkpoint ck;
    const qrt_backend *be;
    qrt_linear embed;    /* [V, D] */
    qrt_linear lm_head;  /* [V, D]; the embedding when tied */
    float *final_norm;   /* [D], 1 + w */
    qrt_layer *layers;   /* [L] */
    qrt_mtp mtp;
    float *vectors;      /* one backend allocation holding every f32 vector above */
    int conv_dim;        /* 2·Hk·Dk + Hv·Dv */
    int kv_format;       /* QRT_KV_* of its sessions */
    int prefill_piece;   /* tokens per forward piece of its sessions: the backend's, or QRT_PREFILL_PIECE */
};

/* The lm_head the MTP draft steps read: its NVFP4 copy when one was made, else the model's. */
static inline const qrt_linear *qrt_draft_lm_head(const qrt_model *m) {
    return m->mtp.draft_head.data ? &m->mtp.draft_head : &m->lm_head;
}

/* Scratch for one forward piece of up to s->piece tokens; one allocation, carved at session creation. */
typedef struct {
    float *h;        /* [T][D] residual stream */
    float *x;        /* [T][D] normed input of a block */
    float *y;        /* [T][D] block output */
    float *mixed;    /* [T][conv_dim] in_proj_qkv output (pre-conv) */
    float *conv;     /* [T][conv_dim] after conv + SiLU: q | k | v */
    float *z;        /* [T][Hv·Dv] */
    float *a, *b;    /* [T][Hv] */
    float *core;     /* [T][Hv·Dv] GDN output, normed and gated */
    float *qg;       /* [T][Hq][2·Dh] q_proj output, per head [query | gate]; the query normed and rotated in place */
    float *ak, *av;  /* [T][Hkv·Dh] */
    float *attn;     /* [T][Hq·Dh] */
    float *mg, *mu;  /* [T][F] gate, up */
    float *hfinal;   /* [T][D] final-normed hidden of every token (what lm_head and the MTP read) */
    float *logits;   /* [QRT_MAX_VERIFY][V] logits of up to a verify's rows, before download */
    int32_t *picks;  /* [piece] greedy choices of the requested rows, before download */
    float *mtp_u;    /* [T][2D] MTP input: [norm(embedding) | norm(hidden)] */
    float *mtp_e;    /* [T][D] MTP token embeddings */
    float *mtp_out;  /* [T][D] MTP output after mtp.norm: its logits' input and the next draft's hidden */
} qrt_scratch;

/* Largest verify (K+1 tokens) whose GDN inputs are kept for rollback. */
#define QRT_MAX_VERIFY 17

/* One decoder layer's state in a session. */
typedef struct {
    qrt_kv kv;             /* FULL: KV cache */
    float *S;              /* LINEAR: recurrent state [Hv][Dk][Dv] */
    float *conv;           /* LINEAR: last Ck-1 raw conv inputs [Ck-1][conv_dim] */
    /* LINEAR, sessions of MTP models only: a verify leaves S as it was and writes its end state to S_verified;
     * with the verify's per-token inputs and the conv state before it, a partial accept re-applies just the
     * accepted steps on S (bit-exact, no second forward), a full accept copies S_verified in. */
    float *S_verified;     /* [Hv][Dk][Dv] */
    float *conv_snap;      /* [Ck-1][conv_dim] */
    float *kept_mixed;     /* [QRT_MAX_VERIFY][conv_dim] pre-conv inputs */
    float *kept_conv;      /* [QRT_MAX_VERIFY][conv_dim] conv outputs (q | k | v) */
    float *kept_a, *kept_b; /* [QRT_MAX_VERIFY][Hv] */
} qrt_layer_state;

/* One recorded forward of the decode loop (graphs.c): the key is everything the recording baked in
 * besides the step slot's position and token ids. */
typedef struct {
    int kind;          /* QRT_GRAPH_MAIN (qrt_forward_greedy), QRT_GRAPH_MTP (qrt_mtp_forward with a pick) or
                        * QRT_GRAPH_ROLLBACK (qrt_session_rollback) */
    int T;             /* tokens (ROLLBACK: n_keep, or 0 for a verify kept whole) */
    int keep;          /* MAIN: a verify (GDN inputs kept for rollback) */
    uint32_t rows;     /* MAIN: the requested rows, bit r for row r */
    const float *h;    /* MTP: the hidden rows read */
    unsigned epoch;    /* the backend's graph epoch when recorded */
    void *graph;       /* the backend's graph; NULL until recorded */
} qrt_graph_entry;
enum { QRT_GRAPH_MAIN = 1, QRT_GRAPH_MTP, QRT_GRAPH_ROLLBACK };
/* Keys one session can hold: decode, verify per K, MTP draft step per hidden row and catch-up per T, rollback per
 * n_keep: at most 1 + 17 + 18 + 17 + 16 for K ≤ 16. */
#define QRT_GRAPH_SLOTS 96

/* What the graph cache holds and did (qwenrt bench prints it; it must not grow during timed runs). */
typedef struct {
    int graphs;             /* recorded graphs held now */
    int64_t records;        /* recordings made (after a key's warm-up run, and again after the epoch moved) */
    int64_t replays;        /* forwards run by replaying a graph */
    int64_t plain;          /* graph-eligible forwards run plainly (warm-ups; graphs off) */
} qrt_graph_stats;

struct qrt_session {
    qrt_model *m;
    int32_t max_ctx;        /* C */
    int32_t piece;          /* tokens per forward piece: min(backend prefill_piece, C), less if memory is short */
    int32_t pos;            /* tokens consumed */
    qrt_layer_state *ls;    /* [L] */
    qrt_layer_state mtp;    /* the MTP layer's KV cache, when the model has one */
    int keeping;            /* the current forward keeps its GDN inputs for rollback */
    int kept_T, kept_pos;   /* tokens and start position of the last forward whose inputs were kept */
    int mtp_last;           /* row of sc.mtp_out holding the MTP head's latest output (qrt_mtp_hidden) */
    /* For a speculative generation that continues this session (prefix reuse): the final-normed hidden of the token
     * at mtp_hidden_pos, kept by qrt_session_keep_hidden. */
    float *mtp_hidden;      /* backend [D], when the model has an MTP head */
    int32_t mtp_hidden_pos; /* -1: none kept */
    qrt_scratch sc;
    void *arena;            /* one backend allocation holding all of the above */
    /* Graphs of the decode loop's forwards, valid for this session's buffers (kept across qrt_session_reset,
     * which moves nothing). graphs_on: the backend records and replays them (QRT_CUDA_GRAPHS=0 turns it off). */
    int graphs_on;
    int n_graphs;
    qrt_graph_entry graphs[QRT_GRAPH_SLOTS];
    const qrt_backend *graph_be; /* the backend that recorded them (frees them) */
    qrt_graph_stats gstats;
};

/* Graphs on (the default, unless QRT_CUDA_GRAPHS=0 in the environment when the session was made) or off; turning
 * them off drops every recorded graph. A backend without graphs (the CPU) runs plainly either way. */
void qrt_session_set_graphs(qrt_session *s, int on);
void qrt_session_graph_stats(const qrt_session *s, qrt_graph_stats *out);

/* Speculative decoding support (engine/spec.c). */
/* The next qrt_forward (T ≤ QRT_MAX_VERIFY) is a verify: GDN state kept as it was (its end state written beside
 * it), conv state snapshotted, inputs kept. */
void qrt_session_begin_verify(qrt_session *s);
/* Keep only the first n_keep tokens of the last verify: KV by position, GDN state by re-applying the
 * kept accepted steps to the start state (n_keep = all: the verify's end state copied in). Bit-exact with a
 * session that consumed only those tokens. The next qrt_forward does it with n_keep = all if nobody did. */
void qrt_session_rollback(qrt_session *s, int n_keep);
/* Final-normed hidden of row t of the last forward piece (backend memory). */
const float *qrt_session_hidden(const qrt_session *s, int t);
/* Continuing speculation (engine/spec.c): keep row t of the last forward piece's hidden states as the hidden of the
 * session's last token (position pos - 1). The MTP pair at pos - 1 reads it with whatever token the session consumes
 * next; the caller has run the MTP over every pair before. */
void qrt_session_keep_hidden(qrt_session *s, int t);
/* The hidden kept for the session's last token (backend [D]), or NULL when none is: the session is empty, or the
 * main model moved since the last qrt_session_keep_hidden (a forward the MTP did not see, a reset). */
const float *qrt_session_kept_hidden(const qrt_session *s);
/* The MTP head over T pairs (h[t], tokens[t]) at positions pos0.. (h: backend [T][D], qrt_session_hidden or, for
 * T = 1, qrt_mtp_hidden); fills the MTP KV cache at pos0..pos0+T-1, leaves each row's output in sc.mtp_out and
 * writes the logits of the last row to logits (host [V]) when non-NULL, its greedy pick (argmax on the backend) to
 * *pick when non-NULL. */
void qrt_mtp_forward(qrt_session *s, const float *h, const int32_t *tokens, int T, int pos0, float *logits,
                     int32_t *pick);
/* The MTP head's latest output: the last row of the last qrt_mtp_forward (backend [D]), the hidden a further draft
 * step reads. */
const float *qrt_mtp_hidden(const qrt_session *s);
/* qrt_forward for greedy decoding: instead of the requested rows' logits, only their argmax (picks, host
 * [n_rows], n_rows ≤ the session's piece), computed on the backend: 4 bytes per row come back instead of V floats. The
 * same tokens as qrt_argmax of qrt_forward's logits. */
qrt_status qrt_forward_greedy(qrt_session *s, const int32_t *ids, int32_t n, const int32_t *rows, int32_t n_rows,
                              int32_t *picks);
/* Bytes one decoded token moves, by kind. */
typedef struct {
    uint64_t weights;    /* matmul weights read (embedding: one row) */
    uint64_t vectors;    /* norms, conv taps, GDN scalars (f32 copies) */
    uint64_t state;      /* GDN recurrent + conv state, read and written */
    uint64_t kv_per_ctx; /* KV cache read per token of context, in the sessions' KV format */
    uint64_t mtp_step;   /* weights one MTP draft step reads (its layer, fc, lm_head); 0 without MTP */
} qrt_token_bytes;

void qrt_model_bytes(const qrt_model *m, qrt_token_bytes *b);

/* Building a model without a checkpoint (tools/synthetic.c shares these with qrt_model_load). */
/* The backend, CPU threads and KV format opts asks for (an unknown device or KV format is an error). */
qrt_status qrt_model_apply_opts(qrt_model *m, const qrt_load_opts *opts);

/* Hand a linear built in host memory (w->data, w->scales malloc'ed) to the backend: the host copies are freed when
 * the backend made its own or failed, else kept for the model's life (m->ck; the CPU backend reads them in place). */
qrt_status qrt_model_hand_over(qrt_model *m, qrt_linear *w);

/* On a model with an MTP head (mtp) whose lm_head is BF16, F16 or F32, by default on a GPU backend (QRT_DRAFT_HEAD=nvfp4
 * or =lm_head decides on any): quantize lm (host rows, before prepare_linear) to NVFP4 into m->mtp.draft_head, prepared
 * for the backend, for the draft steps to read instead (a quarter of the bytes: lm_head is 89% of a draft step of the
 * 27B in the published layout). Drafts are guesses the verify checks, so the greedy output does not change;
 * acceptance can. Otherwise does nothing. */
qrt_status qrt_model_make_draft_head(qrt_model *m, const qrt_linear *lm, int mtp);

/* Memory kept free beside a session made by qrt_session_default_ctx: the ops' own scratch (the prefill matmuls'
 * bf16 copies of x and of a weight, cuBLASLt's workspace, attention's chunk slots, the NVFP4 tuner's buffers). */
#define QRT_CTX_RESERVE ((size_t)2 << 30)
/* The context a session gets when none is asked for: the config's max_position_embeddings, capped so that the
 * session fits in what the backend can still allocate (*available, bytes) less QRT_CTX_RESERVE; 0 when not even one
 * token fits. */
int32_t qrt_session_default_ctx(const qrt_model *m, size_t *available);
/* Floats of every f32 vector the model keeps (norms, conv taps, GDN scalars), main layers and MTP head. */
size_t qrt_model_vector_floats(const qrt_model *m);
/* Upload the f32 vectors from host (where the model's vector pointers point now) into m->vectors (already
 * allocated with floats) and rebase every vector pointer onto it. */
void qrt_model_upload_vectors(qrt_model *m, float *host, size_t floats);

/* Fail with QRT_ERR_NONFINITE for the logits after the token at position pos; who: "" or " of the MTP head". */
qrt_status qrt_fail_nonfinite(int32_t pos, const char *who);
#endif
