/* What the model's files share beyond model.h: the graph cache (graphs.c) runs the forwards (forward.c), which
 * run through it; the session (session.c) drops its graphs when freed. */
#ifndef QRT_MODEL_INTERNAL_H
#define QRT_MODEL_INTERNAL_H
#include "model/model.h"

/* A forward qrt_run_graphed runs (graphs.c says what it may touch). */
typedef void (*qrt_graph_body)(qrt_session *s, const void *arg);

/* Run body(s, arg) by replaying key's graph, or plainly and then recorded. */
void qrt_run_graphed(qrt_session *s, const qrt_graph_entry *key, int pos, const int32_t *ids, int T,
                     qrt_graph_body body, const void *arg);
/* Free every recorded graph of s. */
void qrt_drop_graphs(qrt_session *s);
/* Run the forward g stands for from the key alone (what graphs.c records). */
void qrt_graph_key_forward(qrt_session *s, const qrt_graph_entry *g);
#endif
