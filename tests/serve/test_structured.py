#!/usr/bin/env python3
"""test_structured.py: structured output and logit_bias through `seer serve`, driven by the
official `openai` client on a real instruct model (SmolLM2-135M-Instruct by default, fetched
by scripts/get-model.sh; --model names another, e.g. Qwen2.5-Coder-1.5B).

- response_format json_schema: `client.beta.chat.completions.parse` with a Pydantic model
  gives a parsed object; every schema of tests/data/schemas/ (52 of real-world shape) gives
  JSON that validates against it (the `jsonschema` package, test-only), through chat and
  through completions, and the conformance rate is printed;
- response_format json_object gives a JSON object; the `grammar` extension (extra_body) gives
  text the grammar accepts; greedy output under a schema is the same with speculation on and
  off (n-gram, which drafts the grammar's forced tokens);
- logit_bias: -100 on the token greedy would emit changes it, +100 on a token makes it the
  output; bad values, unsupported schema keywords, malformed grammars and a grammar beside a
  schema each get a 400 naming the field.

Exit 77 (CTest's skip) when the model is absent or the packages can be neither imported nor
installed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_serve as ts  # noqa: E402  (the server fixture and the client's environment)

SKIP = 77
MODEL = None  # the id the server serves (main() asks /v1/models)


def ensure_packages():
    """openai and jsonschema, in the virtual environment test_serve.py uses when missing."""
    try:
        import jsonschema  # noqa: F401
        import openai  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("SEER_TEST_IN_VENV"):
        print("openai or jsonschema is not importable in the test environment: skipped")
        sys.exit(SKIP)
    places = [os.environ.get("SEER_TEST_VENV") or os.path.expanduser("~/.cache/seer/test-venv"),
              os.path.join(tempfile.gettempdir(), f"seer-test-venv-{os.getuid()}")]
    for venv in places:
        py = os.path.join(venv, "bin", "python")
        try:
            if not os.path.exists(py):
                subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
            if subprocess.run([py, "-c", "import openai, jsonschema"], capture_output=True).returncode != 0:
                subprocess.run([py, "-m", "pip", "install", "-q", "openai", "jsonschema"], check=True, timeout=600)
            os.execve(py, [py] + sys.argv, dict(os.environ, SEER_TEST_IN_VENV="1"))
        except (subprocess.SubprocessError, OSError) as e:
            why = e
    print(f"cannot install openai and jsonschema ({why}): skipped")
    sys.exit(SKIP)


def client(port):
    import openai
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=ts.KEY, max_retries=0, timeout=600)


def post(port, path, body):
    st, data = ts.raw(port, "POST", path, json.dumps(body))
    return st, json.loads(data) if data else None


def expect_400(port, path, body, param, what):
    st, r = post(port, path, body)
    ts.check(st == 400 and r["error"]["param"] == param and r["error"]["type"] == "invalid_request_error",
             f"{what}: want a 400 naming {param}: {st} {r}")
    return r["error"]["message"]


def test_parse(port):
    """client.beta.chat.completions.parse with a Pydantic model (strict json_schema)."""
    from typing import List, Literal, Optional

    from pydantic import BaseModel, Field

    class Pet(BaseModel):
        name: str = Field(max_length=20)
        species: Literal["dog", "cat", "bird"]

    class Person(BaseModel):
        name: str = Field(max_length=30)
        age: int = Field(ge=0, le=120)
        pets: List[Pet] = Field(max_length=2)
        nickname: Optional[str] = Field(max_length=20)

    cl = client(port)
    parse = cl.beta.chat.completions.parse if hasattr(cl, "beta") and hasattr(cl.beta, "chat") \
        else cl.chat.completions.parse
    r = parse(model=MODEL, messages=[{"role": "user", "content": "Describe a person with a pet as JSON."}],
              response_format=Person, max_tokens=300, temperature=0)
    msg = r.choices[0].message
    ts.check(r.choices[0].finish_reason == "stop", f"parse: finish {r.choices[0].finish_reason}: {msg.content!r}")
    ts.check(isinstance(msg.parsed, Person), f"parse: not a Person: {msg.content!r}")
    print(f"parse: {msg.parsed!r}")


def test_schemas(port, schema_dir, spec, min_rate):
    """Every schema of the set gives JSON that validates against it: every output that ended by
    itself (finish "stop") validates, and at least min_rate of all of them do (a small model
    can loop inside a string or a recursive structure until max_tokens cuts it)."""
    import jsonschema
    cl = client(port)
    names = sorted(f for f in os.listdir(schema_dir) if f.endswith(".json"))
    ts.check(len(names) >= 50, f"{len(names)} schemas")
    valid, bad = 0, []
    for i, name in enumerate(names):
        schema = json.load(open(os.path.join(schema_dir, name)))
        title = name[:-5]
        fmt = {"type": "json_schema", "json_schema": {"name": title, "schema": schema, "strict": True}}
        prompt = f"Give an example {title.replace('_', ' ')} as JSON."
        if i % 5 == 4:  # every fifth through /v1/completions
            r = cl.completions.create(model=MODEL, prompt=prompt + "\n", max_tokens=600, temperature=0,
                                      extra_body={"response_format": fmt, "seer": {"spec": spec}})
            text, fin = r.choices[0].text, r.choices[0].finish_reason
        else:
            r = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=600, temperature=0, response_format=fmt,
                                           extra_body={"seer": {"spec": spec}})
            text, fin = r.choices[0].message.content, r.choices[0].finish_reason
        try:
            jsonschema.validate(json.loads(text), schema)
            valid += 1
            ok = "valid"
        except (ValueError, jsonschema.ValidationError) as e:
            bad.append((name, fin, str(e)[:120], text[:200]))
            ok = "INVALID"
        print(f"  {name}: {ok} ({fin}, {len(text)} bytes)", flush=True)
    rate = valid / len(names)
    cut = sum(1 for b in bad if b[1] == "length")
    print(f"schema conformance: {valid}/{len(names)} valid ({100 * rate:.1f} %), {cut} cut by max_tokens, spec {spec}")
    for b in bad:
        print("  invalid:", b)
    ts.check(cut == len(bad), f"{len(bad) - cut} outputs that ended by themselves do not validate")
    ts.check(rate >= min_rate, f"conformance {rate:.3f} below {min_rate}")


def test_json_object_and_grammar(port):
    cl = client(port)
    # a small model loops inside free-form JSON unless shown the shape: a pattern to follow
    r = cl.completions.create(model=MODEL, prompt='Colours: {"colours": ["red", "blue"]}\nFruits:', max_tokens=200,
                              temperature=0, extra_body={"response_format": {"type": "json_object"}})
    text = r.choices[0].text
    ts.check(r.choices[0].finish_reason == "stop" and isinstance(json.loads(text), dict), f"json_object: {text!r}")
    gram = 'root ::= ("yes" | "no") ", because " [a-z ]{1,40} "."'
    for kind in ("chat", "completions"):
        if kind == "chat":
            r = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Is the sky blue?"}],
                                           max_tokens=60, temperature=0.7, seed=5, extra_body={"grammar": gram})
            text = r.choices[0].message.content
        else:
            r = cl.completions.create(model=MODEL, prompt="Is the sky blue? Answer:", max_tokens=60, temperature=0,
                                      extra_body={"grammar": gram})
            text = r.choices[0].text
        ts.check(re.fullmatch(r"(yes|no), because [a-z ]{1,40}\.", text) is not None, f"grammar {kind}: {text!r}")
    # streaming gives the same text as a whole answer
    body = {"messages": [{"role": "user", "content": "Is the sky blue?"}], "max_tokens": 60, "temperature": 0,
            "grammar": gram}
    whole = post(port, "/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]
    stream = cl.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=60, temperature=0,
                                        stream=True, extra_body={"grammar": gram})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    ts.check(text == whole, f"grammar stream {text!r} vs {whole!r}")
    print(f"json_object and grammar: ok ({whole!r})")


def test_spec_same(port, schema_dir):
    """Greedy under a schema: speculation on (n-gram, with forced tokens drafted) and off agree."""
    schema = json.load(open(os.path.join(schema_dir, "order.json")))
    fmt = {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}}
    outs = {}
    for spec in ("none", "ngram"):
        st, r = post(port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "An order as JSON."}], "max_tokens": 300, "temperature": 0,
            "response_format": fmt, "seer": {"spec": spec, "gamma": 6}})
        ts.check(st == 200, f"spec {spec}: {st} {r}")
        outs[spec] = r
    a, b = outs["none"], outs["ngram"]
    ts.check(a["seer"]["token_ids"] == b["seer"]["token_ids"], "speculation changed the output under a schema")
    ts.check(b["seer"]["drafted"] > 0 and b["seer"]["accepted"] > 0, f"nothing drafted: {b['seer']}")
    print(f"speculation under a schema: same ids; n-gram drafted {b['seer']['drafted']}, "
          f"accepted {b['seer']['accepted']}, for {len(b['seer']['token_ids'])} tokens")


def test_logit_bias(port):
    body = {"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}
    st, ref = post(port, "/v1/completions", body)
    ts.check(st == 200, f"reference: {st}")
    first = ref["seer"]["token_ids"][0]
    st, r = post(port, "/v1/completions", dict(body, logit_bias={str(first): -100}))
    ts.check(st == 200 and r["seer"]["token_ids"][0] != first, f"logit_bias -100: {r}")
    st, r = post(port, "/v1/completions", dict(body, logit_bias={"42": 100}, seer={"spec": "ngram"}))
    ts.check(st == 200 and r["seer"]["token_ids"] == [42] * 5, f"logit_bias +100: {r}")
    # the openai client's own field
    r = client(port).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=3, temperature=0, logit_bias={"42": 100})
    ts.check(r.choices[0].finish_reason == "length", f"chat logit_bias: {r}")
    print("logit_bias: ok")


def test_refusals(port):
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    for lb in ({"x": 1}, {"5": 101}, {"5": "a"}, {"-1": 1}, {"99999999": 1}, [1]):
        expect_400(port, "/v1/chat/completions", dict(chat, logit_bias=lb), "logit_bias", f"logit_bias {lb}")
    for rf in ({"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"schema": {}}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://x"}}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}},
               {"type": "text", "extra": 1}, "json"):
        msg = expect_400(port, "/v1/chat/completions", dict(chat, response_format=rf), "response_format", f"{rf}")
    ts.check("not" in msg or "object" in msg or "type" in msg, f"message: {msg}")
    msg = expect_400(port, "/v1/chat/completions", dict(chat, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "patternProperties": {}}}}),
        "response_format", "patternProperties")
    ts.check("patternProperties" in msg, f"the keyword is named: {msg}")
    for g in ("root ::= \"a", "root ::= x", "root ::= root \"a\"", "x ::= \"a\"", 5, "root ::= [\u00e9]"):
        expect_400(port, "/v1/completions", {"prompt": "a", "grammar": g}, "grammar", f"grammar {g!r}")
    expect_400(port, "/v1/chat/completions", dict(chat, grammar='root ::= "a"',
                                                  response_format={"type": "json_object"}), "grammar", "both")
    # the server is alive and well afterwards
    st, r = post(port, "/v1/completions", {"prompt": "a", "max_tokens": 2, "grammar": 'root ::= "ok"'})
    ts.check(st == 200 and r["choices"][0]["text"] == "ok", f"after refusals: {st} {r}")
    print("refusals: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                                                    "smollm2-135m-instruct.gguf"))
    ap.add_argument("--schemas", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                      "schemas"))
    ap.add_argument("--spec", default="ngram", help="speculation of the conformance run")
    ap.add_argument("--min-rate", type=float, default=0.9,
                    help="least share of valid outputs (SmolLM2-135M loops in a few; 1 for larger models)")
    ap.add_argument("--only", default="", help="comma-separated test names (default: all)")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    if not os.path.exists(a.model):
        print(f"no {a.model} (scripts/get-model.sh smollm2-135m-instruct): skipped")
        sys.exit(SKIP)
    ensure_packages()
    srv = ts.Server(a.seer, a.model, ["--max-requests", "8", "--ctx", "2048"])
    global MODEL
    try:
        MODEL = client(srv.port).models.list().data[0].id
        for name, fn in (("refusals", lambda: test_refusals(srv.port)), ("logit_bias", lambda: test_logit_bias(srv.port)),
                         ("grammar", lambda: test_json_object_and_grammar(srv.port)),
                         ("parse", lambda: test_parse(srv.port)), ("spec", lambda: test_spec_same(srv.port, a.schemas)),
                         ("schemas", lambda: test_schemas(srv.port, a.schemas, a.spec, a.min_rate))):
            if not only or name in only:
                fn()
    finally:
        srv.kill()
    print("test_structured: all ok")


if __name__ == "__main__":
    main()
