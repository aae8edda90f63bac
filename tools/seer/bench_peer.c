/*
 * bench_peer.c: `seer bench --peer FILE.json`: reads another implementation's decode and
 * prefill timings of the same model shape (scripts/peer-llamacpp.sh writes them for
 * llama.cpp, scripts/hf_peer.py for HF transformers; bench.h has the format) and puts them
 * beside seer's own at the points with the same context depth L and batch B, and the
 * prefills of the same prompt size. The file is checked before it is used: a file that is not
 * a peer file, a point without a time, or a peer that ran another shape is refused with a
 * message that says which.
 * Not for: measuring the peer (the scripts), printing (bench_out.c).
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
    free(p->prefill);
    memset(p, 0, sizeof *p);
}

void bench_result_free(bench_result *r) {
    for (int i = 0; i < r->n_pts; i++)
        free(r->pts[i].spec);
    free(r->pts);
    free(r->peer_only);
    r->pts = NULL;
    r->peer_only = NULL;
    r->n_pts = r->n_peer_only = 0;
}

/* The optional "prefill" array: [{"tokens", "batch" (default 1), "tok_per_s" or "error"}]. */
static int load_prefill(const char *path, json_t *arr, bench_peer *p) {
    if (!arr)
        return 0;
    if (!json_is_array(arr)) {
        fprintf(stderr, "seer bench: --peer %s: \"prefill\" must be an array\n", path);
        return 1;
    }
    const size_t n = json_array_size(arr);
    if (n > 10000) {
        fprintf(stderr, "seer bench: --peer %s: %zu prefill runs is more than any run measures\n", path, n);
        return 1;
    }
    p->prefill = calloc(n ? n : 1, sizeof *p->prefill);
    if (!p->prefill) {
        fprintf(stderr, "seer bench: --peer %s: out of memory\n", path);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i), *ts = json_object_get(e, "tok_per_s");
        const char *err = json_string_value(json_object_get(e, "error"));
        bench_peer_prefill *q = &p->prefill[i];
        q->B = 1;
        if (!get_int(e, "tokens", 1, 1 << 30, &q->tokens) ||
            (json_object_get(e, "batch") && !get_int(e, "batch", 1, 1 << 20, &q->B))) {
            fprintf(stderr, "seer bench: --peer %s: prefill[%zu]: \"tokens\" (and \"batch\" when "
                            "given) must be positive integers\n", path, i);
            return 1;
        }
        if (err) {
            snprintf(q->err, sizeof q->err, "%s", *err ? err : "failed");
        } else if (json_is_number(ts) && json_number_value(ts) > 0 && isfinite(json_number_value(ts))) {
            q->ok = true;
            q->tok_s = json_number_value(ts);
        } else {
            fprintf(stderr, "seer bench: --peer %s: prefill[%zu] (%d tokens, B=%d): neither a "
                            "\"tok_per_s\" > 0 nor an \"error\"\n", path, i, q->tokens, q->B);
            return 1;
        }
        for (size_t j = 0; j < i; j++)
            if (p->prefill[j].tokens == q->tokens && p->prefill[j].B == q->B) {
                fprintf(stderr, "seer bench: --peer %s: prefill of %d tokens at B=%d appears twice\n",
                        path, q->tokens, q->B);
                return 1;
            }
        p->n_prefill++;
    }
    return 0;
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
    const char *version = json_string_value(json_object_get(root, "version"));
    int rc = 1;
    if (!json_is_object(root) || !json_is_object(m) || !json_is_array(pts)) {
        fprintf(stderr, "seer bench: --peer %s is not a peer file: it needs an object with \"model\" "
                        "and \"points\" (as scripts/hf_peer.py writes)\n", path);
        goto done;
    }
    copy_clean(p->label, sizeof p->label, label && *label ? label : "peer");
    copy_clean(p->desc, sizeof p->desc, desc ? desc : "");
    copy_clean(p->version, sizeof p->version, version ? version : "");
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
    if (load_prefill(path, json_object_get(root, "prefill"), p))
        goto done;
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
    bench_peer_prefill *only = calloc(p->n_prefill ? p->n_prefill : 1, sizeof *only);
    if (!only) {
        fprintf(stderr, "seer bench: --peer %s: out of memory\n", path);
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
    free(r->peer_only);
    r->peer_only = only;
    r->n_peer_only = 0;
    for (int i = 0; i < r->n_prefill; i++) {
        bench_prefill *pf = &r->prefill[i];
        pf->peer_has = pf->peer_ok = false;
        pf->peer_err[0] = 0;
        pf->peer_tok_s = 0;
    }
    for (int k = 0; k < p->n_prefill; k++) {
        const bench_peer_prefill *q = &p->prefill[k];
        bool used = false;
        for (int i = 0; i < r->n_prefill && q->B == 1; i++) {
            bench_prefill *pf = &r->prefill[i];
            if (pf->tokens != q->tokens)
                continue;
            pf->peer_has = used = true;
            pf->peer_ok = q->ok;
            snprintf(pf->peer_err, sizeof pf->peer_err, "%s", q->err);
            pf->peer_tok_s = q->ok ? q->tok_s : 0;
        }
        if (!used)
            r->peer_only[r->n_peer_only++] = *q;
    }
    r->has_peer = true;
    snprintf(r->peer_label, sizeof r->peer_label, "%s", p->label);
    snprintf(r->peer_version, sizeof r->peer_version, "%s", p->version);
    snprintf(r->peer_desc, sizeof r->peer_desc, "%s", p->desc);
    return 0;
}
