"""Accuracy of the smaller weight types: perplexity of f16 and q8_0 against f32.

The real trained stories260K (data/stories260K-hf) is exported three times with
export/export.py --dtype f32|f16|q8_0, and ./run --ppl measures each on the same TinyStories text
(windows of 512 tokens, its trained context). What is allowed:
  f16   within 0.1% of f32: the weights are rounded to 11 significant bits, the arithmetic is f32.
  q8_0  within 1% of f32: weights and activations are both rounded to 8 bits per block of 32.
The numbers are printed (pytest -s) so a change in accuracy is visible before it fails.
"""
import re
import subprocess

import pytest

from conftest import REPO, STORIES_HF, TEXT, TOK512, run_export

HF_DIR = STORIES_HF
WINDOWS = 40  # 40 x 511 predicted tokens
TOLERANCE = {"f16": 0.001, "q8_0": 0.01}


@pytest.fixture(scope="module")
def perplexities(c_tools, tmp_path_factory):
    """{dtype: perplexity} of the three exports on the same windows."""
    out = {}
    tmp = tmp_path_factory.mktemp("quant")
    for dtype in ("f32", "f16", "q8_0"):
        model = tmp / f"stories260K-{dtype}.bin"
        proc = run_export(HF_DIR, model, "--dtype", dtype)
        assert proc.returncode == 0, proc.stderr
        proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(TOK512), "--ppl", str(TEXT), "--ctx", "512",
                               "--ppl-windows", str(WINDOWS)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert f", {dtype}): dim" in proc.stderr, f"the banner does not say {dtype}:\n{proc.stderr}"
        m = re.search(r"^perplexity: ([\d.]+)$", proc.stdout, re.M)
        assert m, proc.stdout
        out[dtype] = float(m.group(1))
    return out


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_perplexity_close_to_f32(perplexities, dtype):
    f32, other = perplexities["f32"], perplexities[dtype]
    rel = abs(other - f32) / f32
    print(f"{dtype}: perplexity {other:.6f} vs f32 {f32:.6f}: {rel:.4%} apart (allowed {TOLERANCE[dtype]:.1%})")
    assert 1 < f32 < 20, f"f32 perplexity {f32} is not that of a trained model on its own kind of text"
    assert rel <= TOLERANCE[dtype]
