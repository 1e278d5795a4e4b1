"""ab.py - two builds of ./run (or one with two sets of flags) on the same model files, interleaved: is
a change's speed the same?

    /usr/bin/python3 bench/ab.py OLD_RUN NEW_RUN [--shape 110m tinyllama] [--dtype q8_0 q4_0 bf16]
                                 [--threads 1 2] [--runs 5] [--prompt 512] [--gen 64] [--out FILE]
                                 [--old-flags FLAGS] [--new-flags FLAGS] [--ctx N]
    /usr/bin/python3 bench/ab.py ./run ./run --old-flags="-ctk f16 -ctv f16" \
        --new-flags="-ctk f16 -ctv f16 --swa-full" --shape gemma3-1b --dtype q8_0 --prompt 8192 --gen 33
                                 the sliding layers' ring against a full cache, decoding at depth 8192

A refactoring that must not change the kernels' speed (issue 48: "the kernels' speed unchanged within
noise in a same-run A/B") is measured here: for each round, each model x weight type x thread count, the
old build and the new one run the same 512-token prompt and 64 generated tokens (greedy), one right after
the other, in alternating order from round to round; pp and tg are the tokens/s ./run's timing line
prints (--prompt and --gen set the two lengths). The table gives each side's median over the rounds, their ratio (new / old), and the spread of
the per-round ratios, beside the read bandwidth probed before each round (bench/bwprobe). Both builds
must read the model files (bench/common.py makes them, in --cache as bench.py does). A benchmark, not a
test: nothing fails on speed. --old-flags and --new-flags add flags to each side's ./run (split as a
shell would); --ctx is the context of every run (default: room for the prompt and the generated tokens,
at least 1024).
"""
import argparse
import datetime
import shlex
import statistics
import subprocess
from pathlib import Path

from common import (REPO, RUN_ENV, SHAPES, TIMING, checkpoint, fresh_pages, loadavg, log, machine, prompt_text)

def one(run, model, tokenizer, prompt, gen, threads, ctx, flags):
    """(pp tok/s, tg tok/s) of one ./run."""
    cmd = [str(run), str(model), "-z", str(tokenizer), "-i", prompt, "-n", str(gen), "-t", "0", "--ctx", str(ctx),
           "--threads", str(threads), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=RUN_ENV, errors="replace")
    m = TIMING.search(proc.stderr)
    if proc.returncode or not m:
        raise SystemExit(f"ab: {' '.join(cmd[:2])} failed:\n{proc.stderr[-2000:]}")
    return float(m[3]), float(m[7])


def bandwidth():
    """bwprobe's best read bandwidth at 1 and 2 threads, as "20.2 / 24.1 GB/s"."""
    out = subprocess.run([str(REPO / "bench" / "bwprobe")], capture_output=True, text=True).stdout
    best = [line.split(":")[1].split()[0] for line in out.splitlines() if line.startswith("threads ")]
    return " / ".join(best) + " GB/s" if best else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=lambda p: Path(p).resolve())
    ap.add_argument("new", type=lambda p: Path(p).resolve())
    ap.add_argument("--shape", nargs="+", default=["110m", "tinyllama"], choices=[s for s in SHAPES if s != "stories260k"])
    ap.add_argument("--dtype", nargs="+", default=["q8_0", "q4_0", "bf16"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens, BOS included (default 512)")
    ap.add_argument("--gen", type=int, default=64, help="generated tokens (default 64)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lrun-bench")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--old-flags", default="", help="flags for the old side's ./run")
    ap.add_argument("--new-flags", default="", help="flags for the new side's ./run")
    ap.add_argument("--ctx", type=int, help="--ctx of every run (default: max(1024, prompt + gen))")
    args = ap.parse_args()
    ctx = args.ctx or max(1024, args.prompt + args.gen)
    flags = {"old": shlex.split(args.old_flags), "new": shlex.split(args.new_flags)}
    args.cache.mkdir(parents=True, exist_ok=True)
    cells = [(s, d, t) for s in args.shape for d in args.dtype for t in args.threads]
    models = {(s, d): checkpoint(args.cache, s, d) for s in args.shape for d in args.dtype}
    prompts = {s: prompt_text(SHAPES[s]["tokenizer"], args.prompt) for s in args.shape}
    got = {(c, side): [] for c in cells for side in ("old", "new")}
    probes, before = [], loadavg()
    for r in range(args.runs):
        probes.append(bandwidth())
        for s, d, t in cells:
            fresh_pages(models[(s, d)])
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for side in order:
                got[((s, d, t), side)].append(one(getattr(args, side), models[(s, d)], SHAPES[s]["tokenizer"],
                                                  prompts[s], args.gen, t, ctx, flags[side]))
        log(f"ab: round {r + 1} of {args.runs} done")
    lines = [f"# ./run A/B: {args.old} (old) against {args.new} (new)", "",
             f"{machine()}, {datetime.date.today()}, load average {before} before and {loadavg()} after; read "
             f"bandwidth per round (bwprobe, 1 / 2 threads): {'; '.join(probes)}. {args.prompt}-token prompt, "
             f"{args.gen} generated tokens, --ctx {ctx}, "
             f"medians of {args.runs} rounds, the two sides alternating in order.", "",
             f"Command: `/usr/bin/python3 bench/ab.py {args.old} {args.new} --shape {' '.join(args.shape)} --dtype "
             f"{' '.join(args.dtype)} --threads {' '.join(map(str, args.threads))} --runs {args.runs} --prompt "
             f"{args.prompt} --gen {args.gen} --ctx {ctx}"
             + "".join(f" --{side}-flags={shlex.quote(getattr(args, side + '_flags'))}" for side in ("old", "new")
                       if getattr(args, side + "_flags")) + "`", "",
             "| shape | type | threads | pp old | pp new | pp new/old (rounds' min-max) | tg old | tg new | "
             "tg new/old (rounds' min-max) |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        old, new = got[(c, "old")], got[(c, "new")]
        row = list(c)
        for k in (0, 1):
            o, n = statistics.median(x[k] for x in old), statistics.median(x[k] for x in new)
            ratios = [b[k] / a[k] for a, b in zip(old, new)]
            row += [f"{o:.1f}", f"{n:.1f}", f"{n / o:.3f} ({min(ratios):.2f}-{max(ratios):.2f})"]
        lines.append("| " + " | ".join(map(str, row)) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
