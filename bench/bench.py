"""bench.py - tokens per second of ./run on fixed shapes, weight types and thread counts (`make bench`).

    /usr/bin/python3 bench/bench.py                                     everything (about an hour)
    /usr/bin/python3 bench/bench.py --shape 110m --dtype f32 --runs 3   a subset (to build/bench-subset.md)
    make bench BENCH_ARGS="--shape 110m --dtype f16 --threads 2"
    make bench BENCH_ARGS="--peer llama.cpp=BIN_DIR --peer 'ik_llama.cpp=BIN_DIR:-rtr 1 -fa 1:-rtr -fa 1' --gguf DIR"
                                                                        against peers (bench/versus.py)

What it measures, per model x weight type x thread count, each the median of --runs runs of ./run:
  pp   prompt processing: a prompt of exactly 512 tokens (BOS included), tokens/s
  tg   decode: 128 tokens generated after that prompt, tokens/s
  tg@4k  decode at position ~4000: a 4000-token prompt with --ctx 4096 --rope-scaling ntk, then 32
         tokens; and the same with --rope-scaling dynamic, run for run after it, whose time per
         token over ntk's is the cost of re-basing every key at every step (issue: dynamic at full speed)
  KV cache types (--kv-types f32 f16 q8_0): tg@4k with each type of cached keys and values
         (-ctk T -ctv T, run for run), its ratio to the first type's, and one 4096-token --ppl
         window with each (what a smaller cache costs or saves in prefill)
  RSS  peak resident memory of the process (GNU time), next to the banner's weights + KV cache
and the read bandwidth (bench/bwprobe, measured again before each cell, since other processes on a
shared machine change it), from which the decode roofline:
  roofline tok/s = bandwidth / bytes a decode step must read (every weight matrix once, plus the
  keys and values of the cache up to the current position), and the fraction of it reached.
Decode tokens/s count forward passes (./run prints them as decode steps): the first generated
token comes from the prompt's logits.
Then one 4096-token --ppl window (stories260K f32 and 110M q8_0, 2 threads), processed in blocks
of 512 tokens (the default -b) against one token at a time (-b 1): what batched prefill buys.
The models: random weights of the 110M shape (dim 768, 12 layers, 12 heads, hidden 2048,
vocab 32000) and of the TinyLlama-1.1B shape (dim 2048, 22 layers, 32 heads / 4 kv heads, hidden
5632, vocab 32000), made once by lrun/hf_random.py + export/export.py into a cache directory
outside the repository (--cache, default ~/.cache/lrun-bench), and the real stories260K exported
from data/stories260K-hf. The random models read the Llama 2 tokenizer; the
prompts are TinyStories text cut to the exact token count.

Output: a markdown table on stdout and in --out (default bench/results.md for a full run,
build/bench-subset.md for a subset, so a quick run never replaces a full run's table), with the
machine, the date and the load average before and after. The machine may be shared: every number
is a median, and the load average says how busy it was. This is a benchmark, not a test: nothing
here fails on speed.
"""
import argparse
import datetime
import os
import re
import shlex
import statistics
import subprocess
from pathlib import Path

import versus  # --peer: ./run against llama.cpp, ik_llama.cpp, ... in one interleaved run
# What bench.py and versus.py both use; tests/test_bench.py and rerope_cost.py reach it as bench.TIMING, ...
from common import (DEFAULT_SHAPES, DTYPES, REPO, RUN_ENV, RUN_FLAGS, SHAPES, TEXT, TIMING, checkpoint, commit,
                    fresh_pages, loadavg, log, machine, modelfile, prompt_text, read_header)

TIME = "/usr/bin/time"  # GNU time (Debian package "time"), for the peak RSS

PROMPT_TOKENS, GEN_TOKENS = 512, 128
LONG_PROMPT, LONG_CTX, LONG_GEN = 4000, 4096, 32
CTX = 1024  # context for the pp / tg runs: room for 512 + 128 tokens

PPL_TIMING = re.compile(r"(\d+) windows? in ([\d.]+) s \(([\d.]+) tok/s\)")
WINDOW = 4096  # tokens of the --ppl window timed batched and token by token
WINDOW_MODELS = (("stories260k", "f32"), ("110m", "q8_0"))
BANNER = re.compile(r"weights ([\d.]+) MiB \(mmapped[^)]*\) \| KV cache ([\d.]+) MiB(?: \([^)]*\))?, activations ([\d.]+) MiB")


# --- What a decode step reads ----------------------------------------------------------------------

KV_BYTES = {"f32": 4, "f16": 2, "q8_0": 34 / 32}  # bytes per cached number (q8_0: 32 int8 + a half scale)


def decode_bytes(h, pos, kv_type="f32"):
    """Bytes one decode step at position pos reads: every weight matrix once (the embedding only
    as the classifier when it is shared), the rows of keys and values 0..pos in the cache's type."""
    weights = sum(modelfile.matrix_bytes(*shape, h["dtype"]) for name, shape, kind in modelfile.tensors(h)
                  if kind == "matrix" and name != "token_embedding")
    if h["shared_classifier"]:
        weights += modelfile.matrix_bytes(h["vocab_size"], h["dim"], h["dtype"])
    kv = 2 * h["n_layers"] * (pos + 1) * h["n_kv_heads"] * h["head_dim"] * KV_BYTES[kv_type]
    return weights, kv


# --- Running ./run ---------------------------------------------------------------------------------

def run_once(model, tokenizer, prompt, n_gen, threads, ctx, extra=()):
    """One ./run: (prompt tokens, pp tok/s, generated, tg tok/s, peak RSS MiB, banner numbers)."""
    cmd = [str(REPO / "run"), str(model), "-z", str(tokenizer), "-i", prompt, "-n", str(n_gen), "-t", "0",
           "--threads", str(threads), "--ctx", str(ctx), *extra]
    # Peak RSS through /usr/bin/time: the kernel's figure for a child of this process would include
    # the memory of the Python process it was forked from.
    proc = subprocess.run([TIME, "-f", "bench-maxrss-kb %M"] + cmd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=RUN_ENV)
    err = proc.stderr
    m, b, rss = TIMING.search(err), BANNER.search(err), re.search(r"bench-maxrss-kb (\d+)", err)
    if proc.returncode != 0 or not m or not b or not rss:
        raise SystemExit(f"bench: {' '.join(cmd[:2])} ... failed (exit {proc.returncode}):\n{err[-2000:]}")
    return dict(n_prompt=int(m.group(1)), pp=float(m.group(3)), n_gen=int(m.group(4)), tg=float(m.group(7)),
                rss=int(rss.group(1)) / 1024, weights=float(b.group(1)), kv=float(b.group(2)),
                act=float(b.group(3)))


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def measure(model, tokenizer, prompt, n_gen, threads, ctx, runs, expect_prompt, modes=((),)):
    """runs x each of `modes` (extra arguments), alternating the modes run for run: a list per mode."""
    results = [[] for _ in modes]
    for _ in range(runs):
        for i, extra in enumerate(modes):
            r = run_once(model, tokenizer, prompt, n_gen, threads, ctx, extra)
            if r["n_prompt"] != expect_prompt:
                raise SystemExit(f"bench: the prompt is {r['n_prompt']} tokens, not {expect_prompt}")
            results[i].append(r)
    return results if len(modes) > 1 else results[0]


def kv_args(kv_type):
    return ("-ctk", kv_type, "-ctv", kv_type)


def kv_types_for(h, types):
    """The cache types a model can use: q8_0 needs a head_dim that is a multiple of 32."""
    return [t for t in types if t != "q8_0" or h["head_dim"] % 32 == 0]


def window_speeds(model, tokenizer, threads, runs, kv_types, batches=(512, 1)):
    """{(kv_type, batch): median tokens/s} of ./run --ppl over one WINDOW-token window, with each -b of
    batches for each cache type, the cases alternating run for run (the machine's speed drifts between
    minutes, and a case whose runs all came in a slow minute would look slower than it is)."""
    speeds = {(t, b): [] for t in kv_types for b in batches}
    for _ in range(runs):
        for t, batch in speeds:
            cmd = [str(REPO / "run"), str(model), "-z", str(tokenizer), "--ppl", str(TEXT), "--ctx", str(WINDOW),
                   "--ppl-windows", "1", "--rope-scaling", "pi", "-b", str(batch), "--threads", str(threads),
                   *kv_args(t)]
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=RUN_ENV)
            m = PPL_TIMING.search(proc.stderr)
            if proc.returncode != 0 or not m:
                raise SystemExit(f"bench: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            speeds[t, batch].append(float(m.group(3)))
    log("bench:   window runs " + "; ".join(f"{t} -b {b}: " + " ".join(f"{x:.0f}" for x in v)
                                     for (t, b), v in speeds.items()))
    return {k: statistics.median(v) for k, v in speeds.items()}


def bandwidth(threads):
    """{threads: GB/s} from bench/bwprobe (a 2 GiB buffer, best of 5 passes): 1, 2 and this many threads
    (the probe measures OMP_NUM_THREADS threads besides 1 and 2)."""
    out = subprocess.run([str(REPO / "bench" / "bwprobe"), "2048", "5"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
    return {int(t): float(g) for t, g in re.findall(r"threads (\d+): ([\d.]+) GB/s", out)}


# --- Main ------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", nargs="+", choices=list(SHAPES), default=DEFAULT_SHAPES,
                    help=f"default: {' '.join(DEFAULT_SHAPES)}")
    ap.add_argument("--dtype", nargs="+", choices=DTYPES + tuple(versus.VARIANTS) + versus.GGUF_ROWS,
                    help=f"weight types (default: all; with --peer: {' '.join(versus.DTYPES)}, where f16-as-bf16 "
                    "is the f16 files with ./run --f16-as-bf16)")
    ap.add_argument("--threads", nargs="+", default=["1,2"], help="thread counts, e.g. 1,2 or 4,8,16 (default: 1,2)")
    ap.add_argument("--runs", type=int, default=5, help="runs per cell; the table shows medians (default 5)")
    ap.add_argument("--no-long", action="store_true", help="skip the decode at position ~4000 (with --peer: pp4k "
                    "and tg@4k)")
    ap.add_argument("--no-window", action="store_true", help="skip the 4096-token window, batched vs one by one")
    ap.add_argument("--kv-types", nargs="+", choices=tuple(KV_BYTES), default=["f32"],
                    help="KV cache types for tg@4k and the window, run for run (default: f32)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("LRUN_BENCH_CACHE",
                                                                      Path.home() / ".cache" / "lrun-bench")))
    ap.add_argument("--out", type=Path, help="the table's file (default: bench/results.md, or bench/versus.md "
                    "with --peer, for a full run; build/bench-subset.md or build/versus-subset.md for a subset)")
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=BIN_DIR[:BENCH_FLAGS[:BATCHED_FLAGS]]",
                    help="compare with this build in one interleaved run (bench/versus.py; repeat for more peers): "
                    "its build/bin folder, with llama-bench and llama-batched-bench, and extra flags for each, e.g. "
                    "'ik_llama.cpp=~/ik_llama.cpp/build/bin:-rtr 1 -fa 1:-rtr -fa 1'")
    ap.add_argument("--llama-cpp", metavar="BIN_DIR", help="short for --peer llama.cpp=BIN_DIR")
    ap.add_argument("--gguf", metavar="DIR", help="with --peer: the GGUF files, SHAPE-DTYPE.gguf")
    ap.add_argument("--env", nargs="+", default=[], metavar="VAR=VALUE",
                    help="environment for ./run, e.g. OMP_WAIT_POLICY=passive (recorded in the table)")
    ap.add_argument("--ours-flags", default="", metavar="FLAGS",
                    help="with --peer: flags for every ./run of the comparison, e.g. --ours-flags=--f16-as-bf16 (in the "
                         "table)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        args.threads = versus.thread_counts(args.threads)
        args.peer = ([versus.parse_peer(f"llama.cpp={args.llama_cpp}")] if args.llama_cpp else []) \
            + [versus.parse_peer(p) for p in args.peer]
    except ValueError as e:
        ap.error(str(e))
    if args.dtype is None:
        args.dtype = list(versus.DTYPES if args.peer else DTYPES)
    for assignment in args.env:
        name, eq, value = assignment.partition("=")
        if not eq or not name:
            ap.error(f"--env {assignment!r}: expected VAR=VALUE")
        RUN_ENV[name] = value
    if REPO in args.cache.resolve().parents or args.cache.resolve() == REPO:
        ap.error("--cache must be outside the repository (the checkpoints are gigabytes)")
    args.cache.mkdir(parents=True, exist_ok=True)
    if bool(args.peer) != bool(args.gguf):
        ap.error("--peer (or --llama-cpp) and --gguf go together")
    if args.ours_flags and not args.peer:
        ap.error("--ours-flags goes with --peer")
    peer_only = set(args.dtype) & (set(versus.VARIANTS) | set(versus.GGUF_ROWS))
    if peer_only and not args.peer:
        ap.error(f"--dtype {' '.join(sorted(peer_only))} goes with --peer")
    RUN_FLAGS[:] = shlex.split(args.ours_flags)
    # The committed tables hold full runs: a subset writes elsewhere unless --out says otherwise.
    committed = REPO / "bench" / ("versus.md" if args.peer else "results.md")
    if args.peer:  # every shape with GGUF files, the weight types, at least 3 rounds
        full = (set(args.shape) >= {"110m", "tinyllama"} and args.dtype == list(versus.DTYPES)
                and args.threads == [1, 2] and args.runs >= 3 and not args.no_long and not args.env)
    else:
        full = (args.shape == DEFAULT_SHAPES and args.dtype == list(DTYPES) and args.threads == [1, 2]
                and args.runs == 5 and not args.no_long and not args.no_window and not args.env
                and args.kv_types == ["f32"])
    if args.out is None:
        args.out = committed if full else REPO / "build" / f"{committed.stem}-subset.md"
        if not full:
            log(f"bench: a subset, so the table goes to {args.out}, not {committed.relative_to(REPO)} "
                f"(pass --out {committed.relative_to(REPO)} to replace that)")
    if args.peer:
        return versus.main(args)

    started, load_before = datetime.datetime.now(), loadavg()
    bw_seen = {}  # threads -> every probe result
    log(f"bench: load average {load_before}")
    prompts = {}  # tokenizer -> (pp prompt, tg@4k prompt)
    rows = []
    for shape in args.shape:
        tok = SHAPES[shape]["tokenizer"]
        if tok not in prompts:
            prompts[tok] = (prompt_text(tok, PROMPT_TOKENS), prompt_text(tok, LONG_PROMPT))
        prompt, long_prompt = prompts[tok]
        for dtype in args.dtype:
            model = checkpoint(args.cache, shape, dtype)
            header = read_header(model)
            for threads in args.threads:
                log(f"bench: {shape} {dtype} threads {threads}")
                fresh_pages(model)
                short = measure(model, tok, prompt, GEN_TOKENS, threads, CTX, args.runs, PROMPT_TOKENS)
                # tg@4k: ntk with each KV cache type, then dynamic with the first, run for run
                kv_types = kv_types_for(header, args.kv_types)
                deep = None if args.no_long else measure(
                    model, tok, long_prompt, LONG_GEN, threads, LONG_CTX, args.runs, LONG_PROMPT,
                    modes=[("--rope-scaling", "ntk", *kv_args(t)) for t in kv_types]
                    + [("--rope-scaling", "dynamic", *kv_args(kv_types[0]))])
                long, dyn = (None, None) if deep is None else (deep[0], deep[-1])
                w, kv = decode_bytes(header, PROMPT_TOKENS + GEN_TOKENS // 2)
                bw = bandwidth(threads)
                for t, g in bw.items():
                    bw_seen.setdefault(t, []).append(g)
                gbps = bw.get(threads, max(bw.values()))
                tg = median_of(short, "tg")
                row = dict(shape=shape, dtype=dtype, threads=threads, pp=median_of(short, "pp"), tg=tg,
                           n_gen=min(r["n_gen"] for r in short), rss=max(r["rss"] for r in short),
                           weights=short[0]["weights"], kv=short[0]["kv"], read=(w + kv) * tg / 1e9,
                           roof=(w + kv) * tg / 1e9 / gbps)
                if long:  # per cache type: tok/s, KV MiB, roofline (deep[0] is long, with kv_types[0])
                    row["by_kv"] = {t: (median_of(runs, "tg"), runs[0]["kv"],
                                        sum(decode_bytes(header, LONG_PROMPT + LONG_GEN // 2, t))
                                        * median_of(runs, "tg") / 1e9 / gbps)
                                    for t, runs in zip(kv_types, deep)}
                    tg4k, kv4k, roof4k = row["by_kv"][kv_types[0]]
                    row.update(tg4k=tg4k, rss4k=max(r["rss"] for r in long), kv4k=kv4k, roof4k=roof4k,
                               dyn4k=median_of(dyn, "tg"))
                row["gbps"] = gbps
                rows.append(row)
                log(f"bench:   pp {row['pp']:.1f} tok/s, tg {tg:.2f} tok/s ({row['roof']:.0%} of roofline)"
                    + (f", tg@4k {row['tg4k']:.2f} tok/s, dynamic {row['dyn4k']:.2f} tok/s "
                       f"({row['tg4k'] / row['dyn4k']:.2f}x the time per token)" if long else ""))
    windows = []
    for shape, dtype in () if args.no_window else WINDOW_MODELS:
        if shape in args.shape:
            log(f"bench: {shape} {dtype}: one {WINDOW}-token window, -b 512 and -b 1")
            model, tok = checkpoint(args.cache, shape, dtype), SHAPES[shape]["tokenizer"]
            fresh_pages(model)
            types = kv_types_for(read_header(model), args.kv_types)
            speed = window_speeds(model, tok, 2, args.runs, types)
            windows += [(shape, dtype, t, speed[t, 512], speed[t, 1]) for t in types]

    lines = [f"# Benchmark: ./run, {started:%Y-%m-%d %H:%M}", "",
             f"Machine: {machine()}; Linux {os.uname().release}; commit {commit()}",
             f"Environment of ./run: {' '.join(args.env) if args.env else 'as inherited (OpenMP defaults)'}.",
             f"Load average (1, 5, 15 min): {load_before} before, {loadavg()} after "
             f"({(datetime.datetime.now() - started).total_seconds() / 60:.0f} min).",
             "Read bandwidth (bench/bwprobe, 2 GiB, before each row): "
             + ", ".join(f"{t} thread{'s' if t > 1 else ''} {min(g):.1f} to {max(g):.1f} GB/s (median "
                         f"{statistics.median(g):.1f})" for t, g in sorted(bw_seen.items())) + ".",
             f"Medians of {args.runs} runs. pp = {PROMPT_TOKENS}-token prompt, tg = {GEN_TOKENS} tokens decoded "
             f"after it (--ctx {CTX}), tg@4k = {LONG_GEN} tokens decoded from position {LONG_PROMPT} "
             f"(--ctx {LONG_CTX} --rope-scaling ntk); dynamic = the same with --rope-scaling dynamic, run for run "
             "after it, and its time per token over ntk's. "
             "Roofline = read bandwidth / bytes per decode step (weights + KV cache read).",
             "", "| model | weights | threads | pp tok/s | tg tok/s | tg GB/s (probe) | tg roofline | tg@4k tok/s "
             "| tg@4k roofline | dynamic tg@4k tok/s (time / ntk) | peak RSS MiB | weights + KV MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        budget = f"{r['weights']:.0f} + {r['kv']:.0f}"
        rss = f"{r['rss']:.0f}"
        tg4k = f"{r['tg4k']:.2f}" if "tg4k" in r else "-"
        roof4k = f"{r['roof4k']:.0%}" if "roof4k" in r else "-"
        dyn4k = f"{r['dyn4k']:.2f} ({r['tg4k'] / r['dyn4k']:.2f}x)" if "dyn4k" in r else "-"
        if "tg4k" in r:
            budget += f" (4k: {r['weights']:.0f} + {r['kv4k']:.0f})"
            rss += f" (4k: {r['rss4k']:.0f})"
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['threads']} | {r['pp']:.1f} | {r['tg']:.2f}"
                     f"{'' if r['n_gen'] == GEN_TOKENS else ' (' + str(r['n_gen']) + ' tokens)'} | {r['read']:.1f} ({r['gbps']:.1f}) "
                     f"| {r['roof']:.0%} | {tg4k} | {roof4k} | {dyn4k} | {rss} | {budget} |")
    if len(args.kv_types) > 1 and any("by_kv" in r for r in rows):
        first = args.kv_types[0]
        lines += ["", f"Decode at depth {LONG_PROMPT} (tg@4k, --rope-scaling ntk) by KV cache type (`-ctk T -ctv T`, "
                  "run for run in one loop); roofline counts the cache's own bytes:", "",
                  "| model | weights | threads | " + " | ".join(f"{t} tok/s (KV MiB, roofline)" for t in args.kv_types)
                  + " | " + " | ".join(f"{t} / {first}" for t in args.kv_types[1:]) + " |",
                  "|---|---|---|" + "---|" * (2 * len(args.kv_types) - 1)]
        for r in rows:
            if "by_kv" in r:
                by = r["by_kv"]
                lines.append(f"| {r['shape']} | {r['dtype']} | {r['threads']} | "
                             + " | ".join(f"{by[t][0]:.2f} ({by[t][1]:.0f}, {by[t][2]:.0%})" if t in by else "-"
                                          for t in args.kv_types)
                             + " | " + " | ".join(f"{by[t][0] / by[first][0]:.2f}x" if t in by and first in by
                                                  else "-" for t in args.kv_types[1:]) + " |")
    if windows:
        lines += ["", f"One {WINDOW}-token window of `--ppl` (2 threads): blocks of 512 tokens (matrix x matrix) "
                  "against one token at a time (`-b 1`, matrix x vector):", "",
                  "| model | weights | KV cache | -b 512 tok/s | -b 1 tok/s | speedup |", "|---|---|---|---|---|---|"]
        for shape, dtype, kv_type, batched, single in windows:
            lines.append(f"| {shape} | {dtype} | {kv_type} | {batched:.1f} | {single:.1f} | {batched / single:.1f}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    log(f"bench: wrote {args.out}")


if __name__ == "__main__":
    main()
