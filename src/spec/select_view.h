/*
 * select_view.h: self-drafts whose view is chosen per round from a query (ShadowKV's
 * landmarks, MagicPIG's hash collisions): the drafter's part is a per-sequence index of the
 * cached keys and a selection from it; this part, shared, keeps the index in step with the
 * cache, captures the query, builds the view (sinks + the selection + a recent window) and
 * drafts through it.
 *
 * The selection for a round is made from the query of the pending token of the last round
 * this drafter drafted (captured in its first draft step; after prefill, the last prompt
 * token's): the view must be set before the forward call that computes the current query,
 * as retrieval's refresh does. Keys are indexed only from slots verification has written
 * (slots < n_tokens - 1), so the index never holds a draft's KV.
 *
 * Not for: the views fixed at prefill or built from recency alone (draft_self.c).
 */
#ifndef SEER_SELECT_VIEW_H
#define SEER_SELECT_VIEW_H

#include "spec/drafter.h"

/* What a selecting drafter provides. cfg is its settings (owned by the select view, freed
 * with free()); ix one sequence's index. */
typedef struct {
    void *(*seq_new)(const void *cfg, const seer_model_info *in);
    void (*seq_free)(void *ix);
    /* Adds the keys of slots [from, to) of seq (exact target KV) to the index. */
    seer_status (*extend)(const void *cfg, void *ix, seer_context *c, seer_seq_id seq, int from, int to);
    /* Per layer and KV head, up to n_pick slots in [lo, lim) for query q [n_layers][H*Dh],
     * from the keys indexed so far (slots < indexed): out [n_layers][Hkv][n_pick] in any
     * order, cnt [n_layers * Hkv] how many of each row are set. */
    seer_status (*select)(const void *cfg, void *ix, const float *q, int lo, int lim, int indexed, int n_pick,
                          int32_t *out, int *cnt);
} seer_selector;

/* The settings every selecting drafter has: budget K (sinks + selection + window <= K),
 * sinks (first slots always visible) and window (recent slots always visible). */
typedef struct {
    int budget, sinks, window;
    bool draft_weights;
} seer_select_settings;

/* Makes the shared state (the drafter's impl) for selector sel with settings cfg (taken:
 * freed with the state, also on error). */
seer_status seer_select_init(const seer_draft_env *env, seer_select_settings set, const seer_selector *sel,
                             void *cfg, void **impl);

/* The ops a selecting drafter lists beside its own init. */
void seer_select_free(const seer_draft_env *env, void *impl);
void seer_select_released(const seer_draft_env *env, void *impl, int slot);
seer_status seer_select_propose(const seer_draft_env *env, void *impl, int n, seer_draft_seq *seqs);
int seer_select_q_rows(void *impl, int n_prompt);
seer_status seer_select_prefill_q(const seer_draft_env *env, void *impl, seer_draft_seq *s, const float *q,
                                  int n_rows);
seer_status seer_select_view(const seer_draft_env *env, void *impl, const seer_draft_seq *s,
                             seer_draft_reads *reads);

#endif
