"""Shared pytest fixtures: paths, and building the C test tools once per session.

It also puts the repository root on sys.path, so every test imports the shared Python from lrun/, and
loads torch with a short spin for its OpenMP threads and one OpenBLAS thread (below).
What this is not: a place for test helpers of one suite; they live in that suite's file.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# torch (tests/reference.py, in this process) runs its products on OpenMP threads, and libgomp's
# threads spin 300,000 times before they sleep: with another job on one of two cores, they spin
# against each other at the end of every region. run.c sets GOMP_SPINCOUNT to its DEFAULT_SPINCOUNT,
# 1000, for the same reason. Its matrix products go to OpenBLAS (Debian's libopenblas0-pthread), whose
# threads, one per core, busy-wait for work: beside the other test process, or a job holding a core,
# they wait on each other, and `make test` already runs one test process per core, so each process
# gets one OpenBLAS thread. libgomp and OpenBLAS read these once, as torch loads them; they are set for
# that and taken out again, so the programs the tests start see the caller's environment. (What each
# saves: the README, "Checking it".)
SET_FOR_TORCH = {"GOMP_SPINCOUNT": "1000", "OPENBLAS_NUM_THREADS": "1"}
if "OMP_WAIT_POLICY" in os.environ:
    del SET_FOR_TORCH["GOMP_SPINCOUNT"]
SET_FOR_TORCH = {k: v for k, v in SET_FOR_TORCH.items() if k not in os.environ}
os.environ.update(SET_FOR_TORCH)
try:
    import torch  # noqa: F401
except ImportError:
    pass  # the suites that need torch say so themselves
finally:
    for k in SET_FOR_TORCH:
        del os.environ[k]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tests/tools"      # the C helper binaries: rope_dump, dump_logits, tok_dump
DATA = REPO / "data"              # the real models, tokenizers and text (data/README.md)
STORIES_BIN = DATA / "stories260K/stories260K.bin"   # trained stories260K, llama2.c legacy format
TOK512 = DATA / "stories260K/tokenizer.model"        # its SentencePiece tokenizer (vocab 512)
STORIES_HF = DATA / "stories260K-hf"                 # the same weights as a Hugging Face directory
TINY64_HF = DATA / "tiny64x512-hf"                   # trained head_dim-64 model, L = 512
PASSKEY_HF = DATA / "passkey64x512-hf"               # tiny64x512 taught passkey retrieval
TINY128_HF = DATA / "tiny128x512-hf"                 # the second shape: head_dim 128, one kv head
PASSKEY128_HF = DATA / "passkey128x512-hf"           # tiny128x512 taught passkey retrieval
LLAMA_TOK = DATA / "llama2/tokenizer.model"          # the Llama 2 tokenizer (vocab 32000)
TEXT = DATA / "text/tinystories_validation_head.txt"  # TinyStories validation text
HELDOUT = DATA / "text/tinystories_heldout_tail.txt"  # the tenth tiny64x512 never saw
PYTHON = "/usr/bin/python3"      # Debian's interpreter: the one with python3-torch


# pytest-xdist (`make test`) hands out whole files in the order they were collected, each to the
# first process free; the slowest files go first, so that the last files to finish are short ones and
# neither process waits long for the other at the end (longest first, the classic schedule). The
# order is the files' times beside a busy core (pytest --durations=0, summed per file), but the long
# windows first: one test of theirs is a third of the file.
SLOWEST_FIRST = ["test_long_windows.py", "test_bpe.py", "test_families.py", "test_chat.py", "test_gguf.py",
                 "test_families2.py", "test_parity.py", "test_ppl.py", "test_passkey.py", "test_hints.py",
                 "test_valgrind.py", "test_run_ref.py", "test_hostile.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order stays


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
