"""./run against ./run-ref (`make run-ref`): the same program with every matrix product and attention
through kernels.c's plain references (matmul_ref, attention_ref: the definitions, in double, one
thread; model.c, LRUN_REFERENCE). The perplexity of 512-token windows, which depends on every
logit of every position, agrees within a stated bound per weight type: f32 and f16 within 1e-5
relative (float sums in another order; measured 1e-7 on one window); q8_0 and q4_0 within 2e-3 over
two windows (measured 7.8e-4 and 9.7e-4; q4_0's first window alone is 1.7e-3 off), since the fast
path quantizes each activation block to 8 bits before its integer dot products (as llama.cpp does)
and the reference does not. Also in the modes whose attention turns cached keys (dynamic) or
scores by two paths (leaky-rerope), at 2x the trained context (one window of 1024). The control:
the same comparison between two different modes must fail the f32 bound by far.

Each distinct run is made once (`ppl` keeps its results): ./run-ref, one thread in double, is the
slow part, and the control's reference side is test_past_the_context[yarn]'s own run.
"""
import re
import subprocess

import pytest

from conftest import HELDOUT, REPO, STORIES_BIN, TOK512, run_export

TINY64_HF = REPO / "data/tiny64x512-hf"
BOUND = {"f32": 1e-5, "f16": 1e-5, "q8_0": 2e-3, "q4_0": 2e-3}
WINDOWS = {"f32": 1, "f16": 1, "q8_0": 2, "q4_0": 2}  # of 512 tokens, for each weight type's comparison


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    out = {}
    for dtype in BOUND:
        model = tmp_path_factory.mktemp(f"tiny64-{dtype}") / "m.bin"
        assert run_export(TINY64_HF, model, "--dtype", dtype).returncode == 0
        out[dtype] = model
    return out


_RUNS = {}  # (binary, model, args): the perplexities that run printed


def ppl(binary, model, *args):
    """The total and per-bucket perplexities of `binary model --ppl HELDOUT args`."""
    key = (binary, str(model), tuple(map(str, args)))
    if key not in _RUNS:
        p = subprocess.run([str(REPO / binary), str(model), "--ppl", str(HELDOUT), *key[2]],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        _RUNS[key] = [float(x) for x in re.findall(r"^perplexity: ([\d.]+)$|^\[\d+, \d+\) +\d+ +[\d.]+ +([\d.]+)$",
                                                   p.stdout, re.M) for x in x if x]
    return _RUNS[key]


def rel(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) / y for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", list(BOUND))
def test_fast_path_matches_the_references(c_tools, tiny64, dtype):
    args = ("--ctx", 512, "--ppl-windows", WINDOWS[dtype])
    d = rel(ppl("run", tiny64[dtype], *args), ppl("run-ref", tiny64[dtype], *args))
    print(f"{dtype}: largest relative difference of the perplexities {d:.1e} (bound {BOUND[dtype]:.0e})")
    assert d < BOUND[dtype]


@pytest.mark.parametrize("mode", ["dynamic", "leaky-rerope", "yarn"])
def test_past_the_context(c_tools, tiny64, mode):
    args = ("--ctx", 1024, "--ppl-windows", 1, "--rope-scaling", mode, "-ctk", "f32")
    d = rel(ppl("run", tiny64["f32"], *args), ppl("run-ref", tiny64["f32"], *args))
    print(f"{mode} at 2x: largest relative difference {d:.1e}")
    assert d < BOUND["f32"]


def test_control_other_mode_differs(c_tools, tiny64):
    d = rel(ppl("run", tiny64["f32"], "--ctx", 1024, "--ppl-windows", 1, "--rope-scaling", "ntk", "-ctk", "f32"),
            ppl("run-ref", tiny64["f32"], "--ctx", 1024, "--ppl-windows", 1, "--rope-scaling", "yarn", "-ctk", "f32"))
    assert d > 100 * BOUND["f32"], d


def test_greedy_text_is_the_same(c_tools):
    texts = [subprocess.run([str(REPO / b), str(STORIES_BIN), "-z", str(TOK512), "-t", "0", "-n", "200", "-i",
                             "Once upon a time"], capture_output=True, text=True, timeout=120).stdout
             for b in ("run", "run-ref")]
    assert texts[0] == texts[1] and len(texts[0]) > 400
