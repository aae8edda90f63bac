#!/usr/bin/env python3
"""hf_peer.py: the peer line of `seer bench`: Hugging Face transformers decoding the same
synthetic model shape at the same context depth L and batch B, timed the way seer bench times
plain decoding, written as JSON for `seer bench --peer FILE.json`.

What it runs is what a user of transformers gets by default: LlamaForCausalLM (Qwen2ForCausalLM
for the qwen2 shapes) in bf16 with random weights, attention through PyTorch SDPA, eager mode
(no torch.compile), and a DynamicCache, the cache model.generate() makes unless told
otherwise. Each sequence's cache is filled with L slots of random bf16 K/V (the values do not
change the timing); one step decodes one token per sequence at position L, copies the last
logits of every sequence to the host as f32 (seer's step ends the same way), and is cropped
back to L cached slots afterwards. Median of --steps after --warmup; on a GPU each step is
timed with CUDA events around the forward call and the logits copy.

Not for: real weights, generation quality, or other caches and compiled paths (a StaticCache
under torch.compile is another configuration, not the default one).
"""
import argparse
import datetime
import gc
import json
import os
import sys
import time

# The same table as seer's synthetic shapes (src/model/synthetic.c): name -> arch, n_vocab,
# dim, n_layers, n_heads, n_kv_heads, ffn_dim, trained context, rope base, norm eps, tied
# output, Llama 3.1 RoPE scaling (factor 8, low 1, high 4, original 8192).
SHAPES = {
    "llama-3.1-8b": ("llama", 128256, 4096, 32, 32, 8, 14336, 131072, 500000.0, 1e-5, False, True),
    "llama-2-7b": ("llama", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0, 1e-5, False, False),
    "qwen2.5-7b": ("qwen2", 152064, 3584, 28, 28, 4, 18944, 32768, 1000000.0, 1e-6, False, False),
    "llama-3.2-1b": ("llama", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0, 1e-5, True, True),
    "small": ("llama", 4096, 256, 4, 8, 2, 704, 32768, 10000.0, 1e-5, False, False),
    "tiny": ("llama", 512, 64, 2, 4, 2, 192, 4096, 10000.0, 1e-5, False, False),
    "tiny-qwen2": ("qwen2", 512, 64, 2, 4, 2, 160, 4096, 1000000.0, 1e-6, True, False),
}
KEYS = ("arch", "n_vocab", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "ctx",
        "rope_base", "norm_eps", "tied", "llama3_rope")


def shape_of(name):
    s = dict(zip(KEYS, SHAPES[name]))
    s["head_dim"] = s["dim"] // s["n_heads"]
    return s


def int_list(text):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': give positive integers")
    return vals


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", required=True, choices=sorted(SHAPES), help="seer's synthetic shape")
    p.add_argument("--depths", type=int_list, default=[4096, 32768], help="L: cached tokens per sequence")
    p.add_argument("--batches", type=int_list, default=[1], help="B: sequences decoding together")
    p.add_argument("--steps", type=int, default=20, help="timed decode steps per point")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (for trying the script)")
    p.add_argument("--json-out", help="write the JSON here")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return a


def make_config(s, max_pos):
    import transformers
    cls_cfg = transformers.Qwen2Config if s["arch"] == "qwen2" else transformers.LlamaConfig
    kw = dict(vocab_size=s["n_vocab"], hidden_size=s["dim"], intermediate_size=s["ffn_dim"],
              num_hidden_layers=s["n_layers"], num_attention_heads=s["n_heads"],
              num_key_value_heads=s["n_kv_heads"], head_dim=s["head_dim"],
              max_position_embeddings=max_pos, rms_norm_eps=s["norm_eps"],
              tie_word_embeddings=s["tied"], bos_token_id=1, eos_token_id=2, pad_token_id=None)
    rope = {"rope_type": "default", "rope_theta": s["rope_base"]}
    if s["llama3_rope"]:
        rope = {"rope_type": "llama3", "rope_theta": s["rope_base"], "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
    if s["arch"] == "qwen2":
        kw["use_sliding_window"] = False
    if "rope_parameters" in cls_cfg.__dict__.get("__annotations__", {}) or \
            hasattr(cls_cfg(), "rope_parameters"):
        kw["rope_parameters"] = rope
    else:  # transformers 4.x spells RoPE as rope_theta + rope_scaling
        kw["rope_theta"] = rope.pop("rope_theta")
        if rope["rope_type"] != "default":
            kw["rope_scaling"] = rope
    return cls_cfg(**kw)


def build_model(s, device, max_pos, seed):
    import torch
    import transformers
    torch.manual_seed(seed)
    cfg = make_config(s, max_pos)
    cls = transformers.Qwen2ForCausalLM if s["arch"] == "qwen2" else transformers.LlamaForCausalLM
    # Built on the device in bf16, so the 8B shapes never exist on the host or in f32; the
    # default initialisation (normal, std 0.02) then runs as device kernels.
    with torch.device(device):
        model = cls._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.to(device)
    model.eval()
    bad = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
           if t.is_floating_point() and t.device.type != torch.device(device).type]
    if bad:
        raise RuntimeError(f"tensors not on {device}: {bad[:3]}")
    return model, cls.__name__


def fill_cache(model, s, B, L, device):
    import torch
    from transformers import DynamicCache
    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # transformers 4.x
        cache = DynamicCache()
    shp = (B, s["n_kv_heads"], L, s["head_dim"])
    for layer in range(s["n_layers"]):
        k = torch.randn(shp, dtype=torch.bfloat16, device=device)
        v = torch.randn(shp, dtype=torch.bfloat16, device=device)
        cache.update(k, v, layer)
        del k, v
    return cache


class Timer:
    """CUDA events on a GPU (the device's own clock, as seer synchronises around each step);
    the host clock on the CPU."""

    def __init__(self, device):
        import torch
        self.torch = torch
        self.cuda = torch.device(device).type == "cuda"
        if self.cuda:
            self.t0 = torch.cuda.Event(enable_timing=True)
            self.t1 = torch.cuda.Event(enable_timing=True)

    def start(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.t0.record()
        else:
            self.h0 = time.perf_counter()

    def stop_ms(self):
        if self.cuda:
            self.t1.record()
            self.t1.synchronize()
            return self.t0.elapsed_time(self.t1)
        return (time.perf_counter() - self.h0) * 1e3


def run_point(model, s, B, L, a, gen):
    import torch
    dev = a.device
    cache = fill_cache(model, s, B, L, dev)
    # Ordinary tokens, past the 3 specials and 256 byte tokens of seer's synthetic vocabulary.
    ids = torch.randint(259 if s["n_vocab"] > 1024 else 3, s["n_vocab"], (B, 1), generator=gen).to(dev)
    pos = torch.full((B, 1), L, dtype=torch.long, device=dev)
    cache_pos = torch.tensor([L], dtype=torch.long, device=dev)
    timer = Timer(dev)
    times, finite = [], True
    for i in range(-a.warmup, a.steps):
        timer.start()
        out = model(input_ids=ids, position_ids=pos, cache_position=cache_pos,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :].float().cpu()
        ms = timer.stop_ms()
        if i == -a.warmup:
            finite = bool(torch.isfinite(logits).all())
        cache = out.past_key_values
        if cache.get_seq_length() != L + 1:
            raise RuntimeError(f"cache holds {cache.get_seq_length()} slots after a step, not {L + 1}")
        cache.crop(-1)  # back to exactly L cached slots, as seer rewinds its sequences
        del out, logits
        if i >= 0:
            times.append(ms)
    del cache
    med = sorted(times)[len(times) // 2]  # the element seer bench takes as its median
    return {"ctx": L, "batch": B, "ms_per_step": med, "min_ms": min(times), "max_ms": max(times),
            "tok_per_s": B / (med * 1e-3), "logits_finite": finite}


def free_memory(device):
    import torch
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def write_json(path, res):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    import torch
    import transformers
    if torch.device(a.device).type == "cuda" and not torch.cuda.is_available():
        print("hf_peer: no CUDA device (use --device cpu to try the script)", file=sys.stderr)
        return 1
    s = shape_of(a.shape)
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    max_pos = max(s["ctx"], max(a.depths) + 1)
    model, cls_name = build_model(s, a.device, max_pos, a.seed)
    dev_name = torch.cuda.get_device_name(a.device) if torch.device(a.device).type == "cuda" else "cpu"
    n_params = sum(p.numel() for p in model.parameters())
    desc = (f"HF transformers {transformers.__version__}, torch {torch.__version__}, {cls_name} bf16, "
            f"sdpa, DynamicCache, eager, {dev_name}")
    print(f"hf_peer: {a.shape}: {n_params / 1e9:.3f} G parameters built in {time.time() - t0:.1f} s; "
          f"{desc}", file=sys.stderr)
    points = []
    res = {
        "format": "seer-bench-peer 1",
        "peer": "HF transformers",
        "description": desc,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "shape": a.shape,
        "model": {"arch": s["arch"], "dim": s["dim"], "n_layers": s["n_layers"],
                  "n_heads": s["n_heads"], "n_kv_heads": s["n_kv_heads"], "head_dim": s["head_dim"],
                  "ffn_dim": s["ffn_dim"], "n_vocab": s["n_vocab"], "rope_base": s["rope_base"],
                  "tied_output": s["tied"], "n_params": n_params, "class": cls_name},
        "impl": {"transformers": transformers.__version__, "torch": torch.__version__,
                 "dtype": "bf16", "attn_implementation": "sdpa", "cache": "DynamicCache",
                 "compile": False, "device": dev_name},
        "settings": {"steps": a.steps, "warmup": a.warmup, "seed": a.seed,
                     "kv": "random bf16 K/V (not computed)",
                     "timing": ("CUDA events around the forward call and the f32 logits copy to the host"
                                if torch.device(a.device).type == "cuda" else "host clock")},
        "points": points,
    }
    with torch.inference_mode():
        for L in a.depths:
            for B in a.batches:
                print(f"hf_peer: L={L} B={B}", file=sys.stderr)
                try:
                    pt = run_point(model, s, B, L, a, gen)
                except torch.cuda.OutOfMemoryError:
                    pt = {"ctx": L, "batch": B, "error": "oom"}
                except RuntimeError as e:  # allocation failures on the CPU say so in words
                    msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                    pt = {"ctx": L, "batch": B,
                          "error": "oom" if "out of memory" in msg.lower() else msg}
                free_memory(a.device)
                points.append(pt)
                # Written after every point, so that a run stopped by a time limit still
                # leaves the points it finished.
                if a.json_out:
                    write_json(a.json_out, res)
    print(f"{a.shape}: {desc}")
    print(f"median of {a.steps} steps after {a.warmup} warm-up; one token per sequence per step")
    print(f"{'L':>8} {'B':>5} {'ms/step':>10} {'min ms':>10} {'max ms':>10} {'tok/s':>10}")
    for p in points:
        if "error" in p:
            print(f"{p['ctx']:>8} {p['batch']:>5}  {p['error']}")
        else:
            print(f"{p['ctx']:>8} {p['batch']:>5} {p['ms_per_step']:>10.3f} {p['min_ms']:>10.3f} "
                  f"{p['max_ms']:>10.3f} {p['tok_per_s']:>10.1f}"
                  f"{'' if p['logits_finite'] else '  NON-FINITE LOGITS'}")
    return 0 if all(p.get("error", "oom") == "oom" for p in points) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
