"""rerope_cost.py - what ReRoPE's and Self-Extend's two score paths cost, against plain RoPE, in one
alternating run.

    /usr/bin/python3 bench/rerope_cost.py [--shape 110m] [--dtype f16] [--threads 1 2] [--runs 5]
                                          [--window W] [--out FILE]

Per thread count, each the median of --runs runs, the modes alternating run for run so that the
machine's drift hits them alike:
  prefill  a 4000-token prompt (blocks of 512 tokens, --ctx 4096), tokens/s
  decode   the 64 tokens decoded after it, tokens/s
for --rope-scaling none (the reference: keys cached rotated, one score path), dynamic (keys cached
un-rotated and turned as they are read, one path), dynamic-yarn (the same, with YaRN's blend),
rerope, leaky-rerope and selfextend (keys cached un-rotated, a far and a near path; the README,
"ReRoPE and leaky ReRoPE" and "Self-Extend", says which keys each path turns).
The model is bench.py's random checkpoint of the shape (made on first use into its cache). This is
a benchmark, not a test: nothing fails on speed. Output: a markdown table on stdout and in --out
(default build/rerope-cost.md; bench/rerope-cost.md and bench/selfextend-dca-cost.md hold the runs the
README quotes).
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
from pathlib import Path

import bench  # bench/bench.py, beside this file: checkpoints, prompts, one ./run and its timing lines

MODES = ("none", "dynamic", "dynamic-yarn", "rerope", "leaky-rerope", "selfextend", "dca")
GEN = 64  # decoded tokens: 4000 + 64 fit in --ctx 4096, and twice bench.py's 32 for a steadier median


def rerope_args(mode, window):
    return ["--rope-window", str(window)] if window and ("rerope" in mode or mode == "selfextend") else []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=list(bench.SHAPES), default="110m")
    ap.add_argument("--dtype", choices=bench.DTYPES, default="f16")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", type=int, help="--rope-window W (default: ./run's, L / 4)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("LRUN_BENCH_CACHE",
                                                                      Path.home() / ".cache" / "lrun-bench")))
    ap.add_argument("--out", type=Path, default=bench.REPO / "build" / "rerope-cost.md")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    started, load_before = datetime.datetime.now(), bench.loadavg()
    model, tok = bench.checkpoint(a.cache, a.shape, a.dtype), bench.SHAPES[a.shape]["tokenizer"]
    prompt = bench.prompt_text(tok, bench.LONG_PROMPT)
    bench.fresh_pages(model)
    rows = []
    for threads in a.threads:
        pre, dec = {m: [] for m in MODES}, {m: [] for m in MODES}
        for k in range(a.runs):
            for mode in MODES:
                r = bench.run_once(model, tok, prompt, GEN, threads, bench.LONG_CTX,
                                   ["--rope-scaling", mode] + rerope_args(mode, a.window))
                if r["n_prompt"] != bench.LONG_PROMPT:
                    raise SystemExit(f"rerope_cost: the prompt is {r['n_prompt']} tokens, not {bench.LONG_PROMPT}")
                pre[mode].append(r["pp"])
                dec[mode].append(r["tg"])
            bench.log(f"rerope_cost: threads {threads}, round {k + 1}/{a.runs}: "
                      + ", ".join(f"{m} {pre[m][-1]:.0f} / {dec[m][-1]:.1f}" for m in MODES))
        rows.append((threads, {m: statistics.median(pre[m]) for m in MODES},
                     {m: statistics.median(dec[m]) for m in MODES}))
    lines = [f"# ReRoPE's cost: {a.shape} {a.dtype}, {started:%Y-%m-%d %H:%M}", "",
             f"Machine: {bench.machine()}; commit "
             + subprocess.run(["git", "-C", str(bench.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
             + f"; load average {load_before} before, {bench.loadavg()} after.",
             f"Command: `/usr/bin/python3 bench/rerope_cost.py {' '.join(sys.argv[1:])}`. Medians of {a.runs} runs, "
             f"the modes alternating run for run. Prefill: a {bench.LONG_PROMPT}-token prompt (blocks of 512), "
             f"--ctx {bench.LONG_CTX}; decode: the {GEN} tokens after it. "
             f"rerope window: {a.window or 'the default, L / 4'}. In brackets: the time per token over none's.", "",
             "| threads | " + " | ".join(f"{m} prefill tok/s" for m in MODES) + " | "
             + " | ".join(f"{m} decode tok/s" for m in MODES) + " |",
             "|---|" + "---|" * (2 * len(MODES))]
    for threads, p, d in rows:
        cell = lambda x, m: f"{x[m]:.1f}" + ("" if m == "none" else f" ({x['none'] / x[m]:.2f}x)")  # noqa: E731
        lines.append(f"| {threads} | " + " | ".join(cell(p, m) for m in MODES) + " | "
                     + " | ".join(cell(d, m) for m in MODES) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(table)
    bench.log(f"rerope_cost: wrote {a.out}")


if __name__ == "__main__":
    main()
