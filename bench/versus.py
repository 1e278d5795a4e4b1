"""versus.py - ./run against llama.cpp on the same weights, in one interleaved run, with the roof.

    make bench BENCH_ARGS="--llama-cpp LLAMA_CPP/build/bin --gguf GGUF_DIR"
    /usr/bin/python3 bench/bench.py --llama-cpp LLAMA_CPP/build/bin --gguf GGUF_DIR [--shape 110m] [--dtype q8_0]

What it measures, per model shape x weight type x thread count (1 and 2), each the median of --runs
rounds; within a round the programs and the bandwidth probe run one after the other, so that the
machine's drift (20-30% between minutes here) hits all of them alike, and which program runs first
in a cell alternates from round to round:
  tg      decode from an empty context, 64 steps: ./run with an empty prompt and -n 65 against
          llama-bench -p 0 -n 64
  pp      a 512-token prompt: ./run's prompt speed against llama-bench -p 512 -n 0
  tg@4k   decode at depth 4000: ./run with a 4000-token prompt, --ctx 4096, 32 steps, against
          llama-batched-bench -c 4096 -npp 4000 -ntg 32 -npl 1
  win4k   a 4096-token window: ./run with a 4096-token prompt (--ctx 4096, blocks of 512) against
          llama-bench -p 4096 -n 0: both compute the logits of the last token only (./run --ppl
          computes all 4096, whose classifier alone is a fifth of the 110M shape's work)
  cache   both programs keep keys and values as f16 (llama.cpp's default; ./run -ctk f16 -ctv f16)
  probe   bench/bwprobe at the same thread count (best of 3 passes over 1 GiB), before and after the
          round's programs; the round's probe is the larger of the two, since a probe that caught a
          slow moment is no roof (one such round once put both decoders above the probe's median)
Decode GB/s = tok/s x the bytes of every weight matrix a step reads (all layers and the classifier,
not the embedding lookup), counted the same for both programs with ggml's sizes: f32, f16, q8_0 (34
bytes per 32 weights) and q4_0 (18 bytes per 32). ./run's q8_0 keeps a float32 scale (36 bytes per
32), so its q8_0 decode reads 6% more than counted. "of probe" is that over the probe of the same
round.

What it needs (nothing of llama.cpp is built or converted here): a llama.cpp build directory with
llama-bench and llama-batched-bench, and GGUF_DIR holding SHAPE-DTYPE.gguf (110m-f16.gguf, ...)
converted from the same Hugging Face checkpoints that bench.py exports for ./run (docs/speed.md
says how). Cells whose files are missing on either side are skipped and listed.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
from pathlib import Path

import common  # shared with bench.py (which starts this for --llama-cpp): checkpoints, prompts, timing line

TG, PP, DEEP, DEEP_CTX, DEEP_GEN, WIN = 64, 512, 4000, 4096, 32, 4096
CELLS = ("tg", "pp", "tg@4k", "win4k")
DTYPE_BYTES = {"f32": (4, 1), "f16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32)}  # bytes per weights


def weight_bytes(h, dtype):
    """Bytes of the matrices one decode step reads: every layer's, plus the classifier."""
    D, H = h["dim"], h["hidden_dim"]
    qd, kvd = h["n_heads"] * h["head_dim"], h["n_kv_heads"] * h["head_dim"]
    per, n = DTYPE_BYTES[dtype]
    weights = h["n_layers"] * (2 * qd * D + 2 * kvd * D + 3 * H * D) + h["vocab_size"] * D
    return weights * per // n


def run(cmd, env=None):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
    if proc.returncode != 0:
        raise SystemExit(f"versus: {' '.join(map(str, cmd[:3]))} ... failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    return proc


def ours(model, tok, cell, threads, prompts):
    base = [str(common.REPO / "run"), str(model), "-z", str(tok), "-t", "0", "--threads", str(threads),
            "-ctk", "f16", "-ctv", "f16"]  # llama.cpp's default KV cache
    if cell == "tg":
        args = ["-i", "", "-n", str(TG + 1), "--ctx", "1024"]
    elif cell == "pp":
        args = ["-i", prompts[PP], "-n", "1", "--ctx", "1024"]
    elif cell == "win4k":
        args = ["-i", prompts[WIN], "-n", "1", "--ctx", str(WIN)]
    else:
        args = ["-i", prompts[DEEP], "-n", str(DEEP_GEN + 1), "--ctx", str(DEEP_CTX)]
    m = common.TIMING.search(run(base + args, env=common.RUN_ENV).stderr)
    return float(m.group(3)) if cell in ("pp", "win4k") else float(m.group(7))


def theirs(bindir, gguf, cell, threads):
    if cell == "tg@4k":
        out = run([str(bindir / "llama-batched-bench"), "-m", str(gguf), "-t", str(threads), "-c", str(DEEP_CTX),
                   "-npp", str(DEEP), "-ntg", str(DEEP_GEN), "-npl", "1", "--output-format", "jsonl"]).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return float(rows[-1]["speed_tg"])
    p, n = {"tg": (0, TG), "pp": (PP, 0), "win4k": (WIN, 0)}[cell]
    out = run([str(bindir / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-p", str(p), "-n", str(n),
               "-r", "1", "-o", "jsonl"]).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return float(rows[-1]["avg_ts"])


def probe(threads, compute):
    """bench/bwprobe's read bandwidth at this thread count, GB/s; its compute line goes into compute."""
    out = run([str(common.REPO / "bench" / "bwprobe"), "1024", "3"]).stdout
    compute.append(float(re.search(rf"compute, threads {threads}: ([\d.]+) GFLOP/s", out).group(1)))
    return float(re.search(rf"^threads {threads}: ([\d.]+) GB/s", out, re.M).group(1))


def main(args):
    bindir, ggufs = Path(args.llama_cpp), Path(args.gguf)
    for tool in ("llama-bench", "llama-batched-bench"):
        if not (bindir / tool).exists():
            raise SystemExit(f"versus: no {tool} in {bindir} (hint: --llama-cpp is llama.cpp's build/bin folder)")
    rows, skipped = [], []
    started, load_before = datetime.datetime.now(), common.loadavg()
    prompts = {}
    for shape in args.shape:
        if shape == "stories260k":
            continue  # no GGUF of it: llama.cpp's converter wants a larger vocabulary layout
        tok = common.SHAPES[shape]["tokenizer"]
        if not prompts:
            prompts = {n: common.prompt_text(tok, n) for n in (PP, DEEP, WIN)}
        for dtype in args.dtype:
            gguf = ggufs / f"{shape}-{dtype}.gguf"
            model = common.checkpoint(args.cache, shape, dtype)
            if not gguf.exists():
                skipped.append(f"{shape} {dtype} (no {gguf.name})")
                continue
            h = common.read_header(model)
            wbytes = weight_bytes(h, dtype)
            for threads in args.threads:
                got = {c: ([], []) for c in CELLS}
                probes, compute = [], []
                common.fresh_pages(model, gguf)
                ours(model, tok, "tg", threads, prompts)  # warm up: both files in the page cache
                theirs(bindir, gguf, "tg", threads)
                for r in range(args.runs):
                    common.log(f"versus: {shape} {dtype} threads {threads} round {r + 1}/{args.runs}")
                    common.fresh_pages(model, gguf)
                    before = probe(threads, compute)
                    for cell in CELLS:
                        if cell == "tg@4k" and args.no_long or cell == "win4k" and args.no_window:
                            continue
                        # Who goes first alternates round by round (ours, theirs; theirs, ours; ...), so that
                        # what the step before leaves behind (the probe's minute of full load, a file just
                        # reread) does not always fall on the same program.
                        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                            got[cell][side].append(ours(model, tok, cell, threads, prompts) if side == 0
                                                   else theirs(bindir, gguf, cell, threads))
                    probes.append(max(before, probe(threads, compute)))
                bw = statistics.median(probes)
                row = dict(shape=shape, dtype=dtype, threads=threads, probe=bw, probes=probes, compute=compute)
                for cell, (a, b) in got.items():
                    if a:
                        row[cell] = (statistics.median(a), statistics.median(b), [x / y for x, y in zip(a, b)])
                row["gbps"] = tuple(v * wbytes / 1e9 for v in row["tg"][:2])
                rows.append(row)
                common.log(f"versus:   tg ours {row['tg'][0]:.2f} llama.cpp {row['tg'][1]:.2f} tok/s, "
                          f"{row['gbps'][0] / bw:.0%} / {row['gbps'][1] / bw:.0%} of the probe ({bw:.1f} GB/s)")
    lines = [f"# ./run against llama.cpp, {started:%Y-%m-%d %H:%M}", "",
             f"Machine: {common.machine()}; Linux {os.uname().release}; commit {common.commit()}; llama.cpp: {bindir}",
             f"Load average (1, 5, 15 min): {load_before} before, {common.loadavg()} after "
             f"({(datetime.datetime.now() - started).total_seconds() / 60:.0f} min).",
             f"Medians of {args.runs} interleaved rounds. tg = {TG} decode steps from an empty context; pp = a {PP}-token "
             f"prompt; tg@4k = {DEEP_GEN} steps after {DEEP} tokens (--ctx {DEEP_CTX}); win4k = one {WIN}-token window. "
             "Cells: ours / llama.cpp tok/s (ratio of the medians, and the lowest and highest ratio within one "
             "round: the two programs run minutes apart at most, so a round's ratio survives the drift between rounds). GB/s: decode (tg) x bytes of the weight matrices per step, "
             "and its fraction of the probe (bench/bwprobe before and after the round, the larger; same threads). The probe "
             "column also gives the range of bwprobe's compute line over the rounds: a low one marks rounds in which "
             "the vCPU itself was slow (docs/speed.md, \"Noise\").", "",
             "| model | weights | threads | tg | pp | tg@4k | win4k | probe GB/s | tg GB/s ours (of probe) "
             "| tg GB/s llama.cpp (of probe) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for cell in CELLS:
            if cell in r:
                a, b, each = r[cell]
                spread = f", rounds {min(each):.2f}-{max(each):.2f}" if len(each) > 1 else ""
                cells.append(f"{a:.1f} / {b:.1f} ({a / b:.2f}x{spread})")
            else:
                cells.append("-")
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['threads']} | " + " | ".join(cells)
                     + f" | {r['probe']:.1f} ({min(r['probes']):.1f}-{max(r['probes']):.1f}; "
                     f"compute {min(r['compute']):.0f}-{max(r['compute']):.0f} GFLOP/s) "
                     f"| {r['gbps'][0]:.1f} ({r['gbps'][0] / r['probe']:.0%}) "
                     f"| {r['gbps'][1]:.1f} ({r['gbps'][1] / r['probe']:.0%}) |")
    if skipped:
        lines += ["", "Skipped (a file missing): " + ", ".join(skipped) + "."]
    table = "\n".join(lines) + "\n"
    print(table)
    args.out.write_text(table)
    common.log(f"versus: wrote {args.out}")
