"""plot_rope.py - draw the two RoPE figures of the README.

Usage: /usr/bin/python3 scripts/plot_rope.py [--out-dir docs] [--rope-dump tests/tools/rope_dump]

  docs/rope_decay.png        RoPE's long-term decay (RoFormer, Su et al. 2021, arXiv 2104.09864,
                             section 3.4.3 and figure 2): the relative upper bound of the attention
                             score as the distance between query and key grows.
  docs/rope_wavelengths.png  the wavelength 2*pi/theta_i of every rotation pair under each scaling
                             mode, against the trained context L and the target context L' = s*L.

What this is: a picture of the numbers rope.c computes. The inverse frequencies come from the C
code itself, through tests/tools/rope_dump (build it with `make tests/tools/rope_dump`), and every
one is checked against lrun/rope_ref.py, the independent numpy implementation, before it is drawn.
What this is not: a measurement of any model; see scripts/ppl_results.py for that.

The decay bound. Split a head into d/2 pairs and write pair k of q and k as complex numbers q_k,
k_k. The RoPE score at distance r is Re sum_k q_k conj(k_k) e^{i r theta_k}. Summing by parts
with h_k = q_k conj(k_k) and S_j = sum_{k<j} e^{i r theta_k} (RoFormer eq. 35-37) gives

    |score| <= (max_k |h_{k+1} - h_k|) * sum_{j=1}^{d/2} |S_j|,

and the paper plots (1/(d/2)) sum_{j=1}^{d/2} |S_j| against r: it starts at (d/2 + 1)/2 for r = 0
(every S_j = j) and falls as the pairs turn out of phase. It is a bound, not a score; it says a
far-away key can no longer line up with the query in every pair at once.
"""
import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun import rope_ref  # noqa: E402  (the independent numpy formulas)

REPO = Path(__file__).resolve().parent.parent

MODES = ("none", "pi", "ntk", "dynamic", "yarn", "llama3")
STYLE = {  # mode -> (colour, marker, line style); none is the black baseline
    "none": ("black", "o", "-"),
    "pi": ("tab:blue", "s", "--"),
    "ntk": ("tab:orange", "^", "-"),
    "dynamic": ("tab:green", "v", "-."),
    "yarn": ("tab:red", "D", ":"),
    "llama3": ("tab:purple", "x", "--"),
    "rerope": ("tab:brown", "P", "-"),
    "leaky-rerope": ("tab:cyan", "*", "-"),
}


# ---------------------------------------------------------------------------------------------
# The frequencies, from the C program

def c_inv_freq(rope_dump, mode, d, base, L, s, length=0):
    """theta_i (d/2 floats) as rope.c's rope_inv_freq computes them, read from rope_dump's
    `inv_freq v_0 ... v_{d/2-1}` line. length: the current sequence length (dynamic only)."""
    cmd = [str(rope_dump), "--mode", mode, "--head-dim", str(d), "--base", repr(float(base)),
           "--orig-ctx", str(L), "--factor", repr(float(s)), "--positions", "0"]
    if length:
        cmd += ["--length", str(length)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed: {proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        if line.startswith("inv_freq "):
            return np.array([float(v) for v in line.split()[1:]])
    sys.exit(f"error: {rope_dump} printed no inv_freq line (hint: rebuild it with `make tests/tools/rope_dump`)")


def inv_freq(rope_dump, mode, d, base, L, s, length=0):
    """The C numbers, after checking them against lrun/rope_ref.py (relative 1e-12)."""
    c = c_inv_freq(rope_dump, mode, d, base, L, s, length)
    ref, _ = rope_ref.inv_freq(mode, d, base, L, s, length=length or None)
    err = np.max(np.abs(c - ref) / ref)
    if not err < 1e-12:
        sys.exit(f"error: rope.c and lrun/rope_ref.py disagree for {mode} (d {d}, b {base}, L {L}, s {s}): "
                 f"max relative difference {err:.3g}")
    return c


# ---------------------------------------------------------------------------------------------
# (a) Long-term decay

def decay_bound(theta, r):
    """(1/(d/2)) sum_{j=1}^{d/2} |S_j|, S_j = sum_{k=0}^{j-1} e^{i r theta_k}, for each distance in r.
    theta: (d/2); r: (n) -> (n)."""
    phases = np.exp(1j * np.outer(r, theta))  # (n, d/2) e^{i r theta_k}
    partial = np.cumsum(phases, axis=1)       # (n, d/2) S_1 .. S_{d/2}
    return np.abs(partial).mean(axis=1)       # (n)


def plot_decay(rope_dump, path, base=10000.0):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    # Left: the paper's figure, d = 128, linear distance.
    r = np.arange(0, 1001, dtype=np.float64)
    theta = inv_freq(rope_dump, "none", 128, base, 2048, 1)
    ax1.plot(r, decay_bound(theta, r), color="tab:blue", lw=1)
    ax1.set_title("RoPE long-term decay of the score's upper bound, d = 128, b = 10000\n(RoFormer, Su et al. 2021, fig. 2)")
    ax1.set_xlabel("relative distance m - n (tokens)")
    ax1.set_ylabel(r"relative upper bound $\frac{1}{d/2}\sum_{j=1}^{d/2}|S_j|$")
    ax1.set_xlim(0, 1000)
    ax1.grid(alpha=0.3)

    # Right: several head sizes, normalised to 1 at distance 0, every integer distance out to 10^5.
    # Far out the bound oscillates faster than a pixel, so draw, per log-spaced bin of distances,
    # its mean as a line and its min..max range as a band.
    r = np.arange(0, 100001, dtype=np.float64)
    edges = np.unique(np.concatenate([np.arange(1, 64), np.geomspace(64, r[-1] + 1, 120).round()])).astype(int)
    for d, colour, note in ((8, "tab:red", "stories260K"), (64, "tab:orange", "TinyLlama 1.1B"),
                            (128, "tab:blue", "Llama 2 7B")):
        theta = inv_freq(rope_dump, "none", d, base, 2048, 1)
        y = np.concatenate([decay_bound(theta, chunk) for chunk in np.array_split(r, 50)])
        y /= y[0]
        lo, hi = edges[:-1], edges[1:]
        mid = np.sqrt(lo * np.maximum(hi - 1, lo))  # geometric middle of [lo, hi)
        mean = np.array([y[a:b].mean() for a, b in zip(lo, hi)])
        ax2.fill_between(mid, [y[a:b].min() for a, b in zip(lo, hi)], [y[a:b].max() for a, b in zip(lo, hi)],
                         color=colour, alpha=0.18, lw=0)
        ax2.plot(mid, mean, color=colour, lw=1.5, label=f"d = {d} ({note}, {d // 2} pairs)")
    ax2.set_xscale("log")
    ax2.set_xlim(1, 1e5)
    ax2.set_ylim(0, 1.35)
    ax2.set_title("the bound / its value at distance 0, for three head sizes\n(line: mean over a bin of distances; band: min..max)")
    ax2.set_xlabel("relative distance m - n (tokens, log scale)")
    ax2.set_ylabel("bound / bound at distance 0")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, loc="upper right", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# (b) Wavelengths per pair and mode

def plot_wavelength_panel(ax, rope_dump, d, base, L, s, title):
    Lt = int(round(s * L))
    i = np.arange(d // 2)
    n = len(MODES)
    for k, mode in enumerate(MODES):
        # dynamic at the target length: the base it uses once the text is L' tokens long
        theta = inv_freq(rope_dump, mode, d, base, L, s, length=Lt if mode == "dynamic" else 0)
        colour, marker, ls = STYLE[mode]
        label = {"dynamic": f"dynamic (at length {Lt})", "ntk": f"ntk (alpha = {s:g})"}.get(mode, mode)
        # A small sideways shift per mode so coinciding points stay visible.
        dx = (k - (n - 1) / 2) * (0.06 if d > 16 else 0.05)
        ax.plot(i + dx, 2 * math.pi / theta, color=colour, marker=marker, ls=ls, lw=1, ms=4 if d > 16 else 6,
                label=label, markerfacecolor="none" if marker not in ("x",) else None)
    ax.axhline(L, color="grey", lw=1.2)
    ax.axhline(Lt, color="grey", lw=1.2, ls="--")
    ax.text(-0.4, L * 1.12, f"trained context L = {L}", fontsize=8, color="dimgrey")
    ax.text(-0.4, Lt * 1.12, f"target context L' = {s:g}L = {Lt}", fontsize=8, color="dimgrey")
    ax.axhspan(L, 1e30, color="grey", alpha=0.08, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("pair i (0 = fastest)")
    ax.set_ylabel(r"wavelength $2\pi/\theta_i$ (tokens per turn)")
    ax.set_title(title)
    ax.set_xticks(i if d <= 16 else i[::4])
    ax.grid(alpha=0.3, which="major")


def plot_wavelengths(rope_dump, path):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [2.2, 1]})
    plot_wavelength_panel(ax1, rope_dump, 64, 1e4, 2048, 4,
                          "d = 64, b = 10000, L = 2048, s = 4 (TinyLlama 1.1B's head and context)")
    plot_wavelength_panel(ax2, rope_dump, 8, 1e4, 512, 4, "stories260K: d = 8, L = 512, s = 4\n(only four pairs)")
    ax1.set_ylim(3, 2e6)
    ax2.set_ylim(3, 2e6)
    ax1.legend(fontsize=8, loc="upper left", ncol=2)
    fig.suptitle("Wavelength of every RoPE pair under each scaling mode "
                 "(shaded: fewer than one full turn within the trained context)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(REPO / "docs"), help="where the PNGs go (default: docs/)")
    ap.add_argument("--rope-dump", default=str(REPO / "tests" / "tools" / "rope_dump"),
                    help="the rope_dump tool (default: tests/tools/rope_dump; build it with "
                         "`make tests/tools/rope_dump`)")
    a = ap.parse_args()
    rope_dump = Path(a.rope_dump)
    if not rope_dump.exists():
        sys.exit(f"error: {rope_dump}: not found (hint: `make tests/tools/rope_dump` first)")
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot_decay(rope_dump, out / "rope_decay.png")
    plot_wavelengths(rope_dump, out / "rope_wavelengths.png")
    for name in ("rope_decay.png", "rope_wavelengths.png"):
        print(f"wrote {out / name} ({(out / name).stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
