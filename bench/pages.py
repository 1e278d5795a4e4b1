"""pages.py - where a run's memory comes from: ./run on an f16 model with --f16-as-bf16 (a bf16 copy made
at load, anonymous memory) against the same weights exported as bf16 (the file mapped), interleaved, with
the process's page counters sampled while it runs.

    /usr/bin/python3 bench/pages.py [--shape tinyllama] [--threads 1 2] [--runs 10] [--prompt 512]
                                    [--gen 64] [--out FILE] [--run RUN] [--env VAR=VALUE ...]

Each run is one ./run (a --prompt-token prompt, then --gen greedy tokens); every 20 ms the script reads
/proc/PID/stat (minor and major faults so far) and /proc/PID/smaps_rollup (Rss, AnonHugePages). ./run's
timing line gives the prompt's and the decode's seconds; counted back from the last sample, they cut the
run into its load (the model read and, with the flag, the copy made), the prompt and the decode, and the
table gives the faults of each part, the largest Rss and AnonHugePages seen, and the two speeds. Both
sides' files are read afresh before each round (common.fresh_pages). A benchmark, not a test. docs/speed.md
("The copy's pages") has what it found.
"""
import argparse
import datetime
import statistics
import subprocess
import time
from pathlib import Path

from common import (REPO, RUN_ENV, SHAPES, TIMING, checkpoint, fresh_pages, loadavg, log, machine, prompt_text)

RUN = REPO / "run"  # --run
SIDES = {"f16 --f16-as-bf16": ("f16", ["--f16-as-bf16"]), "bf16 file": ("bf16", [])}


def counters(pid):
    """(minor faults, major faults, Rss kB, AnonHugePages kB) of a live process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command's name, which may hold spaces
    kb = {line.split(":")[0]: int(line.split()[1]) for line in rollup.splitlines()[1:] if line.endswith("kB")}
    return int(fields[7]), int(fields[9]), kb.get("Rss", 0), kb.get("AnonHugePages", 0)


def one(model, tokenizer, prompt, gen, threads, ctx, flags):
    cmd = [str(RUN), str(model), "-z", str(tokenizer), "-i", prompt, "-n", str(gen), "-t", "0",
           "--ctx", str(ctx), "--threads", str(threads), *flags]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=RUN_ENV,
                            errors="replace")
    samples = []  # (seconds since start, counters)
    while proc.poll() is None:
        c = counters(proc.pid)
        if c and c[2]:  # a zombie's smaps_rollup is empty
            samples.append((time.monotonic() - start, c))
        time.sleep(0.02)
    err = proc.stderr.read()
    m = TIMING.search(err)
    if proc.returncode or not m or not samples:
        raise SystemExit(f"pages: {' '.join(cmd[:2])} failed:\n{err[-2000:]}")
    end = samples[-1][0]
    decode_from, prompt_from = end - float(m[6]), end - float(m[6]) - float(m[2])

    def at(t):  # the counters of the last sample at or before t
        return [c for s, c in samples if s <= t][-1] if samples[0][0] <= t else (0, 0, 0, 0)
    load, prompt_end, last = at(prompt_from), at(decode_from), samples[-1][1]
    return dict(pp=float(m[3]), tg=float(m[7]), load_s=prompt_from, faults_load=load[0] + load[1],
                faults_prompt=prompt_end[0] - load[0] + prompt_end[1] - load[1],
                faults_decode=last[0] - prompt_end[0] + last[1] - prompt_end[1], major=last[1],
                rss=max(c[2] for _, c in samples) / 1024, huge=max(c[3] for _, c in samples) / 1024)


def main():
    global RUN
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", nargs="+", default=["tinyllama"], choices=[s for s in SHAPES if s != "stories260k"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens, BOS included (default 512)")
    ap.add_argument("--gen", type=int, default=64, help="generated tokens (default 64)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lrun-bench")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--run", type=Path, default=RUN, help="the ./run to measure (default: this checkout's)")
    ap.add_argument("--env", nargs="+", default=[], metavar="VAR=VALUE", help="set for every ./run")
    args = ap.parse_args()
    RUN = args.run.resolve()
    for kv in args.env:
        RUN_ENV[kv.split("=", 1)[0]] = kv.split("=", 1)[1]
    ctx = max(1024, args.prompt + args.gen)
    models = {(s, d): checkpoint(args.cache, s, d) for s in args.shape for d, _ in SIDES.values()}
    prompts = {s: prompt_text(SHAPES[s]["tokenizer"], args.prompt) for s in args.shape}
    cells = [(s, t) for s in args.shape for t in args.threads]
    got = {(c, side): [] for c in cells for side in SIDES}
    before = loadavg()
    for r in range(args.runs):
        for s, t in cells:
            fresh_pages(*(models[(s, d)] for d, _ in SIDES.values()))
            for side in (list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]):
                dtype, flags = SIDES[side]
                got[((s, t), side)].append(one(models[(s, dtype)], SHAPES[s]["tokenizer"], prompts[s], args.gen, t,
                                               ctx, flags))
        log(f"pages: round {r + 1} of {args.runs} done")
    lines = [f"# --f16-as-bf16's copy against the bf16 file: speeds and pages", "",
             f"{machine()}, {datetime.date.today()}, load average {before} before and {loadavg()} after. "
             f"{args.prompt}-token prompt, {args.gen} generated tokens, --ctx {ctx}, {args.runs} rounds, the two "
             f"sides alternating in order" + (f"; environment {' '.join(args.env)}" if args.env else "") + ".", "",
             f"./run: {RUN}. Command: `/usr/bin/python3 bench/pages.py --shape {' '.join(args.shape)} --threads "
             f"{' '.join(map(str, args.threads))} --runs {args.runs} --prompt {args.prompt} --gen {args.gen}"
             + (f" --env {' '.join(args.env)}" if args.env else "") + "`", "",
             "| shape | threads | side | tg tok/s, each round | tg median (min) | pp median (min) | load s | "
             "faults: load / prompt / decode (major) | max Rss / AnonHugePages MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        for side in SIDES:
            g = got[(c, side)]
            med = lambda k: statistics.median(x[k] for x in g)  # noqa: E731
            each = ", ".join(f"{x['tg']:.1f}" for x in g)
            lines.append(f"| {c[0]} | {c[1]} | {side} | {each} | "
                         f"{med('tg'):.1f} ({min(x['tg'] for x in g):.1f}) | {med('pp'):.1f} "
                         f"({min(x['pp'] for x in g):.1f}) | {med('load_s'):.1f} | {med('faults_load'):.0f} / "
                         f"{med('faults_prompt'):.0f} / {med('faults_decode'):.0f} ({med('major'):.0f}) | "
                         f"{med('rss'):.0f} / {med('huge'):.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
