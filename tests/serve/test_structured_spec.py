#!/usr/bin/env python3
"""test_structured_spec.py: greedy structured output is the same with every drafter, on the
backend `seer serve` picks (--backend auto: CUDA on a GPU machine, where ctest's gpu label
runs it, else the CPU).

stories260K, one JSON schema (a bounded string, an integer range, an array of an enum), greedy:
the answer with speculation off, then with the streaming, retrieval, snapkv, n-gram and
quantised-KV self-drafts and with streaming token trees, each requested through the request's
"seer" object. Every answer must be the very same text, valid JSON of the schema's shape, and
the drafters must have had drafts accepted (so the masks met the drafts, not only plain steps).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_serve as ts  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
SPECS = [{"spec": "none"}, {"spec": "streaming"}, {"spec": "retrieval"}, {"spec": "snapkv"}, {"spec": "ngram"},
         {"spec": "quantkv"}, {"spec": "streaming", "tree_size": 6}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    a = ap.parse_args()
    model = os.path.join(a.data, "models", "stories260K.gguf")
    if not os.path.exists(model):
        print("no stories260K.gguf: skipped")
        sys.exit(ts.SKIP)
    srv = ts.Server(a.seer, model, ["--backend", "auto", "--spec", "none", "--spec-kv-bits", "8", "--ctx", "512",
                                    "--parallel", "4"])
    try:
        ref = None
        for extra in SPECS:
            body = {"messages": [{"role": "user", "content": "Once upon a time a girl named Lily"}],
                    "max_tokens": 80, "temperature": 0, "seer": extra,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}
            st, data = ts.raw(srv.port, "POST", "/v1/chat/completions", json.dumps(body))
            ts.check(st == 200, f"{extra}: {st} {data[:300]!r}")
            r = json.loads(data)
            c = r["choices"][0]
            txt = c["message"]["content"]
            v = json.loads(txt)
            ts.check(set(v) == {"name", "age", "tags"} and len(v["name"]) <= 12 and 0 <= v["age"] <= 120 and
                     len(v["tags"]) <= 3 and all(t in "abc" for t in v["tags"]), f"{extra}: {txt!r}")
            if ref is None:
                ref = txt
            ts.check(txt == ref, f"{extra}: {txt!r} against speculation off {ref!r}")
            sr = c.get("seer") or r.get("seer") or {}
            if extra["spec"] != "none":
                ts.check(sr.get("accepted", 0) > 0, f"{extra}: no draft accepted ({sr})")
            print(f"{json.dumps(extra):40s} drafted {sr.get('drafted')} accepted {sr.get('accepted')}: {txt}")
    finally:
        srv.kill()
    print("structured output, speculation on vs off: all ok")


if __name__ == "__main__":
    main()
