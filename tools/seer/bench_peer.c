/*
 * bench_peer.c: `seer bench --peer FILE.json`: reads another implementation's plain decode
 * timings of the same model shape (scripts/hf_peer.py writes them for HF transformers) and
 * puts them beside seer's own at the points with the same context depth L and batch B. The
 * file is checked before it is used: a file that is not a peer file, a point without a time,
 * or a peer that ran another shape is refused with a message that says which.
 * Not for: measuring the peer (scripts/hf_peer.py), printing (bench_out.c).
 */
#include "bench.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON integer in [lo, hi], or a real that holds one exactly (Python may write 4096.0). */
static bool get_int(json_t *o, const char *key, long long lo, long long hi, int *out) {
    json_t *v = json_object_get(o, key);
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else
        return false;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return false;
    *out = (int)d;
    return true;
}

/* The label goes into gnuplot's quoted titles and both go into the table: printable ASCII
 * without quotes or backslashes. */
static void copy_clean(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src);
    for (char *c = dst; *c; c++)
        if (*c < 0x20 || *c > 0x7e || *c == '\'' || *c == '"' || *c == '\\')
            *c = '_';
}

void bench_peer_free(bench_peer *p) {
    free(p->pts);
    memset(p, 0, sizeof *p);
}

int bench_peer_load(const char *path, bench_peer *p) {
    memset(p, 0, sizeof *p);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "seer bench: --peer %s:%d: %s\n", path, jerr.line, jerr.text);
        return 1;
    }
    json_t *m = json_object_get(root, "model"), *pts = json_object_get(root, "points");
    const char *label = json_string_value(json_object_get(root, "peer"));
    const char *desc = json_string_value(json_object_get(root, "description"));
    int rc = 1;
    if (!json_is_object(root) || !json_is_object(m) || !json_is_array(pts)) {
        fprintf(stderr, "seer bench: --peer %s is not a peer file: it needs an object with \"model\" "
                        "and \"points\" (as scripts/hf_peer.py writes)\n", path);
        goto done;
    }
    copy_clean(p->label, sizeof p->label, label && *label ? label : "peer");
    copy_clean(p->desc, sizeof p->desc, desc ? desc : "");
    struct {
        const char *key;
        int *dst;
    } dims[] = {{"dim", &p->dim}, {"n_layers", &p->n_layers}, {"n_heads", &p->n_heads},
                {"n_kv_heads", &p->n_kv_heads}, {"ffn_dim", &p->ffn_dim}, {"n_vocab", &p->n_vocab}};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        if (!get_int(m, dims[i].key, 1, 1 << 30, dims[i].dst)) {
            fprintf(stderr, "seer bench: --peer %s: model.%s is missing or not a positive integer\n",
                    path, dims[i].key);
            goto done;
        }
    const size_t n = json_array_size(pts);
    if (n > 100000) {
        fprintf(stderr, "seer bench: --peer %s: %zu points is more than any run measures\n", path, n);
        goto done;
    }
    p->pts = calloc(n ? n : 1, sizeof *p->pts);
    if (!p->pts) {
        fprintf(stderr, "seer bench: --peer %s: out of memory\n", path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(pts, i), *ms = json_object_get(e, "ms_per_step");
        const char *err = json_string_value(json_object_get(e, "error"));
        bench_peer_point *q = &p->pts[i];
        if (!get_int(e, "ctx", 1, 1 << 30, &q->L) || !get_int(e, "batch", 1, 1 << 30, &q->B)) {
            fprintf(stderr, "seer bench: --peer %s: points[%zu]: \"ctx\" and \"batch\" must be "
                            "positive integers\n", path, i);
            goto done;
        }
        if (err) {
            snprintf(q->err, sizeof q->err, "%s", *err ? err : "failed");
        } else if (json_is_number(ms) && json_number_value(ms) > 0 && isfinite(json_number_value(ms))) {
            q->ok = true;
            q->step_ms = json_number_value(ms);
        } else {
            fprintf(stderr, "seer bench: --peer %s: points[%zu] (L=%d B=%d): neither an "
                            "\"ms_per_step\" > 0 nor an \"error\"\n", path, i, q->L, q->B);
            goto done;
        }
        for (size_t j = 0; j < i; j++)
            if (p->pts[j].L == q->L && p->pts[j].B == q->B) {
                fprintf(stderr, "seer bench: --peer %s: L=%d B=%d appears twice\n", path, q->L, q->B);
                goto done;
            }
        p->n_pts++;
    }
    rc = 0;
done:
    json_decref(root);
    if (rc)
        bench_peer_free(p);
    return rc;
}

int bench_peer_merge(const char *path, const bench_peer *p, bench_result *r) {
    const seer_model_info *in = &r->info;
    if (p->dim != in->dim || p->n_layers != in->n_layers || p->n_heads != in->n_heads ||
        p->n_kv_heads != in->n_kv_heads || p->ffn_dim != in->ffn_dim || p->n_vocab != in->n_vocab) {
        fprintf(stderr,
                "seer bench: --peer %s ran another shape: D %d, %d layers, H %d / Hkv %d, F %d, V %d; "
                "this run's model (%s) has D %d, %d layers, H %d / Hkv %d, F %d, V %d\n",
                path, p->dim, p->n_layers, p->n_heads, p->n_kv_heads, p->ffn_dim, p->n_vocab,
                in->name, in->dim, in->n_layers, in->n_heads, in->n_kv_heads, in->ffn_dim, in->n_vocab);
        return 1;
    }
    int matched = 0;
    for (int i = 0; i < r->n_pts; i++) {
        bench_point *pt = &r->pts[i];
        pt->peer_has = pt->peer_ok = false;
        pt->peer_err[0] = 0;
        pt->peer_step_ms = pt->peer_tok_s = 0;
        for (int k = 0; k < p->n_pts; k++) {
            const bench_peer_point *q = &p->pts[k];
            if (q->L != pt->L || q->B != pt->B)
                continue;
            pt->peer_has = true;
            pt->peer_ok = q->ok;
            snprintf(pt->peer_err, sizeof pt->peer_err, "%s", q->err);
            pt->peer_step_ms = q->ok ? q->step_ms : 0;
            pt->peer_tok_s = q->ok ? pt->B / (q->step_ms * 1e-3) : 0;
            matched++;
        }
    }
    if (!matched && r->n_pts)
        fprintf(stderr, "seer bench: --peer %s: none of its points has this run's (L, B)\n", path);
    r->has_peer = true;
    snprintf(r->peer_label, sizeof r->peer_label, "%s", p->label);
    snprintf(r->peer_desc, sizeof r->peer_desc, "%s", p->desc);
    return 0;
}
