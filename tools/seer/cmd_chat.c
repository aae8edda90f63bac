/*
 * cmd_chat.c: `seer chat`: a conversation on stdin/stdout.
 *
 * On a terminal a message is a line; a line ending in \ goes on on the next one, and """ at
 * the start of a line opens a message of many lines that """ at the end of a line closes (as
 * llama.cpp's and Ollama's CLIs do). Piped input is text, not typing: all of it is one
 * message (a pasted document is one turn), unless lines holding only /send divide it into
 * several; its replies are printed with a blank line between them, and no prompt.
 *
 * Each turn is a request to the scheduler (the same request API `seer serve` uses, with
 * speculation when --spec asks for it): the whole conversation is rendered with the model's
 * chat template and submitted; the scheduler's prefix cache keeps the conversation's earlier
 * prompt, so a turn computes only what is new (the last reply and message, from the last
 * cached chunk on). Only the template's own special tokens are parsed as such: a user who
 * types "<|im_end|>" sends text. A line that is not valid UTF-8 is refused with a message; a
 * conversation that outgrows the context loses its oldest turns (the system message stays).
 * /quit or end of input ends the program (status 0).
 */
#include "cli.h"
#include "cli_cmds.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(int argc, char **argv, chat_opts *o) {
    const int rc = cli_parse(cli_table, CLI_CHAT, "chat", argc, argv, &o->c, o);
    if (rc >= 0)
        return rc;
    if (optind < argc) {
        fprintf(stderr, "seer chat: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->c.model) {
        fprintf(stderr, "seer chat: -m MODEL is required\n");
        return 2;
    }
    if (!cli_tree_apply(&o->c) || !cli_spec_weights("chat", o->c.spec_weights, &o->c.spec))
        return 2;
    if (!cli_draft_model_ok("chat", o->c.spec.kind, o->c.draft_model))
        return 2;
    if (!cli_cost_file_ok("chat", o->c.cost_file))
        return 2;
    return -1;
}

typedef struct {
    seer_model *model;
    seer_context *ctx;
    seer_sched *sched;
    int n_ctx;
    bool blank_between; /* a blank line between replies (piped input: no prompt divides them) */
    int n_replies;      /* replies printed */
} chat_state;

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

/* Prints a reply as it grows (the request's visible text is only ever appended to). */
typedef struct {
    size_t shown;
} reply_view;

static void show_reply(seer_request *r, void *user) {
    reply_view *v = user;
    size_t len;
    const char *t = seer_request_text(r, &len);
    if (len > v->shown) {
        cli_out(t + v->shown, len - v->shown, true); /* a failure is reported after the turn */
        v->shown = len;
    }
}

/* One turn: the conversation as a request, its reply printed as it comes. Returns 0 when the
 * turn ran, 1 on an error that ends the session, 2 when the last message was refused (too
 * long for the context; it is removed, the session goes on). When the conversation outgrows
 * the context its oldest turns are dropped (the system message stays). */
static int turn(chat_state *c, const chat_opts *o, const seer_chat_template *t, msg_list *msgs) {
    int rc = 1, n = 0, dropped = 0;
    int32_t *ids = NULL;
    char *full = NULL;
    uint8_t *fmark = NULL;
    size_t flen = 0;
    seer_status s = SEER_OK;
    seer_request *r = NULL;
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
        s = seer_tokenize_marked(c->model, full, fmark, flen, true, NULL, 0, &n);
        if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
            cli_error("tokenizing", s);
            goto done;
        }
        ids = malloc(sizeof *ids * (size_t)(n + 1));
        if (!ids || (s = seer_tokenize_marked(c->model, full, fmark, flen, true, ids, n, &n)) != SEER_OK) {
            cli_error("tokenizing", ids ? s : SEER_ERR_OOM);
            goto done;
        }
        if (n < c->n_ctx)
            break;
        /* Room for the prompt and at least one token of the reply is missing. */
        if (!drop_oldest_turn(msgs)) {
            fprintf(stderr, "seer chat: that message does not fit in the context (%d tokens; use --ctx); "
                            "it is dropped\n", c->n_ctx);
            msg_remove(msgs, msgs->n - 1);
            rc = 2;
            goto done;
        }
        dropped++;
    }
    if (dropped)
        fprintf(stderr, "seer chat: the context (%d tokens) is full: the oldest %d turn%s dropped\n",
                c->n_ctx, dropped, dropped == 1 ? " was" : "s were");
    if (c->blank_between && c->n_replies > 0 && !cli_out("\n", 1, true)) {
        cli_stdout_done("chat");
        goto done;
    }
    reply_view view = {0};
    seer_request_params p = seer_request_default_params();
    p.sampler = o->c.sp;
    p.spec = o->c.spec;
    p.max_tokens = o->c.n_predict < 0 || o->c.n_predict > c->n_ctx - n ? c->n_ctx - n : (int)o->c.n_predict;
    p.on_update = show_reply;
    p.user = &view;
    if ((s = seer_request_new(c->model, ids, n, &p, &r)) != SEER_OK ||
        (s = seer_sched_submit(c->sched, r)) != SEER_OK) {
        cli_error("starting the reply", s);
        goto done;
    }
    for (int active = 1; active;)
        if ((s = seer_sched_step(c->sched, &active)) != SEER_OK) {
            cli_error("decode", s);
            seer_request_cancel(r);
            while (seer_sched_step(c->sched, &active) == SEER_OK && active)
                ;
            goto done;
        }
    size_t len;
    const char *reply = seer_request_text(r, &len);
    show_reply(r, &view);
    if (seer_request_finish_reason(r) == SEER_FINISH_LENGTH && n + seer_request_tokens(r, NULL) >= c->n_ctx)
        fprintf(stderr, "\nseer chat: context full (%d tokens)\n", c->n_ctx);
    if (!cli_out("\n", 1, true)) {
        cli_stdout_done("chat"); /* the reply was lost: end the session, and say why */
        goto done;
    }
    c->n_replies++;
    rc = msg_add(msgs, "assistant", reply, len) ? 0 : 1;
done:
    if (r && seer_request_finished(r))
        seer_request_free(r);
    free(ids);
    free(full);
    free(fmark);
    return rc;
}

/* Bytes of one message past which the input is taken for no conversation (stdin may be
 * /dev/zero, whose line never ends, or `yes`, whose lines never do): the session ends instead
 * of reading on. */
#define SKIP_MAX ((size_t)64 << 20)

/* One line of stdin (without its end) into *buf, at most max bytes: the rest of a longer line
 * is read and dropped, counted in *skipped, up to SKIP_MAX bytes. -1 at the end of input with
 * nothing read. */
static ssize_t read_line(char **buf, size_t *cap, size_t max, size_t *skipped) {
    size_t n = 0;
    int ch = EOF;
    *skipped = 0;
    while ((ch = getchar()) != EOF && ch != '\n') {
        if (n == max) {
            if (++*skipped == SKIP_MAX)
                break;
            continue;
        }
        if (n + 1 >= *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = realloc(*buf, nc);
            if (!nb)
                return -1;
            *buf = nb, *cap = nc;
        }
        (*buf)[n++] = (char)ch;
    }
    if (ch == EOF && n == 0 && !*skipped)
        return -1;
    if (!*buf && !(*buf = malloc(*cap = 1)))
        return -1;
    (*buf)[n] = 0;
    return (ssize_t)n;
}

/* A message as it is read: at most max bytes are kept, the rest counted in skipped. */
typedef struct {
    char *buf;
    size_t len, cap, max, skipped;
} msg_text;

static bool msg_put(msg_text *m, const char *p, size_t n) {
    if (m->skipped || m->len + n > m->max) {
        m->skipped += n + 1;
        return true;
    }
    if (m->len + n + 1 > m->cap) {
        size_t nc = m->cap ? m->cap : 256;
        while (nc < m->len + n + 1)
            nc *= 2;
        char *nb = realloc(m->buf, nc);
        if (!nb)
            return false;
        m->buf = nb, m->cap = nc;
    }
    memcpy(m->buf + m->len, p, n);
    m->len += n;
    m->buf[m->len] = 0;
    return true;
}

static bool ends_with(const char *s, size_t n, const char *end) {
    const size_t k = strlen(end);
    return n >= k && !memcmp(s + n - k, end, k);
}

#define QUOTES "\"\"\""

typedef enum {
    READ_MESSAGE, /* a message is in m (possibly too long: m->skipped) */
    READ_QUIT,    /* a /quit line; m holds what came before it */
    READ_END,     /* end of input; m holds what came before it */
    READ_ENDLESS, /* more than SKIP_MAX bytes of one message: not a conversation */
    READ_OOM
} read_end;

/* One message from stdin. On a terminal (tty): a line, a line ending in \ joined to the next
 * (the \ dropped, the line's end kept), or the lines from one starting with """ to one ending
 * with """ (the quotes dropped). Piped: the lines up to one holding only /send. Either way
 * "/quit" alone on a line ends the chat, and a line's end \r (CRLF text) is dropped. */
static read_end read_message(bool tty, char **line, size_t *line_cap, msg_text *m) {
    bool block = false, more = false;
    m->len = m->skipped = 0;
    for (;;) {
        if (tty)
            cli_out(block || more ? "... " : "> ", block || more ? 4 : 2, true);
        size_t skipped;
        ssize_t got = read_line(line, line_cap, m->max, &skipped);
        if (got < 0)
            return READ_END;
        char *l = *line;
        size_t n = (size_t)got;
        if (skipped) { /* a line past the bound: the message is too long whatever the line says */
            m->skipped += skipped + n;
            if (m->skipped >= SKIP_MAX)
                return READ_ENDLESS;
            if (tty && !block)
                return READ_MESSAGE;
            continue;
        }
        while (n > 0 && l[n - 1] == '\r')
            l[--n] = 0;
        if (!block && strlen(l) == n && !strcmp(l, "/quit"))
            return READ_QUIT;
        bool last = false;
        if (!tty) {
            if (strlen(l) == n && !strcmp(l, "/send"))
                return READ_MESSAGE;
        } else if (block) {
            last = ends_with(l, n, QUOTES);
            n -= last ? 3 : 0;
        } else if (!more && n >= 3 && !memcmp(l, QUOTES, 3)) {
            block = true;
            l += 3, n -= 3;
            last = ends_with(l, n, QUOTES); /* """one line""" */
            n -= last ? 3 : 0;
            if (n == 0 && !last)
                continue; /* the opening line holds only the quotes */
        } else {
            more = ends_with(l, n, "\\");
            n -= more ? 1 : 0;
            last = !more;
        }
        if (!msg_put(m, l, n) || (!last && !msg_put(m, "\n", 1)))
            return READ_OOM;
        if (m->skipped >= SKIP_MAX)
            return READ_ENDLESS;
        if (last)
            return READ_MESSAGE;
    }
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    cli_common_init(&o.c);
    o.c.spec.kind = SEER_SPEC_AUTO; /* plain unless a calibrated cost model predicts a gain */
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (!cli_stdout_open("chat"))
        return 1;
    rc = 1;
    chat_state c = {0};
    msg_list msgs = {0};
    seer_model *draft = NULL;
    seer_spec_cost *cost = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    msg_text m = {0};
    seer_status s;
    seer_model_params mp = seer_model_default_params();
    mp.backend = o.c.backend;
    mp.weights = o.c.weights;
    mp.n_threads = (int)o.c.threads;
    mp.tp = (int)o.c.tp;
    if (!cli_tp_setup("chat", &o.c, &mp))
        goto done;
    mp.gpu_layers = (int)o.c.gpu_layers;
    mp.draft_weights = o.c.spec_weights;
    if ((s = seer_model_load(o.c.model, mp, &c.model)) != SEER_OK) {
        cli_error("loading model", s);
        goto done;
    }
    mp.draft_weights = NULL;
    mp.tp_addr = NULL; /* a draft model's ranks are threads of this process */
    seer_chat_template t;
    if ((s = seer_chat_template_init(c.model, o.c.chat_template, &t)) != SEER_OK) {
        cli_error("chat template", s);
        goto done;
    }
    t.no_think = o.c.no_think;
    seer_model_info info;
    seer_model_get_info(c.model, &info);
    if (!cli_ctx_ok(o.c.ctx, info.ctx_train, o.c.ctx_beyond))
        goto done;
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = (int)o.c.ctx; /* 0: the trained context, as memory allows; the pool grows as used */
    cp.n_seq_max = 2;      /* the reply and the prefix cache's copy of the conversation */
    cp.kv_type = o.c.kv_type;
    if (cli_spec_quantkv(&o.c.spec))
        cp.kv_quant_bits = o.c.kv_bits ? (int)o.c.kv_bits : 4;
    if ((s = seer_context_init(c.model, cp, &c.ctx)) != SEER_OK) {
        cli_error("creating context", s);
        goto done;
    }
    c.n_ctx = seer_context_n_ctx(c.ctx);
    if (o.c.draft_model && (s = seer_model_load(o.c.draft_model, mp, &draft)) != SEER_OK) {
        cli_error("loading the draft model", s);
        goto done;
    }
    o.c.spec.draft_model = draft;
    if (o.c.spec.kind == SEER_SPEC_AUTO) /* measured while every sequence is free */
        o.c.spec.cost = cost = cli_auto_cost("chat", c.ctx, draft, o.c.cost_file);
    /* prefill chunks of 64: the prefix cache keeps the conversation in units of 64 tokens */
    seer_sched_params sp = {.max_batch_tokens = 0, .prefill_chunk = 64, .prefix_cache = 1,
                            .kv_host_bytes = (int64_t)(o.c.kv_host_gb * 1073741824.0)};
    if ((s = seer_sched_init(c.ctx, sp, &c.sched)) != SEER_OK) {
        cli_error("setting up", s);
        goto done;
    }
    if (o.c.system && !msg_add(&msgs, "system", o.c.system, strlen(o.c.system)))
        goto done;
    char shown_name[256];
    fprintf(stderr, "seer: chat with %s (%s template, context %d); /quit or Ctrl-D to quit\n",
            seer_text_escape(info.name[0] ? info.name : o.c.model, shown_name, sizeof shown_name),
            seer_chat_kind_name(t.kind), c.n_ctx);
    const bool tty = isatty(0);
    c.blank_between = !tty;
    /* a message longer than the whole context could hold is refused unread past that bound */
    m.max = cli_prompt_max_bytes(c.model, c.n_ctx);
    for (read_end how = READ_MESSAGE; how == READ_MESSAGE;) {
        how = read_message(tty, &line, &line_cap, &m);
        if (how == READ_OOM)
            goto done;
        if (how == READ_ENDLESS) {
            fprintf(stderr, "seer chat: a message of more than %zu bytes: the input is not a conversation; "
                            "ending\n", SKIP_MAX);
            goto done;
        }
        if (how == READ_QUIT && tty)
            break; /* what was typed before /quit is not sent */
        if (m.skipped) { /* the words turn() says for a message of too many tokens */
            fprintf(stderr, "seer chat: that message does not fit in the context (%d tokens, at most %zu "
                            "bytes; use --ctx); it is dropped\n", c.n_ctx, m.max);
            continue;
        }
        /* the lines around a message are not part of it */
        size_t from = 0;
        while (from < m.len && (m.buf[from] == '\n' || m.buf[from] == '\r'))
            from++;
        while (m.len > from && (m.buf[m.len - 1] == '\n' || m.buf[m.len - 1] == '\r'))
            m.len--;
        if (m.len == from)
            continue;
        const char *text = m.buf + from;
        const size_t len = m.len - from;
        if (memchr(text, 0, len)) {
            fprintf(stderr, "seer chat: that message was not used: it has a NUL byte (a message is text)\n");
            continue;
        }
        /* A message that cannot be tokenized (invalid UTF-8) is refused; the chat goes on. */
        int n_tok = 0;
        s = seer_tokenize(c.model, text, len, false, false, NULL, 0, &n_tok);
        if (s != SEER_OK && s != SEER_ERR_INVALID_ARG) {
            fprintf(stderr, "seer chat: that message was not used: %s\n", seer_last_error());
            continue;
        }
        if (!msg_add(&msgs, "user", text, len))
            goto done;
        int r = turn(&c, &o, &t, &msgs);
        if (r == 1)
            goto done;
    }
    if (!cli_stdout_done("chat"))
        goto done;
    rc = 0;
    if (o.c.spec.kind == SEER_SPEC_AUTO) {
        seer_sched_stats st;
        seer_sched_get_stats(c.sched, &st);
        char buf[256];
        int n = 0;
        for (int k = 0; k < SEER_SPEC_KIND_MAX && n < (int)sizeof buf - 48; k++)
            if (st.spec_auto_decisions[k])
                n += snprintf(buf + n, sizeof buf - n, "%s%s %lld", n ? ", " : "",
                              k ? seer_spec_kind_name((seer_spec_kind)k) : "plain",
                              (long long)st.spec_auto_decisions[k]);
        if (n)
            fprintf(stderr, "seer chat: spec auto: rounds by choice: %s\n", buf);
    }
done:
    for (int i = 0; i < msgs.n; i++)
        free((char *)msgs.m[i].content);
    free(msgs.m);
    free(line);
    free(m.buf);
    seer_sched_free(c.sched);
    seer_spec_cost_free(cost);
    seer_context_free(c.ctx);
    seer_model_free(draft);
    cli_tp_reap(o.c.tp_pids, true); /* after the model's goodbye, or when it never came */
    seer_model_free(c.model);
    return rc;
}
