#!/usr/bin/env python3
"""ref-greedy.py: llama.cpp's tokenizer and greedy fixtures for a model, for test_real_models.c.

    scripts/ref-greedy.py NAME --prompts FILE [--corpus FIXTURE] [--steps N] [--threads N]

Writes tests/fixtures/NAME/greedy.tsv: each prompt of FILE (one per line, escaped as the
fixtures are: \\n \\t \\\\ \\xHH), tokenized with add_special and parse_special, then N greedy
tokens (argmax, not stopping at end-of-text) and llama.cpp's top-1 minus top-2 logit at each
step, computed on a copy of models/NAME.gguf converted to F32 by llama.cpp's own quantizer
(so that both engines multiply the same dequantised weights). With --corpus (another model's
tokenize.tsv) it also writes tests/fixtures/NAME/tokenize.tsv: the same texts and flags,
with this model's ids. Then scripts/ref-logits.py NAME adds logits.tsv.

Needs llama-cpp-python 0.3.36 built from source (see scripts/ref-logits.py).
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ref_logits = __import__("ref-logits")

VERSION = ref_logits.VERSION
HEADER = ("made by scripts/ref-greedy.py with llama-cpp-python %s (its vendored llama.cpp, commit\n"
          "# 0c1e570) on the CPU" % VERSION)


def tokenize_fixture(llm, corpus, out, name):
    lines = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            flags, text = line.split("\t")[:2]
            ids = llm.tokenize(ref_logits.unescape(text), add_bos="b" in flags, special="s" in flags)
            lines.append("%s\t%s\t%s" % (flags, text, " ".join(str(i) for i in ids)))
    with open(out, "w", encoding="utf-8") as f:
        f.write("# Token ids of a varied corpus for %s, %s,\n# llama_tokenize(text, add_special = "
                "flags has b, parse_special = flags has s).\n# flags<TAB>text (escaped: \\\\ \\n "
                "\\t \\r \\xHH)<TAB>ids\n" % (name, HEADER))
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--corpus")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models-dir", default=os.environ.get("SEER_MODELS_DIR", "models"))
    a = ap.parse_args()
    if llama_cpp.__version__ != VERSION:
        sys.exit("ref-greedy: llama-cpp-python %s, the fixtures need %s" % (llama_cpp.__version__, VERSION))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fx = os.path.join(root, "tests", "fixtures", a.name)
    os.makedirs(fx, exist_ok=True)
    model = os.path.join(a.models_dir, a.name + ".gguf")
    with open(a.prompts, encoding="utf-8") as f:
        texts = [l.rstrip("\n") for l in f if l.strip()]
    if a.corpus:
        voc = Llama(model_path=model, vocab_only=True, verbose=False)
        tokenize_fixture(voc, a.corpus, os.path.join(fx, "tokenize.tsv"), a.name)
        del voc
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, a.name + ".f32.gguf")
        ref_logits.to_f32(model, f32, a.threads)
        llm = Llama(model_path=f32, logits_all=True, n_ctx=512, n_batch=512, n_ubatch=512,
                    n_threads=a.threads, n_threads_batch=a.threads, type_k=llama_cpp.GGML_TYPE_F32,
                    type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False, verbose=False)
        for text in texts:
            prompt = llm.tokenize(ref_logits.unescape(text), add_bos=True, special=True)
            llm.reset()
            llm.eval(prompt)
            gen, margins = [], []
            for _ in range(a.steps):
                r = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                top = int(np.argmax(r))
                s = np.sort(r)
                gen.append(top)
                margins.append(float(s[-1] - s[-2]))
                llm.eval([top])
            rows.append("%s\t%s\t%s\t%s" % (text, " ".join(map(str, prompt)), " ".join(map(str, gen)),
                                            " ".join("%.3f" % m for m in margins)))
        del llm
    with open(os.path.join(fx, "greedy.tsv"), "w", encoding="utf-8") as f:
        f.write("# Greedy continuations for %s (%d tokens each, argmax, not stopping at end-of-text\n"
                "# tokens), %s in f32: the GGUF file was first converted to F32\n"
                "# by llama_model_quantize, so both engines multiply the same dequantised weights.\n"
                "# Prompts tokenized with add_special = true, parse_special = true.\n"
                "# prompt (escaped)<TAB>prompt ids<TAB>generated ids<TAB>reference top-1 minus top-2 "
                "logit per step\n" % (a.name, a.steps, HEADER))
        f.write("\n".join(rows) + "\n")
    print("wrote %s/greedy.tsv (%d prompts)" % (fx, len(rows)))


if __name__ == "__main__":
    main()
