#!/usr/bin/env python3
"""bench-serve.py: load on a running `seer serve` from N concurrent streaming clients.

    scripts/bench-serve.py --port 8080 --clients 16 --requests 64 --max-tokens 128 \
        [--prompt TEXT] [--api-key KEY] [--spec ngram]

Each client sends its requests one after the other (greedy, ignore_eos so that every request
generates max_tokens); the script reports the generated tokens per second over the whole
run, and percentiles of time to first token and of inter-token latency as the clients see
them (from the arrival of each streamed chunk). Standard library only.
"""
import argparse
import http.client
import json
import threading
import time


def one(port, key, body, ttft, itl, counts):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers=h)
    r = c.getresponse()
    last, n = None, 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev["choices"][0]["finish_reason"]:
            n = len(ev["seer"]["token_ids"])
            continue
        now = time.perf_counter()
        if last is None:
            ttft.append(now - t0)
        else:
            itl.append(now - last)
        last = now
    c.close()
    counts.append(n)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--spec")
    a = ap.parse_args()
    body = {"prompt": a.prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
            "seer": {"ignore_eos": True}}
    if a.spec:
        body["seer"]["spec"] = a.spec
    ttft, itl, counts = [], [], []
    left = [a.requests]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            one(a.port, a.api_key, body, ttft, itl, counts)

    t0 = time.perf_counter()
    th = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.perf_counter() - t0
    print(f"clients {a.clients} requests {a.requests} max_tokens {a.max_tokens} spec {a.spec or 'none'}: "
          f"{sum(counts)} tokens in {dt:.2f} s = {sum(counts) / dt:.0f} tok/s; "
          f"TTFT p50 {pct(ttft, 50) * 1e3:.1f} ms p95 {pct(ttft, 95) * 1e3:.1f} ms; "
          f"ITL p50 {pct(itl, 50) * 1e3:.2f} ms p95 {pct(itl, 95) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
