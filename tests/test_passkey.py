"""Passkey retrieval (scripts/passkey.py): the mechanics, not the model.

stories260K cannot retrieve a passkey, so these tests check what the script promises: prompts of
exactly the requested number of tokens, the key line at the requested depth, the answer read as the
first integer of the continuation, the same right-answer count a stand-in ./run produces, and one
real end-to-end run that completes with a well-formed table.
"""
import re
import subprocess
import sys

import pytest
import sentencepiece as spm

from conftest import LLAMA_TOK, PYTHON, REPO, STORIES_BIN, TOK512

sys.path.insert(0, str(REPO / "scripts"))
import passkey  # noqa: E402

MODEL = STORIES_BIN


@pytest.fixture(scope="module", params=[TOK512, LLAMA_TOK], ids=["tok512", "llama"])
def sp(request):
    return spm.SentencePieceProcessor(model_file=str(request.param))


def n_tokens(sp, text):
    return len(sp.encode(text)) + 1  # BOS, as ./run adds it


@pytest.mark.parametrize("length", [300, 504, 1017, 2040])
@pytest.mark.parametrize("depth", [0.0, 0.3, 0.5, 1.0])
def test_prompt_has_exactly_the_requested_length(sp, length, depth):
    for key in (1, 907, 50000):
        p = passkey.build_prompt(sp, length, key, depth)
        assert n_tokens(sp, p.text) == length == p.n_tokens
        assert p.text.startswith(passkey.TASK + "\n") and p.text.endswith("\n" + passkey.QUESTION)
        assert p.text.count(passkey.KEY_LINE.format(key=key)) == 1


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
def test_key_line_sits_at_the_requested_depth(sp, depth):
    # Measured here without the script's own bookkeeping: tokens before the key line, minus the
    # task line (and BOS), over all the filler there is. The script may move the key by a few
    # tokens to make the length exact; 5 tokens of 2000 is the allowance.
    length, key = 2048, 31337
    p = passkey.build_prompt(sp, length, key, depth)
    offset = n_tokens(sp, p.text[:p.text.index("The pass key is")])
    assert offset == p.key_offset
    head = n_tokens(sp, passkey.TASK + "\n")
    no_filler = n_tokens(sp, "\n".join([passkey.TASK, passkey.KEY_LINE.format(key=key), passkey.QUESTION]))
    filler = length - no_filler
    before = offset - head - (1 if depth > 0 else 0)  # the newline after the filler is not filler
    assert abs(before / filler - depth) <= 5 / filler, (before, filler)
    assert abs(p.filler_depth - depth) <= 5 / filler
    print(f"depth {depth}: key line at token {offset} of {length}, filler before it {before}/{filler}")


def test_depth_is_monotone_and_the_extremes_touch_the_ends(sp):
    offsets = [passkey.build_prompt(sp, 1024, 123, d).key_offset for d in (0, 0.2, 0.4, 0.6, 0.8, 1)]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    first = passkey.build_prompt(sp, 1024, 123, 0).text
    assert first.startswith(passkey.TASK + "\nThe pass key is 123.")
    last = passkey.build_prompt(sp, 1024, 123, 1).text
    assert last.endswith("123 is the pass key.\n" + passkey.QUESTION)


def test_too_short_a_length_is_refused(sp):
    with pytest.raises(ValueError, match="cannot hold"):
        passkey.build_prompt(sp, 20, 12345, 0.5)
    with pytest.raises(ValueError, match="depth"):
        passkey.build_prompt(sp, 1024, 12345, 1.5)


@pytest.mark.parametrize("text, want", [
    (" 12345.", 12345),
    ("12345.", 12345),
    ("\n\n  42 is the pass key", 42),
    (" the key is 7 and 8", 7),
    (" 12,345", 12),
    (" no digits here.", None),
    ("", None),
    (" 0", 0),
])
def test_answer_is_the_first_integer(text, want):
    assert passkey.parse_answer(text) == want


def test_continuation_is_what_follows_the_echoed_prompt():
    prompt = "Task.\nThe pass key is 5.\n" + passkey.QUESTION
    assert passkey.continuation_of(prompt + " 5. Remember\n", prompt) == " 5. Remember"
    # An echo that differs from the prompt: cut after the question.
    assert passkey.continuation_of("task.\n" + passkey.QUESTION + " 9\n", prompt) == " 9"
    with pytest.raises(ValueError):
        passkey.continuation_of("something else\n", prompt)


def test_trial_plan_is_seeded_and_spreads_the_depths():
    plan = passkey.trial_plan(5, None, seed=3)
    assert plan == passkey.trial_plan(5, None, seed=3)
    assert plan != passkey.trial_plan(5, None, seed=4)
    assert [d for _, d in plan] == [0, 0.25, 0.5, 0.75, 1]
    assert all(1 <= k <= 50000 for k, _ in plan)
    assert [d for _, d in passkey.trial_plan(2, [0.1, 0.9], seed=3)] == [0.1, 0.1, 0.9, 0.9]
    assert all(0 <= d <= 1 for _, d in passkey.trial_plan(20, "random", seed=3))


FAKE_RUN = """#!{python}
# A stand-in for ./run: echo the prompt, then answer with the key it finds in it ({how}).
import re, sys
prompt = sys.argv[sys.argv.index("-i") + 1]
key = int(re.search(r"The pass key is (\\d+)", prompt).group(1))
sys.stdout.write(prompt + {answer} + "\\n")
"""


@pytest.mark.parametrize("how, answer, want", [("right", '" " + str(key) + ". Remember"', "2/2 (100%)"),
                                               ("wrong", '" " + str(key + 1) + "."', "0/2 (0%)"),
                                               ("no number", '" a big dog."', "0/2 (0%)")])
def test_scoring_counts_right_answers(tmp_path, how, answer, want):
    fake = tmp_path / "run"
    fake.write_text(FAKE_RUN.format(python=PYTHON, how=how, answer=answer))
    fake.chmod(0o755)
    proc = subprocess.run([PYTHON, str(REPO / "scripts/passkey.py"), str(MODEL), "-z", str(TOK512), "--run",
                           str(fake), "--lengths", "300", "--modes", "none", "--trials", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"| 300 | {want} |" in proc.stdout, proc.stdout


def test_end_to_end_on_stories260K(c_tools, tmp_path):
    # One short real run per mode: completes, and prints (and writes) a well-formed table. The
    # accuracy is whatever a 260K-parameter model manages: about zero.
    out = tmp_path / "passkey.md"
    proc = subprocess.run([PYTHON, str(REPO / "scripts/passkey.py"), str(MODEL), "-z", str(TOK512),
                           "--lengths", "256,600", "--modes", "none,pi", "--trials", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = out.read_text().splitlines()
    assert table[0] == "| context (tokens) | none | pi |"
    assert table[1] == "|---:|---:|---:|"
    for row, length in zip(table[2:], (256, 600)):
        assert re.fullmatch(rf"\| {length} \| [01]/1 \((0|100)%\) \| [01]/1 \((0|100)%\) \|", row), row
    assert len(table) == 4
    assert "\n".join(table) in proc.stdout
    # The log on stderr shows one line per trial, with what the model said.
    assert len(re.findall(r"^length \d+ ", proc.stderr, re.M)) == 4
