"""ppl_results.py - the extension lab: perplexity and passkey retrieval past the trained context, for
every RoPE scaling mode, on a lab's models (`make results` runs both labs).

Usage:
  /usr/bin/python3 scripts/ppl_results.py [--lab tiny64 | tiny128] [--model M.bin] [-z TOK.model]
              [--text FILE] [--ctx 512,...,32768] [--modes none,ntk,rerope+logn,...]
              [--ppl-windows K | --tokens N] [--passkey-model M.bin] [--passkey-tokenizer TOK]
              [--lengths 512,...,32768] [--depths 0,0.25,0.5,0.75,1] [--trials N]
              [--extend-within R] [--contest-trials N] [--prompt-cache-from N] [--seed S] [--only ppl | passkey]
              [--jobs J] [--threads N] [--out-dir DIR] [--json FILE] [--from-json FILE]

A lab (--lab) is a model whose perplexity is measured and one taught to retrieve a passkey, trained at
the same L on the same text: tiny64 is tiny64x512 and passkey64x512 (head_dim 64, four query heads
on two kv heads, theta 10000), tiny128 is tiny128x512 and passkey128x512 (head_dim 128, two query
heads on one kv head, theta 500000); data/README.md has how each was trained. Every row of --modes
is a --rope-scaling mode, or `M+logn` for mode M with --attn-logn, run with ./run's defaults at each
context (dynamic with --rope-factor ctx / L, as transformers runs it), the same flags in both parts.

The schedule: the columns run one after another, each column's ./run calls J at a time. Every row
runs at every --ctx but the last, and at every --lengths with --trials keys per depth (default 2:
ten keys a cell), except that a row which found no key at one length is not asked at longer ones.
The last --ctx (64x) and the --lengths from the --ctx before it on (32x and 64x) are for the rows
within --extend-within (1.10) of the 1x perplexity at that --ctx before the last (32x). Then the
contest's second round: the rows at 32x that its ten keys do not tell from the best one there (their
Wilson 95% intervals overlap) ask more keys, --contest-trials per depth in all (default 10: fifty keys
a cell, which tell a mode that always finds the key, 93-100%, from one that misses one time in ten),
at 32x and at L, with the reference row (none) at L. --extend-within 0 runs every row
everywhere with --trials, and no second round. From --prompt-cache-from tokens on (default 4096),
a row's prompts of one length share a `./run --prompt-cache` file in a temporary folder under
build/ (README, "Prompt cache"): the trial with the deepest key runs first and writes it, and every
other one takes from it what it begins with, the task line and the filler up to its key line, so
only the rest runs; the answers are the same bit for bit (dynamic and dynamic-yarn, whose keys follow
the whole prompt's length, run without).

Perplexity. `./run MODEL --ppl TEXT --ctx N ...` for every context N and row; its `perplexity:`
line, bucket table and window lines go to
  ppl_results.md   overall perplexity (rows: mode, columns: context), the same divided by the 1x
                   perplexity of plain RoPE (none at --ctx L), which differences are real (each row
                   against the best one, paired window by window), and perplexity by position
                   bucket [0, L), [L, 2L), [2L, 4L), ... (L = the trained context)
  ppl_buckets.png  perplexity against the context, one line per row, and by position bucket at the
                   largest context
  ppl_ratio.png    heat map of the ratio to the 1x perplexity, rows x contexts
Passkey. scripts/passkey.py's prompts (a key line hidden in filler at a depth, then the question),
exactly N - 8 tokens long, at each depth of --depths, the same keys and depths for every row,
answered greedily by `./run PASSKEY_MODEL -t 0 -n 8 --ctx N ...` into
  passkey_results.md  right answers per row and length (all depths) with their Wilson 95% intervals,
                      and per length, row and depth
  passkey_grid.png    heat map per row: length x depth, the share of right answers

Defaults: the perplexity on the held-out tenth of the TinyStories text the models never saw in
training, the first 32768 tokens at every context (64 windows of 512 ... 1 of 32768: the same text in
every column), 1x to 64x; retrieval at 1x to 64x, 5 depths x 2 keys (x 10 in the contest's second
round); the eleven modes with and without log-n. The ./run calls go J at a time (--jobs, default:
one per core), each with --threads (default 1); the numbers do not depend on either. The full default run of a lab
writes docs/results/LAB/ (with results.json, the parsed numbers); any other run writes
build/ppl-quick/LAB/ unless --out-dir says otherwise. --json saves the parsed numbers (and the run's
date, machine and wall time) and --from-json redraws the tables and figures from them without
running anything.

What this is not: a benchmark of the modes in general. Small models on one kind of text (short
stories, so far positions mostly look back at unrelated stories) say whether distance hurts and
whether one planted fact is still found, not how a large model uses a long context; the README,
"Results", reads the tables.
"""
import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
MODES = ["none", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope", "leaky-rerope", "selfextend", "dca",
         "dynamic-yarn"]
ROWS = MODES + [m + "+logn" for m in MODES]
import passkey  # noqa: E402  (scripts/ beside this file: the prompts, ./run's environment)
from plot_rope import STYLE as ROPE_STYLE  # noqa: E402  (the same colour per mode in every plot)

STYLE = {**ROPE_STYLE, "selfextend": ("tab:olive", "h", "-"), "dca": ("tab:pink", "p", "-"),
         "dynamic-yarn": ("tab:gray", "D", "-.")}
N_PREDICT = 8  # tokens a passkey trial generates: a key of up to 5 digits and what follows it
GOAL = 1.03    # issue 39: the best mode within 1.03x of the 1x perplexity (a line in the figure)


# ---------------------------------------------------------------------------------------------
# One row's ./run flags, and the ./run calls J at a time

def row_flags(row, ctx, L):
    """(mode, extra ./run flags) of a row at --ctx ctx: `M+logn` adds --attn-logn; dynamic gets
    --rope-factor ctx / L past L (transformers' dynamic with factor s; ./run's default is 1, which
    makes one window of --ppl the ntk row)."""
    mode = row.removesuffix("+logn")
    extra = ["--attn-logn"] if row.endswith("+logn") else []
    if mode == "dynamic" and ctx > L:
        extra += ["--rope-factor", repr(ctx / L)]
    return mode, extra


def trained_context(run, model, tok):
    """L, the trained context, from ./run's banner (`trained context L = 512`)."""
    proc = subprocess.run([str(run), str(model), "-z", str(tok), "-n", "0"], env=passkey.run_env(),
                          capture_output=True, text=True)
    m = re.search(r"trained context L = (\d+)", proc.stderr)
    if proc.returncode != 0 or not m:
        sys.exit(f"error: {model}: ./run did not print its trained context (exit {proc.returncode}):\n"
                 f"{proc.stderr.strip()}")
    return int(m[1])


def run_jobs(jobs, n):
    """Runs jobs [(cost, key, fn, stage)] n at a time, the costliest first (so that no long run starts
    last and keeps one core busy alone), stage 0 before stage 1 (the passkey trials that read a prompt
    cache a stage-0 trial writes); returns {key: fn()}. An error (SystemExit) in one stops the rest."""
    done = {}
    for stage in sorted({j[3] for j in jobs}):
        pool = ThreadPoolExecutor(n)
        try:
            todo = {pool.submit(fn): key for _, key, fn, s in sorted(jobs, key=lambda j: -j[0]) if s == stage}
            done.update({todo[f]: f.result() for f in as_completed(todo)})
        finally:
            pool.shutdown(cancel_futures=True)
    return done


def cost(tokens, ctx):
    """A rough time for ./run on `tokens` tokens in windows of ctx, for the order only: attention grows
    with the window (measured: 32768 tokens take 1.6 s at 512 and 20 s at 16384, one thread)."""
    return tokens * (1 + ctx / 1024) + 2000  # + the start of a process


# ---------------------------------------------------------------------------------------------
# Perplexity: one ./run --ppl

ROW = re.compile(r"^\[(\d+), (\d+)\)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")
WINDOW = re.compile(r"^window (\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")


def parse_ppl(stdout):
    """./run --ppl's stdout -> {"perplexity": x, "buckets": [{"lo", "hi", "tokens", "nll", "ppl"}],
    "window_nll": [mean NLL of window 1, 2, ...]}. Raises ValueError if the output is not the expected
    `perplexity:` line, bucket table and window lines."""
    m = re.search(r"^perplexity: (\S+)$", stdout, re.M)
    if not m:
        raise ValueError(f"no 'perplexity:' line in ./run's output:\n{stdout}")
    buckets = []
    for line in stdout.splitlines():
        r = ROW.match(line)
        if r:
            buckets.append({"lo": int(r[1]), "hi": int(r[2]), "tokens": int(r[3]), "nll": float(r[4]),
                            "ppl": float(r[5])})
    windows = [float(w[3]) for w in map(WINDOW.match, stdout.splitlines()) if w]
    if not buckets or not windows:
        raise ValueError(f"no bucket rows or no window rows in ./run's output:\n{stdout}")
    return {"perplexity": float(m[1]), "buckets": buckets, "window_nll": windows}


def run_ppl(run, model, tok, text, ctx, row, windows=None, threads=None, L=None):
    """One row of the table at one context."""
    mode, extra = row_flags(row, ctx, L or ctx)
    cmd = [str(run), str(model), "-z", str(tok), "--ppl", str(text), "--ctx", str(ctx), "--rope-scaling", mode,
           *extra]
    if windows:
        cmd += ["--ppl-windows", str(windows)]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=passkey.run_env(), capture_output=True, text=True)
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    res = parse_ppl(proc.stdout)
    res["seconds"] = round(secs, 2)
    rope = re.search(r"^rope: (.*)$", proc.stderr, re.M)  # the banner: effective base, factor, magnitude
    res["rope"] = rope[1] if rope else ""
    w = re.search(r"(\d+) windows? of (\d+)", proc.stderr)
    res["windows"] = int(w[1]) if w else None
    # Every window of ctx tokens makes ctx - 1 predictions, and every one falls in some bucket.
    if res["windows"] and sum(b["tokens"] for b in res["buckets"]) != res["windows"] * (ctx - 1):
        sys.exit(f"error: --ctx {ctx} {row}: the bucket counts do not add up to {res['windows']} x {ctx - 1}")
    return res


def ppl_jobs(a, ctxs, rows, L):
    """[(cost, key, fn)]: one ./run --ppl per context and row; key (ctx, row)."""
    jobs = []
    for c in ctxs:
        windows = a.ppl_windows or (max(1, a.tokens // c) if a.tokens else None)
        for row in rows:
            def job(c=c, row=row, windows=windows):
                r = run_ppl(a.run, a.model, a.tokenizer, a.text, c, row, windows, a.threads, L)
                print(f"--ctx {c:5d} {row:20s} perplexity {r['perplexity']:12.4f}  ({r['windows']} windows, "
                      f"{r['seconds']:.1f} s)", file=sys.stderr)
                return r
            jobs.append((cost(windows * c if windows else 40000, c), (c, row), job, 0))
    return jobs


# ---------------------------------------------------------------------------------------------
# Passkey: one greedy ./run per trial

# The modes whose keys depend on the whole prompt's length: ./run refuses them a prompt cache.
FOLLOW_LENGTH = {"dynamic", "dynamic-yarn", "longrope"}


def passkey_jobs(a, lengths, rows, L, depths, trials, start=0):
    """[(cost, key, fn, stage)] (run_jobs): one ./run per length, row and trial from the start-th on; key (length, row, k)
    for the k-th of the trials (passkey.trial_plan: `trials` at each depth, keys uniform in [1, 50000],
    seeded, one round of the depths after another, so more trials add rounds to the same first ones),
    which are the same prompts for every row. fn returns {"depth", "at" (where the key line landed), "key",
    "answer" (None: no number), "seconds", "cached" (prompt tokens taken from the prompt cache)}."""
    tok_path = Path(a.passkey_tokenizer)
    if start >= trials * len(depths) or not rows:
        return []
    try:
        tok = passkey.Tokenizer(tok_path, passkey.checkpoint_bos(a.passkey_model))
        plan = passkey.trial_plan(trials, depths, a.seed)[start:]
        prompts = passkey.build_prompts(tok, [(n - N_PREDICT, key, d) for n in lengths for key, d in plan])
    except (passkey.TokenizerError, ValueError) as e:
        sys.exit(f"error: passkey prompts: {e}")
    jobs = []
    for i, n in enumerate(lengths):
        # The prompt cache (./run --prompt-cache, README "Prompt cache"): a length's prompts are the
        # same text up to their key line, so the one with the deepest key, run first, leaves the
        # keys and values of what all the others begin with. Their answers are the same bit for bit.
        first = start + max(range(len(plan)), key=lambda j: (plan[j][1], -j))
        for row in rows:
            mode, extra = row_flags(row, n, L)
            cache = str(Path(a.cache_dir) / f"{n}-{row}.cache") if a.cache_dir and n >= a.prompt_cache_from and \
                mode not in FOLLOW_LENGTH else None
            if cache:
                extra += ["--prompt-cache", cache]
            for k, (key, d) in enumerate(plan, start=start):
                p = prompts[i * len(plan) + k - start]

                def job(n=n, row=row, p=p, d=d, mode=mode, extra=extra):
                    t0, info = time.monotonic(), {}
                    try:
                        cont, ans = passkey.run_one(a.run, a.passkey_model, tok_path, p, n, mode, N_PREDICT,
                                                    a.threads, flags=extra, info=info)
                    except (ValueError, RuntimeError) as e:
                        sys.exit(f"error: {e}")
                    print(f"length {n:5d} {row:20s} depth {p.filler_depth:.3f} key {p.key:5d} answer {ans} "
                          f"{'ok' if ans == p.key else '--'} {cont!r}", file=sys.stderr)
                    return {"depth": d, "at": round(p.filler_depth, 4), "key": p.key, "answer": ans,
                            "seconds": round(time.monotonic() - t0, 2), "cached": info["reused"]}
                # the deepest key of the first call writes the cache (stage 0), the others read it
                stage = int(bool(cache) and (k != first or Path(cache).exists()))
                jobs.append((cost(n, n), (n, row, k), job, stage))
    return jobs


# ---------------------------------------------------------------------------------------------
# The perplexity tables and figures

def fmt(x):
    return f"{x:.3f}" if x < 1000 else f"{x:.4g}"


def bucket_name(b):
    return f"[{b['lo']}, {b['hi']})"


def run_line(meta):
    """Where, when and how long: the line every document carries."""
    return (f"Run {meta['date']} on {meta['machine']}, {meta['jobs']} ./run at a time with --threads "
            f"{meta['threads']}: {meta['seconds']:.0f} s wall time for the run "
            f"(perplexity {meta['ppl_seconds']:.0f} s and passkey {meta['passkey_seconds']:.0f} s of ./run time)."
            if "date" in meta else "")


def baseline(res, ctxs, modes):
    """The 1x perplexity every ratio divides by: plain RoPE (none, else the first row) at the smallest
    context."""
    lo = res[str(ctxs[0])]
    return lo["none" if "none" in modes else modes[0]]["perplexity"]


def ppl_of(res, c, m):
    """The perplexity of row m at context c, None for a cell not run."""
    r = res[str(c)].get(m)
    return r["perplexity"] if r else None


def paired(res, c, m, best):
    """Row m against row best at context c, window by window (the same text in both): (mean of
    m's NLL - best's NLL, in nats per token; its standard error over the windows, None for fewer
    than 3; the windows where m is worse, of all)."""
    d = [x - y for x, y in zip(res[str(c)][m]["window_nll"], res[str(c)][best]["window_nll"])]
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) >= 3 else None
    return mean, se, sum(x > 0 for x in d), len(d)


def spread_section(res, ctxs, modes):
    """Which differences are real: at every context, each row within 1.10x of the best row's
    perplexity against that best row, paired by window."""
    out = ["", "## Which differences are real (the spread over windows)", "",
           "Every row reads the same windows of the same text, so two rows are compared window by window: "
           "Δ is the mean over windows of the row's NLL minus the best row's (nats per token; the ratio of "
           "the perplexities is exp(Δ)), ± its standard error over the windows, and how many windows the row "
           "is worse in. A Δ more than twice its standard error, in most windows, is taken as real; with "
           "fewer than 3 windows (1 or 2 at the longest contexts) the windows cannot say, and the difference "
           "is shown without one. Rows more than 1.10x the best are left out: those differences are plain.",
           "", "| --ctx | best | row | ratio | Δ (nats) | ± | worse in | real? |",
           "|---:|---|---|---:|---:|---:|---:|---|"]
    for c in ctxs:
        groups = {}  # rows with the same numbers, window for window, are one line
        for m in sorted((m for m in modes if ppl_of(res, c, m) is not None), key=lambda m: ppl_of(res, c, m)):
            groups.setdefault(tuple(res[str(c)][m]["window_nll"]), []).append(m)
        (best, *same), *others = groups.values()
        if same:
            out.append(f"| {c} | {best} | {', '.join(same)} | 1 | 0 | 0 | 0/{len(res[str(c)][best]['window_nll'])} "
                       f"| the same numbers |")
        for rows in others:
            m = rows[0]
            if ppl_of(res, c, m) > 1.10 * ppl_of(res, c, best):
                continue
            mean, se, worse, n = paired(res, c, m, best)
            real = "cannot tell" if se is None else ("yes" if mean > 2 * se and 2 * worse > n else "no")
            out.append(f"| {c} | {best} | {', '.join(rows)} | {ppl_of(res, c, m) / ppl_of(res, c, best):.4f} | "
                       f"{mean:.5f} | {'—' if se is None else f'{se:.5f}'} | {worse}/{n} | {real} |")
    return out


def markdown(res, ctxs, modes, meta):
    L = meta["L"]
    ref = "none" if "none" in modes else modes[0]
    base = baseline(res, ctxs, modes)
    show = lambda c, m, f: "—" if ppl_of(res, c, m) is None else f(ppl_of(res, c, m))  # noqa: E731
    out = [f"# Perplexity of {meta['model']} past its trained context",
           "",
           f"Generated by `{meta['command']}`. Text: `{meta['text']}`; "
           f"{meta['scope']}. Trained context L = {L}; every mode with `./run`'s defaults at each --ctx "
           f"(s = ctx / L; rerope's window W = L / 4, leaky-rerope's rate K = (ctx - W) / (L - W); selfextend's "
           f"W = L / 4 and the smallest group G whose capacity (L - W) G + W covers ctx; dca's chunk S = 3L / 4 "
           f"and local window w = L / 16; dynamic-yarn's s = length / L), except dynamic, run with "
           f"`--rope-factor ctx/L` (its default is 1, which makes one window the ntk row). `+logn`: with "
           f"`--attn-logn`. Lower is better; the [0, {L}) column of the bucket tables is the model inside its "
           f"trained range."
           + (f" At --ctx {ctxs[-1]} only the rows within {meta['extend']['within']}x of the 1x perplexity at "
              f"--ctx {ctxs[-2]} ran; — is a cell not run." if meta.get("extend") else ""),
           ""]
    if run_line(meta):
        out += [run_line(meta), ""]
    out += ["## Overall perplexity (rows: --rope-scaling, columns: --ctx)",
            "",
            "| mode | " + " | ".join(str(c) for c in ctxs) + " |",
            "|---|" + "---:|" * len(ctxs)]
    for m in modes:
        out.append(f"| {m} | " + " | ".join(show(c, m, fmt) for c in ctxs) + " |")
    out += ["", f"## Ratio to the 1x perplexity ({ref} at --ctx {ctxs[0]}: {fmt(base)})", "",
            "| mode | " + " | ".join(f"{c} ({c / L:g}x)" for c in ctxs) + " |",
            "|---|" + "---:|" * len(ctxs)]
    for m in modes:
        out.append(f"| {m} | " + " | ".join(show(c, m, lambda x: f"{x / base:.3f}") for c in ctxs) + " |")
    out.append("")
    for c in ctxs[1:]:
        best = min((m for m in modes if ppl_of(res, c, m) is not None), key=lambda m: ppl_of(res, c, m))
        r = res[str(c)][best]["perplexity"] / base
        out.append(f"Best at --ctx {c} ({c / L:g}x): {best}, {fmt(res[str(c)][best]['perplexity'])}, {r:.3f}x the "
                   f"1x perplexity ({'within' if r <= GOAL else 'not within'} {GOAL}x).  ")
    out += spread_section(res, ctxs, modes)
    for c in sorted(ctxs, reverse=True):
        ran = [m for m in modes if ppl_of(res, c, m) is not None]
        names = [bucket_name(b) for b in res[str(c)][ran[0]]["buckets"]]
        if len(names) < 2:
            continue
        out += ["", f"## Perplexity by position, --ctx {c}", "",
                "| mode | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for m in ran:
            out.append(f"| {m} | " + " | ".join(fmt(b["ppl"]) for b in res[str(c)][m]["buckets"]) + " |")
        tokens = [b["tokens"] for b in res[str(c)][ran[0]]["buckets"]]
        out.append("| (predictions) | " + " | ".join(str(t) for t in tokens) + " |")
    top = str(max(c for c in ctxs if all(ppl_of(res, c, m) is not None for m in modes)))
    out += ["", f"## RoPE as `./run` reported it at --ctx {top}", ""]
    for m in modes:
        out.append(f"- `{m}`: {res[top][m]['rope']}")
    return "\n".join(out) + "\n"


def line_style(row):
    """The mode's colour and marker (plot_rope.STYLE); with log-n, the same colour, thinner and dotted."""
    colour, marker, ls = STYLE.get(row.removesuffix("+logn"), ("grey", ".", "-"))
    logn = row.endswith("+logn")
    return dict(color=colour, marker=marker, ls=":" if logn else ls, lw=1 if logn else 1.6, ms=4 if logn else 6,
                markerfacecolor="none", label=row.replace("+logn", " + log-n"))


def plot(res, ctxs, modes, L, path, title):
    top = max(ctxs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    base = baseline(res, ctxs, modes) if ctxs[0] == L else None
    for m in modes:
        left.plot([c / L for c in ctxs], [ppl_of(res, c, m) or np.nan for c in ctxs], **line_style(m))
        bs = res[str(top)][m]["buckets"] if m in res[str(top)] else []
        right.plot(range(len(bs)), [b["ppl"] for b in bs], **line_style(m))
    left.set_xscale("log", base=2)
    left.set_xticks([c / L for c in ctxs])
    left.set_xticklabels([f"{c}\n({c / L:g}x)" for c in ctxs], fontsize=8)
    left.set_xlabel("--ctx (and s = ctx / L)")
    left.set_title("perplexity of the whole window")
    names = [bucket_name(b) for b in next(iter(res[str(top)].values()))["buckets"]]
    right.set_xticks(range(len(names)))
    right.set_xticklabels(names, fontsize=7)
    right.set_xlabel("position of the predicting token in the window")
    right.set_title(f"by position, --ctx {top} (s = {top / L:g})")
    # The scale is set for the modes that work; a row above it (pi, none) is in the table.
    top_y = min(60, max(max(r["perplexity"] for c in ctxs for r in res[str(c)].values()),
                        max(b["ppl"] for r in res[str(top)].values() for b in r["buckets"])) * 1.1)
    for ax in (left, right):
        ax.set_ylim(base * 0.85 if base else None, top_y)
        if base:
            ax.axhline(base, color="grey", lw=1, ls="--")
            ax.axhline(1.3 * base, color="grey", lw=0.8, ls="-.")
        ax.set_yscale("log")
        ticks = [t for t in (5, 6, 7, 8, 10, 12, 15, 20, 30, 40, 60, 100, 200, 400) if t <= top_y]
        ax.set_yticks(ticks, [str(t) for t in ticks], minor=False)
        ax.set_yticks([], minor=True)
        ax.grid(alpha=0.3)
    left.set_ylabel("perplexity (log scale; lower is better)")
    handles, labels = left.get_legend_handles_labels()
    if base:
        handles += [plt.Line2D([], [], color="grey", lw=1, ls="--"), plt.Line2D([], [], color="grey", lw=0.8, ls="-.")]
        labels += [f"none at --ctx {L}", "1.3x that"]
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.suptitle(title + (f"\n(cut at perplexity {top_y:.0f}: the rows above it are in the table)" if top_y == 60
                          else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def text_colour(cmap, norm, value):
    """Black on a light cell, white on a dark one."""
    r, g, b, _ = cmap(norm(value))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def split_logn(rows):
    """The panels of a heat map: the rows without log-n and those with it (empty ones left out)."""
    return [(rs, name) for rs, name in (([r for r in rows if not r.endswith("+logn")], "without log-n"),
                                        ([r for r in rows if r.endswith("+logn")], "with --attn-logn")) if rs]


def plot_ratio(res, ctxs, modes, L, path, title):
    """Heat map: perplexity / the 1x perplexity, rows x contexts, one panel without and one with log-n.
    Green is at or below 1x, red far above it; a bold number is within the goal (GOAL)."""
    base = baseline(res, ctxs, modes)
    panels = split_logn(modes)
    cmap, norm = plt.get_cmap("RdYlGn_r"), LogNorm(vmin=0.9, vmax=10)
    high = max(len(p) for p, _ in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(2.5 + 4.6 * len(panels), 1.4 + 0.34 * high), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, (rows, name) in zip(axes[0], panels):
        ratio = np.array([[(ppl_of(res, c, m) or np.nan) / base for c in ctxs] for m in rows])
        im = ax.imshow(np.ma.masked_invalid(np.clip(ratio, 0.9, 10)), cmap=cmap, norm=norm, aspect="auto")
        ax.set_facecolor("0.85")  # a cell not run
        for i in range(len(rows)):
            for j in range(len(ctxs)):
                v = ratio[i, j]
                if np.isnan(v):
                    continue
                ax.text(j, i, f"{v:.3f}" if v < 10 else f"{v:.0f}", ha="center", va="center", fontsize=8,
                        color=text_colour(cmap, norm, min(max(v, 0.9), 10)),
                        fontweight="bold" if v <= GOAL else "normal")
        ax.set_xticks(range(len(ctxs)), [f"{c}\n{c / L:g}x" for c in ctxs], fontsize=8)
        if ax is axes[0][0]:
            ax.set_yticks(range(len(rows)), [r.removesuffix("+logn") for r in rows], fontsize=9)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("--ctx")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, label=f"perplexity / {fmt(base)} (none at 1x; log scale)")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The passkey table and figure

def right(trials):
    return sum(t["answer"] == t["key"] for t in trials)


def wilson(k, n, z=1.96):
    """The Wilson score interval (Wilson 1927) of a share k / n at 95% (z = 1.96): the shares p
    whose binomial test at k of n does not reject, (centre +- half) with centre = (k + z^2 / 2) /
    (n + z^2), half = z sqrt(k (n - k) / n + z^2 / 4) / (n + z^2). Unlike k / n +- 1.96 sd it stays
    inside [0, 1] and is not empty at 0 or n right answers."""
    c = (k + z * z / 2) / (n + z * z)
    h = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return max(0.0, c - h), min(1.0, c + h)


def count_cell(trials):
    """"k/n (lo-hi%)": right answers and their Wilson 95% interval; "—" for a cell not run."""
    if not trials:
        return "—"
    k, n = right(trials), len(trials)
    lo, hi = wilson(k, n)
    return f"{k}/{n} ({100 * lo:.0f}-{100 * hi:.0f}%)"


def by_depth(trials, d):
    return [t for t in trials if t["depth"] == d]


def passkey_markdown(pk, lengths, rows):
    meta, res = pk["meta"], pk["results"]
    L, depths = meta["L"], meta["depths"]
    ref = "none" if "none" in rows else rows[0]
    cell = lambda n, m: res[str(n)].get(m, [])  # noqa: E731  (a cell not run: no trials)
    out = [f"# Passkey retrieval of {meta['model']} past its trained context",
           "",
           f"Generated by `{meta['command']}`. scripts/passkey.py's prompts, each exactly N - {meta['n_predict']} "
           f"tokens (N: the --ctx of the run, so the prompt and the {meta['n_predict']} generated tokens fill it), "
           f"{meta['trials']} trial(s) at each depth {', '.join(f'{d:g}' for d in depths)} (the share of the filler "
           f"before the key line), keys uniform in [1, 50000] (seed {meta['seed']}), the same prompts for every "
           f"row; `./run {meta['model']} -t 0 -n {meta['n_predict']} --ctx N --rope-scaling MODE` with the flags "
           f"of ppl_results.md (dynamic: `--rope-factor N/L`; `+logn`: `--attn-logn`); right means the first "
           f"number of the continuation is the key. Trained context L = {L}."]
    contest = meta.get("contest")
    if contest:
        ext = contest.get("lengths", lengths[-1:])
        out[-1] += (f" At {' and '.join(map(str, ext))} only the rows within {contest['within']}x of the 1x "
                    f"perplexity at the longest context before the last ran ({', '.join(contest['rows'])}).")
    if contest and contest.get("second_round"):
        out[-1] += (f" Then the rows at {ext[0]} that those keys did not tell apart from the best one (their "
                    f"Wilson 95% intervals overlap: {', '.join(contest['second_round'])}) asked "
                    f"{contest['trials']} at each depth in all, there and at {lengths[0]}, and so did {ref} at "
                    f"{lengths[0]}.")
    out[-1] += " A row that found no key at one length is not asked at longer ones. — is a cell not run."
    out += ["", "In brackets: the Wilson 95% interval of the share right. Two cells whose intervals overlap "
            "may differ by chance; with 10 trials 10/10 is 72-100%, so only 50 trials (93-100% at 50/50) tell "
            "a mode that always finds the key from one that misses one time in ten.", ""]
    if run_line(meta):
        out += [run_line(meta), ""]
    out += ["## Right answers, all depths (rows: --rope-scaling, columns: N)", "",
            "| mode | " + " | ".join(f"{n} ({n / L:g}x)" for n in lengths) + " |",
            "|---|" + "---:|" * len(lengths)]
    for m in rows:
        out.append(f"| {m} | " + " | ".join(count_cell(cell(n, m)) for n in lengths) + " |")
    base = cell(lengths[0], ref)
    out.append("")
    for n in lengths[1:]:
        ran = [m for m in rows if cell(n, m)]
        if not ran:
            out.append(f"At {n} ({n / L:g}x) no row was asked.  ")
            continue
        top = max(right(cell(n, m)) / len(cell(n, m)) for m in ran)
        best = [m for m in ran if right(cell(n, m)) / len(cell(n, m)) == top]
        out.append(f"Best at {n} ({n / L:g}x): {count_cell(cell(n, best[0]))} ({', '.join(best)}); {ref} at "
                   f"{lengths[0]}: {count_cell(base)}.  ")
    for n in lengths:
        out += ["", f"## By depth, N = {n} ({n / L:g}x)", "",
                "| mode | " + " | ".join(f"{d:g}" for d in depths) + " |", "|---|" + "---:|" * len(depths)]
        for m in rows:
            if cell(n, m):
                out.append(f"| {m} | " + " | ".join(f"{right(by_depth(cell(n, m), d))}/{len(by_depth(cell(n, m), d))}"
                                                    for d in depths) + " |")
    return "\n".join(out) + "\n"


def plot_passkey(pk, lengths, rows, path, title):
    """One small heat map per row, length (down) x depth (across), the share of right answers; a row
    with log-n beside the same mode without it."""
    meta, res = pk["meta"], pk["results"]
    L, depths = meta["L"], meta["depths"]
    order = sorted(rows, key=lambda r: (MODES.index(r.removesuffix("+logn")) if r.removesuffix("+logn") in MODES
                                        else len(MODES), r.endswith("+logn")))
    cols = min(6, len(order))
    lines = math.ceil(len(order) / cols)
    cmap = plt.get_cmap("RdYlGn")
    fig, axes = plt.subplots(lines, cols, figsize=(1.4 + 2.0 * cols, 0.8 + 2.1 * lines), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[len(order):]:
        ax.axis("off")
    for ax, m in zip(axes.flat, order):
        cells = [[by_depth(res[str(n)].get(m, []), d) for d in depths] for n in lengths]
        share = np.ma.masked_invalid([[right(t) / len(t) if t else np.nan for t in line] for line in cells])
        im = ax.imshow(share, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        ax.set_facecolor("0.85")  # a cell not run
        for i, line in enumerate(cells):
            for j, t in enumerate(line):
                if t:
                    ax.text(j, i, f"{right(t)}/{len(t)}", ha="center", va="center", fontsize=6,
                            color=text_colour(cmap, plt.Normalize(0, 1), share[i, j]))
        ax.set_title(m.replace("+logn", " + log-n"), fontsize=8)
        ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=6)
        ax.set_yticks(range(len(lengths)), [f"{n / L:g}x" for n in lengths], fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("depth", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"length (L = {L})", fontsize=7)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="share of right answers")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The command line

def parse_list(text, conv, what):
    try:
        items = [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        items = []
    if not items:
        sys.exit(f"error: {what}: cannot read '{text}' (hint: a comma-separated list)")
    return items


def machine():
    """The CPU's name and the number of cores, as /proc/cpuinfo and os.cpu_count() say."""
    try:
        name = re.search(r"^model name\s*: (.*)$", Path("/proc/cpuinfo").read_text(), re.M)[1].strip()
    except (OSError, TypeError):
        name = "unknown CPU"
    return f"{name}, {os.cpu_count()} cores"


# --lab: a lab is a model whose perplexity is measured and one whose retrieval is (the same model when
# it does both), with their tokenizers; its full run goes to docs/results/LAB/.
LABS = {
    "tiny64": dict(model="build/tiny64.bin", tokenizer="data/tiny64x512-hf/tokenizer.model",
                   passkey_model="build/passkey64.bin", passkey_tokenizer="data/passkey64x512-hf/tokenizer.model"),
    "tiny128": dict(model="build/tiny128.bin", tokenizer="data/tiny128x512-hf/tokenizer.model",
                    passkey_model="build/passkey128.bin", passkey_tokenizer="data/passkey128x512-hf/tokenizer.model"),
}


def trials_of(done, n, m):
    """The passkey trials of row m at length n, in order (keys (n, m, k); perplexity keys are (c, m))."""
    return [done[k] for k in sorted(k for k in done if len(k) == 3 and k[:2] == (n, m))]


def extended_lengths(ctxs, lengths, do_ppl):
    """The passkey lengths that only the rows picked for the last context run: with a perplexity part,
    those from the context the rows are picked at (the --ctx before the last, 32x by default) on, but
    never L (every row's reference); without one, the last length (the rows picked at the one before)."""
    if not do_ppl:
        return lengths[-1:]
    return [n for n in lengths[1:] if n >= ctxs[-2]]


def run_grid(a, ctxs, lengths, modes, depths, L, Lp, do_ppl, do_passkey, extend, ext):
    """Runs the ./run calls column by column, each column's calls J at a time, and returns ({key: result},
    the rows of the extended columns or None, the rows of the contest's second round). A row that found
    no key at one length is not asked at longer ones (— in the tables): retrieval only gets harder with
    length, and these trials cost the most. With extend, the last --ctx and the extended lengths ext
    (extended_lengths: 32x and 64x by default; [] without a passkey part) are for the rows within --extend-within of the 1x
    perplexity at the --ctx before the last (without a perplexity part: those with the most keys right
    at the length before the last). The passkey columns run a column behind the perplexity ones, and
    the extended ones no earlier than the last context, which is when those rows are known. Then the
    contest's second round at the first extended length (contest_round)."""
    done, rows = {}, None
    alive_n = list(modes)
    ref = "none" if "none" in modes else modes[0]
    pk_phase = [j + 1 for j in range(len(lengths))]
    if ext and do_ppl:
        pk_phase = [max(p, len(ctxs) - 1) if n in ext else p for p, n in zip(pk_phase, lengths)]
    for i in range(max([len(ctxs)] + pk_phase) + 1):
        if extend and rows is None and (i == len(ctxs) - 1 if do_ppl else i == pk_phase[-1]):
            if do_ppl:
                base = done[(ctxs[0], ref)]["perplexity"]
                rows = [m for m in modes if (ctxs[-2], m) in done
                        and done[(ctxs[-2], m)]["perplexity"] <= a.extend_within * base]
            else:
                score = {m: right(trials_of(done, lengths[-2], m)) for m in alive_n}
                rows = [m for m in alive_n if score[m] == max(score.values(), default=0)]
            print(f"the last context and length: {', '.join(rows) or '(no row)'}", file=sys.stderr)
        jobs = []
        if do_ppl and i < len(ctxs):
            jobs += ppl_jobs(a, [ctxs[i]], rows if extend and i == len(ctxs) - 1 else modes, L)
        for j, phase in enumerate(pk_phase):
            if do_passkey and phase == i:
                asked = [m for m in rows if m in alive_n] if lengths[j] in ext else alive_n
                jobs += passkey_jobs(a, [lengths[j]], asked, Lp, depths, a.trials)
        done.update(run_jobs(jobs, a.jobs))
        for j, phase in enumerate(pk_phase):
            if do_passkey and phase == i:
                alive_n = [m for m in alive_n if right(trials_of(done, lengths[j], m))]
    contest = contest_round(a, done, ext[0], lengths[0], rows, ref, Lp, depths) if ext else []
    return done, rows, contest


def contenders(cells):
    """The rows of {row: trials} whose Wilson 95% interval overlaps the best row's, in order; none when
    no row found a key (then more keys tell nothing apart)."""
    best = max(cells.values(), key=lambda t: right(t) / len(t), default=[])
    if not best or not right(best):
        return []
    low = wilson(right(best), len(best))[0]
    return [m for m, t in cells.items() if wilson(right(t), len(t))[1] >= low]


def contest_round(a, done, n, first_n, rows, ref, Lp, depths):
    """The contest's second round: where --trials keys a cell cannot tell the rows of length n (the
    first extended one) apart, more keys. The rows whose Wilson 95% interval there overlaps the best
    row's (contenders: 9/10, 60-98%, is not told from 10/10, 72-100%) ask --contest-trials keys per
    depth in all at n, and so do they and the reference row (none) at the first length, L, the
    retrieval they are measured against; the first --trials rounds are the keys already asked
    (passkey.trial_plan). No round when no row found a key at n, or --contest-trials is not above
    --trials. Returns its rows."""
    asked = {m: t for m in rows if (t := trials_of(done, n, m))}
    go = contenders(asked) if a.contest_trials > a.trials else []
    if not go:
        return []
    print(f"the contest's second round, {a.contest_trials} keys per depth: {', '.join(go)}", file=sys.stderr)
    first = a.trials * len(depths)
    jobs = passkey_jobs(a, [n], go, Lp, depths, a.contest_trials, start=first) + \
        passkey_jobs(a, [first_n], [ref] + [m for m in go if m != ref], Lp, depths, a.contest_trials, start=first)
    done.update(run_jobs(jobs, a.jobs))
    return go


def main(argv=None):
    ap = argparse.ArgumentParser(description="Perplexity and passkey retrieval per context length and RoPE "
                                 "scaling mode, as markdown tables and heat maps.")
    ap.add_argument("--lab", choices=list(LABS), default="tiny64", help="the models and their tokenizers "
                    "(default tiny64: tiny64x512's perplexity and passkey64x512's retrieval; tiny128: "
                    "tiny128x512's and passkey128x512's); the four options below replace one each")
    ap.add_argument("--model", help="the perplexity model")
    ap.add_argument("-z", "--tokenizer")
    ap.add_argument("--passkey-model", help="the passkey model")
    ap.add_argument("--passkey-tokenizer")
    ap.add_argument("--text", default=str(DATA / "text/tinystories_heldout_tail.txt"))
    ap.add_argument("--ctx", default="512,1024,2048,4096,8192,16384,32768", help="perplexity: context lengths "
                    "(the smallest should be L)")
    ap.add_argument("--modes", default=",".join(ROWS), help="--rope-scaling modes; M+logn is M with --attn-logn")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--ppl-windows", type=int, help="perplexity: at most K windows per run")
    g.add_argument("--tokens", type=int, default=32768, help="perplexity: the first N tokens at every context: "
                   "N // ctx windows (default 32768; 0: the whole text)")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384,32768", help="passkey: context lengths N (the "
                    "smallest should be L)")
    ap.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="passkey: depths in [0, 1]")
    ap.add_argument("--trials", type=int, default=2, help="passkey: trials per length, depth and row (default 2)")
    ap.add_argument("--extend-within", type=float, default=1.10, help="the last --ctx, and the --lengths from the "
                    "--ctx before it on, run only the rows within this many times the 1x perplexity at that --ctx "
                    "(default 1.10; 0: every row everywhere)")
    ap.add_argument("--contest-trials", type=int, default=10, help="passkey: trials per depth in all, at the "
                    "first extended length (32x) and at the first, for the rows there not told apart from "
                    "the best row by --trials (default 10; at most --trials: no second round)")
    ap.add_argument("--prompt-cache-from", type=int, default=4096, help="passkey: at lengths from this one on, "
                    "each row's prompts of a length share a ./run --prompt-cache (what they begin with runs once; "
                    "the same answers; default 4096; 0: none)")
    ap.add_argument("--seed", type=int, default=1, help="passkey: the seed of the keys (default 1)")
    ap.add_argument("--only", choices=["ppl", "passkey"], help="run one part only")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="./run processes at a time (default: one "
                    "per core)")
    ap.add_argument("--threads", type=int, default=1, help="passed to ./run (default 1)")
    ap.add_argument("--run", default=str(REPO / "run"))
    ap.add_argument("--out-dir", help="where the tables and figures go (default: docs/results/LAB/ for a full "
                    "run, build/ppl-quick/LAB/ for a subset, so a quick look never replaces the committed results)")
    ap.add_argument("--json", help="also save the parsed numbers here (a full run saves them in its "
                    "--out-dir as results.json)")
    ap.add_argument("--from-json", help="do not run anything: redraw from numbers saved with --json")
    a = ap.parse_args(argv)
    full = not a.from_json and all(getattr(a, k) == ap.get_default(k) for k in
                                   ("model", "tokenizer", "text", "ctx", "modes", "ppl_windows", "tokens", "run",
                                    "passkey_model", "passkey_tokenizer", "lengths", "depths", "trials", "seed",
                                    "only", "extend_within", "contest_trials"))
    for k, v in LABS[a.lab].items():
        if getattr(a, k) is None:
            setattr(a, k, str(REPO / v))
    ctxs = sorted(parse_list(a.ctx, int, "--ctx"))
    modes = parse_list(a.modes, str, "--modes")
    lengths = sorted(parse_list(a.lengths, int, "--lengths"))
    depths = parse_list(a.depths, float, "--depths")
    if not all(0 <= d <= 1 for d in depths):
        sys.exit("error: --depths: every depth must be in [0, 1]")
    if a.trials < 1 or a.jobs < 1 or a.contest_trials < 1:
        sys.exit("error: --trials, --contest-trials and --jobs must be at least 1")
    if a.extend_within < 0:
        sys.exit("error: --extend-within must be 0 (every row everywhere) or a ratio such as 1.10")
    out = Path(a.out_dir) if a.out_dir else REPO / (f"docs/results/{a.lab}" if full else f"build/ppl-quick/{a.lab}")
    if not a.out_dir and not full:
        print(f"note: not the full default run, so the results go to {out}, not docs/ (which hold the full run; "
              f"pass --out-dir docs/results/{a.lab} to replace them)", file=sys.stderr)
    do_ppl, do_passkey = a.only != "passkey", a.only != "ppl"
    # The last context and length are the contest: only the rows that did well before it run there.
    extend = a.extend_within > 0 and len(ctxs if do_ppl else lengths) > 1
    if extend and do_passkey and len(lengths) < 2:
        sys.exit("error: --extend-within needs two --lengths or more (the last is for the rows that did well; "
                 "hint: --extend-within 0 runs every row at every length)")
    if extend and do_ppl and len(ctxs) < 2:
        sys.exit("error: --extend-within needs two --ctx or more (hint: --extend-within 0)")
    ext = extended_lengths(ctxs, lengths, do_ppl) if extend and do_passkey else []

    if a.from_json:
        saved = json.loads(Path(a.from_json).read_text())
        res, meta, pk = saved.get("results"), saved.get("meta"), saved.get("passkey")
        if res:
            ctxs = [c for c in ctxs if str(c) in res]
            modes_ppl = [m for m in modes if m in res[str(ctxs[0])]]
        if pk:
            lengths = [n for n in lengths if str(n) in pk["results"]]
            modes_pk = [m for m in modes if m in pk["results"][str(lengths[0])]]
        do_ppl, do_passkey = do_ppl and bool(res), do_passkey and bool(pk)
    else:
        needed = [(a.run, "`make` first")] + \
            ([(a.model, "`make results` exports the bundled models")] if do_ppl else []) + \
            ([(a.passkey_model, "`make results` exports the bundled models")] if do_passkey else [])
        for path, hint in needed:
            if not Path(path).exists():
                sys.exit(f"error: {path}: not found (hint: {hint})")
        cmd = "/usr/bin/python3 scripts/ppl_results.py" + "".join(
            f" {x}" for x in (argv if argv is not None else sys.argv[1:]))
        L = trained_context(a.run, a.model, a.tokenizer) if do_ppl else None
        Lp = trained_context(a.run, a.passkey_model, a.passkey_tokenizer) if do_passkey else None
        t_all = time.monotonic()
        caching = do_passkey and a.prompt_cache_from > 0
        if caching:
            (REPO / "build").mkdir(exist_ok=True)
        with (tempfile.TemporaryDirectory(prefix="passkey-cache-", dir=REPO / "build") if caching
              else contextlib.nullcontext()) as cache_dir:
            a.cache_dir = cache_dir
            done, rows, contest = run_grid(a, ctxs, lengths, modes, depths, L, Lp, do_ppl, do_passkey, extend, ext)
        run = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "jobs": a.jobs, "threads": a.threads,
               "seconds": round(time.monotonic() - t_all, 1),
               "ppl_seconds": round(sum(r["seconds"] for k, r in done.items() if len(k) == 2), 1),
               "passkey_seconds": round(sum(r["seconds"] for k, r in done.items() if len(k) == 3), 1)}
        res = meta = pk = None
        if do_ppl:
            res = {str(c): {m: done[(c, m)] for m in modes if (c, m) in done} for c in ctxs}
            if a.ppl_windows:
                scope = f"at most {a.ppl_windows} window(s) per run"
            elif a.tokens:
                scope = f"the first {a.tokens} tokens at every context (tokens // ctx windows)"
            else:
                scope = "the whole text at every context"
            scope += " (windows: " + ", ".join(f"{next(iter(res[str(c)].values()))['windows']} x {c}"
                                               for c in ctxs) + ")"
            meta = {"model": Path(a.model).name, "text": Path(a.text).name, "command": cmd, "scope": scope, "L": L,
                    **run}
            if extend:
                meta["extend"] = {"within": a.extend_within, "rows": rows}
        if do_passkey:
            pk_res = {str(n): {m: trials_of(done, n, m) for m in modes
                               if (n, m, 0) in done} for n in lengths}
            pk = {"meta": {"model": Path(a.passkey_model).name, "command": cmd, "L": Lp, "depths": depths,
                           "trials": a.trials, "seed": a.seed, "n_predict": N_PREDICT, **run}, "results": pk_res}
            if extend:
                pk["meta"]["contest"] = {"within": a.extend_within, "rows": rows, "trials": a.contest_trials,
                                         "lengths": ext, "second_round": contest}
        print(f"all runs: {run['seconds']:.0f} s", file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        saved = json.dumps({"meta": meta, "results": res, "passkey": pk}, indent=1) + "\n"
        for path in ([a.json] if a.json else []) + ([out / "results.json"] if full else []):
            Path(path).write_text(saved)
        modes_ppl = modes_pk = modes

    out.mkdir(parents=True, exist_ok=True)
    wrote = []
    if do_ppl:
        md = markdown(res, ctxs, modes_ppl, meta)
        (out / "ppl_results.md").write_text(md)
        wrote.append(out / "ppl_results.md")
        if max(ctxs) > meta["L"]:  # the figures need a context past L
            what = f"{meta['model']} (trained at L = {meta['L']}) on {meta['text']}"
            plot(res, ctxs, modes_ppl, meta["L"], out / "ppl_buckets.png", what + ", per RoPE scaling mode")
            plot_ratio(res, ctxs, modes_ppl, meta["L"], out / "ppl_ratio.png",
                       f"{what}: perplexity / the 1x perplexity (bold: within {GOAL}x)")
            wrote += [out / "ppl_buckets.png", out / "ppl_ratio.png"]
        print(md)
    if do_passkey:
        md = passkey_markdown(pk, lengths, modes_pk)
        (out / "passkey_results.md").write_text(md)
        plot_passkey(pk, lengths, modes_pk, out / "passkey_grid.png",
                     f"passkey retrieval of {pk['meta']['model']} (trained at L = {pk['meta']['L']}), greedy: "
                     f"right answers per length and depth of the key")
        wrote += [out / "passkey_results.md", out / "passkey_grid.png"]
        print(md)
    print("wrote " + ", ".join(str(p) for p in wrote), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
