#!/usr/bin/env python3
"""test_tools.py: tool calling in `seer serve` through the official `openai` client.

On stories260K (always; the model cannot call tools, so nothing here depends on what it
chooses): a request with tools (tool_choice auto) is answered, its prompt holding the rendered
tools (more prompt tokens than without; tool_choice "none" renders none); the round trip's
second half, an assistant message with tool_calls and a tool message (tool_call_id) sent back,
is accepted and rendered (its calls and the result count as prompt tokens); streamed and whole
answers agree; tool_choice "required" and a named function make even this model call (the
output constrained to one call: finish_reason "tool_calls", the named function, arguments
that follow its parameters, whole and streamed); a named function not among the tools, a forced
call beside response_format, tool_choice without tools and malformed tools or tool calls are
refused with a 400 naming the field. The parsing of the model's output into
tool_calls is tested on fixed strings in C (tests/serve/test_tools_parse.c), the rendering in
tests/test_chat_tools.c.

On Qwen2.5-Coder-0.5B-Instruct when models/qwen2.5-coder-0.5b-instruct.gguf is there
(scripts/get-model.sh; else this part is skipped and says so): the whole round trip with the
model's own choice, greedy: a question with a weather tool gives finish_reason "tool_calls"
and a get_weather call whose arguments parse as JSON naming the city, whole and streamed (the
stream's deltas: index, id and name, then the arguments), and the tool's result sent back gets
an answer.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_serve as ts  # noqa: E402

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# closed argument values, so that a forced call is whole within max_tokens on any model
TWO = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": False}}},
       {"type": "function", "function": {
           "name": "get_time", "parameters": {"type": "object", "properties": {
               "zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"],
               "additionalProperties": False}}}]


def test_tiny(cl, port):
    import openai
    M = "stories260K"
    msgs = [{"role": "user", "content": "Tell me a story"}]
    plain = cl.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0)
    r = cl.chat.completions.create(model=M, messages=msgs, tools=WEATHER, max_tokens=12, temperature=0)
    c = r.choices[0]
    ts.check(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, f"tools not rendered: {r.usage}")
    ts.check(c.finish_reason in ("stop", "length", "tool_calls"), f"finish {c.finish_reason}")
    if c.message.tool_calls:  # whatever the model chose, what comes back is well formed
        for t in c.message.tool_calls:
            ts.check(t.function.name == "get_weather" and isinstance(json.loads(t.function.arguments), dict), f"{t}")
    none = cl.chat.completions.create(model=M, messages=msgs, tools=WEATHER, tool_choice="none", max_tokens=12,
                                      temperature=0)
    ts.check(none.usage.prompt_tokens == plain.usage.prompt_tokens and
             none.choices[0].message.content == plain.choices[0].message.content, "tool_choice none")
    # streamed: the same answer (content, or the same calls)
    text, calls = "", {}
    for ch in cl.chat.completions.create(model=M, messages=msgs, tools=WEATHER, max_tokens=12, temperature=0,
                                         stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        text += d.content or ""
        for t in d.tool_calls or []:
            e = calls.setdefault(t.index, {"name": "", "arguments": ""})
            e["name"] += (t.function.name or "") if t.function else ""
            e["arguments"] += (t.function.arguments or "") if t.function else ""
    ts.check(text == (c.message.content or ""), f"stream {text!r} vs {c.message.content!r}")
    ts.check(len(calls) == len(c.message.tool_calls or []), "streamed calls")
    # the round trip's second half: the call and its result in the conversation
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    back = msgs + [{"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'}]
    r2 = cl.chat.completions.create(model=M, messages=back, tools=WEATHER, max_tokens=12, temperature=0)
    ts.check(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), "round trip")
    ts.check(r2.usage.prompt_tokens > r.usage.prompt_tokens + 10, f"call and result not rendered: {r2.usage}")
    # a forced call (required, or a named function): the constraint makes even this model call
    for choice, name in (("required", None), ({"type": "function", "function": {"name": "get_time"}}, "get_time")):
        for stream in (False, True):
            kw = dict(model=M, messages=msgs, tools=TWO, tool_choice=choice, max_tokens=120, temperature=0)
            if stream:
                got = {}
                fin = None
                for ch in cl.chat.completions.create(stream=True, **kw):
                    if not ch.choices:
                        continue
                    fin = ch.choices[0].finish_reason or fin
                    for t in ch.choices[0].delta.tool_calls or []:
                        e = got.setdefault(t.index, {"name": "", "arguments": ""})
                        e["name"] += (t.function.name or "") if t.function else ""
                        e["arguments"] += (t.function.arguments or "") if t.function else ""
                calls = [(e["name"], e["arguments"]) for _, e in sorted(got.items())]
            else:
                rr = cl.chat.completions.create(**kw)
                fin = rr.choices[0].finish_reason
                calls = [(t.function.name, t.function.arguments) for t in rr.choices[0].message.tool_calls or []]
            ts.check(fin == "tool_calls" and len(calls) == 1, f"forced {choice} stream={stream}: {fin} {calls}")
            nm, args = calls[0]
            ts.check(name is None and nm in ("get_weather", "get_time") or nm == name, f"forced {choice}: {nm}")
            a_ = json.loads(args)
            want = {"get_weather": ("city", ("Paris", "Rome")), "get_time": ("zone", ("UTC", "CET"))}[nm]
            ts.check(set(a_) == {want[0]} and a_[want[0]] in want[1], f"forced {choice}: arguments {args}")
    # refusals
    for kw, param in (({"tools": WEATHER, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                       "tool_choice"),
                      ({"tools": WEATHER, "tool_choice": "required", "response_format": {"type": "json_object"}},
                       "tool_choice"),
                      ({"tools": WEATHER, "tool_choice": {"type": "function"}}, "tool_choice"),
                      ({"tool_choice": "auto"}, "tool_choice"),
                      ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
                      ({"tools": [{"type": "function"}]}, "tools")):
        try:
            cl.chat.completions.create(model=M, messages=msgs, max_tokens=4, **kw)
            ts.fail(f"{kw}: accepted")
        except openai.BadRequestError as e:
            ts.check(e.body.get("param") == param, f"{kw}: {e.body}")
    for bad in ([{"role": "user", "content": "x", "tool_calls": [call]}],
                [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": 3}}]}],
                [{"role": "tool", "content": "x", "tool_call_id": 5}]):
        st, data = ts.raw(port, "POST", "/v1/chat/completions", json.dumps({"messages": bad, "max_tokens": 2}))
        ts.check(st == 400 and json.loads(data)["error"]["param"] == "messages", f"{bad}: {st} {data[:200]!r}")
    print("tools (stories260K): ok")


def test_qwen(seer, model):
    import openai
    srv = ts.Server(seer, model, ["--ctx", "4096", "--parallel", "2", "--spec", "none"])
    try:
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=ts.KEY, max_retries=0, timeout=300)
        M = "qwen2.5-coder-0.5b-instruct"
        msgs = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
        r = cl.chat.completions.create(model=M, messages=msgs, tools=WEATHER, max_tokens=60, temperature=0)
        c = r.choices[0]
        ts.check(c.finish_reason == "tool_calls" and c.message.tool_calls, f"qwen: no call: {c}")
        t = c.message.tool_calls[0]
        ts.check(t.type == "function" and t.function.name == "get_weather" and t.id, f"qwen call {t}")
        ts.check("paris" in json.loads(t.function.arguments).get("city", "").lower(), f"qwen args {t}")
        deltas = [ch.choices[0].delta for ch in cl.chat.completions.create(
            model=M, messages=msgs, tools=WEATHER, max_tokens=60, temperature=0, stream=True) if ch.choices]
        td = [x.tool_calls[0] for x in deltas if x.tool_calls]
        ts.check(len(td) >= 2 and td[0].id and td[0].function.name == "get_weather" and
                 "".join(x.function.arguments or "" for x in td) == t.function.arguments, f"qwen stream {td}")
        back = msgs + [c.message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": t.id, "content": '{"temp_c": 18, "sky": "sunny"}'}]
        r2 = cl.chat.completions.create(model=M, messages=back, tools=WEATHER, max_tokens=60, temperature=0)
        ts.check(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"qwen answer {r2}")
        print("tools (Qwen2.5-Coder-0.5B, the model's own call): ok")
    finally:
        srv.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", required=True)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    ap.add_argument("--models", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                     "models"))
    a = ap.parse_args()
    model = os.path.join(a.data, "models", "stories260K.gguf")
    if not os.path.exists(model):
        print("no stories260K.gguf: skipped")
        sys.exit(ts.SKIP)
    ts.ensure_openai()
    import openai
    # the tool text is longer than stories260K's 512 tokens of trained context
    srv = ts.Server(a.seer, model, ["--parallel", "4", "--batch", "64", "--ctx", "4096", "--ctx-beyond-trained"])
    try:
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=ts.KEY, max_retries=0, timeout=120)
        test_tiny(cl, srv.port)
    finally:
        srv.kill()
    qwen = os.path.join(a.models, "qwen2.5-coder-0.5b-instruct.gguf")
    if os.path.exists(qwen):
        test_qwen(a.seer, qwen)
    else:
        print(f"no {qwen}: the real model's round trip is skipped")
    print("test_tools: all ok")


if __name__ == "__main__":
    main()
