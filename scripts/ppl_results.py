"""ppl_results.py - perplexity past the trained context, for every RoPE scaling mode: the results table.

Usage:
  /usr/bin/python3 scripts/ppl_results.py [--model M.bin] [-z TOK.model] [--text FILE]
                                          [--ctx 512,1024,2048,4096,8192] [--modes none,ntk,rerope+logn,...]
                                          [--ppl-windows K | --tokens N] [--threads N] [--out-dir docs]
                                          [--json FILE] [--from-json FILE]

Runs `./run MODEL --ppl TEXT --ctx N --rope-scaling MODE [--attn-logn]` for every context N and mode
(a mode written `M+logn` is M with --attn-logn), reads the `perplexity:` line and the per-bucket
table from its stdout, and writes
  docs/ppl_results.md   overall perplexity (rows: mode, columns: context) and perplexity by position
                        bucket [0, L), [L, 2L), [2L, 4L), ... (L = the trained context)
  docs/ppl_buckets.png  left: perplexity against the context, one line per mode; right: perplexity by
                        position bucket at the largest context.
Defaults: tiny64x512 (data/tiny64x512-hf exported to build/tiny64.bin by `make results`; head_dim
64, trained at L = 512) on the held-out tenth of the TinyStories text it never saw in training,
the first 32768 tokens at every context (64 windows of 512 ... 4 of 8192: the same text in every
column), 1x to 16x, the eight modes with and without log-n: 80 ./run calls, a few minutes on two
cores. A run that is not the full default one writes to build/ppl-quick/ unless --out-dir says
otherwise: docs/ holds the full run. --json saves the parsed numbers and --from-json redraws the
table and the plot from them without running anything.

What this is not: a benchmark of the modes in general. One 3M-parameter model on one kind of text
(short stories, so far positions mostly look back at unrelated stories) says whether distance
hurts, not whether a long context is used; the README, "Results", reads the table.
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
MODES = ["none", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope", "leaky-rerope"]
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


def run_ppl(run, model, tok, text, ctx, row, windows=None, threads=None, L=None):
    """One row of the table at one context: row is a --rope-scaling mode, or `mode+logn` for the mode
    with --attn-logn."""
    mode, logn = row.removesuffix("+logn"), row.endswith("+logn")
    cmd = [str(run), str(model), "-z", str(tok), "--ppl", str(text), "--ctx", str(ctx), "--rope-scaling", mode]
    if logn:
        cmd.append("--attn-logn")
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
        sys.exit(f"error: --ctx {ctx} {row}: the bucket counts do not add up to {res['windows']} x {ctx - 1}")
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
           f"{meta['scope']}. Trained context L = {meta['L']}; every mode with `./run`'s defaults at each --ctx "
           f"(s = ctx / L; rerope's window W = L / 4, leaky-rerope's rate K = (ctx - W) / (L - W)), except "
           f"dynamic, run with `--rope-factor ctx/L` (its default is 1, which makes one window the ntk row). "
           f"`+logn`: with `--attn-logn`. Lower is better; the [0, {meta['L']}) column of the bucket tables is "
           f"the model inside its trained range.",
           "",
           "## Overall perplexity (rows: --rope-scaling, columns: --ctx)",
           "",
           "| mode | " + " | ".join(str(c) for c in ctxs) + " |",
           "|---|" + "---:|" * len(ctxs)]
    for m in modes:
        out.append(f"| {m} | " + " | ".join(fmt(res[str(c)][m]["perplexity"]) for c in ctxs) + " |")
    if len(ctxs) > 1:
        lo, hi = str(ctxs[0]), str(ctxs[-1])
        best = min(modes, key=lambda m: res[hi][m]["perplexity"])
        ratio = res[hi][best]["perplexity"] / res[lo][best]["perplexity"]
        out += ["", f"Best at --ctx {hi}: {best}, {fmt(res[hi][best]['perplexity'])}, {ratio:.3f}x its value at "
                f"--ctx {lo}."]
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


def line_style(row):
    """The mode's colour and marker (plot_rope.STYLE); with log-n, the same colour, thinner and dotted."""
    colour, marker, ls = STYLE.get(row.removesuffix("+logn"), ("grey", ".", "-"))
    logn = row.endswith("+logn")
    return dict(color=colour, marker=marker, ls=":" if logn else ls, lw=1 if logn else 1.6, ms=4 if logn else 6,
                markerfacecolor="none", label=row.replace("+logn", " + log-n"))


def plot(res, ctxs, modes, L, path, title):
    top = max(ctxs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    base = res[str(L)][modes[0]]["perplexity"] if str(L) in res else None
    for m in modes:
        left.plot([c / L for c in ctxs], [res[str(c)][m]["perplexity"] for c in ctxs], **line_style(m))
        bs = res[str(top)][m]["buckets"]
        right.plot(range(len(bs)), [b["ppl"] for b in bs], **line_style(m))
    left.set_xscale("log", base=2)
    left.set_xticks([c / L for c in ctxs])
    left.set_xticklabels([f"{c}\n({c / L:g}x)" for c in ctxs], fontsize=8)
    left.set_xlabel("--ctx (and s = ctx / L)")
    left.set_title("perplexity of the whole window")
    names = [bucket_name(b) for b in res[str(top)][modes[0]]["buckets"]]
    right.set_xticks(range(len(names)))
    right.set_xticklabels(names, fontsize=8)
    right.set_xlabel("position of the predicting token in the window")
    right.set_title(f"by position, --ctx {top} (s = {top / L:g})")
    # The scale is set for the modes that work; a row above it (pi, none) is in the table.
    top_y = min(60, max(max(r["perplexity"] for r in res[str(top)].values()),
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
        labels += [f"{modes[0]} at --ctx {L}", "1.3x that"]
    fig.legend(handles, labels, fontsize=8, loc="center right")
    fig.suptitle(title + (f"\n(cut at perplexity {top_y:.0f}: the rows above it are in the table)" if top_y == 60
                          else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.83, 1))
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
    ap.add_argument("--model", default=str(REPO / "build/tiny64.bin"), help="default: data/tiny64x512-hf as "
                    "`make build/tiny64.bin` exports it")
    ap.add_argument("-z", "--tokenizer", default=str(DATA / "tiny64x512-hf/tokenizer.model"))
    ap.add_argument("--text", default=str(DATA / "text/tinystories_heldout_tail.txt"))
    ap.add_argument("--ctx", default="512,1024,2048,4096,8192", help="context lengths (the smallest should be L)")
    ap.add_argument("--modes", default=",".join(MODES + [m + "+logn" for m in MODES]),
                    help="--rope-scaling modes; M+logn is M with --attn-logn")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--ppl-windows", type=int, help="at most K windows per run")
    g.add_argument("--tokens", type=int, default=32768, help="the first N tokens at every context: N // ctx "
                   "windows (default 32768; 0: the whole text)")
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
        if not Path(a.model).exists():
            sys.exit(f"error: {a.model}: not found (hint: `make build/tiny64.bin` exports the default model)")
        res = {}
        t_all = time.monotonic()
        for c in ctxs:
            res[str(c)] = {}
            windows = a.ppl_windows or (max(1, a.tokens // c) if a.tokens else None)
            for m in modes:
                r = run_ppl(a.run, a.model, a.tokenizer, a.text, c, m, windows, a.threads, L=min(ctxs))
                res[str(c)][m] = r
                print(f"--ctx {c:5d} {m:17s} perplexity {r['perplexity']:12.4f}  ({r['windows']} windows, "
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
    if max(ctxs) > meta["L"]:  # the plot needs a context past L
        plot(res, ctxs, modes, meta["L"], out / "ppl_buckets.png",
             f"{meta['model']} (trained at L = {meta['L']}) on {meta['text']}, per RoPE scaling mode")
    print(md)
    print(f"wrote {out / 'ppl_results.md'}" + (f" and {out / 'ppl_buckets.png'}" if max(ctxs) > meta["L"] else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
