#!/usr/bin/env python3
"""ref-logits.py: llama.cpp's logits along the greedy fixture, for tests/test_real_models.c.

    scripts/ref-logits.py NAME [--top K] [--threads N] [--out FILE] [--save-full DIR]

For each prompt of tests/fixtures/NAME/greedy.tsv, llama.cpp evaluates the prompt ids followed
by the fixture's greedy ids (teacher forcing: the same tokens whatever it would pick itself)
and keeps the logits that predict each of those greedy tokens. It does so twice: on
models/NAME.gguf as stored (quantised weights; ggml multiplies them by 8-bit activations,
Q8_1 for Q4_1/Q5_1, Q8_0 for Q4_0/Q5_0/Q8_0, Q8_K for the K-quants) and on a copy converted to
F32 by llama.cpp's own quantizer (llama_model_quantize, ftype ALL_F32, allow_requantize: every
tensor dequantised with ggml's code, as greedy.tsv was made). Writes
tests/fixtures/NAME/logits.tsv: per prompt, weights kind and step, llama.cpp's top K token ids
and their logits. It also prints, per run, where its own greedy pick differs from the
fixture's ids and the smallest top-1/top-2 margin.

Needs llama-cpp-python 0.3.36 (the package whose vendored llama.cpp, commit 0c1e570, made the
fixtures), built from source on the CPU:
    python3 -m venv /tmp/lcp && CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" \\
        /tmp/lcp/bin/pip install llama-cpp-python==0.3.36 numpy
    /tmp/lcp/bin/python scripts/ref-logits.py smollm2-135m-instruct
(about 20 minutes of building on two cores). The KV cache is kept in f32 (type_k/type_v F32,
no flash attention) as seer keeps it, so the two engines differ in their matmuls only.
--save-full DIR also writes every row of logits as DIR/NAME.{stored,f32}.npy
([prompts, steps, V] float32), for measuring beyond the top K.

Not for: the tokenizer fixtures or greedy.tsv itself (those were made with llama.cpp's tools).
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

VERSION = "0.3.36"


def unescape(s):
    out, i = bytearray(), 0
    b = s.encode("utf-8")
    while i < len(b):
        c = b[i]
        if c == 0x5C and i + 1 < len(b):
            n = chr(b[i + 1])
            if n in "ntr\\":
                out += {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}[n]
                i += 2
                continue
            if n == "x" and i + 3 < len(b) + 1:
                out.append(int(b[i + 2:i + 4], 16))
                i += 4
                continue
        out.append(c)
        i += 1
    return bytes(out)


def read_greedy(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            text, prompt, gen, _margins = line.split("\t")
            rows.append((unescape(text), [int(v) for v in prompt.split()],
                         [int(v) for v in gen.split()]))
    return rows


def to_f32(src, dst, threads):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    p.allow_requantize = True
    p.nthread = threads
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p) != 0:
        sys.exit("ref-logits: llama_model_quantize to F32 failed")


def run(path, prompts, threads):
    """[prompt][step] -> logits row (float32 [V]) predicting greedy token `step`."""
    n_ctx = max(len(p) + len(g) for _, p, g in prompts) + 8
    llm = Llama(model_path=path, logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                n_threads=threads, n_threads_batch=threads, type_k=llama_cpp.GGML_TYPE_F32,
                type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False, verbose=False)
    out = []
    for i, (text, prompt, gen) in enumerate(prompts):
        ids = llm.tokenize(text, add_bos=True, special=True)
        if ids != prompt:
            sys.exit("ref-logits: prompt %d tokenizes as %s, the fixture says %s" % (i, ids, prompt))
        llm.reset()
        llm.eval(prompt + gen[:-1])
        n = len(prompt)
        out.append(np.array(llm.scores[n - 1:n - 1 + len(gen)], dtype=np.float32))
    del llm
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models-dir", default=os.environ.get("SEER_MODELS_DIR", "models"))
    ap.add_argument("--out")
    ap.add_argument("--save-full")
    a = ap.parse_args()
    if llama_cpp.__version__ != VERSION:
        sys.exit("ref-logits: llama-cpp-python %s, the fixtures need %s" % (llama_cpp.__version__, VERSION))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fx = os.path.join(root, "tests", "fixtures", a.name)
    model = os.path.join(a.models_dir, a.name + ".gguf")
    prompts = read_greedy(os.path.join(fx, "greedy.tsv"))
    runs = {}
    runs["stored"] = run(model, prompts, a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, a.name + ".f32.gguf")
        to_f32(model, f32, a.threads)
        runs["f32"] = run(f32, prompts, a.threads)
    lines = []
    for kind in ("stored", "f32"):
        for p, rows in enumerate(runs[kind]):
            gen = prompts[p][2]
            picks = [int(np.argmax(r)) for r in rows]
            differ = [t for t in range(len(gen)) if picks[t] != gen[t]]
            margins = [float(np.sort(r)[-1] - np.sort(r)[-2]) for r in rows]
            print("%s prompt %d (%s): greedy picks differ from greedy.tsv at steps %s; "
                  "smallest top-2 margin %.4f (step %d)" %
                  (a.name, p, kind, differ or "none", min(margins), int(np.argmin(margins))))
            for t, r in enumerate(rows):
                top = np.argsort(-r, kind="stable")[:a.top]
                lines.append("%d\t%s\t%d\t%s\t%s" % (p, kind, t, " ".join(str(int(i)) for i in top),
                                                  " ".join("%.5f" % r[i] for i in top)))
        if a.save_full:
            os.makedirs(a.save_full, exist_ok=True)
            np.save(os.path.join(a.save_full, "%s.%s.npy" % (a.name, kind)), np.stack(runs[kind]))
    out = a.out or os.path.join(fx, "logits.tsv")
    with open(out, "w", encoding="utf-8") as f:
        f.write(
            "# llama.cpp's logits along the greedy continuations of greedy.tsv for %s, made by\n"
            "# scripts/ref-logits.py with llama-cpp-python %s (its vendored llama.cpp, commit\n"
            "# 0c1e570) on the CPU: the prompt ids and the greedy ids evaluated as one batch (teacher\n"
            "# forcing), KV cache in f32, no flash attention. weights 'stored': the GGUF file as it is\n"
            "# (ggml's 8-bit activations); 'f32': a copy converted to F32 by llama_model_quantize.\n"
            "# Step t is the row that predicts greedy token t. Regenerate with\n"
            "#   scripts/ref-logits.py %s\n"
            "# prompt<TAB>weights<TAB>step<TAB>top-%d ids, best first<TAB>their logits\n"
            % (a.name, VERSION, a.name, a.top))
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d rows)" % (out, len(lines)))


if __name__ == "__main__":
    main()
