"""Bad input to ./run: every case gets a clear message on stderr and the right exit status
(1 for a runtime or file problem, 2 for a usage error), never a crash or a hang."""
import struct
import subprocess

import pytest

from conftest import LLAMA_TOK, REPO, STORIES_BIN, STORIES_HF, TOK512, run_export

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


@pytest.fixture(scope="module")
def exported(tmp_path_factory, c_tools):
    out = tmp_path_factory.mktemp("err") / "model.bin"
    assert run_export(STORIES_HF, out).returncode == 0
    return out


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_missing_file(c_tools, tmp_path):
    expect(1, ["cannot open model", "No such file"], tmp_path / "nope.bin", "-z", TOK512)


def test_directory(c_tools, tmp_path):
    expect(1, ["not a regular file", "export/export.py"], tmp_path, "-z", TOK512)


def test_empty_and_tiny(c_tools, tmp_path):
    expect(1, ["too short"], write(tmp_path, "empty.bin", b""), "-z", TOK512)
    expect(1, ["too short"], write(tmp_path, "three.bin", b"abc"), "-z", TOK512)


def test_garbage(c_tools, tmp_path):
    garbage = bytes((i * 131 + 7) % 251 for i in range(100000))
    expect(1, ["not a model file", "export/export.py"], write(tmp_path, "garbage.bin", garbage), "-z", TOK512)


def test_text_file(c_tools, tmp_path):
    expect(1, ["not a model file"], write(tmp_path, "t.bin", b"Once upon a time\n" * 100), "-z", TOK512)


def test_wrong_magic(c_tools, tmp_path, exported):
    data = bytearray(exported.read_bytes())
    data[0:4] = b"GGUF"
    expect(1, ["not a model file"], write(tmp_path, "gguf.bin", bytes(data)), "-z", TOK512)
    data[0:4] = b"ak42"
    expect(1, ["llama2.c version 1/2"], write(tmp_path, "ak42.bin", bytes(data)), "-z", TOK512)


def test_unknown_version(c_tools, tmp_path, exported):
    data = bytearray(exported.read_bytes())
    data[4:8] = struct.pack("<I", 7)
    expect(1, ["version 7", "export"], write(tmp_path, "v7.bin", bytes(data)), "-z", TOK512)


def test_truncated_ours(c_tools, tmp_path, exported):
    data = exported.read_bytes()
    for cut in (100, 256, len(data) // 2, len(data) - 1):
        expect(1, ["truncated"], write(tmp_path, f"cut{cut}.bin", data[:cut]), "-z", TOK512)


def test_extra_bytes_ours(c_tools, tmp_path, exported):
    expect(1, ["extra bytes"], write(tmp_path, "long.bin", exported.read_bytes() + b"\0" * 64), "-z", TOK512)


def test_bad_header_field(c_tools, tmp_path, exported):
    data = bytearray(exported.read_bytes())
    data[24:28] = struct.pack("<i", 3)  # n_kv_heads 3 does not divide n_heads 8
    expect(1, ["bad header", "n_kv_heads"], write(tmp_path, "kv3.bin", bytes(data)), "-z", TOK512)


def test_truncated_legacy(c_tools, tmp_path):
    data = LEGACY.read_bytes()
    expect(1, ["not a model file"], write(tmp_path, "legacy_cut.bin", data[: len(data) - 4]), "-z", TOK512)


def test_vocab_mismatch(c_tools):
    # stories260K has 512 tokens; the Llama 2 tokenizer has 32000.
    expect(1, ["32000 tokens", "vocabulary is 512", "-z"], LEGACY, "-z", LLAMA_TOK)


def test_default_tokenizer_is_beside_the_model(c_tools, tmp_path):
    model = tmp_path / "m.bin"
    model.symlink_to(LEGACY)
    expect(1, ["tokenizer.model", "cannot load the SentencePiece tokenizer", "-z"], model)


def test_missing_and_broken_tokenizer(c_tools, tmp_path):
    expect(1, ["cannot load the SentencePiece tokenizer"], LEGACY, "-z", tmp_path / "none.model")
    expect(1, ["cannot load the SentencePiece tokenizer"], LEGACY, "-z", write(tmp_path, "bad.model", b"junk" * 9))


@pytest.mark.parametrize("args, needle", [
    (["--bogus"], "unknown option '--bogus'"),
    (["-x", "1"], "unknown option '-x'"),
    (["-n"], "-n needs a value"),
    (["-n", "12abc"], "invalid value '12abc' for -n"),
    (["-n", "-1"], "invalid value '-1' for -n"),
    (["-t", "nan"], "invalid value 'nan' for -t"),
    (["-t", "-0.5"], "invalid value '-0.5' for -t"),
    (["-p", "1.5"], "invalid value '1.5' for -p"),
    (["-p", "0"], "invalid value '0' for -p"),
    (["--ctx", "0"], "invalid value '0' for --ctx"),
    (["--ctx", "99999999999999999999"], "invalid value"),
    (["--threads", "0"], "invalid value '0' for --threads"),
    (["--rope-scaling", "magic"], "invalid value 'magic' for --rope-scaling"),
    (["--rope-factor", "0.5"], "invalid value '0.5' for --rope-factor"),
    (["--rope-base", "0"], "invalid value '0' for --rope-base"),
    (["--rope-alpha", "4"], "--rope-alpha is used only by --rope-scaling ntk"),
    (["--rope-factor", "2"], "--rope-factor needs a scaling mode"),
    (["extra.bin"], "only one model file"),
])
def test_usage_errors(c_tools, args, needle):
    err = expect(2, [needle], LEGACY, "-z", TOK512, *args)
    assert "usage" in err or needle.startswith("--rope")


def test_no_model(c_tools):
    expect(2, ["no model file"])


def test_help(c_tools):
    code, out, err = run("--help")
    assert code == 0 and "--rope-scaling" in out and "--ctx" in out


def test_prompt_longer_than_context(c_tools):
    expect(1, ["longer than the context of 8"], LEGACY, "-z", TOK512, "--ctx", "8", "-i", "Once upon a time " * 10)


def test_context_too_large_for_memory(c_tools):
    # 2^24 positions: keys, values and dynamic's un-rotated keys are 32 GiB for this tiny model.
    expect(1, ["needs", "GiB", "--ctx"], LEGACY, "-z", TOK512, "--ctx", str(1 << 24), "--rope-scaling", "dynamic")


# --- Strict numbers: every numeric flag, every way a number can be wrong (exit 2, usage) -----------

@pytest.mark.parametrize("flag, value", [
    ("-n", "1.5"), ("-n", " 5"), ("-n", "5 "), ("-n", ""), ("-n", "0x10"), ("-n", "2147483648"), ("-n", "1e3"),
    ("-t", "inf"), ("-t", "1e999"), ("-t", "1x"), ("-t", "-inf"), ("-t", " 1"),
    ("-p", "nan"), ("-p", "-0.1"), ("-p", "-0"), ("-p", "1.0000001"), ("-p", "0.5.5"),
    ("-s", "-1"), ("-s", "99999999999999999999"), ("-s", "12seven"),
    ("--ctx", "-5"), ("--ctx", "1e3"), ("--ctx", "16777217"), ("--ctx", "4096k"),
    ("--threads", "-1"), ("--threads", "2.5"), ("--threads", "1025"),
    ("-b", "0"), ("-b", "-64"), ("--ppl-windows", "0"),
    ("--rope-factor", "nan"), ("--rope-factor", "0.999"), ("--rope-factor", "inf"),
    ("--rope-base", "-1"), ("--rope-base", "nan"), ("--rope-base", "inf"), ("--rope-base", "1e-400"),
    ("--rope-alpha", "0.5"), ("--rope-alpha", "nan"),
])
def test_strict_numbers(c_tools, flag, value):
    expect(2, [f"invalid value '{value}' for {flag}", "usage: run MODEL.bin"], LEGACY, "-z", TOK512, flag, value)


@pytest.mark.parametrize("flag", ["-i", "-z", "-n", "-t", "-p", "-s", "--ctx", "--threads", "-b", "--ppl",
                                  "--ppl-windows", "--rope-scaling", "--rope-factor", "--rope-base", "--rope-alpha"])
def test_missing_value(c_tools, flag):
    expect(2, [f"{flag} needs a value", "usage: run MODEL.bin"], LEGACY, "-z", TOK512, flag)


@pytest.mark.parametrize("arg", ["--", "-n=5", "--ctx=64", "--temp0", "-nan", "--rope-scaling=pi"])
def test_unknown_spellings(c_tools, arg):
    expect(2, [f"unknown option '{arg}'", "usage: run MODEL.bin"], LEGACY, "-z", TOK512, arg)


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
    # BOS alone is one token: --ctx 1 holds it, one token is generated, then the context is full.
    code, out, err = run(LEGACY, "-z", TOK512, "--ctx", "1", "-n", "5", "-t", "0")
    assert code == 0, err
    assert "stopped: context full" in err


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
    expect(1, ["empty.txt is 1 tokens, less than one window of --ctx 64", "hint: a smaller --ctx"], LEGACY,
           "-z", TOK512, "--ppl", write(tmp_path, "empty.txt", b""), "--ctx", "64")
    expect(1, ["less than one window of --ctx 1"], LEGACY, "-z", TOK512,
           "--ppl", write(tmp_path, "one.txt", b"Once upon a time"), "--ctx", "1")


def test_ppl_binary_text(c_tools, tmp_path):
    # Not text at all: random bytes, NULs, invalid UTF-8. Still tokens, still a perplexity.
    junk = bytes((i * 7919 + 13) % 256 for i in range(20000))
    code, out, err = run(LEGACY, "-z", TOK512, "--ppl", write(tmp_path, "junk.bin", junk), "--ctx", "128",
                         "--ppl-windows", "2")
    assert code == 0, err
    assert out.startswith("perplexity: ")
