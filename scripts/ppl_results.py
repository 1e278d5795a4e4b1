"""ppl_results.py - perplexity past the trained context, for every RoPE scaling mode: the results table.

Usage:
  /usr/bin/python3 scripts/ppl_results.py [--model M.bin] [-z TOK.model] [--text FILE] [--ctx 512,1024,2048,4096]
                                          [--modes none,pi,ntk,dynamic,yarn,llama3] [--ppl-windows K | --tokens N]
                                          [--threads N] [--out-dir docs] [--json FILE] [--from-json FILE]

Runs `./run MODEL --ppl TEXT --ctx N --rope-scaling MODE` for every context N and mode, reads the
`perplexity:` line and the per-bucket table from its stdout, and writes
  docs/ppl_results.md   overall perplexity (rows: mode, columns: context) and perplexity by position
                        bucket [0, L), [L, 2L), [2L, 4L), ... (L = the trained context)
  docs/ppl_buckets.png  perplexity per position bucket, one line per mode, one panel per context > L.
Defaults: stories260K (trained at L = 512) on data/text/tinystories_validation_head.txt,
all of it (~393k tokens; every context sees nearly the same text). llama3 is there although the
model is no Llama 3: with L = 512 it keeps pairs 0-1 and divides pairs 2-3 by s, which is YaRN
without its ramp and its attention factor, a useful control. A full run is 24 ./run calls and
takes a long while on two busy cores (see the README); for a quick look, --ppl-windows K evaluates
K windows per run, and --tokens N the first N tokens at every context (N / ctx windows), which keeps
the text the same across the columns. A run that is not the full default one writes to
build/ppl-quick/ unless --out-dir says otherwise: docs/ holds the full run. --json saves the parsed numbers and --from-json redraws the
table and the plot from them without running anything.

What this is not: a benchmark of the modes in general. A 260K-parameter model with head_dim 8 has
four rotation frequencies; what that implies is in the README, "Measuring long context".
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
from passkey import run_env  # noqa: E402  (scripts/ beside this file: OMP_WAIT_POLICY=passive)
from plot_rope import STYLE  # noqa: E402  (the same colour per mode in every plot)


# ---------------------------------------------------------------------------------------------
# One ./run --ppl

ROW = re.compile(r"^\[(\d+), (\d+)\)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")


def parse_ppl(stdout):
    """./run --ppl's stdout -> {"perplexity": x, "buckets": [{"lo", "hi", "tokens", "nll", "ppl"}]}.
    Raises ValueError if the output is not the expected `perplexity:` line and bucket table."""
    m = re.search(r"^perplexity: (\S+)$", stdout, re.M)
    if not m:
        raise ValueError(f"no 'perplexity:' line in ./run's output:\n{stdout}")
    buckets = []
    for line in stdout.splitlines():
        r = ROW.match(line)
        if r:
            buckets.append({"lo": int(r[1]), "hi": int(r[2]), "tokens": int(r[3]), "nll": float(r[4]),
                            "ppl": float(r[5])})
    if not buckets:
        raise ValueError(f"no bucket rows in ./run's output:\n{stdout}")
    return {"perplexity": float(m[1]), "buckets": buckets}


def run_ppl(run, model, tok, text, ctx, mode, windows=None, threads=None, L=None):
    cmd = [str(run), str(model), "-z", str(tok), "--ppl", str(text), "--ctx", str(ctx), "--rope-scaling", mode]
    if mode == "dynamic" and L and ctx > L:  # transformers' dynamic with factor ctx / L (./run's default is 1)
        cmd += ["--rope-factor", repr(ctx / L)]
    if windows:
        cmd += ["--ppl-windows", str(windows)]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=run_env(), capture_output=True, text=True)
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
        sys.exit(f"error: --ctx {ctx} {mode}: the bucket counts do not add up to {res['windows']} x {ctx - 1}")
    return res


# ---------------------------------------------------------------------------------------------
# The table and the plot

def fmt(x):
    return f"{x:.3f}" if x < 1000 else f"{x:.4g}"


def bucket_name(b):
    return f"[{b['lo']}, {b['hi']})"


def markdown(res, ctxs, modes, meta):
    out = [f"# Perplexity of {meta['model']} past its trained context",
           "",
           f"Generated by `{meta['command']}`. Text: `{meta['text']}`; "
           f"{meta['scope']}. Trained context L = {meta['L']}; for every --ctx above L the "
           f"factor is s = ctx / L (`./run`'s default, and `--rope-factor` for dynamic, whose default is 1). Lower is better; the [0, {meta['L']}) column of the bucket tables is "
           f"the model inside its trained range.",
           "",
           "## Overall perplexity (rows: --rope-scaling, columns: --ctx)",
           "",
           "| mode | " + " | ".join(str(c) for c in ctxs) + " |",
           "|---|" + "---:|" * len(ctxs)]
    for m in modes:
        out.append(f"| {m} | " + " | ".join(fmt(res[str(c)][m]["perplexity"]) for c in ctxs) + " |")
    for c in sorted(ctxs, reverse=True):
        names = [bucket_name(b) for b in res[str(c)][modes[0]]["buckets"]]
        if len(names) < 2:
            continue
        out += ["", f"## Perplexity by position, --ctx {c}", "",
                "| mode | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for m in modes:
            out.append(f"| {m} | " + " | ".join(fmt(b["ppl"]) for b in res[str(c)][m]["buckets"]) + " |")
        tokens = [b["tokens"] for b in res[str(c)][modes[0]]["buckets"]]
        out.append("| (predictions) | " + " | ".join(str(t) for t in tokens) + " |")
    top = str(max(ctxs))
    out += ["", f"## RoPE as `./run` reported it at --ctx {top}", ""]
    for m in modes:
        out.append(f"- `{m}`: {res[top][m]['rope']}")
    return "\n".join(out) + "\n"


def plot(res, ctxs, modes, L, path, title):
    panels = [c for c in ctxs if c > L]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), sharey=True, squeeze=False)
    base = res[str(L)]["none"]["perplexity"] if str(L) in res and "none" in modes else None
    for ax, c in zip(axes[0], panels):
        for m in modes:
            bs = res[str(c)][m]["buckets"]
            colour, marker, ls = STYLE.get(m, ("grey", ".", "-"))
            ax.plot(range(len(bs)), [b["ppl"] for b in bs], color=colour, marker=marker, ls=ls, label=m,
                    markerfacecolor="none")
        names = [bucket_name(b) for b in res[str(c)][modes[0]]["buckets"]]
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        if base:
            ax.axhline(base, color="grey", lw=1, ls="--")
        ax.set_title(f"--ctx {c} (s = {c / L:g})")
        ax.set_xlabel("positions in the window")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("perplexity (log scale)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if base:
        handles.append(plt.Line2D([], [], color="grey", lw=1, ls="--"))
        labels.append(f"none at --ctx {L}")
    axes[0][0].legend(handles, labels, fontsize=8, loc="upper left")  # the panel with room at the top
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def parse_list(text, conv, what):
    try:
        items = [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        items = []
    if not items:
        sys.exit(f"error: {what}: cannot read '{text}' (hint: a comma-separated list)")
    return items


def main(argv=None):
    ap = argparse.ArgumentParser(description="Perplexity per context length and RoPE scaling mode, as a "
                                 "markdown table and a plot.")
    ap.add_argument("--model", default=str(DATA / "stories260K/stories260K.bin"))
    ap.add_argument("-z", "--tokenizer", default=str(DATA / "stories260K/tokenizer.model"))
    ap.add_argument("--text", default=str(DATA / "text/tinystories_validation_head.txt"))
    ap.add_argument("--ctx", default="512,1024,2048,4096", help="context lengths (the smallest should be L)")
    ap.add_argument("--modes", default="none,pi,ntk,dynamic,yarn,llama3")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--ppl-windows", type=int, help="at most K windows per run (default: the whole text)")
    g.add_argument("--tokens", type=int, help="the first N tokens at every context: N // ctx windows")
    ap.add_argument("--threads", type=int, help="passed to ./run (default: its own, all cores)")
    ap.add_argument("--run", default=str(REPO / "run"))
    ap.add_argument("--out-dir", help="where ppl_results.md and ppl_buckets.png go (default: docs/ for a full "
                    "run, build/ppl-quick/ for a subset, so a quick look never replaces the committed results)")
    ap.add_argument("--json", help="also save the parsed numbers here")
    ap.add_argument("--from-json", help="do not run anything: redraw from numbers saved with --json")
    a = ap.parse_args(argv)
    ctxs = sorted(parse_list(a.ctx, int, "--ctx"))
    modes = parse_list(a.modes, str, "--modes")
    full = not a.from_json and all(getattr(a, k) == ap.get_default(k) for k in
                                   ("model", "tokenizer", "text", "ctx", "modes", "ppl_windows", "tokens", "run"))
    out = Path(a.out_dir) if a.out_dir else REPO / ("docs" if full else "build/ppl-quick")
    if not a.out_dir and not full:
        print(f"note: not the full default run, so the results go to {out}, not docs/ (which hold the full run; "
              "pass --out-dir docs to replace them)", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)

    if a.from_json:
        saved = json.loads(Path(a.from_json).read_text())
        res, meta = saved["results"], saved["meta"]
        ctxs = [c for c in ctxs if str(c) in res]
        modes = [m for m in modes if all(m in res[str(c)] for c in ctxs)]
    else:
        if not Path(a.run).exists():
            sys.exit(f"error: {a.run}: not found (hint: `make` first)")
        res = {}
        t_all = time.monotonic()
        for c in ctxs:
            res[str(c)] = {}
            windows = a.ppl_windows or (max(1, a.tokens // c) if a.tokens else None)
            for m in modes:
                r = run_ppl(a.run, a.model, a.tokenizer, a.text, c, m, windows, a.threads, L=min(ctxs))
                res[str(c)][m] = r
                print(f"--ctx {c:5d} {m:8s} perplexity {r['perplexity']:12.4f}  ({r['windows']} windows, "
                      f"{r['seconds']:.1f} s)", file=sys.stderr)
        if a.ppl_windows:
            scope = f"at most {a.ppl_windows} window(s) per run"
        elif a.tokens:
            scope = f"the first {a.tokens} tokens at every context (tokens // ctx windows)"
        else:
            scope = "the whole text at every context"
        w = {c: res[str(c)][modes[0]]["windows"] for c in ctxs}
        scope += " (windows: " + ", ".join(f"{w[c]} x {c}" for c in ctxs) + ")"
        cmd = "/usr/bin/python3 scripts/ppl_results.py" + "".join(f" {x}" for x in (argv if argv is not None else sys.argv[1:]))
        m = re.search(r"trained context L = (\d+)", res[str(ctxs[0])][modes[0]]["rope"])
        meta = {"model": Path(a.model).name, "text": Path(a.text).name, "command": cmd, "scope": scope,
                "L": int(m[1]) if m else ctxs[0], "seconds": round(time.monotonic() - t_all, 1)}
        print(f"all runs: {meta['seconds']:.0f} s", file=sys.stderr)
        if a.json:
            Path(a.json).write_text(json.dumps({"meta": meta, "results": res}, indent=1) + "\n")

    md = markdown(res, ctxs, modes, meta)
    (out / "ppl_results.md").write_text(md)
    if max(ctxs) > meta["L"]:  # the plot has one panel per context past L
        plot(res, ctxs, modes, meta["L"], out / "ppl_buckets.png",
             f"{meta['model']} (trained at L = {meta['L']}): perplexity by position in the window, per RoPE scaling mode")
    print(md)
    print(f"wrote {out / 'ppl_results.md'}" + (f" and {out / 'ppl_buckets.png'}" if max(ctxs) > meta["L"] else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
