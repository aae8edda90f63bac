/*
 * test_cli.c: the seer command-line tool end to end: golden greedy ids through
 * `seer generate --json` (with and without speculation, prompts prefilled in chunks of
 * --batch), `seer info`, `seer gen-model`, `seer chat` driven through stdin (messages of many
 * lines piped and on a pseudo-terminal), --ctx against
 * the trained context and memory, and clear failures with a non-zero exit on bad flags,
 * files and prompts (prompts bounded by the context before they are read whole, NUL bytes
 * refused), on output that cannot be written, and on a cost file that is not a regular
 * file; names from a hostile file printed escaped, tokens of any length printed whole.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "gguf/gguf.h"

#include <math.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Runs a shell command; captures stdout+stderr into out (NUL-terminated); returns the exit code. */
static int sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char buf[1 << 20];

static void test_generate_golden_json(void **state) {
    const char *model = tu_data_path("models/stories260K.gguf");
    char m[1024];
    snprintf(m, sizeof m, "%s", model);
    const char *specs[] = {"none", "streaming --spec-budget 16", "ngram", "snapkv --spec-budget 24 --spec-window 4",
                           "tree --spec-base retrieval --spec-budget 16 --spec-tree-size 9 --spec-tree-depth 3",
                           "tree --spec-base draft --draft-budget 16 --draft-model",
                           "hierarchy --spec-base snapkv --spec-budget 24 --spec-window 4 --spec-hier-gamma 3 --draft-model",
                           "auto --spec-cost-file", "streaming --spec-budget 16 --spec-weights q4_0",
                           "auto --spec-weights q4_0 --spec-cost-file"};
    const char *cost = tu_tmp_path("cli.cost");
    for (int k = 0; k < 11; k++) {
        int rc = sh(buf, sizeof buf,
                    "%s generate -m %s -p 'Lily and Tom' --temp 0 -n 300 --json --backend cpu --spec %s %s",
                    SEER_CLI, m, specs[k < 8 ? k : k == 9 ? 8 : k == 10 ? 9 : 7],
                    k == 5 || k == 6 ? m : k == 7 || k == 8 || k == 10 ? cost : "");
        if (rc != 0)
            fail_msg("rc %d: %s", rc, buf);
        /* golden row "Lily and Tom": prompt 1,317,269,274,287; ids start 382,276,337 and end in BOS */
        assert_non_null(strstr(buf, "\"prompt_ids\":[1,317,269,274,287]"));
        assert_non_null(strstr(buf, "\"generated_ids\":[382,276,337,299,322,265"));
        assert_non_null(strstr(buf, "269,381,272,379,426,342,337,266,267,428,316,386,344,363,328,426,1]"));
        assert_non_null(strstr(buf, "\"text\":\" were playing in the park."));
        if (k == 4 || k == 5)
            assert_non_null(strstr(buf, k == 4 ? "\"tree_size\":9" : "\"tree_size\":8"));
        if (k == 6)
            assert_non_null(strstr(buf, "\"hier_base\":\"snapkv\"")), assert_non_null(strstr(buf, "\"hier_gamma\":3"));
        /* the draft steps' weights: the model's, or the q4_0 copy */
        assert_non_null(strstr(buf, k >= 9 ? "\"draft_weights\":\"q4_0\"" : "\"draft_weights\":\"none\""));
        /* auto: calibrated into the file given, then read back from it; the decisions and
         * speedups reported */
        /* k 10: the file holds the table of the model without draft weights (k 7), whose key
         * differs: measured again, through the copy */
        if (k == 7 || k == 8 || k == 10) {
            assert_non_null(strstr(buf, k == 8 ? "cost table from" : "cost model calibrated in"));
            assert_non_null(strstr(buf, "\"kind\":\"auto\""));
            assert_non_null(strstr(buf, "\"auto\":{\"calibrated\":true,\"decisions\":{"));
            assert_non_null(strstr(buf, "\"predicted_speedup\":"));
            assert_non_null(strstr(buf, "rounds by choice:"));
        }
    }
}

/* --batch: the prompt prefilled 3 tokens a call gives the same golden ids (the CPU computes a
 * row the same whatever the batch). */
static void test_generate_batch(void **state) {
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Lily and Tom' --temp 0 -n 300 --json --backend cpu --spec none -b 3",
                SEER_CLI, tu_data_path("models/stories260K.gguf"));
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "\"prompt_ids\":[1,317,269,274,287]"));
    assert_non_null(strstr(buf, "\"generated_ids\":[382,276,337,299,322,265"));
    assert_non_null(strstr(buf, "269,381,272,379,426,342,337,266,267,428,316,386,344,363,328,426,1]"));
}

/* --tp 2 on the CPU: the model divided over two thread pools gives the golden ids, plain and
 * speculative; and with rank 1 a process of its own (--tp-procs starts `seer worker`). */
static void test_generate_tp(void **state) {
    const char *specs[] = {"none", "streaming --spec-budget 16", "none --tp-procs", "streaming --spec-budget 16 --tp-procs"};
    for (int k = 0; k < 4; k++) {
        int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Lily and Tom' --temp 0 -n 300 --json --backend cpu --tp 2 --spec %s",
                    SEER_CLI, tu_data_path("models/stories260K.gguf"), specs[k]);
        if (rc != 0)
            fail_msg("rc %d: %s", rc, buf);
        assert_non_null(strstr(buf, "\"generated_ids\":[382,276,337,299,322,265"));
        assert_non_null(strstr(buf, "269,381,272,379,426,342,337,266,267,428,316,386,344,363,328,426,1]"));
    }
}

static void test_generate_stream_and_stats(void **state) {
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 20 --spec streaming --spec-budget 8",
                SEER_CLI, tu_data_path("models/stories260K.gguf"));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, ", there was a little girl named Lily."));
    assert_non_null(strstr(buf, "prefill"));
    assert_non_null(strstr(buf, "decode"));
    assert_non_null(strstr(buf, "tokens per verification"));
}

static void test_bad_input(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    struct {
        const char *args;
        int rc;
        const char *msg;
    } cases[] = {
        {"generate -m %s -p hi --temp abc", 2, "not a number"},
        {"generate -m %s -p hi --top-p 1.5", 2, "out of range"},
        {"generate -m %s -p hi -n -7", 2, "out of range"},
        {"generate -m %s -p hi --spec magic", 2, "unknown speculation"},
        {"generate -m %s -p hi --spec draft", 2, "--draft-model"},
        {"generate -m %s -p hi --spec hierarchy", 2, "--draft-model"},
        {"generate -m %1$s -p hi --spec hierarchy --spec-base ngram --draft-model %1$s", 2, "middle level"},
        {"generate -m %1$s -p hi --spec hierarchy --spec-tree-size 4 --draft-model %1$s", 2, "chains"},
        {"generate -m %s -p hi --spec streaming --spec-hier-gamma 2", 2, "--spec hierarchy"},
        {"generate -m %1$s -p hi --spec hierarchy --spec-hier-gamma 0 --draft-model %1$s", 2, "out of range"},
        {"generate -m %s -p hi --spec tree --spec-tree-size 3 --spec-tree-depth 4", 2, "exceeds"},
        {"generate -m %s -p hi --spec-tree-size 4", 2, "--spec tree"},
        {"generate -m %s -p hi --spec tree --spec-base none", 2, "--spec-base"},
        {"generate -m %s -p hi --spec tree --spec-tree-size 99", 2, "out of range"},
        {"generate -m %s -p hi --bogus", 2, "unrecognized"},
        /* the drafters' settings, from the registry */
        {"generate -m %s -p hi --spec quantkv --spec-kv-view snapkv", 2, "not one of none, streaming"},
        {"generate -m %s -p hi --spec ngram --spec-ngram 0", 2, "--spec-ngram: 0 is out of range"},
        {"generate -m %s -p hi --spec streaming --spec-hier-base retrieval", 2, "goes with --spec hierarchy"},
        {"chat -m %s --spec-refresh-below x", 2, "is not a number"},
        {"bench --synthetic tiny --spec-sinks -1%.0s", 2, "--spec-sinks: -1 is out of range"},
        {"generate -m %s -p hi --batch 0", 2, "out of range"},
        {"generate -m %s -p hi --kv-type q8_0", 2, "--kv-type must be bf16, q8 or q4"},
        {"generate -m %s -p hi --kv-type q8 --spec quantkv", 1, "kv_quant_bits"},
        {"generate -m %s -p hi --backend cpu --tp 2 --kv-type q4", 1, "cannot store the KV cache as q4"},
        {"perplexity -m %s", 2, "usage: seer perplexity"},
        {"perplexity -m %s -f /nonexistent.txt", 1, "cannot open"},
        {"perplexity -m %s -f /dev/null", 1, "fewer than --ctx"},
        {"perplexity -m %s -f /dev/null --kv-type q5", 2, "--kv-type takes"},
        {"generate -m %s -p hi --spec streaming --spec-gamma 4 --batch 3", 1, "batch limit 3"},
        {"generate -m %s", 2, "-p PROMPT"},
        {"generate -m %s -p 'Once upon a time there was a girl' --ctx 4", 1, "context"},
        {"generate -m %s -p hi --backend tpu", 2, "not one of"},
        {"generate -m %s -p hi --tp 0", 2, "out of range"},
        {"generate -m %s -p hi --backend cpu --tp 3", 1, "do not divide over 3 ranks"},
        {"generate -m %s -p hi --backend cpu --tp-procs", 1, "need --tp 2 or more"},
        {"generate -m %s -p hi --backend cpu --tp 2 --tp-procs --tp-addr 127.0.0.1:1", 1, "leave --tp-addr out"},
        {"worker --tp 2 --tp-rank 1%.0s", 2, "are needed"},
        {"worker --tp 2 --tp-rank 1 --tp-addr nowhere%.0s", 1, "is not HOST:PORT"},
        {"generate -m /nonexistent/model.gguf -p hi%.0s", 1, "nonexistent"},
        {"generate -m %s -p hi --spec draft --draft-model /nonexistent.gguf", 1, "draft"},
        {"generate -m %s -p hi --spec streaming --spec-weights q4_k", 2, "not one of q8_0, q4_0"},
        {"generate -m %s -p hi --spec ngram --spec-weights q4_0", 2, "--spec-weights goes with"},
        {"generate -m %s -p hi --spec none --spec-weights q8_0", 2, "--spec-weights goes with"},
        {"serve -m %s --spec ngram --spec-weights q4_0", 2, "--spec-weights goes with"},
        {"serve -m %s --prefill-stall 0", 2, "would stop prompts"},
        {"serve -m %s --prefill-stall -0.5", 2, "neither -1 nor"},
        {"serve -m %s --prefill-stall nan", 2, "--prefill-stall"},
        {"bench --synthetic tiny --spec streaming --spec-weights q4_0,q8_0%.0s", 2, "one quantised type"},
        {"info %s extra", 2, "unexpected"},
        {"frobnicate %s", 2, "unknown command"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1200];
        snprintf(args, sizeof args, cases[i].args, m);
        int rc = sh(buf, sizeof buf, "%s %s", SEER_CLI, args);
        if (rc == 1 && strstr(buf, "this build has no HTTP server")) /* serve without libmicrohttpd */
            continue;
        if (rc != cases[i].rc || !strstr(buf, cases[i].msg))
            fail_msg("'seer %s': rc %d (want %d), output: %s", args, rc, cases[i].rc, buf);
    }
    /* serve's workers take its SIGTERM when it ends: a load that fails before they connect
     * ends at once, not after their time-out for reaching rank 0 (60 s) */
    {
        const time_t t0 = time(NULL);
        int r = sh(buf, sizeof buf, "timeout 40 %s serve -m /nonexistent.gguf --backend cpu --tp 2 --tp-procs --port 0",
                   SEER_CLI);
        if (!strstr(buf, "this build has no HTTP server")) {
            if (r != 1 || time(NULL) - t0 > 20)
                fail_msg("serve --tp-procs with no model: rc %d after %lld s: %s", r, (long long)(time(NULL) - t0), buf);
        }
    }
    /* invalid UTF-8 in the prompt */
    const char *bad = tu_tmp_path("bad.txt");
    assert_int_equal(tu_write_file(bad, "ab\xff\xfe", 4), 0);
    int rc = sh(buf, sizeof buf, "%s generate -m %s -f %s", SEER_CLI, m, bad);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "UTF-8"));
    /* a truncated model file */
    size_t sz;
    uint8_t *data = tu_read_file(m, &sz);
    const char *trunc = tu_tmp_path("trunc.gguf");
    assert_int_equal(tu_write_file(trunc, data, sz / 3), 0);
    free(data);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p hi", SEER_CLI, trunc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "loading model"));
}

/* seer perplexity on the tiny model: a row per KV type, perplexities finite, bf16 agreeing with
 * itself over every greedy token. */
static void test_perplexity(void **state) {
    (void)state;
    int rc = sh(buf, sizeof buf, "%s perplexity -m %s -f %s/README.md -c 64 --greedy 8 --prompt 8 -t 1", SEER_CLI,
                tu_data_path("models/stories260K.gguf"), SEER_SOURCE_DIR);
    if (rc != 0)
        fail_msg("seer perplexity: rc %d: %s", rc, buf);
    const char *kinds[] = {"bf16", "q8", "q4"};
    for (int k = 0; k < 3; k++) {
        char want[16];
        snprintf(want, sizeof want, "\n%-6s ", kinds[k]);
        const char *row = strstr(buf, want);
        if (!row)
            fail_msg("seer perplexity: no %s row in: %s", kinds[k], buf);
        int tokens = 0, first = -1;
        double ppl = 0, agree = 0;
        assert_int_equal(sscanf(row + 7, "%d %lf %d %lf", &tokens, &ppl, &first, &agree), 4);
        assert_int_equal(tokens, 63);
        assert_true(isfinite(ppl) && ppl > 1);
        if (k == 0)
            assert_true(first == 8 && agree == 100.0);
    }
}

static void test_info_and_gen_model(void **state) {
    int rc = sh(buf, sizeof buf, "%s info %s", SEER_CLI, tu_data_path("models/stories260K.gguf"));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "architecture  llama"));
    assert_non_null(strstr(buf, "8 query, 4 kv"));
    assert_non_null(strstr(buf, "llama, 512 tokens"));
    assert_non_null(strstr(buf, "blk.4.ffn_down.weight"));
    const char *out = tu_tmp_path("g.gguf");
    rc = sh(buf, sizeof buf, "%s gen-model --arch qwen2 --vocab 400 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --dtype q8_0 -o %s",
            SEER_CLI, out);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    rc = sh(buf, sizeof buf, "%s info %s", SEER_CLI, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "architecture  qwen2"));
    assert_non_null(strstr(buf, "q8_0"));
    assert_non_null(strstr(buf, "blk.1.attn_q.bias"));
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'hello world' -n 8 --seed 3 --json", SEER_CLI, out);
    if (rc != 0)
        fail_msg("generate on a generated model: %s", buf);
    /* a llama.cpp mix: info lists each tensor's type */
    rc = sh(buf, sizeof buf, "%s gen-model --vocab 300 --dim 256 --layers 8 --heads 4 --kv-heads 2 --ffn 256 --dtype q4_k_m -o %s",
            SEER_CLI, out);
    if (rc != 0)
        fail_msg("gen-model q4_k_m: %s", buf);
    rc = sh(buf, sizeof buf, "%s info %s", SEER_CLI, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "q4_k_m"));
    assert_non_null(strstr(buf, "blk.1.attn_v.weight                  q4_K"));
    assert_non_null(strstr(buf, "blk.3.attn_v.weight                  q6_K"));
    assert_non_null(strstr(buf, "output.weight                        q6_K"));
    rc = sh(buf, sizeof buf, "%s gen-model --dtype q3_k -o %s", SEER_CLI, out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(buf, "q4_k_m"));
    rc = sh(buf, sizeof buf, "%s gen-model --heads 3 --dim 64 -o %s", SEER_CLI, out);
    assert_int_not_equal(rc, 0);
}

/* Counts the occurrences of needle in hay. */
static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The lines of s that are not seer's own messages (the replies), split in place. */
static int reply_lines(char *s, char **out, int cap) {
    int n = 0;
    char *save = NULL;
    for (char *l = strtok_r(s, "\n", &save); l && n < cap; l = strtok_r(NULL, "\n", &save))
        if (strncmp(l, "seer", 4) != 0)
            out[n++] = l;
    return n;
}

/* `seer chat` with piped lines: a bad line is refused and the chat goes on, a full context
 * loses its oldest turns, /quit and end of input end it with status 0. */
static void test_chat_session(void **state) {
    const char *m = tu_data_path("models/stories260K.gguf");
    const char *in = tu_tmp_path("chat_in.txt");
    const char lines[] = "Hello there\n/send\n\xff\xfe not UTF-8\n/send\nOnce upon a time\n/quit\nnever answered\n";
    assert_int_equal(tu_write_file(in, lines, sizeof lines - 1), 0);
    int rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template chatml --temp 0 -n 6 --spec none < %s", SEER_CLI, m, in);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "that message was not used: invalid UTF-8"));
    /* the same session without the bad line and the lines after /quit answers the same */
    char *first = strdup(buf), *ra[8], *rb[8];
    const int na = reply_lines(first, ra, 8);
    const char ok[] = "Hello there\n/send\nOnce upon a time\n";
    assert_int_equal(tu_write_file(in, ok, sizeof ok - 1), 0);
    rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template chatml --temp 0 -n 6 --spec none < %s", SEER_CLI, m, in);
    assert_int_equal(rc, 0);
    assert_int_equal(na, 2);
    assert_int_equal(reply_lines(buf, rb, 8), 2);
    for (int i = 0; i < 2; i++)
        assert_string_equal(ra[i], rb[i]);
    /* greedy replies are the same with speculation (chat runs on the request scheduler) */
    char *plain[2] = {strdup(rb[0]), strdup(rb[1])};
    const char *specs[] = {"--spec ngram", "--spec streaming --spec-budget 8 --spec-gamma 3", "", "--spec auto"};
    for (int k = 0; k < 4; k++) {
        char *rc2[8];
        rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template chatml --temp 0 -n 6 %s < %s", SEER_CLI, m,
                specs[k], in);
        assert_int_equal(rc, 0);
        assert_int_equal(reply_lines(buf, rc2, 8), 2);
        for (int i = 0; i < 2; i++)
            assert_string_equal(rc2[i], plain[i]);
    }
    free(plain[0]), free(plain[1]);
    free(first);

    /* A small context: turns are dropped with a notice; every line is answered. */
    const char many[] = "Hello there my friend\n/send\nOnce upon a time there was\n/send\nThe little dog ran\n/send\n"
                        "A big red ball\n";
    assert_int_equal(tu_write_file(in, many, sizeof many - 1), 0);
    rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template llama2 --temp 0 -n 20 --ctx 96 --system 'Tell a story' < %s",
            SEER_CLI, m, in);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_true(count(buf, "oldest 1 turn was dropped") >= 2);
    /* A message longer than the context is refused; the next one is answered. */
    char longer[2048] = "";
    for (int i = 0; i < 100; i++)
        strcat(longer, "word ");
    strcat(longer, "\n/send\nhi\n");
    assert_int_equal(tu_write_file(in, longer, strlen(longer)), 0);
    rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template llama2 --temp 0 -n 3 --ctx 64 < %s", SEER_CLI, m, in);
    assert_int_equal(rc, 0);
    assert_int_equal(count(buf, "does not fit in the context"), 1);
    /* help */
    rc = sh(buf, sizeof buf, "%s chat --help", SEER_CLI);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "/quit"));
    assert_non_null(strstr(buf, "Ctrl-D"));
    /* bench's help names every synthetic shape the library has */
    rc = sh(buf, sizeof buf, "%s bench --help", SEER_CLI);
    assert_int_equal(rc, 0);
    for (const char *const *n = seer_synthetic_shapes(); *n; n++)
        if (!strstr(buf, *n))
            fail_msg("seer bench --help does not name the shape %s", *n);
}

/* Runs `seer ARGS` on a pseudo-terminal (stdin, stdout and stderr), types input and returns
 * what the terminal showed (typed text echoed, "\r\n" line ends) in out. */
static void on_terminal(char *out, size_t cap, const char *args, const char *input) {
    int fd = -1;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", args, (char *)NULL);
        _exit(127);
    }
    /* the terminal keeps typed lines until they are read (they fit its 4 KiB line buffer) */
    assert_int_equal(write(fd, input, strlen(input)), (ssize_t)strlen(input));
    size_t n = 0;
    for (ssize_t k; n + 1 < cap && (k = read(fd, out + n, cap - 1 - n)) > 0;)
        n += (size_t)k; /* read fails (EIO) once the program has exited */
    out[n] = 0;
    close(fd);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("on a terminal: status %d: %s", st, out);
}

/* `seer chat` takes messages of many lines: piped input is one message (a pasted document is
 * one turn) unless /send lines divide it, and its replies are divided by a blank line; on a
 * terminal a """ block or lines ending in \ are one message, each turn after a "> " prompt. */
static void test_chat_multiline(void **state) {
    char m[1024], in[512], cmd[2048];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    snprintf(in, sizeof in, "%s", tu_tmp_path("chat_multi.txt"));
    const char *chat = "chat --chat-template chatml --temp 0 -n 8 --backend cpu --spec none";
    /* a document of three lines: one reply, one line of output */
    const char doc[] = "Hello there\nOnce upon a time\nThe little dog ran\n";
    assert_int_equal(tu_write_file(in, doc, sizeof doc - 1), 0);
    int rc = sh(buf, sizeof buf, "{ %s %s -m %s < %s 2>/dev/null; }", SEER_CLI, chat, m, in);
    assert_int_equal(rc, 0);
    if (count(buf, "\n") != 1 || buf[strlen(buf) - 1] != '\n' || strlen(buf) < 2)
        fail_msg("a document of three lines piped: not one reply: '%s'", buf);
    char *one = strdup(buf);
    one[strlen(one) - 1] = 0;
    /* CRLF text and blank lines around it are the same message */
    const char crlf[] = "\r\n\nHello there\r\nOnce upon a time\r\nThe little dog ran\r\n\r\n";
    assert_int_equal(tu_write_file(in, crlf, sizeof crlf - 1), 0);
    rc = sh(buf, sizeof buf, "{ %s %s -m %s < %s 2>/dev/null; }", SEER_CLI, chat, m, in);
    assert_int_equal(rc, 0);
    if (strncmp(buf, one, strlen(one)) || strcmp(buf + strlen(one), "\n"))
        fail_msg("CRLF: '%s', want '%s'", buf, one);
    /* /send divides it: three replies, a blank line between each two */
    const char three[] = "Hello there\n/send\nOnce upon a time\n/send\nThe little dog ran\n/send\n";
    assert_int_equal(tu_write_file(in, three, sizeof three - 1), 0);
    rc = sh(buf, sizeof buf, "{ %s %s -m %s < %s 2>/dev/null; }", SEER_CLI, chat, m, in);
    assert_int_equal(rc, 0);
    char *replies[3] = {0};
    char *p = buf;
    for (int i = 0; i < 3; i++) {
        char *end = strstr(p, i < 2 ? "\n\n" : "\n");
        if (!end || end == p)
            fail_msg("piped /send: reply %d missing: '%s'", i, buf);
        *end = 0;
        replies[i] = p;
        p = end + (i < 2 ? 2 : 1);
        if (strchr(replies[i], '\n'))
            fail_msg("piped /send: reply %d runs into the next: '%s'", i, replies[i]);
    }
    assert_string_equal(p, "");
    /* the first turn alone answers as in the conversation, and differs from the document's */
    rc = sh(buf, sizeof buf, "{ printf 'Hello there\\n' | %s %s -m %s 2>/dev/null; }", SEER_CLI, chat, m);
    assert_int_equal(rc, 0);
    buf[strcspn(buf, "\n")] = 0;
    assert_string_equal(buf, replies[0]);
    /* on a terminal: a """ block and a line continued with \ are two turns (three "> ": one
     * before each and one before /quit); the block is the document, the continued line the
     * text with its line end and without the \ */
    snprintf(cmd, sizeof cmd, "%s %s -m %s", SEER_CLI, chat, m);
    on_terminal(buf, sizeof buf, cmd,
                "\"\"\"\nHello there\nOnce upon a time\nThe little dog ran\n\"\"\"\nThe little \\\ndog ran\n/quit\n");
    if (count(buf, "> ") != 3 || count(buf, "... ") != 5)
        fail_msg("on a terminal: %d prompts, %d continuations: %s", count(buf, "> "), count(buf, "... "), buf);
    const char *after = strstr(buf, "... ... ... ... ");
    if (!after || strncmp(after + 16, one, strlen(one)))
        fail_msg("on a terminal: the \"\"\" block's reply is not the document's '%s': %s", one, buf);
    char *term = strdup(buf);
    /* the same conversation piped: the document, then "The little \ndog ran" */
    const char cont[] = "Hello there\nOnce upon a time\nThe little dog ran\n/send\nThe little \ndog ran\n";
    assert_int_equal(tu_write_file(in, cont, sizeof cont - 1), 0);
    rc = sh(buf, sizeof buf, "{ %s %s -m %s < %s 2>/dev/null; }", SEER_CLI, chat, m, in);
    assert_int_equal(rc, 0);
    const char *two = strstr(buf, "\n\n");
    assert_non_null(two);
    memmove(buf, two + 2, strlen(two + 2) + 1);
    buf[strcspn(buf, "\n")] = 0;
    const char *second = strstr(term + (after - buf) + 16 + strlen(one), "\r\n> ... ");
    if (!second || strncmp(second + 8, buf, strlen(buf)))
        fail_msg("on a terminal: the continued line's reply is not '%s': %s", buf, term);
    /* """one line""" is a message too; text before /quit on a terminal is not sent */
    on_terminal(buf, sizeof buf, cmd, "\"\"\"Hello there\"\"\"\nnot sent \\\n/quit\n");
    if (count(buf, "> ") != 2 || count(buf, "... ") != 1)
        fail_msg("on a terminal, \"\"\"one line\"\"\": %s", buf);
    free(term);
    free(one);
}

/* --ctx: past the trained context only when asked (with a warning); the KV cache grows as
 * used, so a context of 4M tokens on a 1 MB model commits what 13 tokens need; a pool that
 * can never fit in memory is refused before any work. */
static void test_ctx(void **state) {
    const char *m = tu_data_path("models/stories260K.gguf");
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 8 --ctx 16777216", SEER_CLI, m);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "beyond the model's trained context (512 tokens)"));
    assert_non_null(strstr(buf, "--ctx-beyond-trained"));
    /* the CPU backend: f32 KV and its chunk size are what the numbers below describe */
    rc = sh(buf, sizeof buf,
            "%s generate -m %s -p 'Once upon a time' --temp 0 -n 8 --ctx 4194304 --ctx-beyond-trained --backend cpu "
            "--spec none", /* no calibration: it would commit pages for its own fills */
            SEER_CLI, m);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, buf);
    assert_non_null(strstr(buf, "warning"));
    assert_non_null(strstr(buf, ", there was a little girl"));
    /* 13 tokens of 1280 bytes: one chunk committed of a 5 GiB reservation */
    const char *kvl = strstr(buf, "seer: KV cache ");
    assert_non_null(kvl);
    double committed = -1, reserved = -1;
    assert_int_equal(sscanf(kvl, "seer: KV cache %lf MiB committed of %lf MiB reserved", &committed, &reserved), 2);
    assert_true(committed > 0 && committed <= 1.0);
    assert_true(reserved >= 5120.0);
    rc = sh(buf, sizeof buf, "%s chat -m %s --chat-template chatml --ctx 1024 < /dev/null", SEER_CLI, m);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "--ctx-beyond-trained"));
    /* 64 KiB of K/V per token in f32 (the CPU), 32 KiB in bf16 (CUDA): 16M tokens are 1 TiB,
     * 512 GiB (4M fit an H200's 141 GB in bf16) */
    const char *big = tu_tmp_path("bigkv.gguf");
    rc = sh(buf, sizeof buf, "%s gen-model --dim 64 --layers 2 --heads 32 --kv-heads 32 --head-dim 128 --ffn 64 -o %s",
            SEER_CLI, big);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p hi -n 2 --ctx 16777216 --ctx-beyond-trained", SEER_CLI, big);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(buf, "needs"));
    assert_non_null(strstr(buf, "free"));
}

static void test_small_things(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    /* -n 0 generates no token */
    int rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 0 --json --backend cpu",
                SEER_CLI, m);
    if (rc != 0 || !strstr(buf, "\"generated_ids\":[]") || !strstr(buf, "\"text\":\"\""))
        fail_msg("-n 0: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 1 --json --backend cpu",
            SEER_CLI, m);
    if (rc != 0 || !strstr(buf, "\"generated_ids\":[432]"))
        fail_msg("-n 1: rc %d: %s", rc, buf);
    /* auto without a table (none cached in the file named): a context too short to calibrate
     * decodes plain, with a note;
     * a cost file that cannot be written is only a note too */
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 8 --ctx 48 --json --backend cpu "
                             "--spec-cost-file %s", SEER_CLI, m, tu_tmp_path("short.cost"));
    if (rc != 0 || !strstr(buf, "cannot calibrate the cost model") || !strstr(buf, "decoding plain") ||
        !strstr(buf, "\"calibrated\":false") || !strstr(buf, "\"generated_ids\":[432,"))
        fail_msg("auto, short context: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --temp 0 -n 8 --backend cpu "
                             "--spec-cost-file /nonexistent-dir/x.cost", SEER_CLI, m);
    if (rc != 0 || !strstr(buf, "not saved"))
        fail_msg("auto, unwritable cost file: rc %d: %s", rc, buf);
    /* a directory is not a prompt file */
    const char *dir = tu_tmp_path("a-directory");
    mkdir(dir, 0700);
    rc = sh(buf, sizeof buf, "%s generate -m %s -f %s", SEER_CLI, m, dir);
    if (rc != 1 || !strstr(buf, "directory"))
        fail_msg("-f DIR: rc %d: %s", rc, buf);
    /* --backend cuda without a GPU names the missing device (or the missing backend) */
#ifdef SEER_HAVE_CUDA
    const bool no_gpu = !seer_backend_cuda_available();
    const char *want = "no CUDA device was found";
#else
    const bool no_gpu = true;
    const char *want = "no CUDA backend";
#endif
    if (no_gpu) {
        rc = sh(buf, sizeof buf, "%s generate -m %s -p hi --backend cuda", SEER_CLI, m);
        if (rc != 1 || !strstr(buf, want) || strstr(buf, "driver version"))
            fail_msg("--backend cuda: rc %d: %s", rc, buf);
    }
}

/* Copies the GGUF at src to dst with every piece of tokenizer.ggml.tokens that is a normal
 * token (type 1) replaced by piece_len bytes of one letter. */
static void rewrite_vocab(const char *src, const char *dst, size_t piece_len, const char *name) {
    gguf_file *f = NULL;
    ASSERT_OK(seer_gguf_file_open(src, &f));
    const gguf_value *tok = NULL, *type = NULL;
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok));
    ASSERT_OK(seer_gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_COUNT, &type));
    const uint64_t n = tok->arr.n;
    char **pieces = calloc(n, sizeof *pieces);
    assert_non_null(pieces);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_value *t = &tok->arr.items[i];
        const bool normal = type->arr.items[i].i64 == 1 || type->arr.items[i].u64 == 1;
        size_t len = normal ? piece_len : t->str.len;
        pieces[i] = malloc(len + 1);
        assert_non_null(pieces[i]);
        if (normal)
            memset(pieces[i], 'a' + (int)(i % 26), len);
        else
            memcpy(pieces[i], t->str.s, len);
        pieces[i][len] = 0;
    }
    gguf_writer *w = seer_gguf_writer_init();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        if (!strcmp(k, "tokenizer.ggml.tokens"))
            seer_gguf_writer_set_arr_str(w, k, (const char *const *)pieces, n);
        else if (!strcmp(k, "general.name") && name)
            seer_gguf_writer_set_str(w, k, name);
        else
            ASSERT_OK(seer_gguf_writer_set_value(w, k, &f->kv[i].val));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        ASSERT_OK(seer_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    ASSERT_OK(seer_gguf_writer_write(w, dst));
    seer_gguf_writer_free(w);
    for (uint64_t i = 0; i < n; i++)
        free(pieces[i]);
    free(pieces);
    seer_gguf_file_close(f);
}

static void test_long_tokens_and_hostile_names(void **state) {
    const char *base = tu_tmp_path("base.gguf"), *lng = tu_tmp_path("long.gguf");
    int rc = sh(buf, sizeof buf, "%s gen-model --vocab 1000 --dim 32 --layers 1 --heads 2 --kv-heads 2 --ffn 48 -o %s",
                SEER_CLI, base);
    if (rc != 0)
        fail_msg("gen-model: %s", buf);
    /* every normal token is 3000 bytes long, more than any fixed buffer of the tool */
    const size_t piece = 3000;
    rewrite_vocab(base, lng, piece, "evil\x1b]0;owned\x07\x1b[2J\xc2\x9b" "1m");
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'x' --temp 0 -n 6 --ignore-eos --json", SEER_CLI, lng);
    if (rc != 0)
        fail_msg("generate: %s", buf);
    const char *g = strstr(buf, "\"generated_ids\":[");
    assert_non_null(g);
    g += strlen("\"generated_ids\":[");
    int n_long = 0;
    for (char *e; *g && *g != ']'; g = e + (*e == ',')) {
        long id = strtol(g, &e, 10);
        assert_true(e != g);
        n_long += id >= 259; /* after <unk>, <s>, </s> and the 256 byte tokens */
    }
    assert_true(n_long > 0);
    /* the streamed text holds every long token whole */
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'x' --temp 0 -n 6 --ignore-eos 2>/dev/null", SEER_CLI, lng);
    assert_int_equal(rc, 0);
    size_t letters = 0;
    for (const char *p = buf; *p; p++)
        letters += *p >= 'a' && *p <= 'z';
    if (letters < (size_t)n_long * piece)
        fail_msg("%zu letters printed for %d tokens of %zu", letters, n_long, piece);

    /* and so does chat's reply (it used fixed buffers of 1 KiB) */
    rc = sh(buf, sizeof buf, "echo hi | %s chat -m %s --chat-template chatml --temp 0 -n 4 2>/dev/null",
            SEER_CLI, lng);
    assert_int_equal(rc, 0);
    letters = 0;
    for (const char *p = buf; *p; p++)
        letters += *p >= 'a' && *p <= 'z';
    if (letters < piece)
        fail_msg("chat printed %zu letters: %.200s", letters, buf);

    /* a name with terminal escapes is printed escaped, by info and in messages */
    rc = sh(buf, sizeof buf, "%s info %s --meta", SEER_CLI, lng);
    assert_int_equal(rc, 0);
    if (!strstr(buf, "name          evil\\x1b]0;owned\\x07\\x1b[2J\\u009b1m"))
        fail_msg("info: %s", buf);
    for (const char *p = buf; *p; p++)
        if (*p == 0x1b || *p == 0x07 || (*p == '\xc2' && p[1] == '\x9b'))
            fail_msg("a control character reached the output at %zu", (size_t)(p - buf));
}

/* Runs a shell command with stdout a pipe whose reader is already gone (every write is
 * EPIPE, or SIGPIPE where not ignored) and stderr captured into out; returns the exit code,
 * or 128 + the signal that ended it. */
static int sh_closed_pipe(char *out, size_t cap, const char *cmd) {
    int po[2], pe[2];
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    close(po[0]);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[1]), close(pe[0]), close(pe[1]);
        signal(SIGPIPE, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    size_t n = 0;
    for (ssize_t r; n + 1 < cap && (r = read(pe[0], out + n, cap - 1 - n)) > 0;)
        n += (size_t)r;
    out[n] = 0;
    close(pe[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Output that cannot be written is an error, not lost text with exit 0: a full device, a
 * closed stdout and a pipe nobody reads, for generate (streamed and --json) and chat. */
static void test_output_errors(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    const char *gen = "generate -p 'Once upon a time' --temp 0 -n 40 --ignore-eos --backend cpu --spec none";
    const char *json[] = {"", "--json"};
    for (int j = 0; j < 2; j++) {
        int rc = sh(buf, sizeof buf, "{ %s %s -m %s %s > /dev/full; }", SEER_CLI, gen, m, json[j]);
        if (rc != 1 || !strstr(buf, "cannot write the output to stdout: No space left on device"))
            fail_msg("generate %s > /dev/full: rc %d: %s", json[j], rc, buf);
        rc = sh(buf, sizeof buf, "{ %s %s -m %s %s >&-; }", SEER_CLI, gen, m, json[j]);
        if (rc != 1 || !strstr(buf, "stdout is closed"))
            fail_msg("generate %s >&-: rc %d: %s", json[j], rc, buf);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s %s -m %s %s", SEER_CLI, gen, m, json[j]);
        rc = sh_closed_pipe(buf, sizeof buf, cmd);
        if (rc != 1 || !strstr(buf, "cannot write the output to stdout: Broken pipe"))
            fail_msg("generate %s into a closed pipe: rc %d: %s", json[j], rc, buf);
    }
    const char *chat = "chat --chat-template chatml --temp 0 -n 8 --backend cpu --spec none";
    int rc = sh(buf, sizeof buf, "{ echo hi | %s %s -m %s > /dev/full; }", SEER_CLI, chat, m);
    if (rc != 1 || !strstr(buf, "cannot write the output to stdout: No space left on device"))
        fail_msg("chat > /dev/full: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "{ echo hi | %s %s -m %s >&-; }", SEER_CLI, chat, m);
    if (rc != 1 || !strstr(buf, "stdout is closed"))
        fail_msg("chat >&-: rc %d: %s", rc, buf);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "echo hi | %s %s -m %s", SEER_CLI, chat, m);
    rc = sh_closed_pipe(buf, sizeof buf, cmd);
    if (rc != 1 || !strstr(buf, "Broken pipe"))
        fail_msg("chat into a closed pipe: rc %d: %s", rc, buf);
}

/* Prompts are bounded before they are tokenized (a 50 MB file was tokenized whole before the
 * context refused it; /dev/zero grew until memory ran out) and are text: a NUL byte, where a
 * prompt file used to be cut silently, is refused. timeout turns the old unbounded reads
 * into failures rather than hangs. */
static void test_prompt_bounds(void **state) {
    char m[1024];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    const char *nul = tu_tmp_path("nul-prompt.txt");
    assert_int_equal(tu_write_file(nul, "Once upon\0 a time", 17), 0);
    int rc = sh(buf, sizeof buf, "%s generate -m %s -f %s -n 4 --backend cpu", SEER_CLI, m, nul);
    if (rc != 1 || !strstr(buf, "has a NUL byte (at offset 9)"))
        fail_msg("-f with a NUL: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "timeout 60 %s generate -m %s -f /dev/zero -n 4 --backend cpu", SEER_CLI, m);
    if (rc != 1 || !strstr(buf, "has a NUL byte (at offset 0)"))
        fail_msg("-f /dev/zero: rc %d: %s", rc, buf);
    /* 4 MB of text against a context of 64 tokens: refused by its size, unread */
    const size_t big_n = 4 << 20;
    char *big = malloc(big_n);
    assert_non_null(big);
    for (size_t i = 0; i < big_n; i++)
        big[i] = i % 7 == 6 ? ' ' : 'a' + (char)(i % 26);
    const char *bigp = tu_tmp_path("big-prompt.txt");
    assert_int_equal(tu_write_file(bigp, big, big_n), 0);
    free(big);
    rc = sh(buf, sizeof buf, "timeout 60 %s generate -m %s -f %s --ctx 64 -n 4 --backend cpu", SEER_CLI, m, bigp);
    if (rc != 1 || !strstr(buf, "is larger than the context can hold (4194304 bytes; at most"))
        fail_msg("-f 4 MB: rc %d: %s", rc, buf);
    /* a stream without end: read up to the bound, then refused */
    rc = sh(buf, sizeof buf, "yes | timeout 60 %s generate -m %s -f /dev/stdin --ctx 64 -n 4 --backend cpu",
            SEER_CLI, m);
    if (rc != 1 || !strstr(buf, "is larger than the context can hold (more than"))
        fail_msg("-f endless stream: rc %d: %s", rc, buf);
    /* -p: the same bound */
    rc = sh(buf, sizeof buf, "%s generate -m %s -p \"$(head -c 100000 %s)\" --ctx 64 -n 4 --backend cpu",
            SEER_CLI, m, bigp);
    if (rc != 1 || !strstr(buf, "the prompt is larger than the context can hold (100000 bytes"))
        fail_msg("-p 100 kB: rc %d: %s", rc, buf);
    /* a prompt within the bound still runs */
    rc = sh(buf, sizeof buf, "%s generate -m %s -p 'Once upon a time' --ctx 64 -n 4 --backend cpu", SEER_CLI, m);
    if (rc != 0)
        fail_msg("-p short: rc %d: %s", rc, buf);
    /* chat: a line with a NUL is refused and the chat goes on; endless input ends it */
    const char *chat = "chat --chat-template chatml --temp 0 -n 4 --backend cpu --spec none";
    rc = sh(buf, sizeof buf, "printf 'a\\0b\\n/send\\nhello\\n' | %s %s -m %s", SEER_CLI, chat, m);
    if (rc != 0 || !strstr(buf, "that message was not used: it has a NUL byte"))
        fail_msg("chat, a line with a NUL: rc %d: %s", rc, buf);
    rc = sh(buf, sizeof buf, "timeout 60 %s %s -m %s --ctx 64 < /dev/zero", SEER_CLI, chat, m);
    if (rc != 1 || !strstr(buf, "the input is not a conversation"))
        fail_msg("chat < /dev/zero: rc %d: %s", rc, buf);
}

/* --spec-cost-file naming a symlink or a FIFO is refused at start, and neither is replaced
 * (the table used to be renamed over whatever the path named; as root, /dev/null) nor read
 * (a FIFO blocked the open). */
static void test_cost_file_not_regular(void **state) {
    char m[1024], target[512], link[512], fifo[512];
    snprintf(m, sizeof m, "%s", tu_data_path("models/stories260K.gguf"));
    snprintf(target, sizeof target, "%s", tu_tmp_path("cli-cost-target"));
    snprintf(link, sizeof link, "%s", tu_tmp_path("cli-cost-link"));
    snprintf(fifo, sizeof fifo, "%s", tu_tmp_path("cli-cost-fifo"));
    assert_int_equal(tu_write_file(target, "precious\n", 9), 0);
    unlink(link), unlink(fifo);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *paths[] = {link, fifo}, *what[] = {"is a symbolic link", "is a FIFO"};
    const char *cmds[] = {"generate -p 'Once upon a time' -n 4", "chat --chat-template chatml -n 4"};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++) {
            int rc = sh(buf, sizeof buf, "echo hi | timeout 60 %s %s -m %s --backend cpu --spec-cost-file %s",
                        SEER_CLI, cmds[c], m, paths[i]);
            if (rc != 2 || !strstr(buf, what[i]) || !strstr(buf, "not a regular file"))
                fail_msg("%s --spec-cost-file %s: rc %d: %s", cmds[c], paths[i], rc, buf);
            struct stat sb;
            assert_int_equal(lstat(paths[i], &sb), 0);
            assert_true(i == 0 ? S_ISLNK(sb.st_mode) : S_ISFIFO(sb.st_mode));
        }
    size_t n = 0;
    uint8_t *kept = tu_read_file(target, &n);
    assert_non_null(kept);
    assert_int_equal(n, 9);
    assert_memory_equal(kept, "precious\n", 9);
    free(kept);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_errors),
        cmocka_unit_test(test_prompt_bounds),
        cmocka_unit_test(test_cost_file_not_regular),
        cmocka_unit_test(test_perplexity),
        cmocka_unit_test(test_generate_golden_json), cmocka_unit_test(test_generate_batch),
        cmocka_unit_test(test_generate_tp),
        cmocka_unit_test(test_generate_stream_and_stats),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_info_and_gen_model),
        cmocka_unit_test(test_chat_session),
        cmocka_unit_test(test_chat_multiline),
        cmocka_unit_test(test_ctx),
        cmocka_unit_test(test_small_things),
        cmocka_unit_test(test_long_tokens_and_hostile_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
