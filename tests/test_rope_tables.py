"""test_rope_tables.py - RoPE frequency tables: the reference against the research note, and rope.c
against the reference.

Part (a) checks lrun/rope_ref.py (numpy float64, written from the transformers / paper formulas)
against the test vectors of docs/rope-test-vectors.md, read from that file, plus structural identities that hold in exact arithmetic.
Part (b) runs tests/tools/rope_dump (rope.c behind a command line) and compares its inverse
frequencies (within 1e-12 relative), magnitudes and cos/sin tables (float32, within 1e-6
absolute) with rope_ref, in every mode, for three shapes of model.

Run: make tests/tools/rope_dump && /usr/bin/python3 -m pytest -q tests/test_rope_tables.py
(add -s to see the max difference of every comparison).
"""
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lrun import rope_ref as ref

# ---------------------------------------------------------------------------------------------
# (a) rope_ref against docs/rope-test-vectors.md (sections 1-3 there; 8.x in the test names)

# docs/rope-test-vectors.md section 1, d = 64, b = 10000, s = 4, L = 2048: the table of inverse
# frequencies (columns: i, none, pi, ntk a=4, dynamic f=4 l=8192, yarn, llama3) and the cos/sin lines
# at position 5000 (yarn already multiplied by m_s), read from the file so they live in one place.
VECTORS = (Path(__file__).resolve().parent.parent / "docs" / "rope-test-vectors.md").read_text()
SECTION_1, SECTION_2 = VECTORS.split("\n## 2.")[0], VECTORS.split("\n## 2.")[1].split("\n## 3.")[0]
TABLE_8_1 = "\n".join(l for l in SECTION_1.splitlines() if re.match(r"^\|\s*\d+ \| ", l))
COLUMNS_8_1 = [("none", {}), ("pi", {}), ("ntk", {}), ("dynamic", {"length": 8192}), ("yarn", {}), ("llama3", {})]

COS_SIN_8_1 = VECTORS.split("at position 5000")[1].split("```")[1]

D, B, L, S = 64, 1e4, 2048, 4.0  # the shape of section 1 (TinyLlama 1.1B: 64-wide heads, L = 2048)


def table_8_1():
    rows = []
    for line in TABLE_8_1.strip().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append([int(cells[0])] + [float(c) for c in cells[1:]])
    return np.array(rows)  # (32, 7)


def test_table_8_1_complete():
    t = table_8_1()
    assert t.shape == (32, 7) and list(t[:, 0]) == list(range(32))


@pytest.mark.parametrize("col", range(len(COLUMNS_8_1)), ids=[c[0] for c in COLUMNS_8_1])
def test_ref_reproduces_table_8_1(col):
    mode, kw = COLUMNS_8_1[col]
    want = table_8_1()[:, 1 + col]
    got, _ = ref.inv_freq(mode, D, B, L, S, **kw)
    rel = np.max(np.abs(got - want) / want)
    print(f"8.1 {mode}: max relative difference to the printed 10 digits {rel:.2e}")
    assert rel < 1e-9  # the document prints 10 significant digits


def test_ref_reproduces_cos_sin_8_1():
    names = {"default": "none", "linear": "pi", "ntk": "ntk", "yarn": "yarn"}
    worst = 0.0
    for line in COS_SIN_8_1.strip().splitlines():
        f = line.replace("=", " ").split()  # i N mode angle A cos C sin S
        i, mode = int(f[1]), names[f[2]]
        angle, c, s = float(f[4]), float(f[6]), float(f[8])
        inv, ms = ref.inv_freq(mode, D, B, L, S)
        got_c, got_s = ref.cos_sin(inv, ms, 5000)
        worst = max(worst, abs(ref.angles(inv, 5000)[i] - angle), abs(got_c[i] - c), abs(got_s[i] - s))
    print(f"8.1 cos/sin at 5000: max difference to the printed 9 decimals {worst:.2e}")
    assert worst < 1e-9


def test_ref_derived_constants_8_1():
    assert abs(ref.effective_base("ntk", D, B, L, S) - 41829.365929) < 1e-6
    assert abs(ref.effective_base("dynamic", D, B, L, S, length=4096) - 52664.434336) < 1e-6
    assert abs(ref.effective_base("dynamic", D, B, L, S, length=8192) - 141213.757398) < 1e-6
    assert abs(ref.effective_base("dynamic", D, B, L, 1.0, length=4096) - 20452.228712) < 1e-6
    assert abs(ref.effective_base("dynamic", D, B, L, 1.0, length=8192) - 41829.365929) < 1e-6
    assert abs(ref.yarn_correction_dim(32, D, B, L) - 8.064001) < 1e-6
    assert abs(ref.yarn_correction_dim(1, D, B, L) - 20.105201) < 1e-6
    assert ref.yarn_correction_range(32, 1, D, B, L) == (8, 21)
    _, ms = ref.inv_freq("yarn", D, B, L, S)
    assert abs(ms - 1.138629436) < 1e-9 and abs(ms * ms - 1.296476993) < 1e-9
    # YaRN extrapolation factor g_i = 1 - ramp: 1 for i <= 8, 12/13 .. 1/13 for 9..20, 0 after.
    g = 1 - ref.yarn_ramp(8, 21, 32)
    printed = [0.9231, 0.8462, 0.7692, 0.6923, 0.6154, 0.5385, 0.4615, 0.3846, 0.3077, 0.2308, 0.1538, 0.0769]
    assert np.all(g[:9] == 1) and np.all(g[21:] == 0)
    assert np.max(np.abs(g[9:21] - printed)) < 5e-5
    # llama3: H for i <= 15, smooth for 16..20 with the printed sm, L for i >= 21.
    assert "".join(ref.llama3_bands(D, B, L)) == "H" * 16 + "M" * 5 + "L" * 11
    wavelen = 2 * math.pi / ref.default_inv_freq(D, B)
    sm = (L / wavelen[16:21] - 1) / (4 - 1)
    assert np.max(np.abs(sm - [0.7532, 0.4814, 0.2776, 0.1248, 0.0102])) < 5e-5


def test_ref_structure_8_1():
    default, _ = ref.inv_freq("none", D, B, L, S)
    ntk, _ = ref.inv_freq("ntk", D, B, L, S)
    pi, _ = ref.inv_freq("pi", D, B, L, S)
    yarn, _ = ref.inv_freq("yarn", D, B, L, S)
    assert ntk[0] == default[0] == 1.0
    assert abs(ntk[31] / (default[31] / S) - 1) < 1e-13  # exact in math; b' is built for it
    assert np.allclose(pi, default / S, rtol=1e-15, atol=0)
    lo, hi = ref.yarn_correction_range(32, 1, D, B, L)
    assert np.all(yarn[: lo + 1] == default[: lo + 1])
    assert np.allclose(yarn[hi:], default[hi:] / S, rtol=1e-15, atol=0)
    for l in (1, 1000, L - 1, L):
        dyn, _ = ref.inv_freq("dynamic", D, B, L, S, length=l)
        assert np.array_equal(dyn, default), l
    dyn, _ = ref.inv_freq("dynamic", D, B, L, S, length=L + 1)
    assert np.all(dyn[1:] < default[1:])  # one token past L, every pair but 0 slows down
    # Aliases and the alpha/attn_factor knobs.
    assert np.array_equal(ref.inv_freq("linear", D, B, L, S)[0], pi)
    assert np.array_equal(ref.inv_freq("ntk", D, B, L, S, alpha=S)[0], ntk)
    assert ref.inv_freq("yarn", D, B, L, S, attn_factor=1.5)[1] == 1.5


def test_ref_stories15m_8_2():
    d, b, l0, s = 48, 1e4, 256, 4.0
    assert abs(ref.effective_base("ntk", d, b, l0, s) - 42485.087075) < 1e-6
    assert abs(ref.effective_base("dynamic", d, b, l0, s, length=1024) - 145336.826179) < 1e-6
    assert abs(ref.yarn_correction_dim(32, d, b, l0) - 0.629461) < 1e-6
    assert abs(ref.yarn_correction_dim(1, d, b, l0) - 9.660361) < 1e-6
    assert ref.yarn_correction_range(32, 1, d, b, l0) == (0, 10)
    g = 1 - ref.yarn_ramp(0, 10, d // 2)
    assert np.max(np.abs(g[:10] - np.arange(10, 0, -1) / 10)) < 1e-15 and np.all(g[10:] == 0)
    assert "".join(ref.llama3_bands(d, b, l0, 1, 4)) == "H" * 7 + "M" * 3 + "L" * 14


def test_ref_llama31_8b_8_2():
    d, b, l0, s = 128, 5e5, 8192, 8.0
    bands = "".join(ref.llama3_bands(d, b, l0, 1, 4))
    assert bands == "H" * 29 + "M" * 6 + "L" * 29
    inv, ms = ref.inv_freq("llama3", d, b, l0, s, low_freq_factor=1, high_freq_factor=4)
    default = ref.default_inv_freq(d, b)
    assert ms == 1.0
    printed = {0: 1.0, 1: 8.146172339e-01, 20: 1.656044008e-02, 30: 1.371893568e-03,
               31: 8.567514129e-04, 40: 3.428102196e-05, 63: 3.068925989e-07}
    for i, v in printed.items():
        assert abs(inv[i] / v - 1) < 1e-9, i
    for i, v in {30: 2.131119537e-03, 31: 1.736046702e-03, 40: 2.742481757e-04, 63: 2.455140791e-06}.items():
        assert abs(default[i] / v - 1) < 1e-9, i
    assert abs(inv[40] / (default[40] / 8) - 1) < 1e-15


def llama3_inv_freq_torch(d, base, L, factor, low=1.0, high=4.0):
    """transformers' _compute_llama3_parameters, transcribed in PyTorch float64 for this test: kept
    below wavelength L/high, divided by factor above L/low, blended linearly in L/wavelength between.
    Independent of lrun/rope_ref.py and of rope.c."""
    import torch
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > L / low, inv / factor, inv)
    smooth = (L / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= L / high) & (wavelen <= L / low)
    return inv.numpy(), torch.where(medium, blended, scaled).numpy()


def test_llama3_golden_table(rope_tools):
    """docs/rope-test-vectors.md section 2: Llama 3.1 (factor 8) beside Llama 3.2 (factor 32), d = 128,
    b = 500000, L = 8192. The printed table, the PyTorch transcription and rope.c agree; a factor
    hard-coded to 8 does not give the 3.2 column."""
    rows = [l for l in SECTION_2.splitlines() if re.match(r"^\|\s*\d+ \| ", l)]
    table = np.array([[float(c) for c in l.strip().strip("|").split("|")] for l in rows])  # i, none, f8, f32
    assert len(table) == 11
    idx = table[:, 0].astype(int)
    none, f8 = llama3_inv_freq_torch(128, 5e5, 8192, 8.0)
    _, f32 = llama3_inv_freq_torch(128, 5e5, 8192, 32.0)
    for col, want in ((1, none), (2, f8), (3, f32)):
        rel = np.max(np.abs(table[:, col] / want[idx] - 1))
        assert rel < 1e-9, (col, rel)  # printed with 10 significant digits
    for factor, want in ((8.0, f8), (32.0, f32)):
        got = run_dump(rope_tools["rope_dump"], "llama3", 128, 5e5, 8192, factor, [0],
                       low_freq_factor=1.0, high_freq_factor=4.0)
        rel = np.max(np.abs(got["inv_freq"] / want - 1))
        print(f"llama3 factor {factor:g}: rope.c against the PyTorch transcription, max rel {rel:.2e}")
        assert rel < 1e-12
    # Control: the 3.1 factor where 3.2's belongs is off by up to 4x on the slow pairs.
    assert np.max(f8[35:] / f32[35:]) > 3.9 and np.array_equal(f8[:29], f32[:29])


def test_ref_layout_8_3():
    # d = 8, b = 1e4, x = [1..8]: the printed rotations, and the permutation identity.
    inv, ms = ref.inv_freq("none", 8, 1e4, 512, 1.0)
    x = np.arange(1, 9, dtype=np.float64)
    want = {
        ("interleaved", 1): [-1.1426397, 1.9220756, 2.5856788, 4.2795169, 4.9397510, 6.0496992, 6.9919965, 8.0069960],
        ("rotate_half", 1): [-3.6670526, 1.3910078, 2.9298512, 3.9919980, 3.5429825, 6.1696918, 7.0296495, 8.0039960],
        ("interleaved", 3): [-1.2722325, -1.8388650, 1.6839286, 4.7079066, 4.8177772, 6.1472777, 6.9759685, 8.0209640],
    }
    for (layout, pos), w in want.items():
        f = ref.rotate_interleaved if layout == "interleaved" else ref.rotate_half_layout
        assert np.max(np.abs(f(x, inv, ms, pos) - w)) < 1e-7, (layout, pos)
    perm = [0, 2, 4, 6, 1, 3, 5, 7]
    for pos in (1, 3, 1000):
        half = ref.rotate_half_layout(x[perm], inv, ms, pos)
        inter = ref.rotate_interleaved(x, inv, ms, pos)
        assert np.array_equal(half, inter[perm])


# ---------------------------------------------------------------------------------------------
# (b) rope.c (through tests/tools/rope_dump) against rope_ref

POSITIONS = [0, 1, 511, 2047, 5000, 100000]

# (name, d, b, L, s, extra rope_dump flags as keyword arguments of rope_ref.inv_freq)
SHAPES = [
    ("tinyllama", 64, 1e4, 2048, 4.0, {}),
    ("tiny", 8, 1e4, 512, 4.0, {}),
    ("llama31", 128, 5e5, 8192, 8.0, {"low_freq_factor": 1, "high_freq_factor": 4}),
]
MODES = ["none", "pi", "ntk", "dynamic", "yarn", "llama3"]

FLAGS = {"alpha": "--alpha", "length": "--length", "attn_factor": "--attn-factor",
         "beta_fast": "--beta-fast", "beta_slow": "--beta-slow",
         "low_freq_factor": "--low-freq-factor", "high_freq_factor": "--high-freq-factor"}
RELEVANT = {"ntk": {"alpha"}, "dynamic": {"length"}, "yarn": {"attn_factor", "beta_fast", "beta_slow"},
            "llama3": {"low_freq_factor", "high_freq_factor"}}


def run_dump(exe, mode, d, b, l0, s, positions, **kw):
    """Run rope_dump and parse its records into a dict."""
    cmd = [str(exe), "--mode", mode, "--head-dim", str(d), "--base", repr(float(b)),
           "--orig-ctx", str(l0), "--factor", repr(float(s)),
           "--positions", ",".join(str(p) for p in positions)]
    for k, v in kw.items():
        if v is not None:
            cmd += [FLAGS[k], repr(v) if isinstance(v, float) else str(v)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    out = {"cos": {}, "sin": {}}
    for line in proc.stdout.splitlines():
        f = line.split()
        if f[0] in ("cos", "sin"):
            out[f[0]][int(f[1])] = np.array([float(v) for v in f[2:]])
        elif f[0] in ("inv_freq", "table_inv_freq"):
            out[f[0]] = np.array([float(v) for v in f[1:]])
        elif f[0] == "params":
            out["params"] = f[1:]
        else:
            out[f[0]] = float(f[1])
    return out


def ref_kwargs(mode, kw):
    """rope_ref.inv_freq keyword arguments that matter for this mode."""
    return {k: v for k, v in kw.items() if k in RELEVANT.get(mode, set())}


def compare(got, mode, d, b, l0, s, positions, kw, label):
    """Check one rope_dump output against rope_ref; return the max differences."""
    rk = ref_kwargs(mode, kw)
    want_inv, want_ms = ref.inv_freq(mode, d, b, l0, s, **rk)
    want_base = ref.effective_base(mode, d, b, l0, s, alpha=rk.get("alpha"), length=rk.get("length"))
    rel_inv = max(np.max(np.abs(got["inv_freq"] / want_inv - 1)),
                  np.max(np.abs(got["table_inv_freq"] / want_inv - 1)))
    assert rel_inv < 1e-12, f"{label}: inv_freq relative difference {rel_inv:.3e}"
    for key in ("mscale", "table_mscale"):
        assert abs(got[key] / want_ms - 1) < 1e-12, f"{label}: {key} {got[key]!r} != {want_ms!r}"
    for key in ("eff_base", "table_eff_base"):
        assert abs(got[key] / want_base - 1) < 1e-12, f"{label}: {key} {got[key]!r} != {want_base!r}"
    worst = 0.0
    for p in positions:
        c, sn = ref.cos_sin(want_inv, want_ms, p)
        worst = max(worst, np.max(np.abs(got["cos"][p] - c)), np.max(np.abs(got["sin"][p] - sn)))
    assert worst < 1e-6, f"{label}: cos/sin max difference {worst:.3e}"
    print(f"{label}: inv_freq max rel {rel_inv:.2e}, cos/sin max abs {worst:.2e}")
    return rel_inv, worst


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_c_matches_ref(rope_tools, shape, mode):
    name, d, b, l0, s, extra = shape
    kw = ref_kwargs(mode, extra)
    got = run_dump(rope_tools["rope_dump"], mode, d, b, l0, s, POSITIONS, **kw)
    assert got["params"][0] == mode
    compare(got, mode, d, b, l0, s, POSITIONS, kw, f"{name} {mode}")


# The knobs that the default shapes leave at their defaults.
KNOBS = [
    ("ntk", {"alpha": 6.5}),
    ("yarn", {"attn_factor": 1.25}),
    ("yarn", {"beta_fast": 16.0, "beta_slow": 2.0}),
    ("llama3", {"low_freq_factor": 2.0, "high_freq_factor": 8.0}),
]


@pytest.mark.parametrize("mode,kw", KNOBS, ids=[f"{m}-{'-'.join(k)}" for m, k in KNOBS])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_c_matches_ref_knobs(rope_tools, shape, mode, kw):
    name, d, b, l0, s, _ = shape
    got = run_dump(rope_tools["rope_dump"], mode, d, b, l0, s, POSITIONS, **kw)
    compare(got, mode, d, b, l0, s, POSITIONS, kw, f"{name} {mode} {kw}")


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_c_dynamic_lengths(rope_tools, shape):
    """Dynamic NTK at l = L/2, L, 2L, 4L. Up to L the tables are exactly the unscaled ones; past L
    the base grows and the version counter moves. rope_set_length's contract: only rows of
    positions < length are valid after the base changes (positions the sequence has), so only those
    are compared."""
    name, d, b, l0, s, _ = shape
    default, _ = ref.inv_freq("none", d, b, l0, s)
    for length in (l0 // 2, l0, 2 * l0, 4 * l0):
        positions = [p for p in POSITIONS if p < max(length, l0)]
        got = run_dump(rope_tools["rope_dump"], "dynamic", d, b, l0, s, positions, length=length)
        compare(got, "dynamic", d, b, l0, s, positions, {"length": length}, f"{name} dynamic l={length}")
        if length <= l0:
            assert np.max(np.abs(got["table_inv_freq"] / default - 1)) < 1e-15
            assert got["table_eff_base"] == b and got["table_version"] == 0
        else:
            assert got["table_version"] >= 1 and got["table_eff_base"] > b
            assert got["table_length"] == length


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_c_yarn_magnitude(rope_tools, shape):
    """|R q| = m_s |q|: each pair's (cos, sin) has length m_s = 0.1 ln s + 1 at every position."""
    name, d, b, l0, s, _ = shape
    got = run_dump(rope_tools["rope_dump"], "yarn", d, b, l0, s, POSITIONS)
    ms = 0.1 * math.log(s) + 1
    worst = 0.0
    for p in POSITIONS:
        r = np.hypot(got["cos"][p], got["sin"][p])
        worst = max(worst, np.max(np.abs(r - ms)))
    # A rotated head: |R q| over the whole head, q_j = cos(j) (section 8.3's vector).
    q = np.cos(np.arange(d))
    c, sn = got["cos"][5000], got["sin"][5000]
    rq = np.empty(d)
    rq[0::2] = q[0::2] * c - q[1::2] * sn
    rq[1::2] = q[0::2] * sn + q[1::2] * c
    head = abs(np.linalg.norm(rq) / np.linalg.norm(q) - ms)
    print(f"{name} yarn magnitude: max | |(cos,sin)| - m_s | {worst:.2e}, head {head:.2e}")
    assert worst < 1e-6 and head < 1e-6


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_c_llama3_bands(rope_tools, shape):
    """llama3 keeps the pairs with wavelength < L/hf, divides by s those with wavelength > L/lf,
    and blends strictly between for the rest (checked pair by pair against the band of each)."""
    name, d, b, l0, s, extra = shape
    lf, hf = extra.get("low_freq_factor", 1), extra.get("high_freq_factor", 4)
    got = run_dump(rope_tools["rope_dump"], "llama3", d, b, l0, s, [0],
                   low_freq_factor=float(lf), high_freq_factor=float(hf))
    ratio = got["inv_freq"] / ref.default_inv_freq(d, b)
    bands = ref.llama3_bands(d, b, l0, lf, hf)
    for i, band in enumerate(bands):
        if band == "H":
            assert abs(ratio[i] - 1) < 1e-14, (i, ratio[i])
        elif band == "L":
            assert abs(ratio[i] * s - 1) < 1e-14, (i, ratio[i])
        else:
            assert 1 / s < ratio[i] < 1, (i, ratio[i])
    print(f"{name} llama3 bands: {''.join(bands)}")
    if name == "llama31":
        assert "".join(bands) == "H" * 29 + "M" * 6 + "L" * 29


def test_c_alias_and_errors(rope_tools):
    """'linear' is pi; rope_params_check refuses nonsense with exit code 1."""
    exe = rope_tools["rope_dump"]
    a = run_dump(exe, "linear", 64, 1e4, 2048, 4.0, [5000])
    bb = run_dump(exe, "pi", 64, 1e4, 2048, 4.0, [5000])
    assert np.array_equal(a["inv_freq"], bb["inv_freq"]) and a["params"][0] == "pi"
    for args in (["--mode", "pi", "--head-dim", "63", "--base", "1e4", "--orig-ctx", "2048", "--factor", "4"],
                 ["--mode", "pi", "--head-dim", "64", "--base", "1e4", "--orig-ctx", "2048", "--factor", "0.5"],
                 ["--mode", "yarn", "--head-dim", "64", "--base", "1e4", "--orig-ctx", "2048", "--factor", "4",
                  "--beta-fast", "1", "--beta-slow", "32"]):
        proc = subprocess.run([str(exe)] + args + ["--positions", "0"], capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stderr.startswith("error: "), (args, proc.returncode, proc.stderr)


# YaRN's correction range at its edges: lo == hi (the +0.001 guard), hi clamped to d - 1 (beyond
# the last pair index d/2 - 1, as HF clamps it), hi < 0 (every pair extrapolated).
YARN_EDGES = [(8, 1e4, 6), (64, 1e4, 6), (8, 1e4, 1000000), (8, 1e4, 2000000000), (64, 1e4, 1), (16, 500.0, 4096)]


@pytest.mark.parametrize("d,b,l0", YARN_EDGES, ids=[f"d{d}-b{b:g}-L{l0}" for d, b, l0 in YARN_EDGES])
def test_c_yarn_edges(rope_tools, d, b, l0):
    lo, hi = ref.yarn_correction_range(32, 1, d, b, l0)
    got = run_dump(rope_tools["rope_dump"], "yarn", d, b, l0, 4.0, [0, 1, 3, 5000])
    label = f"yarn edge d={d} b={b:g} L={l0} (lo={lo}, hi={hi})"
    rel, _ = compare(got, "yarn", d, b, l0, 4.0, [0, 1, 3, 5000], {}, label)
    assert rel < 1e-12


# --- Partial rotary and LongRoPE (issue 37): rope.c against rope_ref on the rotated part ---------------
# d = 64 with the first R = 48 dimensions turning (Phi-4-mini's 0.75): the frequencies are those of a
# head of R (rope_ref with d = R), the pairs past R/2 have theta 0 and cos 1, sin 0 exactly whatever the
# magnitude. LongRoPE: the short factors up to L, the long past it (by --length), attention factor
# sqrt(1 + ln s / ln L) at every length; the table's version moves once when the length passes L.

def factor_flags(fs):
    return ",".join(repr(f) for f in fs)


def run_dump_extra(exe, mode, d, b, l0, s, positions, extra):
    cmd = [str(exe), "--mode", mode, "--head-dim", str(d), "--base", repr(float(b)), "--orig-ctx", str(l0),
           "--factor", repr(float(s)), "--positions", ",".join(map(str, positions)), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    out = {"cos": {}, "sin": {}}
    for line in proc.stdout.splitlines():
        f = line.split()
        if f[0] in ("cos", "sin"):
            out[f[0]][int(f[1])] = np.array([float(v) for v in f[2:]])
        elif f[0] in ("inv_freq", "table_inv_freq"):
            out[f[0]] = np.array([float(v) for v in f[1:]])
        elif f[0] != "params":
            out[f[0]] = float(f[1])
    return out


R, D_HEAD, L_LR = 48, 64, 4096
SHORT = [1.0 + 0.02 * i for i in range(R // 2)]
LONG = [1.0 + 1.7 * i for i in range(R // 2)]


@pytest.mark.parametrize("mode,length", [("none", 0), ("yarn", 0), ("longrope", 100), ("longrope", 8000)])
def test_c_partial_rotary_and_longrope(rope_tools, mode, length):
    s = 32.0  # Phi-3-mini-128k: 131072 / 4096
    extra = ["--rot-dims", str(R)]
    kw = {}
    if mode == "longrope":
        extra += ["--short-factor", factor_flags(SHORT), "--long-factor", factor_flags(LONG), "--length", str(length)]
        kw = dict(short_factor=SHORT, long_factor=LONG, length=length)
    got = run_dump_extra(rope_tools["rope_dump"], mode, D_HEAD, 1e4, L_LR, s, POSITIONS, extra)
    want_inv, want_ms = ref.inv_freq(mode, R, 1e4, L_LR, s, **kw)
    for key in ("inv_freq", "table_inv_freq"):
        assert np.max(np.abs(got[key][:R // 2] / want_inv - 1)) < 1e-12, key
        assert not got[key][R // 2:].any(), f"{key}: the pairs past R/2 must not turn"
    assert abs(got["table_mscale"] / want_ms - 1) < 1e-12
    worst = 0.0
    for p in POSITIONS:
        c, sn = ref.cos_sin(want_inv, want_ms, p)
        worst = max(worst, np.max(np.abs(got["cos"][p][:R // 2] - c)), np.max(np.abs(got["sin"][p][:R // 2] - sn)))
        assert (got["cos"][p][R // 2:] == 1).all() and (got["sin"][p][R // 2:] == 0).all()
    assert worst < 1e-6
    if mode == "longrope":
        assert got["table_version"] == (1 if length > L_LR else 0)
        assert abs(want_ms - math.sqrt(1 + math.log(s) / math.log(L_LR))) < 1e-15
        # control: the other set of factors is far off
        other, _ = ref.inv_freq(mode, R, 1e4, L_LR, s, short_factor=SHORT, long_factor=LONG,
                                length=L_LR + 1 if length <= L_LR else 1)
        assert np.max(np.abs(got["table_inv_freq"][:R // 2] / other - 1)) > 0.5
    print(f"{mode} rot 48 of 64{f' length {length}' if length else ''}: cos/sin max abs {worst:.2e}")
