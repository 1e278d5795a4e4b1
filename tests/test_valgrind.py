"""valgrind memcheck on ./run: a short generation and a short --ppl run, on every weight type, must
report 0 errors and 0 bytes definitely lost; so must a run that refuses a broken model file.

memcheck sees what AddressSanitizer (`make sanitize`) cannot: reads of uninitialised memory, and
leaks in a binary built exactly like the real one except for one flag. That flag: valgrind 3.19
cannot decode AVX-512, which -march=native emits here, so the binary under test is
build/valgrind/run (-O2 -g, no -march; `make build/valgrind/run`). OpenMP stays on (2 threads,
waiting passively: valgrind runs one thread at a time, and spinning ones would only burn time).
"Possibly lost" blocks (libgomp's thread stacks, which are never joined) are not counted; "still
reachable" ones (SentencePiece's and protobuf's static tables) neither.

Run: /usr/bin/python3 -m pytest -q tests/test_valgrind.py
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, STORIES_BIN, STORIES_HF, TEXT, TOK512, run_export

LEGACY = STORIES_BIN
HF_DIR = STORIES_HF

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None,
                                reason="valgrind is not installed (./setup.sh installs it)")


@pytest.fixture(scope="module")
def vg_run():
    # Not the caller's make flags: `make test CFLAGS=...` must not leak into this build.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "-C", str(REPO), "build/valgrind/run"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(f"make build/valgrind/run failed:\n{proc.stdout}\n{proc.stderr}")
    return REPO / "build/valgrind/run"


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """The first 6 KB of the evaluation text (about 1500 tokens): encoding all 800 KB would take
    valgrind longer than the forward passes."""
    path = tmp_path_factory.mktemp("vg") / "text.txt"
    path.write_bytes(TEXT.read_bytes()[:6000])
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """stories260K exported as f16 and as q8_0 (the f32 path is the legacy file)."""
    out = {}
    for dtype in ("f16", "q8_0"):
        path = tmp_path_factory.mktemp("vg") / f"stories260K-{dtype}.bin"
        proc = run_export(HF_DIR, path, "--dtype", dtype)
        assert proc.returncode == 0, proc.stderr
        out[dtype] = path
    return out


def memcheck(binary, *args, status=0):
    """Run binary under memcheck; returns (stdout, stderr). Asserts the exit status, 0 errors and 0
    bytes definitely lost, and prints the summary numbers."""
    cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
           "--errors-for-leak-kinds=definite", "--track-origins=yes", "--error-exitcode=99",
           str(binary), *map(str, args), "--threads", "2"]
    proc = subprocess.run(cmd, capture_output=True, timeout=600, env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    assert proc.returncode == status, f"exit {proc.returncode}, wanted {status}:\n{err[-6000:]}"
    errors = re.search(r"ERROR SUMMARY: ([\d,]+) errors", err)
    assert errors, f"no valgrind summary:\n{err[-3000:]}"
    assert errors.group(1) == "0", err[-6000:]
    lost = re.search(r"definitely lost: ([\d,]+) bytes", err)
    no_leaks = "All heap blocks were freed" in err
    assert no_leaks or (lost and lost.group(1) == "0"), err[-6000:]
    print(f"memcheck {' '.join(map(str, args[:1]))}: 0 errors, "
          f"{'no leaks possible' if no_leaks else 'definitely lost 0 bytes'}")
    return out, err


def test_generation_legacy_f32(vg_run):
    out, _ = memcheck(vg_run, LEGACY, "-z", TOK512, "-i", "Once upon a time", "-n", "24", "-t", "0.9",
                      "-p", "0.9", "-s", "7")
    assert out.startswith("Once upon a time")


def test_generation_f16_with_yarn(vg_run, exported):
    # A scaled RoPE past the trained context: the tables and the banner of another mode.
    out, err = memcheck(vg_run, exported["f16"], "-z", TOK512, "-n", "16", "-t", "0", "--ctx", "1024",
                        "--rope-scaling", "yarn")
    assert "rope: yarn" in err and len(out) > 10


def test_generation_q8_0_token_by_token(vg_run, exported):
    out, _ = memcheck(vg_run, exported["q8_0"], "-z", TOK512, "-i", "Lily and Tom went to the park", "-n", "12",
                      "-t", "0", "-b", "1")
    assert out.startswith("Lily and Tom")


def test_perplexity_q8_0(vg_run, exported, text):
    # Two windows of 128 tokens in blocks of 64: the batched (prefill) kernels.
    out, _ = memcheck(vg_run, exported["q8_0"], "-z", TOK512, "--ppl", text, "--ctx", "128", "--ppl-windows", "2")
    assert out.startswith("perplexity: ")


def test_generation_legacy_dynamic_past_trained_context(vg_run):
    # A prompt of about 550 tokens, past the trained 512, with dynamic NTK: every new token changes
    # the base, so every cached key is rotated again from its un-rotated copy.
    prompt = TEXT.read_bytes()[:1100].decode("utf-8", "ignore")
    out, err = memcheck(vg_run, LEGACY, "-z", TOK512, "-i", prompt, "-n", "6", "-t", "0", "--ctx", "600",
                        "--rope-scaling", "dynamic")
    assert "rope: dynamic" in err and out.startswith(prompt[:50])


def test_refused_file_frees_everything(vg_run, tmp_path):
    bad = tmp_path / "truncated.bin"
    bad.write_bytes(LEGACY.read_bytes()[:100000])
    _, err = memcheck(vg_run, bad, "-z", TOK512, status=1)
    assert "error: " in err and "not a model file" in err


def test_prompt_cache_written_then_read(vg_run, exported, tmp_path):
    # --prompt-cache: the file written from the KV cache (every byte of it defined), then read back
    # into a second run's cache, which runs only the rest of its longer prompt.
    cache = tmp_path / "p.cache"
    for prompt, want in (("Lily and Tom went to the park", "then written"), ("Lily and Tom went to the park. They",
                                                                              "from the prompt cache, then written")):
        out, err = memcheck(vg_run, exported["q8_0"], "-z", TOK512, "-i", prompt, "-n", "4", "-t", "0",
                            "--prompt-cache", cache, "-ctk", "f16")
        assert want in err and out.startswith("Lily and Tom")
