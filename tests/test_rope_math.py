"""test_rope_math.py - the README's RoPE chapter, number by number, against rope.c.

What this checks, each against rope_rotate / rope_inv_freq (through tests/tools/rope_dump) and an
independent numpy computation written here, each with a control that must fail:
  * the worked example of "The vector form" (x = 1..8, m = 3, d = 8), read from the README:
    its cos, sin, swapped x and result; the doubled cos/sin built wrongly (two copies
    concatenated, Hugging Face's cat(freqs, freqs), used with interleaved pairs) does not give it;
  * the complex view: <R_m q, R_n k> = Re sum_i q_i conj(k_i) e^{i (m-n) theta_i} = q^T R((n-m) theta) k;
    the opposite sign, or rotating only the query, gives another number;
  * a rotation block written with the rows (sin, cos), (sin, cos) is singular and does not keep norms;
  * the table of the two NTK-aware formulas, read from the README, and which one --rope-alpha uses;
  * long-term decay: the levels the README quotes for RoFormer's bound, and for the score itself;
  * docs/rope-math.md's longest wavelengths; every test the "Common mistakes" table names exists.
What this is not: the tables of every scaling mode (tests/test_rope_tables.py does those).

Run: make tests/tools/rope_dump && /usr/bin/python3 -m pytest -q tests/test_rope_math.py
"""
import re
import subprocess

import numpy as np

from conftest import REPO

README = (REPO / "README.md").read_text()


def rope_dump(exe, *args):
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = {"rotated": {}}
    for line in proc.stdout.splitlines():
        f = line.split()
        if f[0] == "rotated":
            out["rotated"][int(f[1])] = np.array([float(v) for v in f[2:]])
        elif f[0] == "inv_freq":
            out["inv_freq"] = np.array([float(v) for v in f[1:]])
        elif f[0] == "eff_base":
            out["eff_base"] = float(f[1])
    return out


def rotated(exe, x, pos, d=None, base=1e4):
    """rope_rotate(x, pos) for mode none, as float64."""
    d = d or len(x)
    got = rope_dump(exe, "--mode", "none", "--head-dim", d, "--base", base, "--orig-ctx", 512, "--factor", 1,
                    "--positions", pos, "--rotate", ",".join(repr(float(v)) for v in x))
    return got["rotated"][pos]


def swap_pairs(x):
    """(-x1, x0, -x3, x2, ...): the second term of the interleaved vector form."""
    out = np.empty_like(x)
    out[0::2], out[1::2] = -x[1::2], x[0::2]
    return out


# ---------------------------------------------------------------------------------------------
# The worked example: README, "The vector form"

def readme_worked_example():
    block = next(b for b in README.split("```")[1::2] if "x_swapped" in b)
    rows = {}
    for line in block.strip().splitlines():
        label, _, values = line.rpartition("=")
        rows[label.strip()] = np.array([float(v) for v in values.split()])
    return rows


def test_worked_example(rope_tools):
    rows = readme_worked_example()
    x, m = np.arange(1.0, 9.0), 3
    theta = 1e4 ** (-np.arange(0, 8, 2) / 8)  # 1, 0.1, 0.01, 0.001
    C, S = np.repeat(np.cos(m * theta), 2), np.repeat(np.sin(m * theta), 2)  # c0 c0 c1 c1 ...
    want = x * C + swap_pairs(x) * S
    got = rotated(rope_tools["rope_dump"], x, m)
    printed = {"x": x, "C": C, "S": S, "x_swapped": swap_pairs(x), "x C + x_swapped S": want}
    assert set(rows) == set(printed), rows.keys()
    for label, v in printed.items():
        diff = np.max(np.abs(rows[label] - v))
        print(f"README worked example, {label}: max diff {diff:.2e}")
        assert diff < 6e-7, label  # printed with 6 decimals
    diff = np.max(np.abs(got - want))
    print(f"rope_rotate(x, 3) against the vector form: max diff {diff:.2e}")
    assert diff < 1e-6
    # Control: two copies concatenated (c0 c1 c2 c3 c0 c1 c2 c3), right for rotate_half, wrong here.
    wrong = x * np.concatenate([C[0::2]] * 2) + swap_pairs(x) * np.concatenate([S[0::2]] * 2)
    print(f"undoubled cos/sin against rope_rotate: max diff {np.max(np.abs(got - wrong)):.2f} (must be large)")
    assert np.max(np.abs(got - wrong)) > 1


def test_rotate_half_form(rope_tools):
    """Hugging Face's form, x C' + rotate_half(x) S' with C' = cat(c, c), on its own layout (pair i is
    (x_i, x_{i+d/2})), is rope_rotate on ours, element for element after the permutation."""
    x, m, d = np.arange(1.0, 9.0), 3, 8
    theta = 1e4 ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(m * theta), np.sin(m * theta)
    perm = np.r_[0:d:2, 1:d:2]  # ours -> Hugging Face's order within a head
    h = x[perm]
    hf = h * np.concatenate([c, c]) + np.concatenate([-h[d // 2:], h[: d // 2]]) * np.concatenate([s, s])
    got = rotated(rope_tools["rope_dump"], x, m)
    assert np.max(np.abs(hf - got[perm])) < 1e-6


# ---------------------------------------------------------------------------------------------
# The complex view and the sign of the offset

def block_rotation(theta, angle_scale):
    """The d x d block-diagonal R(angle_scale * theta)."""
    d = 2 * len(theta)
    R = np.zeros((d, d))
    for i, t in enumerate(theta):
        a = angle_scale * t
        R[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return R


def test_complex_view_and_sign(rope_tools):
    d, m, n = 64, 700, 200  # query at m, key at n, distance r = m - n
    rng = np.random.default_rng(19)
    q, k = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    q, k = q.astype(np.float64), k.astype(np.float64)
    theta = 1e4 ** (-np.arange(0, d, 2) / d)
    exe = rope_tools["rope_dump"]
    score = rotated(exe, q, m) @ rotated(exe, k, n)
    zq, zk = q[0::2] + 1j * q[1::2], k[0::2] + 1j * k[1::2]
    complex_view = np.real(np.sum(zq * np.conj(zk) * np.exp(1j * (m - n) * theta)))
    matrix_view = q @ block_rotation(theta, n - m) @ k
    print(f"score {score:.6f}, complex view {complex_view:.6f}, q^T R((n-m) theta) k {matrix_view:.6f}")
    assert abs(score - complex_view) < 1e-4 * np.abs(q) @ np.abs(k)
    assert abs(complex_view - matrix_view) < 1e-9
    # Controls: the other sign in one place only, and rotating the query alone.
    flipped = np.real(np.sum(zq * np.conj(zk) * np.exp(1j * (n - m) * theta)))
    query_only = rotated(exe, q, m) @ k
    print(f"controls: e^(i(n-m)theta) {flipped:.6f}, only q rotated {query_only:.6f}")
    assert abs(flipped - score) > 0.1 and abs(query_only - score) > 0.1
    # Only the query rotated: the score changes when both positions move by the same amount.
    assert abs(rotated(exe, q, m + 37) @ k - query_only) > 0.1


def test_singular_block():
    """Rows (sin, cos), (sin, cos) instead of (cos, -sin), (sin, cos): determinant 0, norms not kept,
    which the norm check of tests/test_rope.c would catch."""
    a = 0.7
    right = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    wrong = np.array([[np.sin(a), np.cos(a)], [np.sin(a), np.cos(a)]])
    v = np.array([1.0, -1.0])
    assert abs(np.linalg.det(right) - 1) < 1e-15 and abs(np.linalg.norm(right @ v) - np.linalg.norm(v)) < 1e-15
    assert abs(np.linalg.det(wrong)) < 1e-15 and abs(np.linalg.norm(wrong @ v) - np.linalg.norm(v)) > 0.5


# ---------------------------------------------------------------------------------------------
# The two NTK-aware formulas: README, "Past the trained context"

def readme_ntk_table():
    section = README.split("two NTK-aware formulas")[1]
    rows = [l for l in section.splitlines() if re.match(r"^\| *\d+ *\|", l)]
    out = {}
    for line in rows[:3]:
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        out[int(cells[0])] = [float(c) for c in cells[1:]]
    return out


def test_ntk_table(rope_tools):
    b, alpha = 1e4, 4.0
    table = readme_ntk_table()
    assert sorted(table) == [8, 64, 128]
    for d, (base_a, slow_a, base_b, slow_b) in table.items():
        # (b alpha)^(-2i/d): the slowest pair, i = d/2 - 1, is slowed by alpha^((d-2)/d).
        assert base_a == b * alpha and abs(slow_a - alpha ** ((d - 2) / d)) < 0.005, d
        # b alpha^(d/(d-2)): slowed by exactly alpha.
        assert abs(base_b - b * alpha ** (d / (d - 2))) < 0.5 and slow_b == alpha, d
        # rope.c (--rope-alpha) uses the second: its slowest pair is slowed by alpha, not by slow_a.
        got = rope_dump(rope_tools["rope_dump"], "--mode", "ntk", "--head-dim", d, "--base", b, "--orig-ctx",
                        2048, "--factor", alpha, "--alpha", alpha, "--positions", 0)
        none = b ** (-np.arange(0, d, 2) / d)
        slowed = none[-1] / got["inv_freq"][-1]
        print(f"d = {d}: rope.c slows the slowest pair by {slowed:.12f}, base {got['eff_base']:.3f}")
        assert abs(slowed - alpha) < 1e-12 and abs(got["eff_base"] / base_b - 1) < 1e-5
        assert abs(slowed - alpha ** ((d - 2) / d)) > 0.05  # control: not the other formula


# ---------------------------------------------------------------------------------------------
# Long-term decay: README, "Long-term decay: a bound, not the score"

def test_decay_bound_levels(rope_tools):
    """RoFormer's relative upper bound (1/(d/2)) sum_j |S_j|, over the theta_i of rope.c, divided by
    its value at r = 0: the averages the README quotes."""
    r = np.arange(0, 100001, dtype=np.float64)
    quoted = {(128, 1000): 0.15, (64, 1000): 0.21, (8, 100): 0.56}
    for (d, start), want in quoted.items():
        theta = rope_dump(rope_tools["rope_dump"], "--mode", "none", "--head-dim", d, "--base", 1e4,
                          "--orig-ctx", 512, "--factor", 1, "--positions", 0)["inv_freq"]
        y = np.concatenate([np.abs(np.cumsum(np.exp(1j * np.outer(c, theta)), axis=1)).mean(axis=1)
                            for c in np.array_split(r, 40)])
        y /= y[0]
        print(f"d = {d}: mean over [{start}, 1e5] {y[start:].mean():.3f}, max {y[start:].max():.3f}")
        assert abs(y[start:].mean() - want) < 0.005, d
        if d == 8:
            assert y[start:].max() > 0.99  # comes back to its start
        else:
            assert y[start:].max() < 0.65


def test_longest_wavelengths():
    """docs/rope-math.md's table: the longest wavelength 2 pi b^((d-2)/d) for each base and head size."""
    text = (REPO / "docs" / "rope-math.md").read_text()
    rows = [l for l in text.splitlines() if re.match(r"^\| *\d+ *\| *\d+ *\| *[\d,]+ *\|", l)]
    assert len(rows) == 5
    for line in rows:
        b, d, longest = [float(c.strip().replace(",", "")) for c in line.strip("|").split("|")[:3]]
        assert abs(longest - 2 * np.pi * b ** ((d - 2) / d)) < 0.5, line


def test_common_mistakes_name_real_tests():
    """Every `suite.py::test_name` in the README's "Common mistakes" table is a test that exists."""
    section = README.split("### Common mistakes")[1].split("\n### ")[0]
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", section)
    assert len(named) >= 7
    for suite, name in named:
        assert re.search(rf"^def {name}\(", (REPO / "tests" / suite).read_text(), re.M), f"{suite}::{name}"


def test_score_itself(rope_tools):
    """The README's numbers for the score, not the bound: random q, k have rms sqrt(d) at every distance
    (4000 random pairs, within 5%); q = k with equal pair lengths gives mean_i cos(r theta_i)."""
    d, exe = 128, rope_tools["rope_dump"]
    theta = rope_dump(exe, "--mode", "none", "--head-dim", d, "--base", 1e4, "--orig-ctx", 512, "--factor", 1,
                      "--positions", 0)["inv_freq"]
    rng = np.random.default_rng(19)
    q, k = rng.standard_normal((4000, d)), rng.standard_normal((4000, d))
    zq, zk = q[:, 0::2] + 1j * q[:, 1::2], k[:, 0::2] + 1j * k[:, 1::2]
    for r in (0, 10, 1000, 50000):
        rms = np.sqrt(np.mean(np.real(np.sum(zq * np.conj(zk) * np.exp(1j * r * theta), axis=1)) ** 2))
        assert abs(rms / np.sqrt(d) - 1) < 0.05, (r, rms)
    r = np.arange(0, 100001, dtype=np.float64)
    same = np.concatenate([np.cos(np.outer(c, theta)).mean(axis=1) for c in np.array_split(r, 40)])
    assert same[0] == 1 and abs(same[100] - 0.48) < 0.005
    assert abs(same[1000:].min() + 0.28) < 0.005 and abs(same[1000:].max() - 0.32) < 0.005
    theta8 = 1e4 ** (-np.arange(0, 8, 2) / 8)
    assert np.cos(np.outer(r[1000:], theta8)).mean(axis=1).max() > 0.99
