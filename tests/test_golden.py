"""Golden text: greedy generation from the real trained stories260K.

Three independent paths must give the same 200 tokens: ./run on the llama2.c legacy file, ./run on
export/export.py's conversion of the Hugging Face directory (q/k rows permuted back from
rotate_half), and the PyTorch reference (tests/reference.py) on the Hugging Face directory itself.
The text must be the known-good one: its first lines are quoted in data/README.md, and
the whole of it is llama2.c's own expected output for this model at temperature 0, 200 steps.
"""
import subprocess

import pytest

import reference
from conftest import REPO, STORIES_BIN, STORIES_HF, TOK512, run_export

LEGACY = STORIES_BIN
HF_DIR = STORIES_HF

# data/README.md quotes how it begins.
KNOWN_START = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
               "One day, she saw a big, red ball. She wanted to play with it, but it was too high.")
KNOWN = (KNOWN_START + "\nLily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
         "She said, \"I want to play with your ball, but I can't find it.\"\nLily was sad and didn't know what to "
         "do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\nLily didn't want to help her mom, so she")


def greedy(model, *extra):
    proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(TOK512), "-t", "0", "-n", "200", *extra],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("\n")
    return proc.stdout[:-1]  # run ends the text with a newline


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "stories260K.bin"
    proc = run_export(HF_DIR, out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_legacy_file_gives_known_text(c_tools):
    text = greedy(LEGACY)
    assert text.startswith(KNOWN_START)
    assert text == KNOWN
    print(f"legacy: {len(text)} chars, equal to the known-good text")


def test_exported_hf_gives_the_same_text(c_tools, exported):
    assert greedy(exported) == greedy(LEGACY) == KNOWN


def test_reference_gives_the_same_text():
    ref = reference.load(HF_DIR)
    new = ref.generate([ref.bos_id], 200)
    assert ref.decode(new) == KNOWN
    print(f"reference: {len(new)} tokens, equal to the known-good text")


def test_same_text_in_one_thread_and_token_by_token(c_tools, exported):
    # Thread count and prompt block size change how the work is split, never the result.
    assert greedy(exported, "--threads", "1", "-b", "1") == KNOWN
