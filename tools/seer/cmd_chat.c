/*
 * cmd_chat.c: `seer chat`: a conversation on stdin/stdout, one user message per line.
 *
 * The KV cache is kept between turns: each turn renders the whole conversation with the
 * model's chat template and prefills only the text beyond what the cache already holds
 * (the previous prompt plus the reply as generated). When the template renders the reply
 * differently from how it was generated (Llama 3 trims it), the cache is rewound to the end
 * of the previous prompt and the reply is prefilled as the template writes it. Only the
 * template's own special tokens are parsed as such: a user who types "<|im_end|>" sends
 * text. A line that is not valid UTF-8 is refused with a message; a conversation that
 * outgrows the context loses its oldest turns (the system message stays) and is prefilled
 * again. /quit or end of input ends the program (status 0).
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: seer chat -m MODEL.gguf [options]\n"
            "One message per line on stdin; /quit or end of input (Ctrl-D) ends the chat. When\n"
            "the conversation outgrows the context, its oldest turns are dropped (the system\n"
            "message stays).\n"
            "      --chat-template NAME  chatml, llama3 or llama2 (default: from the model)\n"
            "      --system TEXT     a system message to start the conversation with\n"
            "  -n, --n-predict N     most tokens per reply (default: until the end of the turn)\n"
            "      --temp T          temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K         (default 40)\n"
            "      --top-p P         (default 0.95)\n"
            "      --min-p P         (default 0.05)\n"
            "      --repeat-penalty R  (default 1 = off)\n"
            "      --seed S          random seed (default 0)\n"
            "  -c, --ctx N           context length (default: the model's trained context, less\n"
            "                        when memory is short); the KV cache grows as it is used\n"
            "      --ctx-beyond-trained  allow --ctx past the trained context (with a warning)\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "      --backend B       cpu, cuda or auto (default auto)\n"
            "      --weights W       stored (default: quantised blocks as in the file), bf16 or f32\n");
}

typedef struct {
    const char *model, *tmpl, *system;
    long long n_predict, ctx, threads;
    seer_sampler_params sp;
    seer_backend_kind backend;
    bool ctx_beyond;
    seer_weights_kind weights;
} chat_opts;

static int parse(int argc, char **argv, chat_opts *o) {
    enum { O_BACKEND = 256, O_WEIGHTS, O_TMPL, O_SYS, O_CTXB };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"n-predict", required_argument, 0, 'n'},
        {"ctx", required_argument, 0, 'c'},       {"threads", required_argument, 0, 't'},
        {"temp", required_argument, 0, CLI_O_TEMP},   {"top-k", required_argument, 0, CLI_O_TOPK},
        {"top-p", required_argument, 0, CLI_O_TOPP},  {"min-p", required_argument, 0, CLI_O_MINP},
        {"repeat-penalty", required_argument, 0, CLI_O_REP},
        {"seed", required_argument, 0, CLI_O_SEED},   {"backend", required_argument, 0, O_BACKEND},
        {"weights", required_argument, 0, O_WEIGHTS},
        {"chat-template", required_argument, 0, O_TMPL},
        {"system", required_argument, 0, O_SYS},  {"help", no_argument, 0, 'h'},
        {"ctx-beyond-trained", no_argument, 0, O_CTXB},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'n': if (!cli_int("--n-predict", optarg, -1, 1 << 24, &o->n_predict)) return 2; break;
        case 'c': if (!cli_int("--ctx", optarg, 1, 1 << 24, &o->ctx)) return 2; break;
        case 't': if (!cli_int("--threads", optarg, 1, 1024, &o->threads)) return 2; break;
        case O_BACKEND: if (!cli_backend(optarg, &o->backend)) return 2; break;
        case O_WEIGHTS: if (!cli_weights(optarg, &o->weights)) return 2; break;
        case O_TMPL: o->tmpl = optarg; break;
        case O_SYS: o->system = optarg; break;
        case O_CTXB: o->ctx_beyond = true; break;
        case 'h': usage(stdout); return 0;
        default: {
            const int r = cli_sampler_opt(c, optarg, &o->sp);
            if (r < 0)
                return 2;
            if (r == 0) {
                usage(stderr);
                return 2;
            }
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "seer chat: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "seer chat: -m MODEL is required\n");
        return 2;
    }
    return -1;
}

/* A growable byte string. */
typedef struct {
    char *s;
    size_t n, cap;
} str;

static bool str_put(str *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            return false;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return true;
}

static bool starts_with(const char *s, size_t n, const str *prefix) {
    return prefix->n <= n && (prefix->n == 0 || memcmp(s, prefix->s, prefix->n) == 0);
}

typedef struct {
    seer_model *model;
    seer_context *ctx;
    seer_seq_id seq;
    int n_past, n_ctx, n_batch;
    float *logits; /* [V] of the last decoded token */
} chat_state;

/* Prefills ids after what the cache holds; leaves the last token's logits. */
static seer_status prefill(chat_state *c, const int32_t *ids, int n) {
    int32_t *pos = malloc(sizeof *pos * (size_t)c->n_batch);
    seer_seq_id *sq = malloc(sizeof *sq * (size_t)c->n_batch);
    uint8_t *want = calloc((size_t)c->n_batch, 1);
    seer_status s = pos && sq && want ? SEER_OK : SEER_ERR_OOM;
    for (int at = 0; s == SEER_OK && at < n; at += c->n_batch) {
        int k = n - at < c->n_batch ? n - at : c->n_batch;
        for (int i = 0; i < k; i++) {
            pos[i] = c->n_past + i;
            sq[i] = c->seq;
            want[i] = at + i == n - 1;
        }
        seer_batch b = {k, ids + at, sq, pos, want, NULL};
        s = seer_decode(c->ctx, &b, at + k == n ? c->logits : NULL);
        if (s == SEER_OK)
            c->n_past += k;
    }
    free(pos);
    free(sq);
    free(want);
    return s;
}

typedef struct {
    seer_chat_message *m;
    int n, cap;
} msg_list;

static bool msg_add(msg_list *l, const char *role, const char *content, size_t len) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        seer_chat_message *p = realloc(l->m, sizeof *p * (size_t)cap);
        if (!p)
            return false;
        l->m = p;
        l->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c)
        return false;
    memcpy(c, content, len);
    c[len] = 0;
    l->m[l->n++] = (seer_chat_message){role, c};
    return true;
}

/* The conversation as the template writes it, with the marks of seer_chat_render_marked. */
static char *render(const seer_chat_template *t, const msg_list *l, size_t *len, uint8_t **mark) {
    size_t need = 0;
    *mark = NULL;
    seer_chat_render(t, l->m, l->n, true, NULL, 0, &need);
    char *buf = malloc(need + 1);
    uint8_t *mk = malloc(need + 1);
    if (!buf || !mk || seer_chat_render_marked(t, l->m, l->n, true, buf, mk, need + 1, len) != SEER_OK) {
        free(buf);
        free(mk);
        return NULL;
    }
    *mark = mk;
    return buf;
}

static void msg_remove(msg_list *l, int i) {
    free((char *)l->m[i].content);
    memmove(l->m + i, l->m + i + 1, sizeof *l->m * (size_t)(l->n - i - 1));
    l->n--;
}

/* Drops the oldest turn (a user message and the reply to it), keeping the system message and
 * the last message; false when nothing but those is left. */
static bool drop_oldest_turn(msg_list *l) {
    int i = l->n > 0 && !strcmp(l->m[0].role, "system") ? 1 : 0;
    if (l->n - i < 2)
        return false;
    msg_remove(l, i);
    if (i < l->n - 1 && !strcmp(l->m[i].role, "assistant"))
        msg_remove(l, i);
    return true;
}

/* Empties the cache: the next prefill starts from the beginning of the conversation. */
static seer_status restart(chat_state *c, str *cached, str *mark, int *mark_past) {
    cached->n = 0;
    mark->n = 0;
    *mark_past = 0;
    c->n_past = 0;
    return seer_seq_rewind(c->ctx, c->seq, 0);
}

/* One turn: prefill the new text of the conversation, then generate and print the reply.
 * cached holds the text whose tokens are in the cache; mark/mark_past the prompt text and
 * cache length at the end of the previous turn's prompt. Returns 0 when the turn ran, 1 on
 * an error that ends the session, 2 when the last message was refused (too long for the
 * context; it is removed, the session goes on). When the conversation outgrows the context,
 * its oldest turns are dropped (the system message stays) and what remains is prefilled
 * again. */
static int turn(chat_state *c, const chat_opts *o, const seer_chat_template *t, msg_list *msgs,
                seer_sampler *smp, str *cached, str *mark, int *mark_past) {
    int rc = 1, n = 0, dropped = 0;
    int32_t *ids = NULL;
    char *full = NULL;
    uint8_t *fmark = NULL;
    size_t flen = 0;
    seer_status s = SEER_OK;
    for (;;) {
        free(full);
        free(fmark);
        free(ids);
        ids = NULL;
        full = render(t, msgs, &flen, &fmark);
        if (!full) {
            cli_error("chat template", SEER_ERR_OOM);
            goto done;
        }
        size_t from;
        if (starts_with(full, flen, cached)) {
            from = cached->n;
        } else if (starts_with(full, flen, mark)) {
            /* The template wrote the last reply differently from how it was generated. */
            from = mark->n;
        } else {
            from = 0;
        }
        if (from != cached->n) {
            int keep = from ? *mark_past : 0;
            if ((s = seer_seq_rewind(c->ctx, c->seq, keep)) != SEER_OK) {
                cli_error("rewinding the cache", s);
                goto done;
            }
            c->n_past = keep;
            cached->n = from; /* the cache holds the text up to from (mark is a prefix of cached) */
        }
        s = seer_tokenize_marked(c->model, full + from, fmark + from, flen - from, c->n_past == 0,
                                 NULL, 0, &n);
        if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
            cli_error("tokenizing", s);
            goto done;
        }
        ids = malloc(sizeof *ids * (size_t)(n + 1));
        if (!ids || (s = seer_tokenize_marked(c->model, full + from, fmark + from, flen - from,
                                              c->n_past == 0, ids, n, &n)) != SEER_OK) {
            cli_error("tokenizing", ids ? s : SEER_ERR_OOM);
            goto done;
        }
        if (c->n_past + n < c->n_ctx)
            break;
        /* Room for the prompt and at least one token of the reply is missing. */
        if (!drop_oldest_turn(msgs)) {
            fprintf(stderr, "seer chat: that message does not fit in the context (%d tokens; use --ctx); "
                            "it is dropped\n", c->n_ctx);
            msg_remove(msgs, msgs->n - 1);
            rc = restart(c, cached, mark, mark_past) == SEER_OK ? 2 : 1;
            goto done;
        }
        dropped++;
        if ((s = restart(c, cached, mark, mark_past)) != SEER_OK) {
            cli_error("rewinding the cache", s);
            goto done;
        }
    }
    if (dropped)
        fprintf(stderr, "seer chat: the context (%d tokens) is full: the oldest %d turn%s dropped\n",
                c->n_ctx, dropped, dropped == 1 ? " was" : "s were");
    if (n > 0 && (s = prefill(c, ids, n)) != SEER_OK) {
        cli_error("prefill", s);
        goto done;
    }
    cached->n = 0;
    mark->n = 0;
    if (!str_put(cached, full, flen) || !str_put(mark, full, flen))
        goto done;
    *mark_past = c->n_past;

    seer_detok *dt = NULL;
    if ((s = seer_detok_init(c->model, &dt)) != SEER_OK) {
        cli_error("detokenizer", s);
        goto done;
    }
    str reply = {0};
    cli_text text = {0}, piece = {0}; /* grown to fit: no token's text is dropped */
    for (long long g = 0; o->n_predict < 0 || g < o->n_predict; g++) {
        int32_t tok = seer_sampler_sample(smp, c->logits, NULL);
        if (seer_token_is_eog(c->model, tok))
            break;
        seer_sampler_accept(smp, tok);
        text.n = 0;
        int k = cli_detok_append(dt, tok, false, &text);
        if (k > 0) {
            fwrite(text.s, 1, (size_t)k, stdout);
            fflush(stdout);
            str_put(&reply, text.s, (size_t)k);
        }
        /* The reply ends here when the cache has no room for tok; tok is then part of the
         * reply but not of the cache (nor of cached): the next turn prefills it. */
        if (c->n_past + 1 >= c->n_ctx) {
            fprintf(stderr, "\nseer chat: context full (%d tokens)\n", c->n_ctx);
            break;
        }
        int np = seer_token_piece(c->model, tok, NULL, 0);
        if (np > 0 && (size_t)np + 1 > piece.cap) {
            char *p = realloc(piece.s, (size_t)np + 1);
            if (p)
                piece.s = p, piece.cap = (size_t)np + 1;
        }
        if (np > 0 && (size_t)np < piece.cap && seer_token_piece(c->model, tok, piece.s, (int)piece.cap) == np)
            str_put(cached, piece.s, (size_t)np);
        if ((s = prefill(c, &tok, 1)) != SEER_OK) {
            cli_error("decode", s);
            free(reply.s);
            free(text.s);
            free(piece.s);
            seer_detok_free(dt);
            goto done;
        }
    }
    text.n = 0;
    int k = cli_detok_append(dt, 0, true, &text);
    if (k > 0) {
        fwrite(text.s, 1, (size_t)k, stdout);
        str_put(&reply, text.s, (size_t)k);
    }
    free(text.s);
    free(piece.s);
    printf("\n");
    fflush(stdout);
    seer_detok_free(dt);
    rc = msg_add(msgs, "assistant", reply.s ? reply.s : "", reply.n) ? 0 : 1;
    free(reply.s);
done:
    free(ids);
    free(full);
    free(fmark);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o = {.n_predict = -1, .sp = seer_sampler_default_params(), .backend = SEER_BACKEND_AUTO};
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 1;
    chat_state c = {0};
    seer_sampler *smp = NULL;
    msg_list msgs = {0};
    str cached = {0}, mark = {0};
    int mark_past = 0;
    char *line = NULL;
    size_t line_cap = 0;
    seer_status s;
    seer_model_params mp = seer_model_default_params();
    mp.backend = o.backend;
    mp.weights = o.weights;
    mp.n_threads = (int)o.threads;
    if ((s = seer_model_load(o.model, mp, &c.model)) != SEER_OK) {
        cli_error("loading model", s);
        goto done;
    }
    seer_chat_template t;
    if ((s = seer_chat_template_init(c.model, o.tmpl, &t)) != SEER_OK) {
        cli_error("chat template", s);
        goto done;
    }
    seer_model_info info;
    seer_model_get_info(c.model, &info);
    if (!cli_ctx_ok(o.ctx, info.ctx_train, o.ctx_beyond))
        goto done;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = (int)o.ctx; /* 0: the trained context, as memory allows; the pool grows as used */
    if ((s = seer_context_init(c.model, cp, &c.ctx)) != SEER_OK) {
        cli_error("creating context", s);
        goto done;
    }
    c.n_ctx = seer_context_n_ctx(c.ctx);
    c.n_batch = cp.n_batch_max;
    c.logits = malloc(sizeof *c.logits * (size_t)info.n_vocab);
    if (!c.logits || (s = seer_seq_new(c.ctx, &c.seq)) != SEER_OK ||
        (s = seer_sampler_init(o.sp, info.n_vocab, &smp)) != SEER_OK) {
        cli_error("setting up", c.logits ? s : SEER_ERR_OOM);
        goto done;
    }
    if (o.system && !msg_add(&msgs, "system", o.system, strlen(o.system)))
        goto done;
    char shown_name[256];
    fprintf(stderr, "seer: chat with %s (%s template, context %d); /quit or Ctrl-D to quit\n",
            seer_text_escape(info.name[0] ? info.name : o.model, shown_name, sizeof shown_name),
            seer_chat_kind_name(t.kind), c.n_ctx);
    bool tty = isatty(0);
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0)
            break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (got == 0)
            continue;
        if (!strcmp(line, "/quit"))
            break;
        /* A line that cannot be tokenized (invalid UTF-8) is refused; the chat goes on. */
        int n_tok = 0;
        s = seer_tokenize(c.model, line, (size_t)got, false, false, NULL, 0, &n_tok);
        if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
            fprintf(stderr, "seer chat: that line was not used: %s\n", seer_last_error());
            continue;
        }
        if (!msg_add(&msgs, "user", line, (size_t)got))
            goto done;
        int r = turn(&c, &o, &t, &msgs, smp, &cached, &mark, &mark_past);
        if (r == 1)
            goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < msgs.n; i++)
        free((char *)msgs.m[i].content);
    free(msgs.m);
    free(cached.s);
    free(mark.s);
    free(line);
    free(c.logits);
    seer_sampler_free(smp);
    seer_context_free(c.ctx);
    seer_model_free(c.model);
    return rc;
}
