#!/usr/bin/env python3
"""serve-itl.py: inter-token latency of a stream on `seer serve` while long prompts arrive.

    scripts/serve-itl.py --seer build/seer --model models/smollm2-135m-instruct.gguf \
        [--port P] [--long 2048] [--n-long 3] [--stream-tokens 120] [--vocab 49152] \
        [--serve-args "--prefill-chunk 64 ..."]

Starts the server, then streams one greedy completion ("Once upon a time", end-of-sequence
ignored, no speculation) alone, and again while K prompts of N random token ids arrive one
after another (each sent 0.3 s after the previous one was answered, the first after the
stream's 5th token; max_tokens 1, not streamed). Prints p50, p99 and max of the stream's gaps
between tokens: alone, and the gaps that overlap a long prompt's time in flight (listed too).
Standard library only.
"""
import argparse
import http.client
import json
import random
import subprocess
import threading
import time


def stream(port, n, stamps, started):
    body = {"prompt": "Once upon a time", "max_tokens": n, "temperature": 0, "stream": True,
            "seer": {"ignore_eos": True, "spec": "none"}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    if resp.status != 200:
        started.set()
        raise SystemExit("stream: HTTP %d: %s" % (resp.status, resp.read()[:300]))
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        ch = ev.get("choices") or [{}]
        if ch[0].get("finish_reason"):
            continue
        k = len(ev.get("seer", {}).get("token_ids", [])) or 1
        now = time.perf_counter()
        stamps.extend([now] * k)
        if len(stamps) >= 5:
            started.set()
    started.set()
    c.close()


def long_prompt(port, ids):
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "seer": {"spec": "none"}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    data = resp.read()
    c.close()
    if resp.status != 200:
        raise SystemExit("long prompt: HTTP %d: %s" % (resp.status, data[:300]))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def summary(name, gaps):
    ms = [g * 1000 for g in gaps]
    print("%-28s n=%4d  p50 %8.1f ms  p99 %8.1f ms  max %8.1f ms" % (name, len(ms), pct(ms, 50), pct(ms, 99),
                                                                     max(ms) if ms else float("nan")), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=18231)
    ap.add_argument("--long", type=int, default=2048)
    ap.add_argument("--n-long", type=int, default=3)
    ap.add_argument("--stream-tokens", type=int, default=120)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--serve-args", default="")
    a = ap.parse_args()
    srv = subprocess.Popen([a.seer, "serve", "-m", a.model, "--port", str(a.port)] + a.serve_args.split(),
                           stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit("the server did not answer /health")
        # warm-up, then idle
        stream(a.port, 8, [], threading.Event())
        st = []
        stream(a.port, a.stream_tokens, st, threading.Event())
        idle = [y - x for x, y in zip(st, st[1:])]
        summary("idle", idle)
        # long prompts arriving while the stream decodes
        rng = random.Random(1)
        st, started, windows = [], threading.Event(), []
        th = threading.Thread(target=stream, args=(a.port, a.stream_tokens, st, started))
        th.start()
        started.wait()
        for _ in range(a.n_long):
            ids = [rng.randrange(100, a.vocab - 100) for _ in range(a.long)]
            t0 = time.perf_counter()
            long_prompt(a.port, ids)
            windows.append((t0, time.perf_counter()))
            time.sleep(0.3)
        th.join()
        gaps = [(x, y) for x, y in zip(st, st[1:])]
        # gaps that overlap a window in which a long prompt was in flight
        under = [y - x for x, y in gaps if any(x < w1 and y > w0 for w0, w1 in windows)]
        print("under-load gaps (ms):", " ".join("%d" % (g * 1000) for g in under), flush=True)
        summary("under long-prompt arrivals", under)
        summary("whole loaded stream", [y - x for x, y in gaps])
        print("long prompts: %s s each" % ", ".join("%.1f" % (w1 - w0) for w0, w1 in windows), flush=True)
        if len(st) < a.stream_tokens:  # events that carried no text are not seen
            print("stream: %d of %d tokens seen" % (len(st), a.stream_tokens))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
