"""bench/bench.py and bench/versus.py read ./run's own timing lines: do their patterns still match?

A wording change in the banner ("1 token", "1 window") once left the benchmark unable to read a
decode speed, and nothing in `make test` noticed. This runs ./run on the real stories260K the way
the benchmarks do (a decode from an empty prompt, a prompt, one --ppl window) and checks that the
patterns find the numbers, and that the numbers are the ones printed. Timing is not checked: this
is a test of the parsing, not of the speed.
"""
import subprocess
import sys

import pytest

from conftest import REPO, STORIES_BIN, TEXT, TOK512

sys.path.insert(0, str(REPO / "bench"))
import bench  # noqa: E402  (bench/ is not a package)


def stderr_of(*args):
    proc = subprocess.run([str(REPO / "run"), str(STORIES_BIN), "-z", str(TOK512), "--threads", "2", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("prompt, tokens", [("", 1), ("Once upon a time", 5)])
@pytest.mark.parametrize("generate", [1, 2, 9])
def test_timing_line(c_tools, prompt, tokens, generate):
    err = stderr_of("-i", prompt, "-n", generate, "-t", 0)
    m = bench.TIMING.search(err)
    assert m, f"bench.TIMING does not match:\n{err}"
    assert int(m.group(1)) == tokens and int(m.group(4)) == generate and int(m.group(5)) == generate - 1
    assert int(m.group(8)) == 2
    assert bench.BANNER.search(err), f"bench.BANNER does not match:\n{err}"


def test_ppl_timing_line(c_tools, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT.read_text()[:3000])
    err = stderr_of("--ppl", text, "--ctx", 256, "--ppl-windows", 1)
    m = bench.PPL_TIMING.search(err)
    assert m, f"bench.PPL_TIMING does not match:\n{err}"
    assert int(m.group(1)) == 1


def test_patterns_reject_other_text():
    """The negative control: the patterns do not match a line that only looks similar."""
    assert not bench.TIMING.search("prompt: 5 tokens in 0.1 s | generation: 3 tokens | threads 2")
    assert not bench.PPL_TIMING.search("perplexity: 5.18 over 1 window")
