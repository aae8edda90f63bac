#!/usr/bin/env python3
"""peer_llamacpp_run.py: runs llama.cpp's llama-bench and llama-batched-bench on one GGUF file at
the points `seer bench` measures and writes the peer file `seer bench --peer` reads
(tools/seer/bench.h describes it). scripts/peer-llamacpp.sh `run` calls it; see there for what is
measured. Standard library only (the GPU machine has python3 and nothing else).

Not for: building llama.cpp (peer-llamacpp.sh), comparing (seer bench --peer).

Every point runs in its own process, because llama-bench exits at the first failure (an
out-of-memory context would take the points after it along) and llama-batched-bench silently
skips a point whose cache does not fit its -c.
"""
import argparse
import json
import os
import shlex
import statistics
import struct
import subprocess
import sys

PEER_VERSION = "0.3.36"  # llama-cpp-python, as pinned in peer-llamacpp.sh

# llama.cpp's general.file_type values (enum llama_ftype) that GGUF writers use.
FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
          10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
          16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def gguf_meta(path):
    """The key/value pairs of a GGUF header (arrays as their length) and the tensor shapes."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}

    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize(fmt)
            b = f.read(n)
            if len(b) != n:
                raise ValueError("truncated GGUF header")
            return struct.unpack(fmt, b)[0]

        def rstr():
            n = rd("<Q")
            if n > 1 << 20:
                raise ValueError("string of %d bytes in the GGUF header" % n)
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t in scalar:
                return rd(scalar[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("<I"), rd("<Q")
                for _ in range(n):
                    value(et)
                return n
            raise ValueError("GGUF value type %d" % t)

        if f.read(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        rd("<I")
        n_tensors, n_kv = rd("<Q"), rd("<Q")
        kv = {}
        for _ in range(n_kv):
            k = rstr()
            kv[k] = value(rd("<I"))
        shapes = {}
        for _ in range(n_tensors):
            name = rstr()
            nd = rd("<I")
            shapes[name] = [rd("<Q") for _ in range(nd)]
            rd("<I")
            rd("<Q")
    return kv, shapes


def model_shape(path):
    kv, shapes = gguf_meta(path)
    arch = kv.get("general.architecture", "llama")

    def get(key):
        v = kv.get("%s.%s" % (arch, key))
        if v is None:
            raise ValueError("%s has no %s.%s" % (path, arch, key))
        return int(v)

    n_heads = get("attention.head_count")
    emb = shapes.get("token_embd.weight")
    n_vocab = kv.get("%s.vocab_size" % arch) or kv.get("tokenizer.ggml.tokens") or (emb[1] if emb else 0)
    ft = kv.get("general.file_type")
    return {"arch": arch, "dim": get("embedding_length"), "n_layers": get("block_count"),
            "n_heads": n_heads, "n_kv_heads": int(kv.get("%s.attention.head_count_kv" % arch, n_heads)),
            "ffn_dim": get("feed_forward_length"), "n_vocab": int(n_vocab),
            "file": os.path.basename(path), "file_bytes": os.path.getsize(path),
            "file_type": FTYPES.get(ft, "type %s" % ft) if ft is not None else "unknown"}


def run(cmd, timeout, log):
    """Runs cmd; returns (exit status or "timeout", stdout, stderr). The JSON is read from
    stdout alone: the tools' log lines go to stderr and would break llama-bench's array."""
    log.write("$ %s\n" % shlex.join(cmd))
    log.flush()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", e.stderr or b""
    out, err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    log.write(out[-4000:] + err[-4000:])
    return rc, out, err


def failure(out, rc):
    """A short reason for the table: out of memory when llama.cpp says so."""
    low = out.lower()
    if "out of memory" in low or "failed to allocate" in low or "cudamalloc" in low:
        return "oom"
    return "timeout" if rc == "timeout" else "exit %s" % rc


def json_objects(out):
    """The JSON objects of a jsonl output, and of a JSON array (llama-bench -o json)."""
    objs = []
    start = out.find("[\n")
    if start >= 0:
        end = out.rfind("]")
        try:
            objs.extend(json.loads(out[start:end + 1]))
        except ValueError:
            pass
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                objs.append(json.loads(line))
            except ValueError:
                pass
    return objs


def int_list(s):
    v = [int(x) for x in s.split(",") if x] if s.replace(",", "").isdigit() or not s else None
    if v is None or (v and min(v) < 1):
        raise argparse.ArgumentTypeError("a list of positive integers: %r" % s)
    return v


def pair_list(s):
    out = []
    for x in s.split(","):
        b, _, l = x.partition("x")
        if not (b.isdigit() and l.isdigit() and int(b) > 1 and int(l) > 0):
            raise argparse.ArgumentTypeError("BxL pairs with B > 1, like 14x32768: %r" % x)
        out.append((int(b), int(l)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="folder with llama-bench and llama-batched-bench")
    ap.add_argument("--kind", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--out", required=True, help="the peer JSON to write")
    ap.add_argument("--ctx-list", type=int_list, default=[4096, 32768],
                    help="depths L of the B = 1 decode (llama-bench); empty: none")
    ap.add_argument("--batched", type=pair_list, default=[],
                    help="BxL,... batched decode points (llama-batched-bench)")
    ap.add_argument("--prefill-list", type=int_list, default=[])
    ap.add_argument("--gen", type=int, default=64, help="tokens generated per tg run (llama-bench -n)")
    ap.add_argument("--batched-gen", type=int, default=32, help="new tokens per sequence (-ntg)")
    ap.add_argument("--batched-cache", default="streams", choices=["streams", "unified"],
                    help="streams (default): one prompt prefilled once and copied into each "
                         "sequence's own cache stream (-pps), so a step reads B*L cells as seer's "
                         "does and the prefill takes seconds; unified: B prompts in one unified "
                         "cache (-kvu), whose prefill of B long prompts takes minutes")
    ap.add_argument("--reps", type=int, default=5, help="llama-bench -r")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ngl", type=int, default=None,
                    help="llama.cpp's -ngl: layers on the GPU (default 99 for cuda, 0 for cpu)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per command")
    ap.add_argument("--log", default=None, help="the tools' output (default: OUT.log)")
    ap.add_argument("--split-mode", default=None, choices=["none", "layer", "row", "tensor"],
                    help="llama.cpp's -sm over several GPUs (the peer of seer bench --tp N)")
    ap.add_argument("--cache-type", default=None,
                    help="the KV cache's type for both tools (-ctk T -ctv T: f16, q8_0, q4_0 ...)")
    ap.add_argument("--bench-args", default="",
                    help="more llama-bench flags, e.g. '--repack 0' where its repacked CPU "
                         "path crashes (the AMX matmul on some VMs)")
    a = ap.parse_args()

    bench = os.path.join(a.bin, "llama-bench")
    batched = os.path.join(a.bin, "llama-batched-bench")
    for b in (bench, batched) if a.batched else (bench,):  # the tools the points need
        if not os.access(b, os.X_OK):
            sys.exit("peer_llamacpp_run: no %s: run 'scripts/peer-llamacpp.sh build %s' first" % (b, a.kind))
    try:
        shape = model_shape(a.model)
    except (OSError, ValueError, struct.error) as e:
        sys.exit("peer_llamacpp_run: %s: %s" % (a.model, e))

    ngl = str(a.ngl) if a.ngl is not None else "99" if a.kind == "cuda" else "0"
    common = ["-fa", "1", "-ngl", ngl] + (["-t", str(a.threads)] if a.threads else [])
    if a.cache_type:
        common += ["-ctk", a.cache_type, "-ctv", a.cache_type]
    if a.split_mode:
        common += ["-sm", a.split_mode]
    log = open(a.log or a.out + ".log", "w")
    points, prefill, info = [], [], {}

    def llama_bench(extra):
        cmd = [bench, "-m", a.model] + common + shlex.split(a.bench_args) + ["-r", str(a.reps), "-o", "json"] + extra
        rc, out, err = run(cmd, a.timeout, log)
        tests = [t for t in json_objects(out) if "samples_ns" in t]
        if rc != 0 or not tests:
            return None, failure(out + err, rc)
        info.update({k: tests[0].get(k) for k in ("build_commit", "build_number", "cpu_info",
                                                  "gpu_info", "backends", "model_type",
                                                  "model_size", "model_n_params")})
        return tests[0], None

    N = a.batched_gen
    cache_flag = "-pps" if a.batched_cache == "streams" else "-kvu"

    def write():
        """The peer file as measured so far: written after every point, so that a run cut off by
        its time limit keeps what it measured."""
        device = info.get("gpu_info") if a.kind == "cuda" else info.get("cpu_info")
        version = "llama.cpp %s (build %s), from llama-cpp-python %s" % (
            info.get("build_commit", "?"), info.get("build_number", "?"), PEER_VERSION)
        flags = " ".join(common)
        bflags = " ".join(common + shlex.split(a.bench_args))
        desc = ("%s; %s Release build; %s; %s; llama-bench -m FILE %s -r %d -o json -p 0 -n %d -d L; "
                "prefill: llama-bench ... -p P -n 0 -d 0; batched: llama-batched-bench -m FILE %s %s "
                "-c B*(L+%d) -npp L,1 -ntg %d -npl B --output-format jsonl") % (
            version, a.kind.upper(), device or "device unknown", info.get("model_type") or shape["file_type"],
            bflags, a.reps, a.gen, flags, cache_flag, N, N)
        model = dict(shape)
        if info.get("model_size"):
            model["llama_cpp_model_bytes"] = info["model_size"]
        doc = {"peer": "llama.cpp", "version": version, "description": desc, "model": model,
               "points": points, "prefill": prefill}
        with open(a.out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(a.out + ".tmp", a.out)

    # B = 1: llama-bench's tg N at depth L (the cache holds L tokens of a prompt it processed).
    if a.ctx_list:
        for L in a.ctx_list:
            print("peer_llamacpp_run: llama-bench tg%d @ d%d" % (a.gen, L), file=sys.stderr)
            t, err = llama_bench(["-p", "0", "-n", str(a.gen), "-d", str(L)])
            if t is None:
                points.append({"ctx": L, "batch": 1, "error": err})
            else:
                ms = statistics.median(t["samples_ns"]) / t["n_gen"] / 1e6
                points.append({"ctx": L, "batch": 1, "ms_per_step": ms, "tool": "llama-bench"})
            write()
    for P in a.prefill_list:
        print("peer_llamacpp_run: llama-bench pp%d" % P, file=sys.stderr)
        t, err = llama_bench(["-p", str(P), "-n", "0", "-d", "0"])
        if t is None:
            prefill.append({"tokens": P, "batch": 1, "error": err})
        else:
            prefill.append({"tokens": P, "batch": 1,
                            "tok_per_s": P / (statistics.median(t["samples_ns"]) / 1e9)})
        write()

    # B > 1: llama-batched-bench, B prompts of L tokens, then N steps of B tokens.
    for B, L in a.batched:
        print("peer_llamacpp_run: llama-batched-bench %d x %d + %d" % (B, L, N), file=sys.stderr)
        # "-npp L,1": llama.cpp's log is asynchronous and not flushed at exit, so the line of
        # the last run may be lost when the process ends right after it (seen with small
        # models); a 1-token-prompt run after the real one gives the log the time to write it.
        cmd = [batched, "-m", a.model] + common + [
            cache_flag, "-c", str(B * (L + N)), "-npp", "%d,1" % L, "-ntg", str(N), "-npl", str(B),
            "--output-format", "jsonl"]
        rc, out, errout = run(cmd, a.timeout, log)
        rows = [r for r in json_objects(out) + json_objects(errout)
                if r.get("pl") == B and r.get("pp") == L]
        if rc != 0 or not rows or not rows[0].get("t_tg"):
            err = failure(out + errout, rc) if rc != 0 else "no result"
            points.append({"ctx": L, "batch": B, "error": err})
            if a.batched_cache == "unified":
                prefill.append({"tokens": L, "batch": B, "error": err})
            write()
            continue
        r = rows[0]
        points.append({"ctx": L, "batch": B, "ms_per_step": r["t_tg"] / r["tg"] * 1e3,
                       "tool": "llama-batched-bench"})
        # with one shared prompt its prefill is one sequence's, which llama-bench measures
        if a.batched_cache == "unified":
            prefill.append({"tokens": L, "batch": B, "tok_per_s": r["speed_pp"]})
        write()

    write()
    ok = sum("error" not in p for p in points + prefill)
    print("peer_llamacpp_run: wrote %s: %d of %d points measured" % (a.out, ok, len(points) + len(prefill)),
          file=sys.stderr)
    return 0 if ok == len(points) + len(prefill) else 1


if __name__ == "__main__":
    sys.exit(main())
