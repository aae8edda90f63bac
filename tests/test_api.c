/*
 * test_api.c: every function of include/seer.h given NULL where it takes a pointer: those
 * that return a status say SEER_ERR_INVALID_ARG (and leave *out NULL), the others return
 * their documented "nothing" value (-1, 0, false, "") without touching memory. Not for the
 * functions' behaviour on valid arguments (the other test files).
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define EXPECT_INVALID(expr)                                                                \
    do {                                                                                    \
        seer_status s_ = (expr);                                                            \
        if (s_ != SEER_ERR_INVALID_ARG)                                                     \
            fail_msg("%s -> %s (want SEER_ERR_INVALID_ARG): %s", #expr, seer_status_str(s_), \
                     seer_last_error());                                                    \
    } while (0)

static void test_null_everywhere(void **state) {
    (void)state;
    seer_model_params mp = seer_model_default_params();
    mp.backend = SEER_BACKEND_CPU;
    seer_model *m = NULL;
    ASSERT_OK(seer_model_load(tu_data_path("models/stories260K.gguf"), mp, &m));
    seer_context_params cp = seer_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 2;
    seer_context *ctx = NULL;
    ASSERT_OK(seer_context_init(m, cp, &ctx));

    /* errors and text */
    assert_non_null(seer_last_error());
    char b[16];
    assert_string_equal(seer_text_escape(NULL, b, sizeof b), "");

    /* model */
    seer_model *mo = (seer_model *)0x1;
    EXPECT_INVALID(seer_model_load(NULL, mp, &mo));
    assert_null(mo);
    EXPECT_INVALID(seer_model_load("x.gguf", mp, NULL));
    seer_model_free(NULL);
    seer_model_info info;
    memset(&info, 0x5a, sizeof info);
    seer_model_get_info(NULL, &info);
    seer_model_get_info(m, NULL);
    seer_model_footprint fp;
    seer_model_get_footprint(NULL, &fp);
    seer_model_get_footprint(m, NULL);
    double bw;
    EXPECT_INVALID(seer_model_measure_bandwidth(NULL, &bw));
    EXPECT_INVALID(seer_model_measure_bandwidth(m, NULL));
    EXPECT_INVALID(seer_model_sync(NULL));
    mo = (seer_model *)0x1;
    EXPECT_INVALID(seer_model_synthetic("tiny", NULL, mp, NULL));
    EXPECT_INVALID(seer_model_synthetic(NULL, NULL, mp, &mo));
    assert_null(mo);
    EXPECT_INVALID(seer_gen_model(NULL, "x.gguf"));
    seer_gen_params gp = seer_gen_default_params();
    EXPECT_INVALID(seer_gen_model(&gp, NULL));

    /* tokenizer */
    int32_t ids[8];
    int n = -5;
    EXPECT_INVALID(seer_tokenize(NULL, "a", 1, true, false, ids, 8, &n));
    EXPECT_INVALID(seer_tokenize(m, NULL, 1, true, false, ids, 8, &n));
    EXPECT_INVALID(seer_tokenize(m, "a", 1, true, false, ids, 8, NULL));
    EXPECT_INVALID(seer_tokenize(m, "a", 1, true, false, NULL, 8, &n));
    assert_int_equal(seer_token_piece(NULL, 1, b, sizeof b), -1);
    assert_int_equal(seer_token_bos(NULL), -1);
    assert_int_equal(seer_token_eos(NULL), -1);
    assert_int_equal(seer_n_vocab(NULL), 0);
    assert_false(seer_token_is_eog(NULL, 2));
    seer_detok *dt = (seer_detok *)0x1;
    EXPECT_INVALID(seer_detok_init(NULL, &dt));
    assert_null(dt);
    EXPECT_INVALID(seer_detok_init(m, NULL));
    ASSERT_OK(seer_detok_init(m, &dt));
    assert_int_equal(seer_detok_push(NULL, 5, b, sizeof b), -1);
    assert_int_equal(seer_detok_push(dt, 5, NULL, 16), -1);
    assert_int_equal(seer_detok_flush(NULL, b, sizeof b), -1);
    assert_int_equal(seer_detok_flush(dt, NULL, 16), -1);
    seer_detok_free(dt);
    seer_detok_free(NULL);

    /* host memory for logits; 0 bytes is refused too */
    void *hp = (void *)0x1;
    EXPECT_INVALID(seer_host_alloc(NULL, 64, &hp));
    assert_null(hp);
    EXPECT_INVALID(seer_host_alloc(m, 64, NULL));
    hp = (void *)0x1;
    EXPECT_INVALID(seer_host_alloc(m, 0, &hp));
    assert_null(hp);
    seer_host_free(NULL, NULL);
    seer_host_free(m, NULL);
    ASSERT_OK(seer_host_alloc(m, 64, &hp));
    memset(hp, 0, 64);
    seer_host_free(m, hp);

    /* context and sequences */
    seer_context *co = (seer_context *)0x1;
    EXPECT_INVALID(seer_context_init(NULL, cp, &co));
    assert_null(co);
    EXPECT_INVALID(seer_context_init(m, cp, NULL));
    seer_context_free(NULL);
    assert_null(seer_context_model(NULL));
    assert_int_equal(seer_context_n_ctx(NULL), 0);
    seer_seq_id sq;
    EXPECT_INVALID(seer_seq_new(NULL, &sq));
    EXPECT_INVALID(seer_seq_new(ctx, NULL));
    ASSERT_OK(seer_seq_new(ctx, &sq));
    EXPECT_INVALID(seer_seq_fork(NULL, sq, &sq));
    EXPECT_INVALID(seer_seq_fork(ctx, sq, NULL));
    EXPECT_INVALID(seer_seq_rewind(NULL, sq, 0));
    seer_seq_free(NULL, sq);
    assert_int_equal(seer_seq_len(NULL, sq), -1);
    assert_int_equal(seer_kv_free_pages(NULL), 0);
    EXPECT_INVALID(seer_seq_set_view(NULL, sq, NULL));
    EXPECT_INVALID(seer_seq_set_view(ctx, sq, NULL));
    seer_seq_clear_view(NULL, sq);
    EXPECT_INVALID(seer_seq_fill_synthetic(NULL, sq, 4, 1));
    seer_batch batch = {0};
    EXPECT_INVALID(seer_decode(NULL, &batch, NULL));
    EXPECT_INVALID(seer_decode(ctx, NULL, NULL));
    int32_t tok = 1, pos = 0;
    batch = (seer_batch){.n_tokens = 1, .token = &tok, .seq = &sq, .pos = NULL};
    EXPECT_INVALID(seer_decode(ctx, &batch, NULL));
    batch = (seer_batch){.n_tokens = 1, .token = NULL, .seq = &sq, .pos = &pos};
    EXPECT_INVALID(seer_decode(ctx, &batch, NULL));
    batch = (seer_batch){.n_tokens = 1, .token = &tok, .seq = NULL, .pos = &pos};
    EXPECT_INVALID(seer_decode(ctx, &batch, NULL));
    uint8_t want = 1;
    batch = (seer_batch){.n_tokens = 1, .token = &tok, .seq = &sq, .pos = &pos, .logits = &want};
    EXPECT_INVALID(seer_decode(ctx, &batch, NULL)); /* logits asked for, nowhere to put them */
    assert_int_equal(seer_seq_len(ctx, sq), 0);

    /* sampler */
    seer_sampler_params sp = seer_sampler_default_params();
    EXPECT_INVALID(seer_sampler_init(sp, 10, NULL));
    seer_sampler_free(NULL);
    seer_sampler_accept(NULL, 1);
    seer_sampler_reset(NULL);
    float logits[4] = {0}, probs[4];
    seer_sampler *smp;
    ASSERT_OK(seer_sampler_init(sp, 4, &smp));
    seer_sampler_probs(NULL, logits, probs);
    seer_sampler_probs(smp, NULL, probs);
    seer_sampler_probs(smp, logits, NULL);
    assert_int_equal(seer_sampler_sample(NULL, logits, NULL), -1);
    assert_int_equal(seer_sampler_sample(smp, NULL, NULL), -1);
    assert_true(seer_sampler_uniform(NULL) == 0.0);
    seer_sampler_free(smp);

    /* generator */
    seer_spec_params spec = seer_spec_default_params();
    seer_gen *g = (seer_gen *)0x1;
    EXPECT_INVALID(seer_gen_init(NULL, spec, &g));
    assert_null(g);
    EXPECT_INVALID(seer_gen_init(ctx, spec, NULL));
    ASSERT_OK(seer_gen_init(ctx, spec, &g));
    int h;
    EXPECT_INVALID(seer_gen_add(NULL, ids, 1, 4, sp, false, &h));
    EXPECT_INVALID(seer_gen_add(g, NULL, 1, 4, sp, false, &h));
    EXPECT_INVALID(seer_gen_add(g, ids, 1, 4, sp, false, NULL));
    EXPECT_INVALID(seer_gen_add_ext(NULL, ids, 1, 4, sp, false, NULL, &h));
    EXPECT_INVALID(seer_gen_add_ext(g, NULL, 1, 4, sp, false, NULL, &h));
    EXPECT_INVALID(seer_gen_add_ext(g, ids, 1, 4, sp, false, NULL, NULL));
    EXPECT_INVALID(seer_gen_adopt(NULL, sq, ids, 1, 4, sp, false, &h));
    EXPECT_INVALID(seer_gen_adopt(g, sq, NULL, 1, 4, sp, false, &h));
    EXPECT_INVALID(seer_gen_adopt(g, sq, ids, 1, 4, sp, false, NULL));
    int act;
    EXPECT_INVALID(seer_gen_step(NULL, &act));
    EXPECT_INVALID(seer_gen_step(g, NULL));
    const int32_t *out;
    assert_int_equal(seer_gen_output(NULL, 0, &out), -1);
    assert_int_equal(seer_gen_output(g, 0, NULL), -1);
    const seer_token_logprob *lps;
    assert_int_equal(seer_gen_logprobs(NULL, 0, &lps), -1);
    assert_int_equal(seer_gen_logprobs(g, 0, NULL), -1);
    assert_true(seer_gen_finished(NULL, 0));
    seer_gen_release(NULL, 0);
    seer_gen_remove(NULL, 0);
    seer_spec_stats st;
    seer_gen_stats(NULL, &st);
    seer_gen_stats(g, NULL);
    seer_gen_free(g);
    seer_gen_free(NULL);
    seer_spec_kind kind;
    EXPECT_INVALID(seer_spec_kind_parse(NULL, &kind));
    EXPECT_INVALID(seer_spec_kind_parse("none", NULL));
    {
        seer_spec_params sp = seer_spec_default_params();
        double v = 0;
        assert_false(seer_spec_option_at(0, NULL));
        assert_false(seer_spec_option_at(-1, NULL));
        EXPECT_INVALID(seer_spec_set(NULL, "budget", "1"));
        EXPECT_INVALID(seer_spec_set(&sp, NULL, "1"));
        EXPECT_INVALID(seer_spec_set(&sp, "budget", NULL));
        EXPECT_INVALID(seer_spec_set_num(NULL, "budget", 1));
        EXPECT_INVALID(seer_spec_set_num(&sp, NULL, 1));
        EXPECT_INVALID(seer_spec_get(NULL, "budget", &v));
        EXPECT_INVALID(seer_spec_get(&sp, NULL, &v));
        EXPECT_INVALID(seer_spec_get(&sp, "budget", NULL));
        const seer_spec_params def = seer_spec_default_params();
        assert_true(tu_spec_get(&sp, "budget") == tu_spec_get(&def, "budget"));
    }

    /* model files */
    seer_gguf *gg = (seer_gguf *)0x1;
    EXPECT_INVALID(seer_gguf_open(NULL, &gg));
    assert_null(gg);
    EXPECT_INVALID(seer_gguf_open("x.gguf", NULL));
    seer_gguf_close(NULL);
    assert_int_equal(seer_gguf_version(NULL), 0);
    assert_int_equal(seer_gguf_n_kv(NULL), 0);
    assert_int_equal(seer_gguf_n_tensors(NULL), 0);
    assert_null(seer_gguf_key(NULL, 0));
    seer_gguf_value_text(NULL, 0, b, sizeof b);
    assert_string_equal(b, "");
    ASSERT_OK(seer_gguf_open(tu_data_path("models/stories260K.gguf"), &gg));
    seer_gguf_value_text(gg, 0, NULL, 16);
    seer_gguf_tensor(NULL, 0, NULL);
    seer_gguf_tensor(gg, 0, NULL);
    seer_gguf_close(gg);

    /* chat */
    seer_chat_template t;
    EXPECT_INVALID(seer_chat_template_init(NULL, "chatml", &t));
    EXPECT_INVALID(seer_chat_template_init(m, "chatml", NULL));
    ASSERT_OK(seer_chat_template_init(m, "chatml", &t));
    size_t len;
    seer_chat_message msg = {"user", "hi"};
    EXPECT_INVALID(seer_chat_render(NULL, &msg, 1, true, NULL, 0, &len));
    EXPECT_INVALID(seer_chat_render(&t, NULL, 1, true, NULL, 0, &len));
    EXPECT_INVALID(seer_chat_render(&t, &msg, 1, true, NULL, 0, NULL));
    seer_chat_message bad = {NULL, "hi"};
    EXPECT_INVALID(seer_chat_render(&t, &bad, 1, true, NULL, 0, &len));
    bad = (seer_chat_message){"user", NULL};
    EXPECT_INVALID(seer_chat_render(&t, &bad, 1, true, NULL, 0, &len));

    seer_context_free(ctx);
    seer_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
