"""Bad input to ./run: every case gets a clear message on stderr and the right exit status
(1 for a runtime or file problem, 2 for a usage error), never a crash or a hang."""
import struct
import subprocess

import pytest

from conftest import REPO, SHARED, run_export

LEGACY = SHARED / "data/models/stories260K.bin"
TOK512 = SHARED / "data/models/tok512.model"
LLAMA_TOK = SHARED / "data/models/tokenizer.model"


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
    assert run_export(SHARED / "data/models/stories260K-hf", out).returncode == 0
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
