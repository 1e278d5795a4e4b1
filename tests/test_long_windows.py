"""Long windows on the trained tiny64x512 (L = 512): one perplexity window of 32768 tokens (64x L)
and generation through a full 16384-token context, which shifts it. These two are the longest runs of
the suite; they have a file of their own so that `make test`'s two processes can run them beside the
rest of tests/test_ppl.py (pytest-xdist hands out whole files).
"""
import re
import subprocess

import pytest

from conftest import HELDOUT, REPO, TEXT, TINY64_HF, TOK512, run_export
from test_ppl import _run_ppl as run_ppl  # (perplexity, buckets) of one ./run --ppl


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    model = tmp_path_factory.mktemp("tiny64") / "tiny64x512.bin"
    assert run_export(TINY64_HF, model).returncode == 0
    return model


def test_32k_window(c_tools, tiny64):
    """One 32768-token window of the held-out text, 64x tiny64x512's trained context, with leaky ReRoPE
    and log-n: every bucket is counted and the perplexity is that of a model that still reads (8.19;
    at 1x it is 7.64, docs/results/tiny64/ppl_results.md). Control: plain RoPE, which falls apart past L, is above the
    bound already on the text's first window of 4096 tokens (8x; docs/results/tiny64/ppl_results.md has 45 there and
    more at every longer window), a sixteenth of the 32k window's attention. (One token at a time, -b
    1, gives the same 8.188923, but takes 4x as long: the README, "Long windows", has the command.)"""
    leaky, buckets = run_ppl(tiny64, HELDOUT, "--ctx", 32768, "--ppl-windows", 1, "--rope-scaling", "leaky-rerope",
                             "--attn-logn")
    plain, _ = run_ppl(tiny64, HELDOUT, "--ctx", 4096, "--ppl-windows", 1)
    print(f"32768-token window: leaky-rerope + log-n {leaky:.6f} (buckets " + ", ".join(f"{b[4]:.2f}" for b in buckets)
          + f"), none at 4096 {plain:.3f}")
    assert [(lo, hi) for lo, hi, *_ in buckets][-1] == (16384, 32768) and sum(b[2] for b in buckets) == 32767
    assert leaky < 10 and plain > 10


def test_16k_generation_fills_the_context_and_shifts(c_tools, tiny64, tmp_path):
    """Generation through a full context far past L: in a 16384-token context (32x tiny64x512's
    trained 512), a 16169-token prompt (BOS and the held-out text's first 32000 characters), then
    300 tokens, which fill the context and shift it once (keep 4, drop half of the rest) and go on.
    The continuation after 16k positions is still the model's English: most of its words are words
    of the training text. (A 32768-token context checks the same at 4x the cost, about a minute on
    the two-core VM: test_32k_window, above, runs a window of that length.)"""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(HELDOUT.read_text()[:32000])
    proc = subprocess.run([str(REPO / "run"), str(tiny64), "-z", str(TOK512), "-f", str(prompt), "--ctx", "16384",
                           "-n", "300", "-t", "0", "--rope-scaling", "leaky-rerope", "--attn-logn"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"prompt: 16169 tokens .* generation: 300 tokens, 299 decode steps .* context shifts: 1 "
                     r"\(kept 4, dropped 8190 each\)", proc.stderr), proc.stderr
    text = prompt.read_text()
    assert proc.stdout.startswith(text[:1000])  # ./run echoes the prompt, then the 300 new tokens
    words = re.findall(r"[a-z]+", proc.stdout[len(text):].lower())
    known = set(re.findall(r"[a-z]+", TEXT.read_text().lower()))
    print(f"last words: {' '.join(words[-40:])}; {sum(w in known for w in words)} of {len(words)} known")
    assert len(words) > 100 and sum(w in known for w in words) > 0.9 * len(words)
