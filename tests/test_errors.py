"""User mistakes given to ./run: every case gets a clear message on stderr and the right exit status
(1 for a runtime or file problem, 2 for a usage error), never a crash or a hang.

What the user types or names: the command line (unknown flags, missing values, numbers that are not
numbers or out of range), a model path that is missing or not a file (directory, FIFO, device), the
wrong or a broken tokenizer, a prompt longer than the context, a --ctx whose KV cache cannot fit,
a perplexity text that is missing or too short; and the edge values that must be accepted.
What this is not: damaged or adversarial model files (their bytes); tests/test_hostile.py has those.
"""
import os
import re
import subprocess

import pytest

from conftest import LLAMA_TOK, REPO, STORIES_BIN, TEXT, TOK512, run_export
from lrun.hf_random import make_checkpoint

LEGACY = STORIES_BIN


def run(*args, timeout=60):
    proc = subprocess.run([str(REPO / "run"), *map(str, args)], capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def expect(status, needles, *args):
    code, out, err = run(*args)
    assert code == status, f"exit {code}, wanted {status}; stderr: {err}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in stderr: {err}"
    assert out == "", "errors must not print to stdout"
    return err


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_missing_file(c_tools, tmp_path):
    expect(1, ["cannot open model", "No such file"], tmp_path / "nope.bin", "-z", TOK512)


def test_not_a_regular_file(c_tools, tmp_path):
    # A directory; a FIFO must be refused at once, not wait in open() for a writer that never comes;
    # devices (endless /dev/zero, empty /dev/null) are refused before anything is read.
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo, "/dev/zero", "/dev/null"):
        err = expect(1, ["not a regular file", "export/export.py"], path, "-z", TOK512, "-n", "4")
        assert err.startswith(f"error: {path}: "), err


def test_vocab_mismatch(c_tools):
    # stories260K has 512 tokens; the Llama 2 tokenizer has 32000.
    expect(1, ["32000 tokens", "vocabulary is 512", "-z"], LEGACY, "-z", LLAMA_TOK)


def test_default_tokenizer_is_beside_the_model(c_tools, tmp_path):
    model = tmp_path / "m.bin"
    model.symlink_to(LEGACY)
    expect(1, [f"error: {tmp_path / 'tokenizer.model'}: cannot open the tokenizer: No such file", "-z"], model)


def test_missing_and_broken_tokenizer(c_tools, tmp_path):
    expect(1, [f"error: {tmp_path / 'none.model'}: cannot open the tokenizer: No such file or directory (hint: pass "
               "the model's tokenizer.model or tokenizer.json with -z)"], LEGACY, "-z", tmp_path / "none.model")
    expect(1, ["cannot load the SentencePiece tokenizer"], LEGACY, "-z", write(tmp_path, "bad.model", b"junk" * 9))


def test_tokenizer_path_not_a_tokenizer_file(c_tools, tmp_path):
    """Issue 47: a directory or an empty file given as the tokenizer showed the library's words
    (basic_filebuf::underflow, "unk is not defined") and no hint. Now the error says what the path
    is; a directory holding a tokenizer names it, and that hint runs. A FIFO is refused at once."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "with").mkdir()
    (tmp_path / "with" / "tokenizer.model").symlink_to(TOK512)
    hint = "(hint: pass the model's tokenizer.model or tokenizer.json with -z)"
    for path, words in [(tmp_path, f"is a directory, not a tokenizer file {hint}"),
                        (write(tmp_path, "empty.model", b""), f"is empty, not a tokenizer {hint}"),
                        ("/dev/null", f"is not a regular file {hint}"),
                        (tmp_path / "fifo", f"is not a regular file {hint}"),
                        (tmp_path / "with",
                         f"is a directory, not a tokenizer file (hint: -z {tmp_path}/with/tokenizer.model)")]:
        err = expect(1, [f"error: {path}: {words}\n"], LEGACY, "-z", path, "-n", "4")
        assert "basic_filebuf" not in err and "unk is not defined" not in err and err.count("\n") == 1, err
    code, out, err = run(LEGACY, "-z", f"{tmp_path}/with/tokenizer.model", "-n", "4", "-i", "Once")
    assert code == 0 and out.startswith("Once"), err


# Numbers, missing values and unknown options have their own tables below.
@pytest.mark.parametrize("args, needle", [
    (["--rope-scaling", "magic"], "invalid value 'magic' for --rope-scaling"),
    (["--rope-alpha", "4"], "--rope-alpha is used only by --rope-scaling ntk"),
    (["--rope-factor", "2"], "--rope-factor needs a scaling mode"),
    (["extra.bin"], "only one model file"),
    # Flags that would do nothing: refused, not ignored.
    (["--ppl-windows", "2"], "--ppl-windows limits a perplexity run and needs --ppl FILE"),
    (["--ppl", "text.txt", "-i", "Once"], "-i is for generating text, and --ppl does not generate"),
    (["--ppl", "text.txt", "--n-predict", "5"], "--n-predict is for generating text"),
    (["-t", "0", "--ppl", "text.txt"], "-t is for generating text"),
    (["-ctk", "q4_0"], "invalid KV cache type 'q4_0' for --cache-type-k (hint: f32 or f16; q8_0 needs a head_dim that is a multiple of 32)"),
    (["-ctv", "q8_0"], "--cache-type-v q8_0 needs a head_dim that is a multiple of 32, and this model's is 8 "
                       "(hint: f16)"),
    (["--cache-type-v", "F16"], "invalid KV cache type 'F16' for --cache-type-v"),
])
def test_usage_errors(c_tools, args, needle):
    err = expect(2, [needle], LEGACY, "-z", TOK512, *args)
    assert "see ./run --help" in err or needle.startswith(("--rope", "invalid KV", "--cache"))
    assert "usage:" not in err  # the error stays on screen: no 50 lines of --help after it


# ReRoPE's flags (stories260K: L = 512). Every combination that would do nothing or leave the trained
# range is refused with exit 2 and a message naming the flag and the fix.
@pytest.mark.parametrize("args, needle", [
    (["--rope-window", "64"], "--rope-window is used only by --rope-scaling rerope, leaky-rerope, selfextend and dca"),
    (["--rope-scaling", "ntk", "--rope-window", "64"], "--rope-window is used only by --rope-scaling rerope"),
    (["--rope-scaling", "rerope", "--rope-factor", "2"], "rerope has no --rope-factor"),
    (["--rope-scaling", "leaky-rerope", "--rope-factor", "1"], "leaky-rerope with --rope-factor 1 is plain RoPE"),
    (["--rope-scaling", "rerope", "--rope-window", "513"], "the window W must be in [1, L]"),
    (["--rope-scaling", "leaky-rerope", "--rope-window", "512"], "leaky-rerope and selfextend need a window W below L"),
    # Self-Extend (--grp-attn-n, --grp-attn-w / --rope-window) and dynamic YaRN
    (["--grp-attn-n", "4"], "--grp-attn-n is used only by --rope-scaling selfextend"),
    (["--rope-scaling", "selfextend", "--rope-factor", "4"], "selfextend has no --rope-factor: its reach is its group size G"),
    (["--rope-scaling", "selfextend", "-gaw", "512"], "leaky-rerope and selfextend need a window W below L"),
    (["--rope-scaling", "dynamic-yarn", "--rope-factor", "4"], "dynamic-yarn has no --rope-factor"),
    # dual chunk attention: a chunk size below L, a local window below it
    (["--dca-chunk", "256"], "--dca-chunk is used only by --rope-scaling dca"),
    (["--rope-scaling", "dca", "--rope-factor", "2"], "dca has no --rope-factor"),
    (["--rope-scaling", "dca", "--dca-chunk", "512"], "dca needs a local window w >= 1 below its chunk size S"),
    (["--rope-scaling", "dca", "--dca-chunk", "64", "--rope-window", "64"], "dca needs a local window w >= 1 below"),
])
def test_rerope_usage_errors(c_tools, args, needle):
    expect(2, [needle], LEGACY, "-z", TOK512, "--ctx", "2048", *args)


def test_selfextend_capacity_and_banner(c_tools):
    # stories260K, L = 512, W = 128: the default G covers --ctx 4096 ((512 - 128) 11 + 128 = 4352); a G
    # given too small warns with the capacity and the G that would cover it; the banner names W and G.
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "4096", "-n", "3", "--rope-scaling", "selfextend")
    assert code == 0 and "warning" not in err, err
    assert "neighbour window W = 128, group G = 11" in err and "capacity (L - W) G + W = 4352" in err, err
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "4096", "-n", "3", "--rope-scaling", "selfextend", "-gan", "4")
    assert code == 0, err
    assert ("warning: selfextend with --grp-attn-n 4 covers 1664 positions, fewer than --ctx 4096" in err
            and "(hint: --grp-attn-n 11" in err), err


def test_rerope_edges_and_banner(c_tools):
    # W = L is allowed for rerope (the far path then starts at the last trained distance), W = 1 too
    # (every earlier key at distance 1); the banner names the mode, W and K.
    for args, banner in ((["--rope-scaling", "rerope", "--rope-window", "512"], "rope: rerope, base 10000, window W = 512"),
                         (["--rope-scaling", "rerope", "--rope-window", "1"], "window W = 1 (distances past W scored as W)"),
                         (["--rope-scaling", "leaky-rerope"], "window W = 128, K = 15 (distance r past W scored as W + (r - W) / K)")):
        code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "5888", "-n", "3", *args)
        assert code == 0 and banner in err, err


def test_no_model(c_tools):
    expect(2, ["no model file"])


def test_help(c_tools):
    code, out, err = run("--help")
    assert code == 0 and "--rope-scaling" in out and "--ctx" in out
    for alias in ("--ctx-size", "--rope-scale", "--rope-freq-base", "linear", "--n-predict", "--batch-size"):
        assert alias in out, alias


@pytest.mark.parametrize("flag, value", [("--rope-window", "64"), ("--rope-alpha", "4"), ("--grp-attn-n", "4"),
                                         ("--dca-chunk", "256")])
def test_help_names_every_mode_of_a_flag(c_tools, flag, value):
    """Issue 47: --help for --rope-window named rerope, leaky-rerope and selfextend, and the parser
    also takes it for dca. Each mode-only flag's help names every mode its refusal names."""
    err = expect(2, [f"{flag} is used only by --rope-scaling "], LEGACY, "-z", TOK512, flag, value)
    modes = re.split(r", | and ", re.search(rf"{flag} is used only by --rope-scaling (.*)", err)[1].strip())
    _, out, _ = run("--help")
    first = re.search(rf"^ +{flag} \S+ +(.*)$", out, re.M)[1]
    for mode in modes:
        assert re.search(rf"(^|[ ,]){mode}[:, ]", first), (mode, first)


def test_help_ranges_are_the_parsers(c_tools):
    """Every range --help shows, [lo, hi] or (lo, hi], is the one the parser applies: the bounds
    themselves pass the parser (the run then stops at the missing model, exit 1), the values just
    outside are usage errors (exit 2). Errors say "see --help for the allowed range"."""
    code, out, _ = run("--help")
    ranges = {}
    for line in out.splitlines():
        m = re.search(r"^\s+(?:-\w, )?(--[\w-]+).*?([\[(])([\d.e+-]+), ([\d.e+-]+)\]", line)
        if m:
            ranges[m[1]] = (m[2] == "(", m[3], m[4])
    assert set(ranges) == {"--n-predict", "--keep", "--temp", "--top-p", "--seed", "--ctx", "--threads",
                           "--batch-size", "--ppl-windows", "--rope-factor", "--rope-alpha", "--rope-window", "--grp-attn-n",
                           "--dca-chunk",
                           "--top-k", "--min-p", "--repeat-penalty", "--repeat-last-n"}, ranges
    assert "RoPE base > 0" in out
    ranges["--rope-base"] = (True, "0", "1e300")
    for flag, (open_lo, lo, hi) in ranges.items():
        extra = ["--ppl", "t.txt"] if flag == "--ppl-windows" else []
        real = "." in lo + hi or "e" in lo + hi
        below = lo if open_lo else (repr(float(lo) - 1e-9) if real else str(int(lo) - 1))
        above = repr(float(hi) * (1 + 1e-9)) if real else str(int(hi) + 1)
        inside = [v for v in (lo, hi) if not (open_lo and v == lo)] + ([repr(float(lo) + 1e-9)] if open_lo else [])
        for v in inside:
            c, _, err = run("/nonexistent/model.bin", flag, v, *extra)
            assert c == 1 and "cannot open model" in err, (flag, v, err)
        for v in (below, above):
            c, _, err = run("/nonexistent/model.bin", flag, v, *extra)
            assert c == 2 and f"invalid value '{v}' for {flag}" in err, (flag, v, err)


def test_warnings(c_tools):
    """Runs that go ahead but probably not as meant say so on stderr; each with a run that must not warn."""
    def stderr_of(*args):
        code, _, err = run(LEGACY, "-z", TOK512, "-n", "0", *args)
        assert code == 0, err
        return err
    # Past L with no scaling: the hint names every mode.
    assert "(hint: --rope-scaling pi|ntk|dynamic|yarn|llama3|rerope|leaky-rerope|selfextend|dynamic-yarn|dca)" in stderr_of("--ctx", "1024")
    assert "warning" not in stderr_of("--ctx", "512")
    # A factor with s * L < ctx, in every mode that has one: the positions past s * L are
    # extrapolated, not interpolated. dynamic's factor grows with the length and never warns.
    for mode in ("pi", "ntk", "yarn", "llama3"):
        err = stderr_of("--ctx", "2048", "--rope-scaling", mode, "--rope-factor", "3")
        assert f"warning: {mode} with --rope-factor 3 covers 1536 positions, fewer than --ctx 2048" in err, err
        assert "hint: --rope-factor 4" in err
        assert "warning" not in stderr_of("--ctx", "2048", "--rope-scaling", mode, "--rope-factor", "4")
        assert "warning" not in stderr_of("--ctx", "2048", "--rope-scaling", mode)
    assert "warning" not in stderr_of("--ctx", "2048", "--rope-scaling", "dynamic", "--rope-factor", "1")
    # leaky-rerope: distances up to W + K (L - W) land inside L. W 128, K 2: 128 + 2 * 384 = 896.
    err = stderr_of("--ctx", "2048", "--rope-scaling", "leaky-rerope", "--rope-window", "128", "--rope-factor", "2")
    assert "warning: leaky-rerope with --rope-factor 2 covers 896 positions, fewer than --ctx 2048" in err, err
    assert "hint: --rope-factor 5" in err  # (2048 - 128) / (512 - 128)
    assert "warning" not in stderr_of("--ctx", "2048", "--rope-scaling", "leaky-rerope", "--rope-window", "128")


def test_prompt_longer_than_context(c_tools):
    expect(1, ["longer than the context of 8"], LEGACY, "-z", TOK512, "--ctx", "8", "-i", "Once upon a time " * 10)


def test_context_too_large_for_memory(c_tools, tmp_path):
    # 2^24 positions: keys, values and dynamic's un-rotated keys are 32 GiB for this tiny model.
    expect(1, ["needs", "GiB", "--ctx"], LEGACY, "-z", TOK512, "--ctx", str(1 << 24), "--rope-scaling", "dynamic")
    # 2 layers of 4 kv heads of 64 (kv_dim 256): 4 KiB of f32 keys and values per position, 64 GiB at
    # --ctx 2^24 with no RoPE scaling (32 GiB in f16), more than this machine (or CI's) has.
    make_checkpoint(tmp_path / "hf", dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=64,
                    vocab_size=512, max_pos=64)
    assert run_export(tmp_path / "hf", tmp_path / "m.bin").returncode == 0
    expect(1, ["--ctx 16777216 needs", "GiB", "hint: a smaller --ctx, or -ctk f16 -ctv f16"], tmp_path / "m.bin",
           "-z", TOK512, "--ctx", str(1 << 24))
    # Already in f16 (16 GiB, still too much): the hint no longer offers f16.
    err = expect(1, ["--ctx 16777216 needs", "hint: a smaller --ctx)"], tmp_path / "m.bin", "-z", TOK512,
                 "--ctx", str(1 << 24), "-ctk", "f16", "-ctv", "f16")
    assert "-ctk f16" not in err


# --- Strict numbers: every numeric flag, every way a number can be wrong (exit 2, usage) -----------

@pytest.mark.parametrize("flag, value", [
    ("-n", "12abc"), ("-n", "-2"), ("-t", "nan"), ("-t", "-0.5"), ("-p", "1.5"), ("-p", "0"), ("--ctx", "0"),
    ("--ctx", "99999999999999999999"), ("--threads", "0"), ("--rope-factor", "0.5"), ("--rope-base", "0"),
    ("-n", "1.5"), ("-n", " 5"), ("-n", "5 "), ("-n", ""), ("-n", "0x10"), ("-n", "2147483648"), ("-n", "1e3"),
    ("-t", "inf"), ("-t", "1e999"), ("-t", "1x"), ("-t", "-inf"), ("-t", " 1"),
    ("-t", "0x10"), ("--temp", "0x1p4"), ("-t", "infinity"), ("-p", "0x.8"), ("--min-p", "0X0"),
    ("--rope-base", "0x10"),
    ("--rope-factor", "0x2"), ("--repeat-penalty", "nan"), ("--top-k", "0x10"), ("-s", "0x10"),
    ("-p", "nan"), ("-p", "-0.1"), ("-p", "-0"), ("-p", "1.0000001"), ("-p", "0.5.5"),
    ("-s", "-2"), ("-s", "99999999999999999999"), ("-s", "12seven"),
    ("--ctx", "-5"), ("--ctx", "1e3"), ("--ctx", "16777217"), ("--ctx", "4096k"),
    ("--threads", "-1"), ("--threads", "2.5"), ("--threads", "1025"),
    ("-b", "0"), ("-b", "-64"), ("--ppl-windows", "0"),
    ("--rope-factor", "nan"), ("--rope-factor", "0.999"), ("--rope-factor", "inf"),
    ("--rope-base", "-1"), ("--rope-base", "nan"), ("--rope-base", "inf"), ("--rope-base", "1e-400"),
    ("--rope-alpha", "0.5"), ("--rope-alpha", "nan"),
    ("--rope-window", "0"), ("--rope-window", "-3"), ("--rope-window", "1.5"), ("--rope-window", "16777217"),
])
def test_strict_numbers(c_tools, flag, value):
    expect(2, [f"invalid value '{value}' for {flag}: ", "see ./run --help"], LEGACY, "-z", TOK512, flag, value)


@pytest.mark.parametrize("flag", ["-i", "-z", "-n", "-t", "-p", "-s", "--ctx", "--threads", "-b", "--ppl",
                                  "--ppl-windows", "--rope-scaling", "--rope-factor", "--rope-base", "--rope-alpha",
                                  "--rope-window"])
def test_missing_value(c_tools, flag):
    expect(2, [f"{flag} needs a value", "see ./run --help"], LEGACY, "-z", TOK512, flag)


@pytest.mark.parametrize("arg", ["--bogus", "-x", "--", "-n=5", "--ctx-sizes=64", "--temp0", "-nan", "--=pi", "--bogus="])
def test_unknown_spellings(c_tools, arg):
    expect(2, [f"unknown option '{arg.split('=')[0] if arg.startswith('--') else arg}'", "see ./run --help"], LEGACY,
           "-z", TOK512, arg)


def test_edge_values_accepted(c_tools):
    # The boundaries themselves are allowed: temperature 0, top-p 1, one token of context, no new
    # tokens, one thread, factor 1, a tiny base, the largest seed.
    code, out, err = run(LEGACY, "-z", TOK512, "-t", "0", "-p", "1", "--ctx", "1", "-n", "0", "--threads", "1",
                         "-s", "9000000000000000000")
    assert code == 0, err
    code, out, err = run(LEGACY, "-z", TOK512, "-n", "4", "--rope-scaling", "pi", "--rope-factor", "1",
                         "--rope-base", "1e-3", "-t", "1e-30", "-p", "1e-30")
    assert code == 0, err


# --- Prompts -------------------------------------------------------------------------------------

def test_prompt_fills_the_context_exactly(c_tools):
    # BOS alone is one token: --ctx 1 holds it, one token is generated, then the context is full and
    # a context shift has nothing to drop. From --ctx 2 on the default --keep (ctx - 2 below 6)
    # leaves a shift something to drop, and generation goes on.
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "1", "-n", "5", "-t", "0")
    assert code == 0, err
    assert "stopped: context full (hint: a larger --ctx: a context shift needs 2 positions)" in err
    for ctx in range(2, 7):
        code, out, err = run(LEGACY, "-z", TOK512, "--ctx", str(ctx), "-n", "12", "-t", "0")
        assert code == 0 and "generation: 12 tokens" in err and "context full" not in err, (ctx, err)
        assert f"(kept {min(4, ctx - 2)}, dropped" in err, err


@pytest.mark.parametrize("args", [[], ["--rope-scaling", "dynamic"], ["--rope-scaling", "yarn", "-ctk", "f16"],
                                  ["--rope-scaling", "rerope", "--rope-window", "16"],
                                  ["--rope-scaling", "leaky-rerope", "--rope-window", "16", "-ctk", "f16"]])
def test_generation_runs_past_the_context(c_tools, args):
    # Ten times --ctx tokens, greedy: the context fills and shifts again and again (README, "Past the
    # end of the context"); the summary line counts the shifts.
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "48", "-n", "480", "-t", "0", "-i", "Once upon a time", *args)
    assert code == 0, err
    assert "generation: 480 tokens, 479 decode steps" in err, err
    assert "context shifts: 20 (kept 4, dropped 22 each)" in err, err


def test_attn_logn_is_a_switch(c_tools):
    # --attn-logn takes no value: the next argument is the next flag; the banner says what it does.
    code, out, err = run(LEGACY, "-z", TOK512, "--attn-logn", "-n", "3", "--ctx", "1024", "--rope-scaling", "ntk")
    assert code == 0, err
    assert "log-n: queries past L times ln(m + 1) / ln(L)" in err, err
    code, out, err = run(LEGACY, "-z", TOK512, "-n", "3")
    assert "log-n" not in err, err


def test_context_shift_without_sinks(c_tools):
    # --keep 0 drops BOS too: it runs, but this model then soon ends its text (StreamingLLM's point:
    # the first tokens are where attention rests).
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "48", "-n", "480", "-t", "0", "-i", "Once upon a time",
                         "--keep", "0")
    assert code == 0, err
    assert re.search(r"context shifts: \d+ \(kept 0, dropped 24 each\)", err), err


def test_invalid_utf8_prompt(c_tools):
    # Bytes that are not UTF-8 (a lone continuation byte, a truncated sequence, an overlong '/', a
    # surrogate): SentencePiece encodes them (byte fallback) and the run goes on.
    prompt = b"Tom \xff\xfe said \xc3 \xe2\x82 \xc0\xaf \xed\xa0\x80 hi"
    proc = subprocess.run([str(REPO / "run"), str(LEGACY), "-z", str(TOK512), "-i", prompt, "-n", "8", "-t", "0"],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout.startswith(b"Tom ") and b" said " in proc.stdout


def test_empty_prompt_without_bos(c_tools, tmp_path):
    # tok512 with <s> turned from a control piece (type 3) into a user-defined one (type 4): the
    # tokenizer then has no BOS, and an empty prompt is zero tokens; there is nothing to start from.
    data = bytearray(TOK512.read_bytes())
    at = data.index(b"\x0a\x03<s>")
    type_field = data.index(b"\x18\x03", at)
    assert type_field - at < 16
    data[type_field + 1] = 4
    nobos = write(tmp_path, "nobos.model", bytes(data))
    expect(1, ["prompt is empty", "no BOS token", "hint: give a prompt with -i"], LEGACY, "-z", nobos)
    code, out, err = run(LEGACY, "-z", nobos, "-i", "Once", "-n", "4", "-t", "0")
    assert code == 0 and out.startswith("Once"), err


# --- Perplexity input ----------------------------------------------------------------------------

def test_ppl_file_problems(c_tools, tmp_path):
    expect(1, ["error: ", "nope.txt: cannot read", "No such file"], LEGACY, "-z", TOK512,
           "--ppl", tmp_path / "nope.txt")
    expect(1, ["cannot read", "Is a directory"], LEGACY, "-z", TOK512, "--ppl", tmp_path)
    # Issue 47: an empty file was "1 tokens" (its BOS), and --ctx 1 "less than one window" of any text.
    for empty in (write(tmp_path, "empty.txt", b""), "/dev/null"):
        expect(1, [f"error: {empty} is empty: there is no text to score (hint: give --ppl a file with text in it)"],
               LEGACY, "-z", TOK512, "--ppl", empty, "--ctx", "64")
    short = write(tmp_path, "one.txt", b"Once upon a time")
    err = expect(2, ["error: --ppl scores each token of a window from those before it, and a window of --ctx 1 has "
                     "none to score (hint: --ctx 2 or more)"], LEGACY, "-z", TOK512, "--ppl", short, "--ctx", "1")
    assert "model:" not in err  # refused before the model loads
    expect(1, [f"error: {short} is 5 tokens, less than one window of --ctx 64 (hint: --ctx 5, or a longer text)"],
           LEGACY, "-z", TOK512, "--ppl", short, "--ctx", "64")
    for ctx in ("2", "5"):  # the hints run: the smallest window, and the text's own length
        code, out, err = run(LEGACY, "-z", TOK512, "--ppl", short, "--ctx", ctx)
        assert code == 0 and out.startswith("perplexity: "), err


def test_ppl_binary_text(c_tools, tmp_path):
    # Not text at all: random bytes, NULs, invalid UTF-8. Still tokens, still a perplexity.
    junk = bytes((i * 7919 + 13) % 256 for i in range(20000))
    code, out, err = run(LEGACY, "-z", TOK512, "--ppl", write(tmp_path, "junk.bin", junk), "--ctx", "128",
                         "--ppl-windows", "2")
    assert code == 0, err
    assert out.startswith("perplexity: ")


def test_prompt_file(c_tools, tmp_path):
    """-f FILE: its bytes are the prompt, the same as -i with that text; -i and -f together, a
    missing file, and -f with --ppl are refused."""
    prompt = write(tmp_path, "prompt.txt", "Once upon a time, Lily\n".encode())
    code, from_file, _ = run(LEGACY, "-z", TOK512, "-t", "0", "-n", "12", "-f", prompt)
    code2, from_flag, _ = run(LEGACY, "-z", TOK512, "-t", "0", "-n", "12", "-i", "Once upon a time, Lily\n")
    assert code == code2 == 0 and from_file == from_flag and from_file.startswith("Once upon a time, Lily\n")
    expect(2, ["-i and -f both give the prompt"], LEGACY, "-z", TOK512, "-i", "x", "-f", prompt)
    expect(1, [f"{tmp_path / 'nope.txt'}: cannot read the prompt file", "-f"], LEGACY, "-z", TOK512, "-f",
           tmp_path / "nope.txt")
    expect(2, ["-f is for generating text"], LEGACY, "-z", TOK512, "-f", prompt, "--ppl", prompt)
    # An empty file is said to be empty, and runs as no prompt does.
    code, out, err = run(LEGACY, "-z", TOK512, "-t", "0", "-n", "12", "-f", "/dev/null")
    code2, none, _ = run(LEGACY, "-z", TOK512, "-t", "0", "-n", "12")
    assert code == code2 == 0 and out == none, err
    assert "warning: -f /dev/null is empty: the text starts after BOS, as with no prompt" in err


def test_bad_tokenizer_json(c_tools, tmp_path):
    """A file whose first byte is '{' is read as tokenizer.json, and refused with the reason."""
    bad = write(tmp_path, "tokenizer.json", b'{"model": {"type": "Unigram"}}')
    expect(1, [f"error: {bad}: model type Unigram is not implemented"], LEGACY, "-z", bad)


# tokenizer_config.json beside the tokenizer, broken: (its bytes, or None for a directory of that
# name; what the error says after the file's path).
BROKEN_CONFIGS = {
    "not-json": (b"{broken", "not valid JSON near byte"),
    "add_bos_token-yes": (b'{"add_bos_token": "yes"}', 'add_bos_token is "yes", and must be true or false (hint: '
                          '"add_bos_token": true or false, or leave the key out'),
    "bos_token-number": (b'{"bos_token": 1}', "bos_token is 1, and must be a token's text"),
    "with-class": (b'{"add_eos_token": 1, "tokenizer_class": "GPT2Tokenizer"}', "add_eos_token is 1, and must be"),
    "trailing-text": (b'{"add_bos_token": false} }', "not valid JSON near byte 25"),
    "empty": (b"", "is empty (hint: "),
    "directory": (None, "cannot read it: Is a directory (hint: "),
}
MODES = {"generate": ["-n", "4"], "chat": ["-m", "chat"], "chat-template": ["-m", "chat", "--chat-template", "llama2"],
         "ppl": ["--ppl", TEXT, "--ctx", "64", "--ppl-windows", "1"]}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", list(BROKEN_CONFIGS))
def test_broken_tokenizer_config(c_tools, tmp_path, case, mode):
    """Issue 47: a broken tokenizer_config.json was ignored when generating (BOS decided as if it
    were not there) and an error in chat. Now the same error in every mode, naming the file, the key
    and the fix, exit 1, before anything runs."""
    data, words = BROKEN_CONFIGS[case]
    (tmp_path / "tokenizer.model").symlink_to(TOK512)
    config = tmp_path / "tokenizer_config.json"
    config.mkdir() if data is None else config.write_bytes(data)
    proc = subprocess.run([str(REPO / "run"), str(LEGACY), "-z", str(tmp_path / "tokenizer.model"),
                           *map(str, MODES[mode])],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(f"error: {config}: {words}") and proc.stderr.count("\n") == 1, proc.stderr


def test_broken_tokenizer_config_hints_work(c_tools, tmp_path):
    """Each fix the errors name runs: the key true or false, the key left out, the file moved away."""
    tok = tmp_path / "tokenizer.model"
    tok.symlink_to(TOK512)
    config = tmp_path / "tokenizer_config.json"
    for text, bos in [(b'{"add_bos_token": false}', "no BOS (tokenizer_config.json add_bos_token)"),
                      (b'{"add_bos_token": true}', "BOS 1 first (tokenizer_config.json add_bos_token)"),
                      (b'{"bos_token": null}', "no BOS"), (b"{}", "BOS 1 first (SentencePiece's default)"),
                      (b'{"add_bos_token": null}', "BOS 1 first (SentencePiece's default)"),  # null: not set
                      (None, "BOS 1 first (SentencePiece's default)")]:
        if text is None:
            config.unlink()
        else:
            config.write_bytes(text)
        code, out, err = run(LEGACY, "-z", tok, "-i", "Once", "-n", "4", "-t", "0")
        assert code == 0 and out.startswith("Once") and bos in err, err
