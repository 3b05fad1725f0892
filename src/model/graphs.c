#include "model/model_internal.h"

#include <string.h>

/* Graphs. A decode loop runs the same few forwards over and over, only the position and the token ids
 * changing: the main model on one token (greedy decode), on K+1 (a verify), the MTP head on one token (a
 * draft step) or on the j+1 accepted ones (its catch-up). On a backend with graphs each such forward is
 * recorded once and replayed: ~720 kernel launches become one graph launch. The backend reads the position
 * and the ids of a recorded forward from its step slot (backend.h), so a graph serves every position; the
 * key (qrt_graph_entry) holds the rest of what the recording baked in: which forward, T, the requested rows,
 * whether GDN inputs are kept for rollback, the hidden rows the MTP reads. Everything else it touches is the session's
 * (fixed for its life) or the model's.
 *
 * A rollback after a partial accept (the GDN layers' re-run of the kept steps) is recorded per n_keep the same way.
 *
 * A key runs plainly the first time: the warm-up, in which the NVFP4 autotuner times new shapes and scratch
 * buffers grow, neither of which a recording may do; it is recorded right after (from the key alone,
 * record_key), and every later run is a replay. When the backend's epoch moves (a scratch buffer that recordings
 * point at was reallocated), every recording made before is made again. The results are the plain run's bits: the same
 * kernels on the same buffers, attention's chunking depending only on each token's position. Only greedy
 * forwards (picks, not logits) of the decode loop's shapes are recorded: the main model on one token or on up to
 * QRT_GRAPH_MAX_T with every row requested (a verify), the MTP on up to QRT_MAX_VERIFY. Prefill (one requested
 * row; the MTP's longer pieces) and sampling (the logits download and the host's sampling would sit inside) run
 * plainly. */

void qrt_drop_graphs(qrt_session *s) {
    for (int i = 0; i < s->n_graphs; i++)
        if (s->graphs[i].graph) s->graph_be->graph_free(s->graphs[i].graph);
    s->n_graphs = 0;
    s->gstats.graphs = 0;
}

void qrt_session_set_graphs(qrt_session *s, int on) {
    if (!on) qrt_drop_graphs(s);
    s->graphs_on = on;
}

void qrt_session_graph_stats(const qrt_session *s, qrt_graph_stats *out) { *out = s->gstats; }

/* The cache entry for key (made, not yet run, when new); NULL when graphs cannot be used. */
static qrt_graph_entry *graph_entry(qrt_session *s, const qrt_graph_entry *key) {
    const qrt_backend *be = s->m->be;
    if (!s->graphs_on || !be->graph_begin || (s->graph_be && s->graph_be != be)) return NULL;
    for (int i = 0; i < s->n_graphs; i++) {
        qrt_graph_entry *g = &s->graphs[i];
        if (g->kind == key->kind && g->T == key->T && g->keep == key->keep && g->rows == key->rows &&
            g->h == key->h)
            return g;
    }
    if (s->n_graphs == QRT_GRAPH_SLOTS) return NULL; /* more keys than K ≤ 16 makes: the rest run plainly */
    qrt_graph_entry *g = &s->graphs[s->n_graphs++];
    *g = *key;
    g->graph = NULL;
    return g;
}

/* Record g's forward from its key alone (qrt_graph_key_forward). */
static void record_key(qrt_session *s, qrt_graph_entry *g) {
    const qrt_backend *be = s->m->be;
    if (!be->graph_begin(s->max_ctx)) return;
    qrt_graph_key_forward(s, g);
    g->graph = be->graph_end();
    g->epoch = be->graph_epoch();
    s->graph_be = be;
    s->gstats.records++;
    if (g->graph) s->gstats.graphs++;
    else s->graphs_on = 0; /* recording failed (the backend said why on stderr): this session runs plainly */
}

/* body(s, arg): one forward at position pos over the T host ids (T = 0: none, and no position), which reads them
 * only through be->embed and be->attn_prep / be->attention and changes no host state. Run by replaying key's
 * graph, or plainly and then recorded (see above). */
void qrt_run_graphed(qrt_session *s, const qrt_graph_entry *key, int pos, const int32_t *ids, int T,
                     qrt_graph_body body, const void *arg) {
    const qrt_backend *be = s->m->be;
    qrt_graph_entry *g = graph_entry(s, key);
    if (!g) {
        body(s, arg);
        return;
    }
    if (g->graph && g->epoch != be->graph_epoch()) {
        /* a buffer moved: record every graph made before again now (their warm-ups are done), so that keys met
         * once per generation (the first draft step after a prefill) do not wait for their next use */
        for (int i = 0; i < s->n_graphs && s->graphs_on; i++) {
            qrt_graph_entry *e = &s->graphs[i];
            if (!e->graph || e->epoch == be->graph_epoch()) continue;
            be->graph_free(e->graph);
            e->graph = NULL;
            s->gstats.graphs--;
            record_key(s, e);
        }
    }
    if (g->graph) {
        be->graph_launch(g->graph, pos, ids, T);
        s->gstats.replays++;
        return;
    }
    body(s, arg);
    s->gstats.plain++;
    /* recorded right after its warm-up, so that the first generation leaves every key it met recorded and the
     * next ones (bench's timed reps) record nothing */
    if (s->graphs_on) record_key(s, g);
}
