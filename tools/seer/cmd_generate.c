/* cmd_generate.c: `seer generate`: prompt in, streamed text out, stats to stderr. */
#include "cli.h"
#include "cli_cmds.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A chat prompt (mark given) has special tokens where its template put them; a plain one
 * has none. */
static seer_status tokenize_prompt(const seer_model *m, const char *p, const uint8_t *mark, size_t len,
                                   bool bos, int32_t *out, int cap, int *n) {
    return mark ? seer_tokenize_marked(m, p, mark, len, bos, out, cap, n)
                : seer_tokenize(m, p, len, bos, false, out, cap, n);
}

static int parse(int argc, char **argv, gen_opts *o) {
    const int rc = cli_parse(cli_table, CLI_GENERATE, "generate", argc, argv, &o->c, o);
    if (rc >= 0)
        return rc;
    o->c.chat |= o->c.chat_template || o->c.system || o->c.no_think; /* they imply --chat */
    if (!cli_tree_apply(&o->c) || !cli_spec_weights("generate", o->c.spec_weights, &o->c.spec))
        return 2;
    if (!cli_draft_model_ok("generate", o->c.spec.kind, o->c.draft_model))
        return 2;
    if (optind < argc) {
        fprintf(stderr, "seer generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->c.model) {
        fprintf(stderr, "seer generate: -m MODEL is required\n");
        return 2;
    }
    if (!o->prompt == !o->prompt_file) {
        fprintf(stderr, "seer generate: give exactly one of -p PROMPT or -f FILE\n");
        return 2;
    }
    if (!cli_cost_file_ok("generate", o->c.cost_file))
        return 2;
    return -1;
}

/* What one generation produced, for its JSON object and its statistics lines. */
typedef struct {
    const int32_t *ids, *gen_ids;
    int n_prompt, n_gen;
    const char *text;
    size_t text_len;
    double prefill_s, decode_s, pf_tps, dec_tps, acc_rate, per_round;
    seer_spec_stats st;
} gen_result;

/* The --json object (NULL after saying why: the text is not valid UTF-8). */
static json_t *gen_json(const gen_opts *o, seer_context *ctx, seer_gen *gen, const gen_result *r) {
    json_t *pids = json_array(), *gids = json_array();
    for (int i = 0; i < r->n_prompt; i++)
        json_array_append_new(pids, json_integer(r->ids[i]));
    for (int i = 0; i < r->n_gen; i++)
        json_array_append_new(gids, json_integer(r->gen_ids[i]));
    seer_kv_memory km;
    seer_context_kv_memory(ctx, &km);
    json_t *out = json_pack("{s:o, s:o, s:s%, s:{s:i, s:i, s:f, s:f, s:f, s:f}, s:{s:s, s:i, s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f}, "
                            "s:{s:I, s:I, s:i, s:I, s:I}}",
                            "prompt_ids", pids, "generated_ids", gids, "text", r->text, r->text_len,
                            "stats", "prompt_tokens", r->n_prompt, "generated_tokens", r->n_gen,
                            "prefill_tok_s", r->pf_tps, "decode_tok_s", r->dec_tps, "prefill_s", r->prefill_s,
                            "decode_s", r->decode_s,
                            "spec", "kind", seer_spec_kind_name(o->c.spec.kind), "gamma", o->c.spec.gamma,
                            "budget", (int)cli_spec_num(&o->c.spec, "budget"), "rounds", (json_int_t)r->st.rounds,
                            "drafted", (json_int_t)r->st.drafted, "accepted", (json_int_t)r->st.accepted,
                            "acceptance", r->acc_rate, "tokens_per_round", r->per_round,
                            "draft_s", r->st.t_draft_s, "verify_s", r->st.t_verify_s,
                            "kv", "bytes_committed", (json_int_t)km.bytes_committed,
                            "bytes_reserved", (json_int_t)km.bytes_reserved, "quant_bits", km.quant_bits,
                            "quant_bytes_committed", (json_int_t)km.quant_bytes_committed,
                            "quant_bytes_reserved", (json_int_t)km.quant_bytes_reserved);
    json_t *jspec = out ? json_object_get(out, "spec") : NULL;
    if (jspec && o->c.spec.kind == SEER_SPEC_AUTO) {
        seer_spec_auto_stats as;
        seer_gen_auto_stats(gen, &as);
        json_object_set_new(jspec, "auto", cli_auto_json(&as));
    }
    if (jspec && o->c.spec.tree_size != 0) {
        json_object_set_new(jspec, "tree_size", json_integer(o->c.spec.tree_size));
        json_object_set_new(jspec, "tree_depth", json_integer(o->c.spec.tree_depth));
    }
    if (jspec) /* the type of the weights the draft steps multiply by, or none */
        json_object_set_new(jspec, "draft_weights",
                            json_string(o->c.spec.draft_weights ? o->c.spec_weights : "none"));
    if (jspec && o->c.spec.kind == SEER_SPEC_HIERARCHY) {
        json_object_set_new(jspec, "hier_base", json_string(seer_spec_kind_name((seer_spec_kind)(int)cli_spec_num(&o->c.spec, "hier_base"))));
        json_object_set_new(jspec, "hier_gamma", json_integer((int)cli_spec_num(&o->c.spec, "hier_gamma")));
    }
    if (!out)
        fprintf(stderr, "seer generate: generated text is not valid UTF-8\n");
    return out;
}

/* The statistics lines on stderr. */
static void print_stats(const gen_opts *o, seer_context *ctx, seer_gen *gen, const seer_model_info *info, int n_ctx,
                        const gen_result *r) {
    fprintf(stderr, "seer: prompt %d tokens, prefill %.1f tok/s; generated %d tokens, decode %.1f tok/s (%s)\n",
            r->n_prompt, r->pf_tps, r->n_gen, r->dec_tps, info->backend);
    seer_kv_memory km;
    seer_context_kv_memory(ctx, &km);
    fprintf(stderr, "seer: KV cache %.2f MiB committed of %.2f MiB reserved (context %d tokens)\n",
            km.bytes_committed / 1048576.0, km.bytes_reserved / 1048576.0, n_ctx);
    char tree[96] = "";
    if (o->c.spec.tree_size < 0)
        snprintf(tree, sizeof tree, " tree of automatic size, depth %d", o->c.spec.tree_depth);
    else if (o->c.spec.tree_size > 0)
        snprintf(tree, sizeof tree, " tree of %d nodes, depth %d%s", o->c.spec.tree_size, o->c.spec.tree_depth,
                 o->c.spec.tree_replan ? ", shape re-planned online" : "");
    else if (o->c.spec.kind == SEER_SPEC_HIERARCHY) /* draft: the middle level's time, bottom's within */
        snprintf(tree, sizeof tree, " (draft model -> %s view, %d per middle call)",
                 seer_spec_kind_name((seer_spec_kind)(int)cli_spec_num(&o->c.spec, "hier_base")),
                 (int)cli_spec_num(&o->c.spec, "hier_gamma"));
    if (km.quant_bits)
        fprintf(stderr, "seer: of which the %d-bit KV copy: %.2f MiB committed of %.2f MiB reserved\n",
                km.quant_bits, km.quant_bytes_committed / 1048576.0, km.quant_bytes_reserved / 1048576.0);
    if (o->c.spec.kind == SEER_SPEC_AUTO) {
        seer_spec_auto_stats as;
        seer_gen_auto_stats(gen, &as);
        cli_auto_print("generate", &as);
    }
    if (o->c.spec.kind != SEER_SPEC_NONE)
        fprintf(stderr, "seer: spec %s%s: drafted %lld, accepted %lld (%.1f%%), %.2f tokens per verification, "
                        "draft %.3f s, verify %.3f s\n",
                seer_spec_kind_name(o->c.spec.kind), tree, (long long)r->st.drafted, (long long)r->st.accepted,
                100 * r->acc_rate, r->per_round, r->st.t_draft_s, r->st.t_verify_s);
}

/* The prompt as one user message (after an optional system message) in the model's chat
 * template: only the template's own special tokens are parsed as such, never text the prompt
 * spells (*mark says which bytes are the template's). NULL after an error message. */
static const char *chat_prompt(seer_model *model, const gen_opts *o, const char *prompt, char **text,
                               uint8_t **mark) {
    seer_chat_template tmpl;
    seer_status s;
    if ((s = seer_chat_template_init(model, o->c.chat_template, &tmpl)) != SEER_OK) {
        cli_error("chat template", s);
        return NULL;
    }
    tmpl.no_think = o->c.no_think;
    seer_chat_message msgs[2];
    int nm = 0;
    if (o->c.system)
        msgs[nm++] = (seer_chat_message){"system", o->c.system};
    msgs[nm++] = (seer_chat_message){"user", prompt};
    size_t clen = 0;
    seer_chat_render(&tmpl, msgs, nm, true, NULL, 0, &clen);
    *text = malloc(clen + 1);
    *mark = malloc(clen + 1);
    if (!*text || !*mark ||
        (s = seer_chat_render_marked(&tmpl, msgs, nm, true, *text, *mark, clen + 1, &clen)) != SEER_OK) {
        cli_error("chat template", *text && *mark ? s : SEER_ERR_OOM);
        return NULL;
    }
    return *text;
}

/* The prompt's token ids (malloc'd; *n of them), refused when empty or as long as the
 * context. NULL after an error message. */
static int32_t *prompt_ids(seer_model *model, const gen_opts *o, const char *prompt, const uint8_t *mark, int n_ctx,
                           int *n) {
    const size_t plen = strlen(prompt);
    int n_prompt = 0;
    seer_status s = tokenize_prompt(model, prompt, mark, plen, !o->no_bos, NULL, 0, &n_prompt);
    if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
        cli_error("tokenizing prompt", s);
        return NULL;
    }
    int32_t *ids = malloc(sizeof *ids * (n_prompt + 1));
    if (!ids) {
        fprintf(stderr, "seer generate: out of memory\n");
        return NULL;
    }
    if ((s = tokenize_prompt(model, prompt, mark, plen, !o->no_bos, ids, n_prompt, &n_prompt)) != SEER_OK) {
        cli_error("tokenizing prompt", s);
    } else if (n_prompt == 0) {
        fprintf(stderr, "seer generate: the prompt is empty (and no BOS token was added)\n");
    } else if (n_prompt >= n_ctx) {
        fprintf(stderr, "seer generate: the prompt has %d tokens; the context holds %d (use --ctx)\n", n_prompt,
                n_ctx);
    } else {
        *n = n_prompt;
        return ids;
    }
    free(ids);
    return NULL;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {0};
    cli_common_init(&o.c);
    o.c.spec.kind = SEER_SPEC_AUTO; /* plain unless a calibrated cost model predicts a gain */
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;

    if (!cli_stdout_open("generate"))
        return 1;
    /* opened now, to fail before the model loads; read once the context bounds its size */
    FILE *prompt_f = o.prompt_file ? cli_prompt_open("generate", o.prompt_file) : NULL;
    if (o.prompt_file && !prompt_f)
        return 1;
    char *file_text = NULL;
    const char *prompt = o.prompt;

    seer_model *model = NULL, *draft = NULL;
    seer_context *ctx = NULL;
    seer_gen *gen = NULL;
    seer_spec_cost *cost = NULL;
    seer_accept_trace *trace = NULL;
    seer_detok *dt = NULL;
    int32_t *ids = NULL;
    json_t *out = NULL;
    cli_text text = {0};
    char *chat_text = NULL;
    uint8_t *chat_mark = NULL;
    rc = 1;
    seer_status s;

    seer_model_params mp = seer_model_default_params();
    mp.backend = o.c.backend;
    mp.weights = o.c.weights;
    mp.n_threads = (int)o.c.threads;
    mp.tp = (int)o.c.tp;
    if (!cli_tp_setup("generate", &o.c, &mp))
        goto done;
    mp.gpu_layers = (int)o.c.gpu_layers;
    mp.draft_weights = o.c.spec_weights;
    if ((s = seer_model_load(o.c.model, mp, &model)) != SEER_OK) {
        cli_error("loading model", s);
        goto done;
    }
    mp.draft_weights = NULL;
    mp.tp_addr = NULL; /* a draft model's ranks are threads of this process */
    if (o.c.draft_model && (s = seer_model_load(o.c.draft_model, mp, &draft)) != SEER_OK) {
        cli_error("loading draft model", s);
        goto done;
    }
    o.c.spec.draft_model = draft;
    seer_model_info info;
    seer_model_get_info(model, &info);
    if (!cli_ctx_ok(o.c.ctx, info.ctx_train, o.c.ctx_beyond))
        goto done;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = (int)o.c.ctx; /* 0: the trained context, as memory allows */
    if (o.c.batch)
        cp.n_batch_max = (int)o.c.batch;
    cp.kv_type = o.c.kv_type;
    if (cli_spec_quantkv(&o.c.spec))
        cp.kv_quant_bits = o.c.kv_bits ? (int)o.c.kv_bits : 4;
    if ((s = seer_context_init(model, cp, &ctx)) != SEER_OK) {
        cli_error("creating context", s);
        goto done;
    }
    const int n_ctx = seer_context_n_ctx(ctx);
    /* A prompt that cannot fit is refused before it is read whole or tokenized. */
    const size_t prompt_max = cli_prompt_max_bytes(model, n_ctx);
    if (prompt_f && !(prompt = file_text = cli_prompt_read("generate", prompt_f, o.prompt_file, prompt_max, n_ctx)))
        goto done;
    if (!prompt_f && !cli_prompt_fits("generate", "the prompt", strlen(prompt), prompt_max, n_ctx))
        goto done;
    if (o.c.chat && !(prompt = chat_prompt(model, &o, prompt, &chat_text, &chat_mark)))
        goto done;
    int n_prompt = 0;
    if (!(ids = prompt_ids(model, &o, prompt, chat_mark, n_ctx, &n_prompt)))
        goto done;
    if (o.c.spec.kind == SEER_SPEC_AUTO && o.c.n_predict != 0)
        o.c.spec.cost = cost = cli_auto_cost("generate", ctx, draft, o.c.cost_file);
    if ((s = seer_gen_init(ctx, o.c.spec, &gen)) != SEER_OK) {
        cli_error("speculation", s);
        goto done;
    }
    if (o.trace_file && ((s = seer_accept_trace_new(&trace)) != SEER_OK ||
                         (s = seer_gen_record_trace(gen, trace)) != SEER_OK)) {
        cli_error("acceptance trace", s);
        goto done;
    }
    if ((s = seer_detok_init(model, &dt)) != SEER_OK) {
        cli_error("detokenizer", s);
        goto done;
    }
    double t0 = cli_now_s();
    /* -n 0 asks for no token: nothing is generated (the prompt is only checked). */
    int h = -1;
    if (o.c.n_predict != 0 && (s = seer_gen_add(gen, ids, n_prompt, (int)o.c.n_predict, o.c.sp,
                                               o.ignore_eos, &h)) != SEER_OK) {
        cli_error("prefill", s);
        goto done;
    }
    double t1 = cli_now_s();
    int shown = 0, active = 1;
    const int32_t *gen_ids = NULL;
    while (h >= 0) {
        int n_gen = seer_gen_output(gen, h, &gen_ids);
        for (; shown < n_gen; shown++) {
            size_t at = text.n;
            int k = cli_detok_append(dt, gen_ids[shown], false, &text);
            if (k < 0)
                goto done;
            if (k > 0 && !o.json && !cli_out(text.s + at, (size_t)k, true)) {
                cli_stdout_done("generate"); /* the text is lost: stop, and say why */
                goto done;
            }
        }
        if (!active || seer_gen_finished(gen, h))
            break;
        if ((s = seer_gen_step(gen, &active)) != SEER_OK) {
            cli_error("decode", s);
            goto done;
        }
    }
    size_t at = text.n;
    int k = cli_detok_append(dt, 0, true, &text);
    if (k < 0)
        goto done;
    if (k > 0 && !o.json)
        cli_out(text.s + at, (size_t)k, false);
    double t2 = cli_now_s();
    int n_gen = h >= 0 ? seer_gen_output(gen, h, &gen_ids) : 0;
    seer_spec_stats st;
    seer_gen_stats(gen, &st);
    double pf_tps = h < 0 ? 0 : n_prompt / (t1 - t0 > 0 ? t1 - t0 : 1e-9);
    int n_steps = n_gen > 0 ? n_gen - 1 : 0; /* the first token comes from the prefill */
    double dec_tps = n_steps / (t2 - t1 > 0 ? t2 - t1 : 1e-9);
    double acc_rate = st.drafted ? (double)st.accepted / st.drafted : 0;
    double per_round = st.rounds ? (double)(st.emitted - 1) / st.rounds : 0;
    gen_result res = {.ids = ids, .n_prompt = n_prompt, .gen_ids = gen_ids, .n_gen = n_gen,
                      .text = text.s ? text.s : "", .text_len = text.n, .prefill_s = t1 - t0,
                      .decode_s = t2 - t1, .pf_tps = pf_tps, .dec_tps = dec_tps, .acc_rate = acc_rate,
                      .per_round = per_round, .st = st};
    if (o.json) {
        if (!(out = gen_json(&o, ctx, gen, &res)))
            goto done;
        char *js = json_dumps(out, JSON_COMPACT);
        if (!js) {
            fprintf(stderr, "seer generate: out of memory\n");
            goto done;
        }
        cli_out(js, strlen(js), false);
        free(js);
    }
    cli_out("\n", 1, false);
    if (!cli_stdout_done("generate"))
        goto done;
    print_stats(&o, ctx, gen, &info, n_ctx, &res);
    if (trace && (s = seer_accept_trace_save(trace, o.trace_file)) != SEER_OK) {
        cli_error("acceptance trace", s);
        goto done;
    }
    rc = 0;
done:
    json_decref(out);
    free(ids);
    free(text.s);
    free(file_text);
    if (prompt_f)
        fclose(prompt_f);
    free(chat_text);
    free(chat_mark);
    seer_detok_free(dt);
    seer_gen_free(gen);
    seer_accept_trace_free(trace);
    seer_spec_cost_free(cost);
    seer_context_free(ctx);
    seer_model_free(draft);
    cli_tp_reap(o.c.tp_pids, true); /* after the model's goodbye, or when it never came */
    seer_model_free(model);
    return rc;
}
