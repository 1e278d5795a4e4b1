"""Shared pytest fixtures: paths, and building the C test tools once per session.

It also puts the repository root on sys.path, so every test imports the shared Python from lrun/, and
loads torch with a short spin for its OpenMP threads (below).
What this is not: a place for test helpers of one suite; they live in that suite's file.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# torch (tests/reference.py, in this process) runs its products on OpenMP threads, and libgomp's
# threads spin 300,000 times before they sleep: with another job on one of two cores, they spin
# against each other at the end of every region (test_parity's stories260K tests at 2048 tokens:
# 146-235 s so, 26 s with 1000 spins, measured 2026-11-28 under load). run.c sets GOMP_SPINCOUNT to
# its DEFAULT_SPINCOUNT, 1000, for the same reason; here it is set for libgomp, which reads it once
# as torch loads it, then taken out again: the programs the tests start see the caller's environment.
if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"
    try:
        import torch  # noqa: F401
    except ImportError:
        pass  # the suites that need torch say so themselves
    finally:
        del os.environ["GOMP_SPINCOUNT"]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tests/tools"      # the C helper binaries: rope_dump, dump_logits, tok_dump
DATA = REPO / "data"              # the real models, tokenizers and text (data/README.md)
STORIES_BIN = DATA / "stories260K/stories260K.bin"   # trained stories260K, llama2.c legacy format
TOK512 = DATA / "stories260K/tokenizer.model"        # its SentencePiece tokenizer (vocab 512)
STORIES_HF = DATA / "stories260K-hf"                 # the same weights as a Hugging Face directory
TINY64_HF = DATA / "tiny64x512-hf"                   # trained head_dim-64 model, L = 512
PASSKEY_HF = DATA / "passkey64x512-hf"               # tiny64x512 taught passkey retrieval
LLAMA_TOK = DATA / "llama2/tokenizer.model"          # the Llama 2 tokenizer (vocab 32000)
TEXT = DATA / "text/tinystories_validation_head.txt"  # TinyStories validation text
HELDOUT = DATA / "text/tinystories_heldout_tail.txt"  # the tenth tiny64x512 never saw
PYTHON = "/usr/bin/python3"      # Debian's interpreter: the one with python3-torch


@pytest.fixture(scope="session")
def rope_tools():
    """Build tests/tools/rope_dump and tests/test_rope once (`make -C REPO tests/tools/rope_dump
    tests/test_rope`) and return {name: path}. Only the RoPE tools are built, so these tests do
    not wait for (or fail because of) the rest of the program."""
    targets = ["tests/tools/rope_dump", "tests/test_rope"]
    proc = subprocess.run(["make", "-C", str(REPO)] + targets, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make {' '.join(targets)} failed:\n{proc.stdout}\n{proc.stderr}")
    return {Path(t).name: REPO / t for t in targets}


@pytest.fixture(scope="session")
def c_tools():
    """Build ./run and every C test tool once (`make tools`)."""
    proc = subprocess.run(["make", "-C", str(REPO), "tools"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make tools failed:\n{proc.stdout}\n{proc.stderr}")


# --- The exporter (export/export.py) ---------------------------------------------------------------
EXPORT = REPO / "export" / "export.py"


def run_export(hf_dir, out, *args):
    """Run `PYTHON export/export.py hf_dir out *args`; returns the CompletedProcess (text mode)."""
    return subprocess.run([PYTHON, str(EXPORT), str(hf_dir), str(out), *map(str, args)],
                          capture_output=True, text=True)
