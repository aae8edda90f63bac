#!/usr/bin/env python3
"""trace-serve.py: a trace of long-context requests against an OpenAI-compatible server.

    scripts/trace-serve.py --port 8080 --server seer|llama --requests 8 --rate 0.5 \
        --min-prompt 8192 --max-prompt 32768 --max-tokens 64 --vocab 128256 \
        [--spec none|streaming|...] [--seed 1] [--probe N] [--json-out FILE]

Requests arrive as a Poisson process (exponential gaps of mean 1/rate seconds, drawn from
--seed, so two servers see the same trace). Each prompt is a list of random token ids of a
length drawn uniformly from [min-prompt, max-prompt], sent to /v1/completions as token ids,
streamed, greedy, generating exactly max-tokens tokens (end-of-sequence ignored: seer's
"seer": {"ignore_eos": true}, llama-server's "ignore_eos": true). With --spec, seer's requests
ask for that speculation ("seer": {"spec": ...}).

With --probe N, a greedy request of N prompt tokens (not part of the trace) is sent alone
before the trace and again while the trace's second request is being served: whether its
text came out the same under load is reported (a server whose rows depend on the batch they
are computed in may not give the same).

Reported: requests done and failed, generated tokens per second over the trace (first
arrival to last completion), prompt tokens per second, and percentiles of the time to the
first token (from the request's arrival) and of the inter-token latency (gaps between
streamed tokens; a chunk of k tokens counts as one gap and k - 1 zero gaps). Standard
library only.
"""
import argparse
import http.client
import json
import random
import threading
import time


def one(a, ids, t_arrive, res):
    body = {"prompt": ids, "max_tokens": a.max_tokens, "temperature": 0, "stream": True}
    if a.server == "seer":
        body["seer"] = {"ignore_eos": True}
        if a.spec:
            body["seer"]["spec"] = a.spec
    else:
        body["ignore_eos"] = True
    r = {"prompt": len(ids), "tokens": 0, "ttft": None, "gaps": [], "error": None}
    try:
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.timeout)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        if resp.status != 200:
            r["error"] = "HTTP %d: %s" % (resp.status, resp.read()[:200])
        else:
            last = None
            for line in resp:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                ch = ev.get("choices") or [{}]
                if a.server == "seer":
                    if ch[0].get("finish_reason"):
                        r["tokens"] = len(ev.get("seer", {}).get("token_ids", []))
                        continue
                    k = len(ev.get("seer", {}).get("token_ids", [])) or 1
                else:
                    if not ch[0].get("text"):
                        continue
                    k = 1
                    r["tokens"] += 1
                now = time.perf_counter()
                if last is None:
                    r["ttft"] = now - t_arrive
                else:
                    r["gaps"].append(now - last)
                r["gaps"].extend([0.0] * (k - 1))
                last = now
        c.close()
    except Exception as e:  # a failed request is counted, not fatal
        r["error"] = repr(e)
    r["done"] = time.perf_counter()
    res.append(r)


def probe(a, ids, out):
    """A non-streamed greedy completion; its text (or the error) appended to out."""
    body = {"prompt": ids, "max_tokens": a.max_tokens, "temperature": 0}
    if a.server == "seer":
        body["seer"] = {"ignore_eos": True}
    else:
        body["ignore_eos"] = True
    try:
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.timeout)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        data = resp.read()
        c.close()
        out.append(json.loads(data)["choices"][0]["text"] if resp.status == 200 else "HTTP %d" % resp.status)
    except Exception as e:
        out.append("error: %r" % e)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--server", choices=["seer", "llama"], default="seer")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0.5, help="mean arrivals per second")
    ap.add_argument("--min-prompt", type=int, default=8192)
    ap.add_argument("--max-prompt", type=int, default=32768)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids are drawn below this")
    ap.add_argument("--spec", help="seer only: the speculation each request asks for")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--probe", type=int, default=0, help="prompt tokens of the greedy probe (0: none)")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    trace, t = [], 0.0
    for _ in range(a.requests):
        n = rng.randint(a.min_prompt, a.max_prompt)
        trace.append((t, [rng.randrange(100, a.vocab - 100) for _ in range(n)]))
        t += rng.expovariate(a.rate)
    probes, pids = [], [random.Random(a.seed + 1000).randrange(100, a.vocab - 100) for _ in range(a.probe)]
    if a.probe:
        probe(a, pids, probes)  # alone
    res, th = [], []
    t0 = time.perf_counter()
    if a.probe:  # again, while the second request of the trace arrives
        at = trace[1][0] if len(trace) > 1 else 0.0
        x = threading.Thread(target=lambda: (time.sleep(max(0.0, t0 + at + 0.5 - time.perf_counter())),
                                             probe(a, pids, probes)))
        x.start()
        th.append(x)
    for at, ids in trace:
        d = t0 + at - time.perf_counter()
        if d > 0:
            time.sleep(d)
        x = threading.Thread(target=one, args=(a, ids, time.perf_counter(), res))
        x.start()
        th.append(x)
    for x in th:
        x.join()
    ok = [r for r in res if not r["error"]]
    wall = max(r["done"] for r in res) - t0 if res else float("nan")
    toks = sum(r["tokens"] for r in ok)
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    gaps = [g for r in ok for g in r["gaps"]]
    out = {
        "server": a.server, "spec": a.spec or "", "requests": a.requests, "done": len(ok),
        "failed": len(res) - len(ok), "rate": a.rate, "prompt_tokens": sum(r["prompt"] for r in ok),
        "tokens": toks, "wall_s": wall, "tok_per_s": toks / wall if wall > 0 else 0,
        "prompt_tok_per_s": sum(r["prompt"] for r in ok) / wall if wall > 0 else 0,
        "ttft_s": {p: pct(ttft, p) for p in (50, 90, 99)},
        "itl_ms": {p: 1e3 * pct(gaps, p) for p in (50, 90, 99)},
        "errors": [r["error"] for r in res if r["error"]][:3],
    }
    if a.probe:
        out["probe_same_under_load"] = len(probes) == 2 and probes[0] == probes[1] and not probes[0].startswith(("HTTP", "error"))
        out["probe_texts"] = probes
    print("%-6s spec %-10s %d/%d done, %6.1f s: %7.1f tok/s out, %8.0f prompt tok/s; TTFT p50 %.2f p90 %.2f "
          "p99 %.2f s; ITL p50 %.1f p90 %.1f p99 %.1f ms" %
          (a.server, a.spec or "-", len(ok), a.requests, wall, out["tok_per_s"], out["prompt_tok_per_s"],
           out["ttft_s"][50], out["ttft_s"][90], out["ttft_s"][99], out["itl_ms"][50], out["itl_ms"][90],
           out["itl_ms"][99]))
    for e in out["errors"]:
        print("  error:", e)
    if a.probe:
        print("  probe of %d tokens, greedy, alone and under load: %s" %
              (a.probe, "same text" if out["probe_same_under_load"] else "DIFFERENT (%r)" % [p[:60] for p in probes]))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
