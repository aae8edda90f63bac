#!/usr/bin/env python3
"""test_logprobs.py: `logprobs` and `echo` of `seer serve` through the official `openai`
client, on the CPU with stories260K (test_serve.py's server and helpers).

Chat (logprobs, top_logprobs) and completions (logprobs 0..5) in OpenAI's shapes, whole and
streamed: under greedy decoding the top-1 alternative is the chosen token with the same value,
alternatives come in order with exp sums <= 1, the tokens' bytes spell the text, completions'
text_offset follows the text and its top_logprobs hold the chosen token; the streamed values
equal the whole ones; speculation (n-gram, streaming self-draft, a token tree) on or off gives
the same values bit for bit; a sampled request reports the raw values too (its chosen token is
never likelier than the top-1). echo prepends the prompt, whole and streamed; with logprobs
the prompt's tokens come first (the first one's value null), their values those the same
tokens get when generated. best_of returns the n candidates of highest cumulative
log-probability, each candidate's recomputed through echo over its ids. Values out of range,
best_of below n or with stream, are refused with a 400 naming the field. That the values are
the log-softmax of the model's logits is checked in C (tests/test_logprobs.c).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_serve as ts  # noqa: E402

M = "stories260K"


def chat_lp(cl, **kw):
    return cl.chat.completions.create(model=M, messages=[{"role": "user", "content": "Tell me a story"}], **kw)


def check_chat_entries(content, text, greedy, top):
    ts.check(content, "chat: no logprobs")
    ts.check(b"".join(bytes(e.bytes) for e in content) == text.encode(), f"chat: bytes do not spell {text!r}")
    for e in content:
        ts.check(e.logprob <= 0 and len(e.top_logprobs) == top, f"chat entry {e}")
        lps = [t.logprob for t in e.top_logprobs]
        ts.check(lps == sorted(lps, reverse=True), f"chat: alternatives out of order {lps}")
        ts.check(sum(math.exp(x) for x in lps) <= 1 + 1e-6, f"chat: alternatives sum past 1 {lps}")
        if top:
            ts.check(e.logprob <= lps[0] + 1e-6, f"chat: chosen likelier than the top-1 {e}")
        if greedy and top:
            ts.check(e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob,
                     f"greedy: top-1 is not the chosen token: {e}")


def test_chat(cl):
    r = chat_lp(cl, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3)
    c = r.choices[0]
    check_chat_entries(c.logprobs.content, c.message.content, True, 3)
    ts.check(len(c.logprobs.content) <= r.usage.completion_tokens, "chat: more entries than tokens")
    # streamed: the same entries, in pieces
    got, text = [], ""
    for ch in chat_lp(cl, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            got += ch.choices[0].logprobs.content
        if ch.choices:
            text += ch.choices[0].delta.content or ""
    ts.check(text == c.message.content, "chat stream text")
    ts.check([(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in got] ==
             [(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs]) for e in c.logprobs.content],
             "chat: streamed logprobs differ from the whole ones")
    # speculation on or off: the same values
    for sx in ({"spec": "ngram", "gamma": 3}, {"spec": "streaming", "gamma": 3, "budget": 32},
               {"spec": "retrieval", "tree_size": 9, "tree_depth": 3, "budget": 32}):
        s = chat_lp(cl, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3, extra_body={"seer": sx})
        ts.check(s.choices[0].logprobs.model_dump() == c.logprobs.model_dump(), f"spec {sx}: logprobs differ")
    # without alternatives; sampled
    r0 = chat_lp(cl, max_tokens=8, temperature=0, logprobs=True)
    ts.check(all(e.top_logprobs == [] for e in r0.choices[0].logprobs.content), "top_logprobs 0")
    ts.check([e.logprob for e in r0.choices[0].logprobs.content] ==
             [e.logprob for e in c.logprobs.content[:len(r0.choices[0].logprobs.content)]], "top_logprobs 0 values")
    rs = chat_lp(cl, max_tokens=24, temperature=1.0, seed=5, logprobs=True, top_logprobs=5,
                 extra_body={"seer": {"spec": "ngram", "gamma": 3}})
    check_chat_entries(rs.choices[0].logprobs.content, rs.choices[0].message.content, False, 5)
    # without logprobs: none
    ts.check(chat_lp(cl, max_tokens=4, temperature=0).choices[0].logprobs is None, "logprobs without asking")
    print("logprobs chat: ok")


def test_completions(cl, port):
    prompt = "Once upon a time"
    r = cl.completions.create(model=M, prompt=prompt, max_tokens=24, temperature=0, logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    n = len(lp.tokens)
    ts.check(n > 0 and len(lp.token_logprobs) == n == len(lp.top_logprobs) == len(lp.text_offset), "shapes")
    ts.check("".join(lp.tokens) == c.text, f"tokens {lp.tokens} do not spell {c.text!r}")
    off = 0
    for i in range(n):
        ts.check(lp.text_offset[i] == off, f"text_offset {lp.text_offset}")
        off += len(lp.tokens[i])
        top = lp.top_logprobs[i]
        ts.check(lp.tokens[i] in top and top[lp.tokens[i]] == lp.token_logprobs[i], f"top_logprobs {top}")
        ts.check(max(top.values()) == lp.token_logprobs[i], f"greedy: the chosen token is not the top-1: {top}")
        ts.check(len(top) <= 4 and sum(math.exp(v) for v in top.values()) <= 1 + 1e-6, f"top_logprobs {top}")
    # streamed
    toks, lps, offs = [], [], []
    for ch in cl.completions.create(model=M, prompt=prompt, max_tokens=24, temperature=0, logprobs=3, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            toks += ch.choices[0].logprobs.tokens
            lps += ch.choices[0].logprobs.token_logprobs
            offs += ch.choices[0].logprobs.text_offset
    ts.check((toks, lps, offs) == (lp.tokens, lp.token_logprobs, lp.text_offset), "completions: streamed differ")
    # speculation on or off
    s = cl.completions.create(model=M, prompt=prompt, max_tokens=24, temperature=0, logprobs=3,
                              extra_body={"seer": {"spec": "ngram", "gamma": 4}})
    ts.check(s.choices[0].logprobs.model_dump() == lp.model_dump(), "completions: spec on vs off")
    # stop strings cut the text: no token past the cut
    st = cl.completions.create(model=M, prompt=prompt, max_tokens=100, temperature=0, logprobs=1, stop=["little"])
    ts.check("".join(st.choices[0].logprobs.tokens).startswith(st.choices[0].text) and
             len("".join(st.choices[0].logprobs.tokens)) < len(st.choices[0].text) + 8, "stop: tokens past the cut")
    # echo: the prompt first, whole and streamed
    e = cl.completions.create(model=M, prompt=prompt, max_tokens=24, temperature=0, echo=True)
    ts.check(e.choices[0].text == prompt + c.text, f"echo: {e.choices[0].text!r}")
    text = "".join(ch.choices[0].text for ch in cl.completions.create(
        model=M, prompt=prompt, max_tokens=24, temperature=0, echo=True, stream=True) if ch.choices)
    ts.check(text == prompt + c.text, f"echo streamed: {text!r}")
    print("logprobs completions and echo: ok")


def post(port, body):
    import json
    st, data = ts.raw(port, "POST", "/v1/completions", json.dumps(body))
    ts.check(st == 200, f"{body}: {st} {data[:300]!r}")
    return json.loads(data)


def echo_values(port, ids, top=0):
    """The prompt's log-probabilities of ids through echo."""
    r = post(port, {"prompt": ids, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": top})
    return r["choices"][0]["logprobs"]


def test_echo_logprobs(cl, port):
    prompt = [1, 403, 407, 261, 378]
    g = post(port, {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 2,
                    "seer": {"ignore_eos": True}})
    gen, glp = g["seer"]["token_ids"], g["choices"][0]["logprobs"]
    ts.check(len(gen) == 12, f"generated {gen}")
    e = echo_values(port, prompt + gen[:-1], 2)
    n = len(prompt)
    ts.check(len(e["tokens"]) == n + len(gen) and e["token_logprobs"][0] is None and e["top_logprobs"][0] is None,
             f"echo logprobs: {e['tokens']} {e['token_logprobs'][:2]}")
    ts.check(e["text_offset"] == sorted(e["text_offset"]), f"echo offsets {e['text_offset']}")
    # the prompt's values are those the same tokens got when generated (prefill rows against decode rows)
    for i in range(len(gen) - 1):
        a, b = e["token_logprobs"][n + i], glp["token_logprobs"][i]
        ts.check(abs(a - b) < 1e-3, f"echo token {i}: {a} against generated {b}")
        ts.check(set(e["top_logprobs"][n + i]) == set(glp["top_logprobs"][i]), f"echo top {i}")
    # streamed: the same entries
    body = {"prompt": prompt + gen[:-1], "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 2}
    toks, lps = [], []
    for ch in cl.completions.create(model=M, stream=True, **body):
        if ch.choices and ch.choices[0].logprobs:
            toks += ch.choices[0].logprobs.tokens
            lps += ch.choices[0].logprobs.token_logprobs
    ts.check((toks, lps) == (e["tokens"], e["token_logprobs"]), "echo logprobs streamed differ")
    # through the client
    w = cl.completions.create(model=M, prompt="Once upon a time", max_tokens=4, temperature=0, echo=True, logprobs=1)
    ts.check(w.choices[0].logprobs.token_logprobs[0] is None and len(w.choices[0].logprobs.tokens) > 4,
             f"echo logprobs client: {w.choices[0].logprobs}")
    print("echo with logprobs: ok")


def test_best_of(port):
    prompt = [1, 403, 407, 261, 378]
    base = {"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "seed": 7, "seer": {"spec": "none"}}
    # the candidates: best_of's are n's choices of the same seed
    cands = post(port, dict(base, n=4, logprobs=0))["choices"]
    ids = [c["seer"]["token_ids"] for c in cands]
    ts.check(len(set(map(tuple, ids))) > 1, f"candidates all alike: {ids}")
    # each candidate's cumulative log-probability, recomputed through echo over its ids
    total = []
    for k, c in enumerate(cands):
        e = echo_values(port, prompt + ids[k])
        total.append(sum(e["token_logprobs"][len(prompt):len(prompt) + len(ids[k])]))
        ts.check(abs(total[-1] - sum(c["logprobs"]["token_logprobs"])) < 1e-2 or
                 len(c["logprobs"]["token_logprobs"]) < len(ids[k]), f"candidate {k}: {total[-1]}")
    rank = sorted(range(4), key=lambda k: (-total[k], k))
    for n in (1, 2):
        r = post(port, dict(base, best_of=4, n=n))
        got = [c["text"] for c in r["choices"]]
        ts.check([c["index"] for c in r["choices"]] == list(range(n)), f"best_of indices {r['choices']}")
        ts.check(r["usage"]["completion_tokens"] == sum(len(x) for x in ids), f"best_of usage {r['usage']}")
        # the returned are the likeliest (up to candidates whose recomputed totals tie)
        for i, t in enumerate(got):
            ts.check(abs(total[[cands[k]["text"] for k in range(4)].index(t)] - total[rank[i]]) < 1e-3,
                     f"best_of n={n}: {got}, candidates {[(c['text'], s) for c, s in zip(cands, total)]}")
    print("best_of: ok")


def test_refusals(port):
    import json
    for path, body, param in (
            ("/v1/completions", {"prompt": "x", "best_of": 2, "n": 3}, "best_of"),
            ("/v1/completions", {"prompt": "x", "best_of": 2, "stream": True}, "best_of"),
            ("/v1/completions", {"prompt": "x", "best_of": 0}, "best_of"),
            ("/v1/completions", {"prompt": "x", "logprobs": 6}, "logprobs"),
            ("/v1/completions", {"prompt": "x", "logprobs": "yes"}, "logprobs"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                                      "top_logprobs": 21}, "top_logprobs"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
             "top_logprobs"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 2}, "logprobs")):
        st, data = ts.raw(port, "POST", path, json.dumps(body))
        err = json.loads(data).get("error") or {}
        ts.check(st == 400 and err.get("param") == param, f"{body}: {st} {data[:200]!r}")
    print("logprobs refusals: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    a = ap.parse_args()
    model = os.path.join(a.data, "models", "stories260K.gguf")
    if not os.path.exists(model):
        print("no stories260K.gguf: skipped")
        sys.exit(ts.SKIP)
    ts.ensure_openai()
    import openai
    srv = ts.Server(a.seer, model, ["--parallel", "4", "--batch", "64"])
    try:
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=ts.KEY, max_retries=0, timeout=120)
        test_chat(cl)
        test_completions(cl, srv.port)
        test_echo_logprobs(cl, srv.port)
        test_best_of(srv.port)
        test_refusals(srv.port)
    finally:
        srv.kill()
    print("test_logprobs: all ok")


if __name__ == "__main__":
    main()
