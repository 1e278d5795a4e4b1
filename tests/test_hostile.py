"""Damaged and adversarial model files given to ./run: whatever the bytes, a clear refusal (exit 1,
`error: <file>: <what is wrong> (hint: ...)` on stderr, nothing on stdout) or a normal run; never a
crash, a hang, a read outside the file or an absurd allocation.

  - not a model file at all: empty, a few bytes, garbage, text, another format's magic;
  - every header field out of its range, one at a time, in our format and in llama2.c's legacy one
    (the loader's checks are model.c check_shape, read_header_ours/legacy, rope.c rope_params_check);
  - the largest header the checks allow, describing petabytes: refused by its size, no overflow;
  - a file cut anywhere or too long, in every dtype;
  - weights that are all zero, NaN or infinity: the sampler and the forward pass must cope;
  - a few hundred random mutations of valid files, each run through ./run;
  - the fuzzers' checked-in seed corpus (fuzz/corpus/model): the valid seeds load and run, the
    broken ones are refused.
`make sanitize` runs this file against an AddressSanitizer + UBSan build, which turns a silent
out-of-bounds read here into a failure.
What this is not: the user's mistakes (a bad flag, a path that is no file, the wrong tokenizer, a
--ctx too large for memory); tests/test_errors.py has those.
"""
import math
import random
import re
import struct
import subprocess

import pytest

from conftest import REPO, STORIES_BIN, TEXT, TOK512, TOOLS, run_export
from lrun.hf_random import make_checkpoint
from lrun.modelfile import (DTYPES, LEGACY_FIELDS, LEGACY_HEADER, R16, R16_BLOCK_BYTES, bf16_rows, file_size,
                            layout, q8_0_rows, read_header, set_field)

LEGACY = STORIES_BIN
CORPUS = REPO / "fuzz/corpus/model"

# A tiny model that still has the 512-token vocabulary of tok512, so ./run accepts it.
TINY = dict(dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512, max_pos=64)


def run(*args, timeout=60):
    proc = subprocess.run([str(REPO / "run"), *map(str, args)], capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def refused(path, needles, *extra):
    """./run path must exit 1 with `error: path: ...` and every needle on stderr, nothing on stdout."""
    code, out, err = run(path, "-z", TOK512, "-n", "4", *extra)
    assert code == 1, f"exit {code}, wanted 1; stderr: {err}"
    assert err.startswith(f"error: {path}: "), err
    for needle in needles:
        assert needle in err, f"{needle!r} not in stderr: {err}"
    assert out == ""
    return err


def runs(path, *extra):
    code, out, err = run(path, "-z", TOK512, *extra)
    assert code == 0, f"exit {code}; stderr: {err}"
    return out, err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, c_tools):
    """{dtype: path} of the tiny model exported as f32, f16, q8_0 (in 16-row groups: q8_0_r16), q4_0 and
    bf16 (in 16-row groups: bf16_r16); and q8_0_rows, bf16_rows: the q8_0 and bf16 ones in the first
    layouts (dtypes 2 and 4), as older exporters wrote them."""
    base = tmp_path_factory.mktemp("hostile")
    make_checkpoint(base / "hf", **TINY)
    out = {}
    for dtype in ("f32", "f16", "q8_0", "q4_0", "bf16"):
        out[dtype] = base / f"tiny-{dtype}.bin"
        proc = run_export(base / "hf", out[dtype], "--dtype", dtype)
        assert proc.returncode == 0, proc.stderr
    out["q8_0_rows"] = base / "tiny-q8_0_rows.bin"
    out["q8_0_rows"].write_bytes(q8_0_rows(out["q8_0"].read_bytes()))
    out["bf16_rows"] = base / "tiny-bf16_rows.bin"
    out["bf16_rows"].write_bytes(bf16_rows(out["bf16"].read_bytes()))
    return out


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


# --- Not a model file at all ------------------------------------------------------------------------

def test_empty_and_tiny(tmp_path, c_tools):
    refused(write(tmp_path, "empty.bin", b""), ["too short"])
    refused(write(tmp_path, "three.bin", b"abc"), ["too short"])


def test_garbage(tmp_path, c_tools):
    garbage = bytes((i * 131 + 7) % 251 for i in range(100000))
    refused(write(tmp_path, "garbage.bin", garbage), ["not a model file", "export/export.py"])


def test_text_file(tmp_path, c_tools):
    refused(write(tmp_path, "t.bin", b"Once upon a time\n" * 100), ["not a model file"])


def test_wrong_magic(tmp_path, tiny):
    data = bytearray(tiny["f32"].read_bytes())
    data[0:4] = b"GGUF"  # then read as llama.cpp's format, whose version field holds our 1
    refused(write(tmp_path, "gguf.bin", bytes(data)), ["bad GGUF: version 1"])
    data[0:4] = b"ak42"
    refused(write(tmp_path, "ak42.bin", bytes(data)), ["llama2.c version 1/2"])


# --- Our header, field by field (model.h: int32 at 4..60, float64 at 64..120, zeros to 256) ------

NAN, INF = float("nan"), float("inf")

# (case id, {field: value}, words the message must contain). TINY: dim 16, 4 heads of 4, 2 kv heads.
HEADER_CASES = [
    ("version-0", {"version": 0}, ["format version 0"]),
    ("version-7", {"version": 7}, ["version 7", "export"]),
    ("dim-0", {"dim": 0}, ["dim must be in [1, 65536]"]),
    ("dim-negative", {"dim": -16}, ["dim must be in [1, 65536]"]),
    ("dim-too-large", {"dim": 65537}, ["dim must be in [1, 65536]"]),
    ("hidden-0", {"hidden_dim": 0}, ["hidden_dim must be in"]),
    ("hidden-too-large", {"hidden_dim": (1 << 20) + 1}, ["hidden_dim must be in"]),
    ("layers-0", {"n_layers": 0}, ["n_layers must be in [1, 1024]"]),
    ("layers-too-many", {"n_layers": 1025}, ["n_layers must be in [1, 1024]"]),
    ("layers-int-min", {"n_layers": -(2**31)}, ["n_layers must be in [1, 1024]"]),
    ("heads-0", {"n_heads": 0}, ["n_heads must be in [1, 1024]"]),
    ("heads-too-many", {"n_heads": 1025}, ["n_heads must be in [1, 1024]"]),
    ("kv-heads-0", {"n_kv_heads": 0}, ["n_kv_heads must be in [1, n_heads]"]),
    ("kv-heads-above-heads", {"n_kv_heads": 8}, ["n_kv_heads must be in [1, n_heads]"]),
    ("kv-heads-not-divisor", {"n_kv_heads": 3}, ["bad header", "n_heads must be a multiple of n_kv_heads"]),
    ("head-dim-0", {"head_dim": 0}, ["head_dim must be even"]),
    ("head-dim-odd", {"head_dim": 5}, ["head_dim must be even"]),
    ("head-dim-too-large", {"head_dim": 1026}, ["head_dim must be even, in [2, 1024]"]),
    ("vocab-0", {"vocab_size": 0}, ["vocab_size must be in"]),
    ("vocab-too-large", {"vocab_size": (1 << 22) + 1}, ["vocab_size must be in"]),
    ("seq-len-0", {"seq_len": 0}, ["seq_len (max_position_embeddings) must be in"]),
    ("seq-len-too-large", {"seq_len": (1 << 24) + 1}, ["seq_len (max_position_embeddings) must be in"]),
    ("bos-past-vocab", {"bos_id": 512}, ["bos_id must be -1 or a token id"]),
    ("bos-negative", {"bos_id": -2}, ["bos_id must be -1 or a token id"]),
    ("eos-past-vocab", {"eos_id": 512}, ["eos_id must be -1 or a token id"]),
    ("shared-2", {"shared_classifier": 2}, ["shared_classifier must be 0 or 1"]),
    ("dtype-7", {"dtype": 7}, ["unknown weight dtype (0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 bf16, 5 q8_0_r16, 6 bf16_r16)"]),
    ("dtype-negative", {"dtype": -1}, ["unknown weight dtype"]),
    ("rope-mode-6", {"rope_scaling": 6}, ["unknown rope_scaling mode"]),
    ("rope-mode-negative", {"rope_scaling": -1}, ["unknown rope_scaling mode"]),
    ("orig-ctx-negative", {"rope_orig_ctx": -1}, ["rope_orig_ctx must be in"]),
    ("orig-ctx-too-large", {"rope_orig_ctx": (1 << 24) + 1}, ["rope_orig_ctx must be in"]),
    ("eps-0", {"norm_eps": 0.0}, ["norm_eps must be in (0, 1)"]),
    ("eps-negative", {"norm_eps": -1e-5}, ["norm_eps must be in (0, 1)"]),
    ("eps-1", {"norm_eps": 1.0}, ["norm_eps must be in (0, 1)"]),
    ("eps-nan", {"norm_eps": NAN}, ["norm_eps must be in (0, 1)"]),
    ("eps-inf", {"norm_eps": INF}, ["norm_eps must be in (0, 1)"]),
    ("eps-underflows-float", {"norm_eps": 1e-50}, ["norm_eps must be in (0, 1)"]),
    ("theta-0", {"rope_theta": 0.0}, ["base (rope_theta) must be a finite number > 0"]),
    ("theta-negative", {"rope_theta": -10000.0}, ["base (rope_theta) must be a finite number > 0"]),
    ("theta-nan", {"rope_theta": NAN}, ["base (rope_theta) must be a finite number > 0"]),
    ("theta-inf", {"rope_theta": INF}, ["base (rope_theta) must be a finite number > 0"]),
    ("pi-factor-below-1", {"rope_scaling": 1, "rope_factor": 0.5}, ["factor must be a finite number >= 1"]),
    ("pi-factor-nan", {"rope_scaling": 1, "rope_factor": NAN}, ["factor must be a finite number >= 1"]),
    ("pi-factor-inf", {"rope_scaling": 1, "rope_factor": INF}, ["factor must be a finite number >= 1"]),
    ("dynamic-head-dim-2", {"rope_scaling": 3, "rope_factor": 2.0, "head_dim": 2}, ["d >= 4 rotated dimensions"]),
    ("yarn-theta-1", {"rope_scaling": 4, "rope_factor": 2.0, "rope_theta": 1.0}, ["yarn needs base > 1"]),
    ("yarn-betas-swapped", {"rope_scaling": 4, "rope_factor": 2.0, "rope_beta_fast": 1.0, "rope_beta_slow": 32.0},
     ["beta_fast > beta_slow > 0"]),
    ("yarn-beta-nan", {"rope_scaling": 4, "rope_factor": 2.0, "rope_beta_slow": NAN}, ["beta_fast > beta_slow > 0"]),
    ("yarn-attn-negative", {"rope_scaling": 4, "rope_factor": 2.0, "rope_attn_factor": -1.0},
     ["yarn attention factor must be >= 0"]),
    ("llama3-freqs-swapped", {"rope_scaling": 5, "rope_factor": 8.0, "rope_low_freq_factor": 4.0,
                              "rope_high_freq_factor": 1.0}, ["high_freq_factor > low_freq_factor > 0"]),
    ("llama3-freq-inf", {"rope_scaling": 5, "rope_factor": 8.0, "rope_low_freq_factor": 1.0,
                         "rope_high_freq_factor": INF}, ["high_freq_factor > low_freq_factor > 0"]),
]


def with_fields(data, fields):
    b = bytearray(data)
    for name, value in fields.items():
        set_field(b, name, value)
    return bytes(b)


@pytest.mark.parametrize("fields, needles", [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES])
def test_header_field_out_of_range(tmp_path, tiny, fields, needles):
    path = tmp_path / "bad.bin"
    path.write_bytes(with_fields(tiny["f32"].read_bytes(), fields))
    err = refused(path, needles)
    assert "(hint: " in err


def test_reserved_bytes_must_be_zero(tmp_path, tiny):
    for offset in (128, 200, 255):
        data = bytearray(tiny["f32"].read_bytes())
        data[offset] = 1
        path = tmp_path / f"reserved{offset}.bin"
        path.write_bytes(bytes(data))
        refused(path, ["reserved header bytes 128..255 must be zero"])


# Version 2 (several end tokens): the count, the ids, and the zeros after them.
V2_CASES = [("n-zero", [0], "n_end_ids must be in [1, 8]"), ("n-nine", [9], "n_end_ids must be in [1, 8]"),
            ("id-negative", [1, -1], "end_ids must be token ids"),
            ("id-past-vocab", [2, 3, 4096], "end_ids must be token ids"),
            ("past-n", [1, 3, 5], "end_ids past n_end_ids must be zero"),
            ("reserved", [1, 3, 0, 0, 0, 0, 0, 0, 0, 7], "reserved header bytes 164..255 must be zero")]


@pytest.mark.parametrize("name,values,needle", V2_CASES, ids=[c[0] for c in V2_CASES])
def test_version2_end_ids_checked(tmp_path, tiny, name, values, needle):
    data = bytearray(tiny["f32"].read_bytes())
    struct.pack_into("<i", data, 4, 2)  # version 2
    struct.pack_into(f"<{len(values)}i", data, 128, *values)
    refused(write(tmp_path, f"{name}.bin", bytes(data)), [needle])


def test_version2_with_good_end_ids_loads(tmp_path, tiny):
    data = bytearray(tiny["f32"].read_bytes())
    struct.pack_into("<3i", data, 128, 2, 3, 4)
    struct.pack_into("<i", data, 4, 2)
    code, out, err = run(write(tmp_path, "v2.bin", bytes(data)), "-z", TOK512, "-n", "4", "-t", "0")
    assert code == 0 and "lrun v2" in err, err


# Version 3 (the families past Llama, model.h): its five fields at 164, its zeros from 184, the layer
# table at 256 and LongRoPE's factors after it. Files: data/families' SmolLM3 (NoPE layers) and Phi-3
# (LongRoPE, partial rotary), exported.
@pytest.fixture(scope="module")
def v3(tmp_path_factory, c_tools):
    root = tmp_path_factory.mktemp("v3")
    files = {}
    for case in ("smollm3-nope", "phi3-longrope-short"):
        (root / case).mkdir()
        proc = run_export(REPO / "data/families" / case, root / case / "model.bin")
        assert proc.returncode == 0, proc.stderr
        files[case] = (root / case / "model.bin").read_bytes()
    return files


def at(offset, fmt, value):
    return lambda b: struct.pack_into(fmt, b, offset, value)


V3_CASES = [
    ("family-6", "smollm3-nope", at(164, "<i", 6), "unknown family"),
    ("rot-dims-odd", "smollm3-nope", at(168, "<i", 7), "rot_dims must be 0 or even, up to head_dim"),
    ("rot-dims-past-head", "smollm3-nope", at(168, "<i", 34), "rot_dims must be 0 or even, up to head_dim"),
    ("qkv-bias-2", "smollm3-nope", at(172, "<i", 2), "qkv_bias must be 0 or 1"),
    ("qk-norm-negative", "smollm3-nope", at(176, "<i", -1), "qk_norm must be 0 or 1"),
    ("window-negative", "smollm3-nope", at(180, "<i", -1), "sliding_window must be in [0, 2^24]"),
    ("reserved-184", "smollm3-nope", at(184, "<B", 1), "reserved header bytes 184..255 must be zero"),
    ("n-end-ids-9", "smollm3-nope", at(128, "<i", 9), "n_end_ids must be in [0, 8]"),
    ("layer-kind-bit", "smollm3-nope", at(256, "<i", 4), "layer_kind has unknown bits"),
    ("sliding-without-window", "smollm3-nope", at(260, "<i", 2), "a sliding layer, and no sliding_window"),
    ("longrope-in-v2", "phi3-longrope-short", at(4, "<i", 2), "longrope needs a version 3 file"),
    ("longrope-factor-nan", "phi3-longrope-short", at(320, "<d", NAN), "longrope factors must be finite numbers > 0"),
    ("longrope-factor-0", "phi3-longrope-short", at(384, "<d", 0.0), "longrope factors must be finite numbers > 0"),
]


@pytest.mark.parametrize("case,model,edit,needle", V3_CASES, ids=[c[0] for c in V3_CASES])
def test_version3_fields_checked(tmp_path, v3, case, model, edit, needle):
    data = bytearray(v3[model])
    edit(data)
    refused(write(tmp_path, f"{case}.bin", bytes(data)), [needle, "(hint: "])


def test_version3_files_run(tmp_path, v3):
    for name, data in v3.items():
        out, err = runs(write(tmp_path, f"{name}.bin", data), "-n", "8", "-t", "0")
        assert "lrun v3" in err


@pytest.mark.parametrize("dtype", [0, 1, 2, 3, 4, 5, 6], ids=["f32", "f16", "q8_0", "q4_0", "bf16", "q8_0_r16", "bf16_r16"])
def test_largest_allowed_header_is_refused_by_size(tmp_path, tiny, dtype):
    # Every field at the top of its range describes 2^47 to 2^51 bytes of tensors: the size
    # arithmetic must be exact (no wrap-around) and nothing may be mapped or allocated for it.
    shape = dict(dim=65536, hidden_dim=1 << 20, n_layers=1024, n_heads=1024, n_kv_heads=1024, head_dim=1024,
                 vocab_size=1 << 22, shared_classifier=0, dtype=dtype)
    path = tmp_path / "huge.bin"
    path.write_bytes(with_fields(tiny["f32"].read_bytes(), {**shape, "seq_len": 1 << 24}))
    size = file_size(shape)  # lrun/modelfile.py, in Python's unbounded integers
    assert size > 2**47
    refused(path, [f"file is {path.stat().st_size} bytes but its header describes {size} ", "truncated"])


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q8_0_rows", "q4_0", "bf16", "bf16_rows"])
def test_file_size_must_be_exact(tmp_path, tiny, dtype):
    data = tiny[dtype].read_bytes()
    short, long = tmp_path / "short.bin", tmp_path / "long.bin"
    short.write_bytes(data[:-1])
    long.write_bytes(data + b"\0")
    refused(short, [f"file is {len(data) - 1} bytes but its header describes {len(data)}", "truncated"])
    refused(long, [f"file is {len(data) + 1} bytes but its header describes {len(data)}", "extra bytes"])
    for cut in (100, 256, len(data) // 2):  # inside the header, the header alone, half the tensors
        refused(write(tmp_path, f"cut{cut}.bin", data[:cut]), ["truncated"])
    refused(write(tmp_path, "long64.bin", data + bytes(64)), ["extra bytes"])  # one more aligned block
    runs(tiny[dtype], "-n", "4")


# --- llama2.c legacy files -----------------------------------------------------------------------

LEGACY_CASES = [
    ("dim-0", {"dim": 0}), ("dim-not-multiple-of-heads", {"dim": 60}), ("head-dim-odd", {"dim": 24}),
    ("layers-negative", {"n_layers": -5}), ("heads-0", {"n_heads": 0}), ("kv-heads-above-heads", {"n_kv_heads": 16}),
    ("kv-heads-not-divisor", {"n_kv_heads": 3}), ("vocab-int-min", {"vocab_size": -(2**31)}),
    ("vocab-below-3", {"vocab_size": 2}), ("seq-len-0", {"seq_len": 0}), ("hidden-huge", {"hidden_dim": 2**31 - 1}),
]


def legacy_with(fields, data=None):
    data = data if data is not None else LEGACY.read_bytes()
    header = list(LEGACY_HEADER.unpack_from(data))
    for name, value in fields.items():
        header[LEGACY_FIELDS.index(name)] = value
    return LEGACY_HEADER.pack(*header) + data[LEGACY_HEADER.size:]


@pytest.mark.parametrize("fields", [c[1] for c in LEGACY_CASES], ids=[c[0] for c in LEGACY_CASES])
def test_legacy_header_out_of_range(tmp_path, c_tools, fields):
    path = tmp_path / "legacy.bin"
    path.write_bytes(legacy_with(fields))
    refused(path, ["not a model file", "no valid llama2.c legacy header", "export/export.py"])


def test_legacy_size_must_be_exact(tmp_path, c_tools):
    data = LEGACY.read_bytes()
    long = tmp_path / "long.bin"
    long.write_bytes(data + b"\0" * 4)
    refused(long, [f"header describes {len(data)}", "extra bytes"])
    for cut in (1, 4):
        short = write(tmp_path, f"short{cut}.bin", data[:-cut])
        refused(short, ["not a model file", f"more than its {len(data) - cut} bytes"])


def test_legacy_separate_classifier(tmp_path, c_tools):
    # A negative vocab_size: the classifier (vocab, dim) follows the RoPE tables. Here it is a copy
    # of the embedding, so greedy text must equal that of the tied original.
    data = LEGACY.read_bytes()
    embedding = data[28:28 + 512 * 64 * 4]
    path = tmp_path / "untied.bin"
    path.write_bytes(legacy_with({"vocab_size": -512}, data) + embedding)
    untied, _ = runs(path, "-n", "40", "-t", "0")
    tied, _ = runs(LEGACY, "-n", "40", "-t", "0")
    assert untied == tied
    path.write_bytes(legacy_with({"vocab_size": -512}, data))  # ... and without it: too short
    refused(path, ["not a model file", "more than its"])


# --- Weights that are not numbers ------------------------------------------------------------------

@pytest.mark.parametrize("fill", [b"\0\0\0\0", b"\xff\xff\xff\xff", b"\0\0\x80\x7f"], ids=["zero", "nan", "inf"])
def test_degenerate_weights(tmp_path, c_tools, fill):
    # All-zero weights give equal logits: top-p 0.001 (< 1/512) keeps no token above the cutoff,
    # and the sampler must then take the likeliest rather than read before its candidate array.
    # NaN and infinite weights give NaN everywhere: an error naming the position (tests/
    # test_nonfinite.py has the details), never a crash, text or a perplexity of NaN.
    data = LEGACY.read_bytes()
    path = tmp_path / "weights.bin"
    path.write_bytes(data[:28] + fill * ((len(data) - 28) // 4))
    text = tmp_path / "text.txt"
    text.write_bytes(TEXT.read_bytes()[:4000])
    runs_of = [["-n", "8", "-s", "3", *sampling] for sampling in (["-t", "1", "-p", "0.001"], ["-t", "1", "-p", "0.9"],
                                                                  ["-t", "0"])]
    for args in runs_of + [["--ppl", text, "--ctx", "64", "--ppl-windows", "2"]]:
        if fill == b"\0\0\0\0":
            out, _ = runs(path, *args)
            assert "--ppl" not in args or out.startswith("perplexity: ")
        else:
            code, out, err = run(path, "-z", TOK512, *args)
            assert code == 1 and "error: the logits at position 0" in err and "are not finite" in err, err
            assert out == "", out


@pytest.mark.parametrize("dtype", ["q8_0", "q8_0_rows"])
def test_q8_0_scales_not_numbers(tmp_path, tiny, dtype):
    # q8_0 scales are float32 in the file: NaN and subnormal ones reach the integer kernels (in
    # q8_0_r16 the scales sit among the values, so some of these land on values instead).
    data = bytearray(tiny[dtype].read_bytes())
    rng = random.Random(5)
    for _ in range(200):
        off = rng.randrange(256, len(data) - 4) // 4 * 4
        data[off:off + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x01\0\0\0", b"\0\0\x80\x7f"])
    path = tmp_path / "scales.bin"
    path.write_bytes(bytes(data))
    for args in (["-n", "8", "-t", "0", "-i", "Once upon a time"], ["-n", "8", "-t", "1", "-b", "1"]):
        code, out, err = run(path, "-z", TOK512, *args)  # it runs, or stops at the numbers that are not finite
        assert code == 0 or (code == 1 and "are not finite" in err), err


def test_q8_0_layouts_agree(tiny):
    # The same numbers in both q8_0 layouts (the first one still loads: copied into q8_0_r16, which the
    # banner says): the same greedy text, in decode (-b 1) and prefill.
    for extra in (["-b", "1"], []):
        (old, err), (new, _) = [runs(tiny[d], "-n", "24", "-t", "0", "-i", "Once upon a time", *extra)
                                for d in ("q8_0_rows", "q8_0")]
        assert old == new and old
        assert re.search(r"copied at load: q8_0 to q8_0_r16, [\d.]+ MiB, the first layout: export again to skip it", err)


def test_q8_0_r16_padding_rows_not_read(tmp_path, tiny):
    # The rows that fill up a matrix's last group of 16 (TINY's k, v, gate and up have 8 and 24 rows) are
    # read by the kernels but never stored: NaN scales and random values there change no output.
    data = bytearray(tiny["q8_0"].read_bytes())
    h, rng, touched = read_header(data), random.Random(7), 0
    assert h["dtype"] == DTYPES["q8_0_r16"]
    for name, shape, kind, pieces in layout(h):
        if kind != "matrix" or shape[0] % R16 == 0:
            continue
        rows, cols = shape
        (start, size), = pieces
        blocks = -(-cols // 32)
        last = start + (rows // R16) * blocks * R16_BLOCK_BYTES  # the last group
        for b in range(blocks):
            at = last + b * R16_BLOCK_BYTES
            for i in range(rows % R16, R16):
                data[at + 4 * i:at + 4 * i + 4] = b"\xff\xff\xff\xff"  # a NaN scale
                for u in range(8):
                    v = at + 64 + 64 * u + 4 * i
                    data[v:v + 4] = bytes(rng.randrange(256) for _ in range(4))
                touched += 1
    assert touched > 0
    path = write(tmp_path, "padding.bin", bytes(data))
    for extra in (["-b", "1"], []):
        want = runs(tiny["q8_0"], "-n", "16", "-t", "0", "-i", "Once upon a time", *extra)[0]
        assert runs(path, "-n", "16", "-t", "0", "-i", "Once upon a time", *extra)[0] == want


def test_bf16_r16_padding_not_read(tmp_path, tiny):
    # bf16_r16's padding rows, which fill up a matrix's last group of 16 (TINY's k, v, gate and up have
    # 8 and 24 rows), are read by the kernels but never stored: NaN there changes no output. (Its padding
    # columns are part of every sum, times x's zero padding, so they must be zero as model.h says: a
    # NaN there would be a NaN weight like any other.)
    data = bytearray(tiny["bf16"].read_bytes())
    h, touched = read_header(data), 0
    assert h["dtype"] == DTYPES["bf16_r16"]
    for name, shape, kind, pieces in layout(h):
        if kind != "matrix":
            continue
        rows, cols = shape
        (start, size), = pieces
        cp = -(-cols // 32) * 32
        for r in range(-(-rows // R16) * R16):
            for c in range(cp):
                if r >= rows:
                    at = start + 2 * ((r // R16) * R16 * cp + (c // 2) * 2 * R16 + (r % R16) * 2 + c % 2)
                    data[at:at + 2] = b"\xc0\x7f"  # a bf16 NaN
                    touched += 1
    assert touched > 0
    path = write(tmp_path, "padding.bin", bytes(data))
    for extra in (["-b", "1"], []):
        want = runs(tiny["bf16"], "-n", "16", "-t", "0", "-i", "Once upon a time", *extra)[0]
        got = runs(path, "-n", "16", "-t", "0", "-i", "Once upon a time", *extra)[0]
        assert got == want, "a NaN in the padding reached an output"


def test_bf16_layouts_agree(tiny):
    # The same numbers in both bf16 layouts (the first one still loads: copied into bf16_r16, which the
    # banner says): the same greedy text, in decode (-b 1) and prefill.
    for extra in (["-b", "1"], []):
        (old, err), (new, _) = [runs(tiny[d], "-n", "24", "-t", "0", "-i", "Once upon a time", *extra)
                                for d in ("bf16_rows", "bf16")]
        assert old == new and old
        assert re.search(r"copied at load: bf16 to bf16_r16, [\d.]+ MiB, the first layout", err)


# --- Random mutations: a small in-suite fuzzer over the real binary --------------------------------

INTERESTING = [0, 1, -1, 2, 3, 7, 64, 255, 256, 511, 512, 65535, 65536, 1 << 20, 1 << 24, 2**31 - 1, -(2**31)]


def mutate(data, rng):
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:  # a header int32 field to an interesting value
        off = rng.randrange(0, 64 if data[:4] == b"LRUN" else 28, 4)
        struct.pack_into("<i", b, off, rng.choice(INTERESTING))
    elif kind == 1:  # a header float64 to a strange number
        if data[:4] == b"LRUN":
            struct.pack_into("<d", b, rng.randrange(64, 128, 8), rng.choice([0.0, -1.0, 1e308, 1e-320, NAN, INF, 0.5]))
    elif kind == 2:  # random bytes anywhere
        for _ in range(rng.randrange(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 3:  # cut or extend
        b = b[:rng.randrange(len(b))] if rng.random() < 0.5 else b + bytes(rng.randrange(1, 300))
    else:  # two fields at once, size kept: dims that still describe a file of the same length
        for _ in range(2):
            struct.pack_into("<i", b, rng.randrange(0, 28, 4), rng.choice(INTERESTING))
    return bytes(b)


def test_random_mutations(tmp_path, tiny):
    rng = random.Random(20240607)
    seeds = [tiny["f32"].read_bytes(), tiny["f16"].read_bytes(), tiny["q8_0"].read_bytes(), LEGACY.read_bytes(),
             tiny["q8_0_rows"].read_bytes(), tiny["bf16"].read_bytes()]
    path = tmp_path / "mutant.bin"
    outcomes = {0: 0, 1: 0}
    for i in range(200):
        path.write_bytes(mutate(seeds[i % len(seeds)], rng))
        code, out, err = run(path, "-z", TOK512, "-n", "3", "-s", "1", "--ctx", "16", timeout=30)
        assert code in (0, 1), f"mutant {i}: exit {code} (a signal?); stderr: {err[-2000:]}"
        if code == 1:  # refused at load, or stopped where its numbers went non-finite
            assert (err.startswith("error: ") and out == "") or "are not finite" in err, f"mutant {i}: {err}"
        outcomes[code] += 1
    print(f"200 mutants: {outcomes[0]} ran, {outcomes[1]} refused with a message")
    assert outcomes[1] > 0


# --- The fuzzers' seed corpus ---------------------------------------------------------------------

def corpus(prefix):
    files = sorted(CORPUS.glob(prefix + "*"))
    assert files, f"no {prefix}* seeds in {CORPUS} (fuzz/make_corpus.py writes them)"
    return files


@pytest.mark.parametrize("seed", corpus("ok-"), ids=lambda p: p.stem)
def test_corpus_valid_seeds_run(tmp_path, c_tools, seed):
    # The seeds have a 32-token vocabulary (the version 4 ones 512), so they run through
    # tests/tools/dump_logits, not ./run.
    ids, out = tmp_path / "ids.bin", tmp_path / "logits.bin"
    ids.write_bytes(struct.pack("<4i", 1, 5, 31, 7))
    proc = subprocess.run([str(TOOLS / "dump_logits"), str(seed), str(ids), str(out), "--ctx", "4"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert len(data) in (4 * 32 * 4, 4 * 512 * 4)
    logits = struct.unpack(f"<{len(data) // 4}f", data)
    assert all(math.isfinite(v) for v in logits)


@pytest.mark.parametrize("seed", corpus("bad-"), ids=lambda p: p.stem)
def test_corpus_broken_seeds_refused(c_tools, seed):
    refused(seed, [])
