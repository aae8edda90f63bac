/*
 * bench_out.c: what `seer bench` prints: the aligned table, the JSON object and the gnuplot
 * PNG, with a peer's columns and line when --peer gave one. Every speculative number is
 * printed next to the words SYNTHETIC ACCEPTANCE: on random weights those runs accept each
 * draft token with a chosen probability, not by verification.
 * Not for: measuring (cmd_bench.c), reading a peer's file (bench_peer.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dtype_name(int bytes) {
    return bytes == 2 ? "bf16" : bytes == 4 ? "f32" : bytes == 1 ? "8-bit" : "?";
}

void bench_weight_types(const seer_model_footprint *fp, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    if (fp->file_type[0])
        n += (size_t)snprintf(buf, cap, "%s: ", fp->file_type);
    for (int i = 0; i < fp->n_weight_types && n < cap; i++) {
        const double share = fp->weight_bytes ? 100.0 * fp->weight_types[i].bytes / fp->weight_bytes : 0;
        n += (size_t)snprintf(buf + n, cap - n, "%s%s %.0f%%", i ? ", " : "", fp->weight_types[i].name, share);
    }
    if (!fp->n_weight_types && n < cap)
        snprintf(buf + n, cap - n, "%s", dtype_name(fp->weight_elem_bytes));
}

static void print_header(FILE *f, const bench_opts *o, const bench_result *r) {
    const seer_model_info *in = &r->info;
    fprintf(f, "seer bench  %s  %s\n", r->date, o->synthetic ? "SYNTHETIC WEIGHTS (random, generated on the backend)" : o->model_path);
    fprintf(f, "model   %s: %s, D %d, %d layers, H %d / Hkv %d x Dh %d, F %d, V %d\n", in->name,
            in->arch, in->dim, in->n_layers, in->n_heads, in->n_kv_heads, in->head_dim, in->ffn_dim,
            in->n_vocab);
    char types[256];
    bench_weight_types(&r->fp, types, sizeof types);
    fprintf(f, "backend %s; weights as stored there: %s of W = %.3f GB (linear + LM head); KV %s, "
               "c = %.1f KiB/token\n", in->backend, types, r->fp.weight_bytes * 1e-9,
            r->kv_type != SEER_KV_FULL ? seer_kv_type_name(r->kv_type) : dtype_name(r->fp.kv_elem_bytes),
            r->fp.kv_bytes_per_token / 1024.0);
    if (r->kv_capacity) { /* the largest B x L: sequences of each L that the free memory holds */
        fprintf(f, "capacity %.0f tokens of KV fit in the free memory before the run:", (double)r->kv_capacity);
        for (int i = 0; i < r->n_pts; i++)
            if (i == 0 || r->pts[i].L != r->pts[i - 1].L)
                fprintf(f, " B <= %llu at L = %d;", (unsigned long long)(r->kv_capacity / (uint64_t)r->pts[i].L),
                        r->pts[i].L);
        fprintf(f, "\n");
    }
    if (r->fp.windowed_layers)
        fprintf(f, "window  %d of %d layers attend over the last %d positions: the floor counts at most "
                   "that many slots of theirs (L*c below is each layer's own)\n",
                r->fp.windowed_layers, r->fp.n_layers, r->fp.window);
    fprintf(f, "copy bandwidth BW = %.3f TB/s (device-to-device copy, read + write, median)\n",
            r->bandwidth * 1e-12);
    if (r->info.host_weight_bytes)
        fprintf(f, "streamed %d of %d layers in host memory, W_host = %.3f GB copied to the device every step;\n"
                   "        host-to-device H2D = %.1f GB/s (pinned copy, median); PCIe floor = W_host / H2D;\n"
                   "        floor below = max((W + B*L*c) / BW, PCIe floor); H2D achieved = W_host / ms/step\n",
                r->info.n_layers - r->info.n_layers_resident, r->info.n_layers, r->info.host_weight_bytes * 1e-9,
                r->h2d_bandwidth * 1e-9);
    if (r->ranks > 1)
        fprintf(f, "floor = (W + B*L*c) / (%d * BW): each of %d GPUs reads its part of the weights and KV "
                   "(an even division; the all-reduces are not counted); fraction = floor / measured\n",
                r->ranks, r->ranks);
    else
        fprintf(f, "floor = (W + B*L*c) / BW; fraction = floor / measured\n");
    if (r->ranks > 1 || o->tp == 1) {
        fprintf(f, "per GPU: W / %d = %.3f GB at BW: %.3f ms of each step's floor, before its KV\n", r->ranks,
                r->fp.weight_bytes * 1e-9 / r->ranks, (double)r->fp.weight_bytes / r->ranks / r->bandwidth * 1e3);
        for (int k = 0; k < o->n_batch; k++)
            if (r->allreduce_s[k] > 0)
                fprintf(f, "all-reduce of B = %d rows of D: %.1f us each, 2 x %d layers = %.3f ms per step "
                           "(timed alone, as the forward call makes it)\n",
                        o->batch[k], r->allreduce_s[k] * 1e6, in->n_layers,
                        2.0 * in->n_layers * r->allreduce_s[k] * 1e3);
    }
    if (r->has_peer)
        fprintf(f, "peer    %s\n        %s\n        peer ms = its ms/step at the same L and B; speedup = "
                   "peer ms / ms/step (> 1: seer is faster)\n",
                r->peer_version[0] ? r->peer_version : r->peer_label, r->peer_desc);
}

/* Prefill: seer's runs with the peer's of the same size, then the peer's runs of no size of
 * this run (its batched prefill, say). */
static void print_prefill(FILE *f, const bench_opts *o, const bench_result *r) {
    if (!r->n_prefill && !r->n_peer_only)
        return;
    if (o->prefill_reps > 0)
        fprintf(f, "\nprefill: one prompt of P tokens in one sequence, %d per call, median of %d after a "
                   "warm-up\n", o->prefill_chunk, o->prefill_reps);
    else /* a replotted run's JSON from before the setting was written */
        fprintf(f, "\nprefill: one prompt of P tokens in one sequence\n");
    fprintf(f, "%8s %10s %10s %9s", "P", "ms", "tok/s", "TFLOP/s");
    if (r->has_peer)
        fprintf(f, " %11s %8s", "peer tok/s", "speedup");
    fprintf(f, "\n");
    for (int i = 0; i < r->n_prefill; i++) {
        const bench_prefill *p = &r->prefill[i];
        if (!p->ok) {
            fprintf(f, "%8d  failed: %s\n", p->tokens, p->err);
            continue;
        }
        fprintf(f, "%8d %10.2f %10.0f %9.1f", p->tokens, p->ms, p->tok_s, p->tflops);
        if (r->has_peer && !p->peer_has)
            fprintf(f, " %11s %8s", "-", "-");
        else if (r->has_peer && !p->peer_ok)
            fprintf(f, " %11.11s %8s", p->peer_err, "-");
        else if (r->has_peer)
            fprintf(f, " %11.0f %7.2fx", p->peer_tok_s, p->tok_s / p->peer_tok_s);
        fprintf(f, "\n");
    }
    for (int i = 0; i < r->n_peer_only; i++) {
        const bench_peer_prefill *q = &r->peer_only[i];
        if (q->ok)
            fprintf(f, "%8d  %s alone, B=%d: %.0f tok/s\n", q->tokens, r->peer_label, q->B, q->tok_s);
        else
            fprintf(f, "%8d  %s alone, B=%d: %s\n", q->tokens, r->peer_label, q->B, q->err);
    }
}

/* A self-draft step's floor: the weights it multiplies by (the draft weights with /dw; with a
 * sparse FFN its kept share of the FFN's, taken as the FFN's share of the elements) and the
 * B * min(K, L) KV slots of its view, over the bandwidth; 0 for other drafters. */
static double draft_floor_ms(const bench_result *r, const bench_point *p, const bench_spec *s) {
    if ((s->kind != SEER_SPEC_STREAMING && s->kind != SEER_SPEC_RETRIEVAL && s->kind != SEER_SPEC_SNAPKV) ||
        r->bandwidth <= 0)
        return 0;
    double w = s->draft_weights ? (double)r->fp.draft_weight_bytes : (double)r->fp.weight_bytes;
    if (s->ffn_density > 0 && s->ffn_density < 1 && r->fp.weight_elems) { /* the FFN's unread share */
        const seer_model_info *in = &r->info;
        const double ffn = 3.0 * in->dim * in->ffn_dim * in->n_layers / (double)r->fp.weight_elems;
        /* CATS reads all of the gate and the density's share of up and down */
        const double kept = s->ffn_cats ? (1 + 2.0 * s->ffn_density) / 3
                                        : (double)seer_sparse_ffn_keep(in->ffn_dim, s->ffn_density) / in->ffn_dim;
        w *= 1 - ffn * (1 - kept);
    }
    const double kv = (double)p->B * seer_footprint_kv_read(&r->fp, p->L, s->budget);
    return (w + kv) / (r->bandwidth * (r->ranks > 0 ? r->ranks : 1)) * 1e3;
}

/* The peer's two columns of a plain row: its ms/step and seer's speedup over it. */

/* Token trees (SpecExec's best-first trees of hundreds of nodes above all, on an offloaded
 * target): tokens per target pass (one verification, all its calls) and time per token. */
static void print_trees(FILE *f, const bench_result *r, const char *mode, double alpha) {
    bool any = false;
    for (int i = 0; i < r->n_pts; i++)
        for (int k = 0; k < r->pts[i].n_spec && r->pts[i].ok; k++)
            any |= r->pts[i].spec[k].ok && r->pts[i].spec[k].tree_size > 0;
    if (!any)
        return;
    fprintf(f, "\ntoken trees: tok/pass = tokens per sequence per target pass (the tree's verification,\n"
               "in calls of at most 65 rows of a sequence: calls = forward calls per pass), ms/tok = ms\n"
               "per token per sequence\n");
    fprintf(f, "%8s %5s %-14s %6s %8s %6s %10s %10s %8s  %s\n", "L", "B", "spec", "nodes", "tok/pass", "calls",
            "ms/tok", "plain ms", "x plain", "acceptance");
    for (int i = 0; i < r->n_pts; i++) {
        const bench_point *p = &r->pts[i];
        for (int k = 0; k < p->n_spec && p->ok; k++) {
            const bench_spec *s = &p->spec[k];
            if (!s->ok || s->tree_size <= 0 || !(s->spec_tok_s > 0) || !(s->gen_plain_tok_s > 0))
                continue;
            fprintf(f, "%8d %5d %-14s %6d %8.2f %6.2f %10.3f %10.3f %7.2fx  %s %.2f\n", p->L, p->B,
                    bench_spec_label(s), s->tree_size, s->tok_per_verify, s->calls_per_verify,
                    1e3 * p->B / s->spec_tok_s, 1e3 * p->B / s->gen_plain_tok_s, s->speedup, mode, alpha);
        }
    }
}
static void print_peer_cols(FILE *f, const bench_point *p) {
    if (!p->peer_has)
        fprintf(f, " %10s %8s", "-", "-");
    else if (!p->peer_ok)
        fprintf(f, " %10.10s %8s", p->peer_err, "-");
    else
        fprintf(f, " %10.3f %7.2fx", p->peer_step_ms, p->peer_step_ms / p->step_ms);
}

void bench_print_table(const bench_opts *o, const bench_result *r) {
    FILE *f = stdout;
    print_header(f, o, r);
    print_prefill(f, o, r);
    bench_print_resume(f, o, r);
    fprintf(f, "\nplain decode: one token per sequence per step, logits of every sequence to the host;\n"
               "median of %d steps after %d warm-up, page size %d\n",
            o->steps, o->warmup, o->page_size);
    fprintf(f, "%8s %5s %10s %10s %10s %10s %10s %11s %9s", "L", "B", "ms/step", "min ms",
            "max ms", "tok/s", "floor ms", "floor tok/s", "of floor");
    if (r->has_peer)
        fprintf(f, " %10s %8s", "peer ms", "speedup");
    fprintf(f, "\n");
    for (int i = 0; i < r->n_pts; i++) {
        const bench_point *p = &r->pts[i];
        if (!p->ok) {
            fprintf(f, "%8d %5d  failed: %s\n", p->L, p->B, p->err);
            continue;
        }
        fprintf(f, "%8d %5d %10.3f %10.3f %10.3f %10.1f %10.3f %11.1f %8.1f%%", p->L, p->B,
                p->step_ms, p->step_min_ms, p->step_max_ms, p->tok_s, p->floor_ms, p->floor_tok_s,
                100 * p->fraction);
        if (r->has_peer)
            print_peer_cols(f, p);
        if (r->info.host_weight_bytes)
            fprintf(f, "  H2D achieved %.1f GB/s, %.1f%% of the PCIe floor",
                    (double)r->info.host_weight_bytes / (p->step_ms * 1e-3) * 1e-9,
                    p->pcie_floor_ms > 0 ? 100 * p->pcie_floor_ms / p->step_ms : 0.0);
        fprintf(f, "%s\n", p->finite ? "" : "  NON-FINITE LOGITS");
    }
    bool any = false;
    for (int i = 0; i < r->n_pts; i++)
        any |= r->pts[i].n_spec > 0;
    if (!any)
        return;
    if (o->trace_path)
        fprintf(f, "\nREPLAYED ACCEPTANCE: each drafter kind accepts as recorded from a real model in %s\n"
                   "(its rounds as a stream of per-token outcomes, each sequence its own line and offset;\n"
                   "kinds without a line accept at alpha); acc and tok/ver below are the replay's\n",
                o->trace_path);
    if (r->fp.draft_weight_bytes)
        fprintf(f, "\ndraft weights (/dw): %s, W_D = %.3f GB; D floor = a self-draft step's (W or W_D + B*min(K, L)*c) / BW\n",
                r->fp.draft_weights, r->fp.draft_weight_bytes * 1e-9);
    fprintf(f, "\nspeculative decode with SYNTHETIC ACCEPTANCE: each draft token accepted independently\n"
               "with probability alpha = %.2f (not lossless, timing only); %d generator rounds after %d\n"
               "warm-up; plain = the same generator without drafts, run just before on the same caches;\n"
               "T_T = plain ms/step above, T_D = one draft step, T_V = one verification;\n"
               "acc = accepted / drafted (the chain stops at the first rejection: expected\n"
               "(alpha + ... + alpha^G) / G), tok/ver = tokens per sequence per verification\n"
               "(expected Omega(G, alpha) = (1 - alpha^(G+1)) / (1 - alpha));\n"
               "projected = Omega(G, alpha) / (G T_D/T_T + T_V/T_T)\n",
            o->alpha, o->steps, o->warmup);
    fprintf(f, "%8s %5s %-12s %6s %3s %8s %8s %8s %8s %6s %7s %10s %10s %8s %9s  %s\n", "L", "B", "spec",
            "K", "G", "T_T ms", "T_D ms", "D floor", "T_V ms", "acc", "tok/ver", "plain t/s", "spec t/s",
            "speedup", "projected", "acceptance");
    const char *mode = o->trace_path ? "REPLAYED" : "SYNTHETIC";
    bool has_auto = false;
    for (int i = 0; i < r->n_pts; i++) {
        const bench_point *p = &r->pts[i];
        for (int k = 0; k < p->n_spec && p->ok; k++) {
            const bench_spec *s = &p->spec[k];
            has_auto |= s->kind == SEER_SPEC_AUTO;
            if (!s->ok) {
                fprintf(f, "%8d %5d %-12s %6d %3d  failed: %s  (%s ACCEPTANCE %.2f)\n", p->L, p->B,
                        bench_spec_label(s), s->budget, s->gamma, s->err, mode, o->alpha);
                continue;
            }
            fprintf(f, "%8d %5d %-12s %6d %3d %8.3f %8.3f %8.3f %8.3f %6.3f %7.2f %10.1f %10.1f %7.3fx %8.3fx  %s %.2f\n",
                    p->L, p->B, bench_spec_label(s), s->budget, s->gamma, p->step_ms,
                    s->draft_step_ms, draft_floor_ms(r, p, s), s->verify_ms, s->acceptance, s->tok_per_verify,
                    s->gen_plain_tok_s, s->spec_tok_s, s->speedup, s->projected, mode, o->alpha);
        }
    }
    print_trees(f, r, mode, o->alpha);
    if (!has_auto)
        return;
    fprintf(f, "\nauto against the fixed settings (%s acceptance): plain = rounds auto decoded plain,\n"
               "G = its mean chain over the others, predicted = the point's table's forecast;\n"
               "best fixed = the fastest of plain decoding and every fixed setting above\n", mode);
    fprintf(f, "%8s %5s %7s %5s %9s %9s %-22s %9s %9s\n", "L", "B", "plain", "G", "auto", "predicted",
            "best fixed", "its x", "auto/best");
    for (int i = 0; i < r->n_pts; i++) {
        const bench_point *p = &r->pts[i];
        for (int k = 0; k < p->n_spec && p->ok; k++) {
            const bench_spec *s = &p->spec[k];
            if (s->kind != SEER_SPEC_AUTO || !s->ok)
                continue;
            int bi;
            const double best = bench_best_fixed(p, &bi);
            char bl[64];
            if (bi < 0)
                snprintf(bl, sizeof bl, "none");
            else
                snprintf(bl, sizeof bl, "%s K%d G%d", bench_spec_label(&p->spec[bi]), p->spec[bi].budget,
                         p->spec[bi].gamma);
            fprintf(f, "%8d %5d %6.0f%% %5.1f %8.3fx %8.3fx %-22s %8.3fx %8.3f\n", p->L, p->B,
                    100 * s->auto_plain_frac, s->auto_mean_gamma, s->speedup, s->auto_predicted, bl, best,
                    s->speedup / best);
        }
    }
}

int bench_print_json(FILE *f, const bench_opts *o, const bench_result *r) {
    const seer_model_info *in = &r->info;
    json_t *root = json_object(), *pts = json_array();
    if (!root || !pts)
        return 1;
    json_object_set_new(root, "date", json_string(r->date));
    json_object_set_new(root, "model", json_pack(
        "{s:s, s:b, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:s, s:s, s:I, s:I}",
        "name", in->name, "synthetic_weights", o->synthetic != NULL, "arch", in->arch,
        "dim", in->dim, "n_layers", in->n_layers, "n_heads", in->n_heads,
        "n_kv_heads", in->n_kv_heads, "head_dim", in->head_dim, "ffn_dim", in->ffn_dim,
        "n_vocab", in->n_vocab, "n_params", (json_int_t)in->n_params,
        "weight_dtype", r->fp.n_weight_types ? r->fp.weight_types[0].name : dtype_name(r->fp.weight_elem_bytes),
        "kv_dtype", r->kv_type != SEER_KV_FULL ? seer_kv_type_name(r->kv_type) : dtype_name(r->fp.kv_elem_bytes),
        "weight_bytes", (json_int_t)r->fp.weight_bytes,
        "kv_bytes_per_token", (json_int_t)r->fp.kv_bytes_per_token));
    json_object_set_new(root, "kv_capacity_tokens", json_integer((json_int_t)r->kv_capacity));
    json_object_set_new(json_object_get(root, "model"), "window", json_pack("{s:i, s:i}", "layers",
                        r->fp.windowed_layers, "size", r->fp.window));
    /* W as the backend stores it, by dtype (what the floor counts), and the file's type. */
    json_t *model = json_object_get(root, "model"), *wt = json_array();
    for (int i = 0; i < r->fp.n_weight_types; i++)
        json_array_append_new(wt, json_pack("{s:s, s:I, s:f}", "dtype", r->fp.weight_types[i].name,
            "bytes", (json_int_t)r->fp.weight_types[i].bytes, "share",
            r->fp.weight_bytes ? (double)r->fp.weight_types[i].bytes / r->fp.weight_bytes : 0.0));
    json_object_set_new(model, "weight_types", wt);
    json_object_set_new(model, "file_type", json_string(r->fp.file_type));
    json_object_set_new(model, "weight_elems", json_integer((json_int_t)r->fp.weight_elems));
    json_object_set_new(root, "backend", json_string(in->backend));
    json_object_set_new(root, "bandwidth_bytes_per_s", json_real(r->bandwidth));
    if (r->info.host_weight_bytes)
        json_object_set_new(root, "host_weights", json_pack("{s:i, s:i, s:I, s:f}", "layers_resident",
            r->info.n_layers_resident, "layers", r->info.n_layers, "bytes",
            (json_int_t)r->info.host_weight_bytes, "h2d_bytes_per_s", r->h2d_bandwidth));
    json_object_set_new(root, "ranks", json_integer(r->ranks));
    json_object_set_new(root, "settings", json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:s}", "steps", o->steps,
        "warmup", o->warmup, "prefill_reps", o->prefill_reps, "prefill_chunk", o->prefill_chunk, "page_size", o->page_size, "seed", (json_int_t)o->seed,
        "kv", "synthetic fill (random K/V, not computed)"));
    /* Prefill runs, each with the peer's of the same size; the peer's others in "peer". */
    json_t *pa = json_array();
    for (int i = 0; i < r->n_prefill; i++) {
        const bench_prefill *p = &r->prefill[i];
        json_t *e = p->ok ? json_pack("{s:i, s:f, s:f, s:f}", "tokens", p->tokens, "ms", p->ms,
                                      "tok_per_s", p->tok_s, "tflop_per_s", p->tflops)
                          : json_pack("{s:i, s:s}", "tokens", p->tokens, "error", p->err);
        if (p->peer_has && p->peer_ok) {
            json_t *pe = json_pack("{s:f}", "tok_per_s", p->peer_tok_s);
            if (p->ok) /* seer's tok/s over the peer's */
                json_object_set_new(pe, "speedup", json_real(p->tok_s / p->peer_tok_s));
            json_object_set_new(e, "peer", pe);
        } else if (p->peer_has) {
            json_object_set_new(e, "peer", json_pack("{s:s}", "error", p->peer_err));
        }
        json_array_append_new(pa, e);
    }
    if (r->n_prefill)
        json_object_set_new(root, "prefill", pa);
    else
        json_decref(pa);
    if (r->n_resume)
        json_object_set_new(root, "resume", bench_resume_json(r));
    if (r->has_peer) {
        json_t *pe = json_pack("{s:s, s:s, s:s}", "label", r->peer_label, "version", r->peer_version,
                               "description", r->peer_desc);
        json_t *only = json_array();
        for (int i = 0; i < r->n_peer_only; i++) {
            const bench_peer_prefill *q = &r->peer_only[i];
            json_array_append_new(only, q->ok ? json_pack("{s:i, s:i, s:f}", "tokens", q->tokens,
                                                          "batch", q->B, "tok_per_s", q->tok_s)
                                              : json_pack("{s:i, s:i, s:s}", "tokens", q->tokens,
                                                          "batch", q->B, "error", q->err));
        }
        json_object_set_new(pe, "prefill", only);
        json_object_set_new(root, "peer", pe);
    }
    for (int i = 0; i < r->n_pts; i++) {
        const bench_point *p = &r->pts[i];
        json_t *pt = json_pack("{s:i, s:i}", "ctx", p->L, "batch", p->B);
        if (p->peer_has && p->peer_ok) {
            json_t *pe = json_pack("{s:f, s:f}", "ms_per_step", p->peer_step_ms, "tok_per_s", p->peer_tok_s);
            if (p->ok) /* seer's tok/s over the peer's at this (L, B) */
                json_object_set_new(pe, "speedup", json_real(p->peer_step_ms / p->step_ms));
            json_object_set_new(pt, "peer", pe);
        } else if (p->peer_has) {
            json_object_set_new(pt, "peer", json_pack("{s:s}", "error", p->peer_err));
        }
        if (!p->ok) {
            json_object_set_new(pt, "error", json_string(p->err));
            json_array_append_new(pts, pt);
            continue;
        }
        json_object_set_new(pt, "plain", json_pack(
            "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "ms_per_step", p->step_ms,
            "min_ms", p->step_min_ms, "max_ms", p->step_max_ms, "tok_per_s", p->tok_s,
            "bytes_per_step", p->bytes, "floor_ms", p->floor_ms, "floor_tok_per_s", p->floor_tok_s,
            "fraction_of_floor", p->fraction, "ms_per_token", p->step_ms / p->B,
            "logits_finite", p->finite));
        if (p->pcie_floor_ms > 0)
            json_object_set_new(json_object_get(pt, "plain"), "pcie_floor_ms", json_real(p->pcie_floor_ms));
        json_t *sa = json_array();
        for (int k = 0; k < p->n_spec; k++) {
            const bench_spec *s = &p->spec[k];
            char label[512];
            if (o->trace_path)
                snprintf(label, sizeof label,
                         "REPLAYED ACCEPTANCE: each drafter kind accepts as recorded in %s (other kinds at "
                         "%.2f); not lossless; timing only", o->trace_path, o->alpha);
            else
                snprintf(label, sizeof label,
                         "SYNTHETIC ACCEPTANCE: each draft token accepted independently with probability %.2f; "
                         "not lossless; timing only", o->alpha);
            const int gm = s->gamma > 0 ? s->gamma : 1; /* auto that never drafted: G 0 */
            json_t *e = json_pack("{s:s, s:i, s:i, s:i, s:f, s:s, s:f, s:f}", "kind",
                                  seer_spec_kind_name(s->kind), "tree_size", s->tree_size, "budget", s->budget, "gamma",
                                  s->gamma, "synthetic_acceptance_alpha", o->alpha,
                                  "acceptance_mode", label, "tokens_per_verification_expected",
                                  s->gamma > 0 ? bench_omega(gm, o->alpha) : 1.0, "acceptance_expected",
                                  s->gamma > 0 ? (bench_omega(gm, o->alpha) - 1) / gm : 0.0);
            if (!e) { /* a number JSON cannot hold: say so rather than drop the setting */
                json_decref(sa), json_decref(pt), json_decref(pts), json_decref(root);
                fprintf(stderr, "seer bench: cannot write %s's numbers as JSON\n", bench_spec_label(s));
                return 1;
            }
            if (s->best_first)
                json_object_set_new(e, "best_first", json_integer(s->best_first));
            if (!s->ok) {
                json_object_set_new(e, "error", json_string(s->err));
            } else {
                json_t *v = json_pack(
                    "{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
                    "target_step_ms", p->step_ms, "draft_step_ms", s->draft_step_ms,
                    "verify_ms", s->verify_ms, "round_ms_synthetic", s->round_ms,
                    "acceptance_synthetic", s->acceptance,
                    "tokens_per_verification_synthetic", s->tok_per_verify,
                    "plain_gen_tok_per_s", s->gen_plain_tok_s,
                    "spec_tok_per_s_synthetic", s->spec_tok_s,
                    "speedup_measured_synthetic", s->speedup,
                    "speedup_projected_at_alpha", s->projected);
                json_object_set_new(v, "draft_floor_ms", json_real(draft_floor_ms(r, p, s)));
                json_object_set_new(v, "draft_weights",
                                    json_string(s->draft_weights ? r->fp.draft_weights : "none"));
                json_object_update(e, v);
                json_decref(v);
                if (o->trace_path)
                    json_object_set_new(e, "acceptance_replayed_from", json_string(o->trace_path));
                if (s->kind == SEER_SPEC_AUTO) {
                    int bi;
                    const double best = bench_best_fixed(p, &bi);
                    json_t *a = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "plain_fraction", s->auto_plain_frac,
                                          "mean_gamma", s->auto_mean_gamma, "predicted_speedup",
                                          s->auto_predicted, "calibration_s", s->calibrate_s,
                                          "best_fixed_speedup", best, "auto_over_best_fixed", s->speedup / best);
                    json_object_set_new(a, "best_fixed", bi < 0 ? json_string("none")
                                                                 : json_pack("{s:s, s:i, s:i}", "kind",
                                                                             bench_spec_label(&p->spec[bi]),
                                                                             "budget", p->spec[bi].budget,
                                                                             "gamma", p->spec[bi].gamma));
                    json_object_set_new(e, "auto", a);
                }
            }
            json_array_append_new(sa, e);
        }
        json_object_set_new(pt, "spec", sa);
        json_array_append_new(pts, pt);
    }
    json_object_set_new(root, "points", pts);
    char *js = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!js)
        return 1;
    fprintf(f, "%s\n", js);
    free(js);
    return 0;
}

/* ---- reading results back (plots of a run made elsewhere) -------------------------------- */

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

int bench_load_json(const char *path, bench_opts *o, bench_result *r) {
    static char backend[32], model[160];
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "seer bench: %s:%d: %s\n", path, err.line, err.text);
        return 1;
    }
    json_t *m = json_object_get(root, "model"), *pts = json_object_get(root, "points");
    if (!json_is_object(m) || !json_is_array(pts)) {
        fprintf(stderr, "seer bench: %s is not the JSON of seer bench\n", path);
        json_decref(root);
        return 1;
    }
    const char *name = json_string_value(json_object_get(m, "name"));
    const char *be = json_string_value(json_object_get(root, "backend"));
    const char *date = json_string_value(json_object_get(root, "date"));
    snprintf(r->info.name, sizeof r->info.name, "%s", name ? name : "?");
    snprintf(backend, sizeof backend, "%s", be ? be : "?");
    r->info.backend = backend;
    snprintf(r->date, sizeof r->date, "%s", date ? date : "?");
    snprintf(model, sizeof model, "%s", path);
    if (json_is_true(json_object_get(m, "synthetic_weights")))
        o->synthetic = r->info.name;
    else
        o->model_path = model;
    r->bandwidth = num(root, "bandwidth_bytes_per_s");
    r->ranks = json_is_integer(json_object_get(root, "ranks")) ? (int)json_integer_value(json_object_get(root, "ranks")) : 1;
    /* The dimensions, so that --replot --peer can check the peer ran the same shape. */
    r->info.dim = (int)num(m, "dim");
    r->info.n_layers = (int)num(m, "n_layers");
    r->info.n_heads = (int)num(m, "n_heads");
    r->info.n_kv_heads = (int)num(m, "n_kv_heads");
    r->info.ffn_dim = (int)num(m, "ffn_dim");
    r->info.n_vocab = (int)num(m, "n_vocab");
    json_t *peer = json_object_get(root, "peer");
    if (json_is_object(peer)) {
        const char *pl = json_string_value(json_object_get(peer, "label"));
        const char *pd = json_string_value(json_object_get(peer, "description"));
        const char *pv = json_string_value(json_object_get(peer, "version"));
        r->has_peer = true;
        snprintf(r->peer_label, sizeof r->peer_label, "%s", pl ? pl : "peer");
        snprintf(r->peer_desc, sizeof r->peer_desc, "%s", pd ? pd : "");
        snprintf(r->peer_version, sizeof r->peer_version, "%s", pv ? pv : "");
    }
    json_t *pf = json_object_get(root, "prefill");
    for (size_t i = 0; i < json_array_size(pf) && r->n_prefill < BENCH_MAX_LIST; i++) {
        json_t *e = json_array_get(pf, i), *pe = json_object_get(e, "peer");
        bench_prefill *q = &r->prefill[r->n_prefill++];
        q->tokens = (int)num(e, "tokens");
        q->tok_s = num(e, "tok_per_s");
        q->ok = q->tok_s > 0;
        if (json_is_object(pe)) {
            const char *perr = json_string_value(json_object_get(pe, "error"));
            q->peer_has = true;
            q->peer_tok_s = num(pe, "tok_per_s");
            q->peer_ok = !perr && q->peer_tok_s > 0;
            snprintf(q->peer_err, sizeof q->peer_err, "%s", perr ? perr : "");
        }
    }
    const size_t n = json_array_size(pts);
    r->pts = calloc(n ? n : 1, sizeof *r->pts);
    if (!r->pts) {
        json_decref(root);
        return 1;
    }
    o->n_batch = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(pts, i), *pl = json_object_get(p, "plain");
        json_t *sp = json_object_get(p, "spec");
        bench_point *pt = &r->pts[r->n_pts++];
        pt->L = (int)num(p, "ctx");
        pt->B = (int)num(p, "batch");
        pt->ok = json_is_object(pl);
        pt->tok_s = pt->ok ? num(pl, "tok_per_s") : 0;
        pt->floor_tok_s = pt->ok ? num(pl, "floor_tok_per_s") : 0;
        pt->step_ms = pt->ok ? num(pl, "ms_per_step") : 0;
        json_t *pe = json_object_get(p, "peer");
        if (json_is_object(pe)) {
            const char *perr = json_string_value(json_object_get(pe, "error"));
            pt->peer_has = true;
            pt->peer_ok = !perr;
            snprintf(pt->peer_err, sizeof pt->peer_err, "%s", perr ? perr : "");
            pt->peer_step_ms = num(pe, "ms_per_step");
            pt->peer_tok_s = num(pe, "tok_per_s");
        }
        bool seen = false;
        for (int b = 0; b < o->n_batch; b++)
            seen |= o->batch[b] == pt->B;
        if (!seen && o->n_batch < BENCH_MAX_LIST)
            o->batch[o->n_batch++] = pt->B;
        const size_t ns = json_array_size(sp);
        pt->spec = ns ? calloc(ns, sizeof *pt->spec) : NULL;
        for (size_t k = 0; k < ns && pt->spec; k++) {
            json_t *e = json_array_get(sp, k);
            bench_spec *bs = &pt->spec[pt->n_spec++];
            const char *kind = json_string_value(json_object_get(e, "kind"));
            if (!kind || seer_spec_kind_parse(kind, &bs->kind) != SEER_OK)
                bs->kind = SEER_SPEC_NONE;
            bs->budget = (int)num(e, "budget");
            bs->gamma = (int)num(e, "gamma");
            bs->tree_size = (int)num(e, "tree_size"); /* 0 where an older run has none */
            bs->best_first = (int)num(e, "best_first");
            const char *dw = json_string_value(json_object_get(e, "draft_weights"));
            bs->draft_weights = dw && strcmp(dw, "none"); /* labelled /dw as when measured */
            bs->ok = !json_object_get(e, "error");
            bs->speedup = num(e, "speedup_measured_synthetic");
            bs->projected = num(e, "speedup_projected_at_alpha");
            o->alpha = num(e, "synthetic_acceptance_alpha");
        }
    }
    json_decref(root);
    return 0;
}

/* ---- plot ---------------------------------------------------------------------------- */

static bool have_gnuplot(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

int bench_plot(const bench_opts *o, const bench_result *r) {
    if (!have_gnuplot()) {
        fprintf(stderr, "seer bench: --plot: gnuplot is not installed, so no plot was written "
                        "(the table and --json have the numbers)\n");
        return 0;
    }
    char dir[] = "/tmp/seer-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "seer bench: --plot: cannot make a temporary folder\n");
        return 1;
    }
    char dat[64], gp[64];
    snprintf(dat, sizeof dat, "%s/points.dat", dir);
    snprintf(gp, sizeof gp, "%s/plot.gp", dir);
    FILE *d = fopen(dat, "w"), *g = fopen(gp, "w");
    if (!d || !g) {
        if (d)
            fclose(d);
        if (g)
            fclose(g);
        fprintf(stderr, "seer bench: --plot: cannot write in %s\n", dir);
        return 1;
    }
    /* One gnuplot data block per series (blank-line separated, addressed by index): per
     * batch size measured and floor tok/s; per (B, spec setting) measured and projected
     * speedup. */
    enum { MAX_BLOCKS = 3 * BENCH_MAX_LIST * (1 + BENCH_MAX_LIST) + BENCH_MAX_LIST + 1 };
    int n_blocks = 0;
    char titles[MAX_BLOCKS][96];
    int kinds[MAX_BLOCKS];           /* 0 tok/s, 1 speedup, 2 seer over the peer */
    int colors[MAX_BLOCKS];          /* one per (B, setting): measured and floor/projected alike */
    const char *styles[MAX_BLOCKS];
    char peer[64];                   /* the peer's label as a gnuplot title may hold it */
    snprintf(peer, sizeof peer, "%s", r->peer_label);
    for (char *c = peer; *c; c++)
        if (*c == '\'' || *c == '\\')
            *c = '_';
    const int n_set = r->n_pts ? r->pts[0].n_spec : 0;
    for (int bi = 0, pair = 0; bi < o->n_batch; bi++) {
        for (int set = -1; set < n_set && n_blocks + 3 <= MAX_BLOCKS; set++, pair++) {
            /* col 0 measured, 1 floor or projected, 2 the peer's tok/s (plain, with --peer) */
            for (int col = 0; col < (set < 0 && r->has_peer ? 3 : 2); col++) {
                int rows = 0;
                for (int i = 0; i < r->n_pts; i++) {
                    const bench_point *p = &r->pts[i];
                    if (p->B != o->batch[bi])
                        continue;
                    if (col == 2 ? !(p->peer_has && p->peer_ok) : !p->ok || (set >= 0 && !p->spec[set].ok))
                        continue;
                    double y = col == 2 ? p->peer_tok_s
                             : set < 0 ? (col ? p->floor_tok_s : p->tok_s)
                                       : (col ? p->spec[set].projected : p->spec[set].speedup);
                    fprintf(d, "%d %g\n", p->L, y);
                    rows++;
                }
                if (!rows)
                    fprintf(d, "nan nan\n");
                fprintf(d, "\n\n");
                if (set < 0)
                    snprintf(titles[n_blocks], sizeof titles[0], "B=%d %s", o->batch[bi],
                             col == 2 ? peer : col ? "floor" : r->has_peer ? "seer" : "measured");
                else
                    snprintf(titles[n_blocks], sizeof titles[0], "B=%d %s K=%d G=%d %s", o->batch[bi],
                             bench_spec_label(&r->pts[0].spec[set]), r->pts[0].spec[set].budget,
                             r->pts[0].spec[set].gamma, col ? "projected" : "measured");
                kinds[n_blocks] = set < 0 ? 0 : 1;
                colors[n_blocks] = pair + 1;
                styles[n_blocks++] = col == 2 ? "lw 2 dt 4 pt 6" : col ? "dt 2" : "lw 2";
            }
        }
    }
    /* With a peer: seer's speed over the peer's, decode per batch size against L and
     * prefill against the prompt size P, on a third panel. */
    int n_ratio = 0;
    for (int bi = 0; r->has_peer && bi < o->n_batch && n_blocks < MAX_BLOCKS; bi++) {
        int rows = 0;
        for (int i = 0; i < r->n_pts; i++) {
            const bench_point *p = &r->pts[i];
            if (p->B == o->batch[bi] && p->ok && p->peer_has && p->peer_ok) {
                fprintf(d, "%d %g\n", p->L, p->peer_step_ms / p->step_ms);
                rows++;
            }
        }
        if (!rows)
            continue;
        fprintf(d, "\n\n");
        snprintf(titles[n_blocks], sizeof titles[0], "B=%d decode", o->batch[bi]);
        kinds[n_blocks] = 2;
        colors[n_blocks] = bi + 1;
        styles[n_blocks++] = "lw 2";
        n_ratio++;
    }
    int rows = 0;
    for (int i = 0; r->has_peer && i < r->n_prefill && n_blocks < MAX_BLOCKS; i++) {
        const bench_prefill *p = &r->prefill[i];
        if (p->ok && p->peer_has && p->peer_ok) {
            fprintf(d, "%d %g\n", p->tokens, p->tok_s / p->peer_tok_s);
            rows++;
        }
    }
    if (rows) {
        fprintf(d, "\n\n");
        snprintf(titles[n_blocks], sizeof titles[0], "prefill (x = prompt tokens P)");
        kinds[n_blocks] = 2;
        colors[n_blocks] = 8;
        styles[n_blocks++] = "lw 2 dt 2 pt 7";
        n_ratio++;
    }
    fclose(d);
    const seer_model_info *in = &r->info;
    fprintf(g, "set terminal pngcairo size %d,560 noenhanced\n", n_ratio ? 2100 : 1400);
    fprintf(g, "set output '%s'\n", o->plot);
    fprintf(g, "set multiplot layout 1,%d title '%s on %s (%s), BW %.2f TB/s, %s'\n", n_ratio ? 3 : 2,
            in->name, in->backend, r->date, r->bandwidth * 1e-12,
            o->synthetic ? "synthetic weights" : "GGUF weights");
    fprintf(g, "set logscale x 2\nset grid\nset key outside bottom center font ',9'\n"
               "set xlabel 'context length L (tokens)'\n");
    fprintf(g, "set ylabel 'decode tok/s'\nset title 'plain decode vs floor%s%s'\nset yrange [0:*]\nplot ",
            r->has_peer ? " and " : "", r->has_peer ? peer : "");
    for (int i = 0, first = 1; i < n_blocks; i++)
        if (kinds[i] == 0) {
            fprintf(g, "%s'%s' index %d with linespoints %s lc %d title '%s'", first ? "" : ", ",
                    dat, i, styles[i], colors[i], titles[i]);
            first = 0;
        }
    fprintf(g, "\nset ylabel 'speedup over plain'\nset title 'speculative, SYNTHETIC ACCEPTANCE alpha=%.2f'\n"
               "set yrange [0:1.2<*]\n", o->alpha);
    int n_sp = 0;
    for (int i = 0; i < n_blocks; i++)
        n_sp += kinds[i] == 1;
    if (n_sp) {
        fprintf(g, "plot 1 dt 3 lc 'black' notitle");
        for (int i = 0; i < n_blocks; i++)
            if (kinds[i] == 1)
                fprintf(g, ", '%s' index %d with linespoints %s lc %d title '%s'", dat, i, styles[i],
                        colors[i], titles[i]);
        fprintf(g, "\n");
    } else {
        fprintf(g, "set label 1 'no speculative runs (--spec)' at graph 0.3, graph 0.5\nplot [1:2] [0:1] NaN notitle\n");
    }
    if (n_ratio) {
        fprintf(g, "set ylabel 'seer speed / %s speed'\nset title 'seer over %s (> 1: seer faster)'\n"
                   "set xlabel 'L (decode) or P (prefill), tokens'\nset yrange [0:*]\n"
                   "plot 1 dt 3 lc 'black' notitle", peer, peer);
        for (int i = 0; i < n_blocks; i++)
            if (kinds[i] == 2)
                fprintf(g, ", '%s' index %d with linespoints %s lc %d title '%s'", dat, i, styles[i],
                        colors[i], titles[i]);
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    fclose(g);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
    int st = system(cmd);
    remove(dat);
    remove(gp);
    rmdir(dir);
    if (st != 0 || access(o->plot, F_OK) != 0) {
        fprintf(stderr, "seer bench: --plot: gnuplot failed (exit %d); no plot written\n",
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 1;
    }
    fprintf(stderr, "seer bench: plot written to %s\n", o->plot);
    return 0;
}
