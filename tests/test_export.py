"""test_export.py - export/export.py alone: Hugging Face checkpoint in, model.h file out.

The model file is read back here through lrun/modelfile.py, the layout the exporter writes with.
That layout is checked against model.h's own table here (the header) and against the C loader
elsewhere (it loads every exported file; test_hostile.py compares its file sizes with the loader's
in every dtype). So these tests check the exporter against the specification:
  - the header, field by field, for tied/untied, MHA/GQA, head_dim != dim/n_heads, every RoPE
    scaling spelling; the file ends exactly where the documented layout says; padding is zero;
  - the q/k row permutation, element by element from its index formula, on random weights and on
    the real stories260K (whose legacy llama2.c file already holds interleaved rows);
  - every input dtype and file layout gives the same bytes; f16 and q8_0 within their precision;
  - each refusal exits 1 with a message naming the key or tensor, and leaves no file behind;
  - where it writes: only a regular file or a new path (a device, FIFO, socket or directory is
    refused and left as it is; a symlink is written through), and never over, beside or without
    another model's tokenizer files, in either order (checked before anything is written).
What this is not: a test of the C side (loading these files), which is tested elsewhere.

Run: /usr/bin/python3 -m pytest -q tests/test_export.py
"""
import importlib.util
import json
import os
import re
import shutil
import socket
import stat
import struct
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conftest import LLAMA_TOK, PYTHON, REPO, STORIES_BIN, STORIES_HF, TOK512, run_export
from lrun import hf_checkpoint as st
from lrun import install_hint
from lrun import modelfile
from lrun.hf_random import make_checkpoint

_spec = importlib.util.spec_from_file_location("lrun_export", REPO / "export" / "export.py")
exporter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(exporter)

STORIES_LEGACY = STORIES_BIN

# Small shapes with awkward sizes: dim and hidden_dim not multiples of 32 (q8_0 padding), GQA,
# and a head_dim that is not dim / n_heads.
TIED_MHA = dict(dim=48, hidden_dim=72, n_layers=2, n_heads=4, n_kv_heads=4, vocab_size=70, max_pos=64)
UNTIED_GQA = dict(dim=64, hidden_dim=100, n_layers=2, n_heads=8, n_kv_heads=2, vocab_size=90,
                  max_pos=128, tied=False)
ODD_HEAD_DIM = dict(dim=48, hidden_dim=64, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=16,
                    vocab_size=50, max_pos=32, tied=False)


# --- Reading our model file back -------------------------------------------------------------------

def test_header_layout_is_model_h():
    """lrun/modelfile.py's header is model.h's table: the same fields at the same offsets, int32
    below 64 and float64 from 64 (magic: 4 bytes), reserved zeros from 128 to 256 in version 1;
    version 2's end ids from 128 (struct END_IDS) and its zeros from 164; version 3's fields from 164
    (FAMILY), its zeros from 184 and its layer table at 256; version 4's n_hparams at 184, its zeros from
    188 and its hparams table at 256."""
    text = (REPO / "model.h").read_text()
    table = text[text.index("// Header, 256 bytes"):text.index("// Tensors follow")]
    rows = [(int(off), name) for off, name in re.findall(r"^//\s+(\d+)\s+(\w+)", table, re.M)]
    assert rows == [(modelfile.OFFSET[name], name) for name, _ in modelfile.HEADER_FIELDS] + [
        (128, "reserved"), (128, "n_end_ids"), (132, "end_ids"), (128 + modelfile.END_IDS.size, "reserved")] + [
        (164 + 4 * k, name) for k, name in enumerate(modelfile.FAMILY_FIELDS)] + [
        (164 + modelfile.FAMILY.size, "reserved"), (256, "layer_kind"), (184, "n_hparams"), (188, "reserved"),
        (256, "the")]  # version 4: its count, its zeros, and "256 the hparams table"
    assert [code for _, code in modelfile.HEADER_FIELDS] == ["4s"] + ["i"] * 15 + ["d"] * 8
    assert modelfile.HEADER.size == 128 and modelfile.HEADER_SIZE == 256


def read_model(path):
    """(header, {name: float32 array}, {name: (q int8 (rows, cp), d (rows, cp/32))} for q8_0).
    Checks that every gap is zero and that the file ends where the last tensor ends."""
    buf = memoryview(open(path, "rb").read())
    h = modelfile.read_header(buf)
    tensors, q8 = {}, {}
    pos = modelfile.HEADER_SIZE
    for name, shape, kind, pieces in modelfile.layout(h):
        for start, size in pieces:
            assert not any(buf[pos:start]), f"non-zero padding at {pos}"
            pos = start + size
        start, size = pieces[0]
        if kind in ("i32", "f64"):  # version 3's tables
            tensors[name] = np.frombuffer(buf, "<i4" if kind == "i32" else "<f8", size // (4 if kind == "i32" else 8),
                                          start).reshape(shape)
        elif kind == "norm" or h["dtype"] == 0:
            tensors[name] = np.frombuffer(buf, "<f4", size // 4, start).reshape(shape)
        elif h["dtype"] == 1:
            tensors[name] = np.frombuffer(buf, "<f2", size // 2, start).astype(np.float32).reshape(shape)
        elif h["dtype"] == 4:  # bf16: the top 16 bits of a float32
            bits = np.frombuffer(buf, "<u2", size // 2, start).astype(np.uint32) << 16
            tensors[name] = bits.view(np.float32).reshape(shape)
        elif h["dtype"] == 6:  # bf16_r16: groups of 16 rows, pairs of columns; the padding must be zero
            rows, cols = shape
            cp, full = (cols + 31) // 32 * 32, -(-rows // 16) * 16
            b = modelfile.rows_from_br16(buf[start:start + size], full, cp)
            assert not b[rows:].any() and not b[:, cols:].any(), f"{name}: padding not zero"
            assert modelfile.br16_from_rows(b[:rows, :cols]) == bytes(buf[start:start + size])  # the inverse
            tensors[name] = (b[:rows, :cols].astype(np.uint32) << 16).view(np.float32)
        elif h["dtype"] == 3:  # q4_0: low nibbles are values 0..15 of a block, high ones 16..31
            rows, cols = shape
            cp = size * 2 // rows
            packed = np.frombuffer(buf, "u1", size, start).reshape(rows, cp // 32, 16)
            q = np.concatenate([packed & 15, packed >> 4], axis=2).astype(np.int8) - 8  # (rows, cp/32, 32)
            d = np.frombuffer(buf, "<f2", rows * cp // 32, pieces[1][0]).astype(np.float32).reshape(rows, cp // 32)
            q8[name] = (q.reshape(rows, cp), d)
            tensors[name] = (q * d[:, :, None]).reshape(rows, cp)[:, :cols]
        elif h["dtype"] == 5:  # q8_0_r16: groups of 16 rows; the padding rows must be zero too
            rows, cols = shape
            cp = (cols + 31) // 32 * 32
            q, d = modelfile.rows_from_r16(buf[start:start + size], -(-rows // 16) * 16, cols)
            assert not q[rows:].any() and not d[rows:].any(), f"{name}: padding rows not zero"
            q, d = q[:rows], d[:rows]
            assert modelfile.r16_from_rows(q, d) == bytes(buf[start:start + size])  # the inverse, both ways
            q8[name] = (q, d)
            tensors[name] = (q.reshape(rows, cp // 32, 32) * d[:, :, None]).reshape(rows, cp)[:, :cols]
        else:
            rows, cols = shape
            cp = size // rows
            q = np.frombuffer(buf, "i1", size, start).reshape(rows, cp)
            d = np.frombuffer(buf, "<f4", rows * cp // 32, pieces[1][0]).reshape(rows, cp // 32)
            q8[name] = (q, d)
            tensors[name] = (q.reshape(rows, cp // 32, 32) * d[:, :, None]).reshape(rows, cp)[:, :cols]
    assert pos == len(buf), f"file is {len(buf)} bytes, the layout ends at {pos}"
    return h, tensors, q8


def hf_weights(hf_dir):
    ckpt = st.Checkpoint(str(hf_dir))
    return {name: ckpt.get(name) for name in ckpt.names()}


# --- Helpers -----------------------------------------------------------------------------------------

def export_inprocess(capsys, hf_dir, out, *args):
    """export.main() in this process (fast); returns (exit status, stderr)."""
    code = exporter.main([str(hf_dir), str(out), *map(str, args)])
    return code, capsys.readouterr().err


def export_ok(capsys, hf_dir, out, *args):
    code, err = export_inprocess(capsys, hf_dir, out, *args)
    assert code == 0, err
    return read_model(out)


@pytest.fixture(scope="module")
def gqa_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gqa")
    make_checkpoint(d, **UNTIED_GQA, seed=3)
    return d


# --- Header --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [TIED_MHA, UNTIED_GQA, ODD_HEAD_DIM], ids=["tied-mha", "untied-gqa", "head-dim"])
def test_header_fields(tmp_path, capsys, shape):
    make_checkpoint(tmp_path / "hf", **shape, rope_theta=500000.0)
    h, _, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    head_dim = shape.get("head_dim") or shape["dim"] // shape["n_heads"]
    expect = dict(magic=b"LRUN", version=1, dim=shape["dim"], hidden_dim=shape["hidden_dim"],
                  n_layers=shape["n_layers"], n_heads=shape["n_heads"], n_kv_heads=shape["n_kv_heads"],
                  head_dim=head_dim, vocab_size=shape["vocab_size"], seq_len=shape["max_pos"],
                  bos_id=1, eos_id=2, shared_classifier=int(shape.get("tied", True)), dtype=0,
                  rope_scaling=0, rope_orig_ctx=0, rope_theta=500000.0, norm_eps=1e-5,
                  rope_factor=1.0, rope_attn_factor=0.0, rope_beta_fast=0.0, rope_beta_slow=0.0,
                  rope_low_freq_factor=0.0, rope_high_freq_factor=0.0, end_ids=[], reserved=bytes(128),
                  family=0, rot_dims=0, qkv_bias=0, qk_norm=0, sliding_window=0)
    assert h == expect


ROPE_CASES = {
    "none": (None, dict(rope_scaling=0, rope_factor=1.0)),
    "default": ({"rope_type": "default"}, dict(rope_scaling=0, rope_factor=1.0)),
    "linear": ({"rope_type": "linear", "factor": 2.0}, dict(rope_scaling=1, rope_factor=2.0)),
    "linear-legacy-type": ({"type": "linear", "factor": 4}, dict(rope_scaling=1, rope_factor=4.0)),
    "dynamic": ({"type": "dynamic", "factor": 2.0}, dict(rope_scaling=3, rope_factor=2.0)),
    "yarn-defaults": ({"rope_type": "yarn", "factor": 4.0}, dict(rope_scaling=4, rope_factor=4.0)),
    "yarn-full": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                   "attention_factor": 1.25, "beta_fast": 16, "beta_slow": 2},
                  dict(rope_scaling=4, rope_factor=4.0, rope_orig_ctx=32, rope_attn_factor=1.25,
                       rope_beta_fast=16.0, rope_beta_slow=2.0)),
    "yarn-no-factor": ({"rope_type": "yarn", "original_max_position_embeddings": 16},
                       dict(rope_scaling=4, rope_factor=4.0, rope_orig_ctx=16)),  # 64 / 16
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16},
               dict(rope_scaling=5, rope_factor=8.0, rope_orig_ctx=16, rope_low_freq_factor=1.0,
                    rope_high_freq_factor=4.0)),
}


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_header_rope(tmp_path, capsys, case):
    scaling, fields = ROPE_CASES[case]
    make_checkpoint(tmp_path / "hf", **TIED_MHA, rope_theta=20000.0, rope_scaling=scaling)
    h, _, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    expect = dict(rope_scaling=0, rope_orig_ctx=0, rope_theta=20000.0, rope_factor=1.0,
                  rope_attn_factor=0.0, rope_beta_fast=0.0, rope_beta_slow=0.0,
                  rope_low_freq_factor=0.0, rope_high_freq_factor=0.0)
    expect.update(fields)
    assert {k: h[k] for k in expect} == expect


def test_header_rope_parameters_v5(tmp_path, capsys):
    """transformers v5 folds rope_theta and rope_scaling into one rope_parameters dict."""
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    make_checkpoint(tmp_path / "hf", **TIED_MHA,
                    extra_config={"rope_theta": None, "rope_scaling": None, "rope_parameters": params})
    h, _, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert (h["rope_scaling"], h["rope_theta"], h["rope_factor"], h["rope_orig_ctx"]) == (5, 500000.0, 32.0, 8192)
    assert (h["rope_low_freq_factor"], h["rope_high_freq_factor"]) == (1.0, 4.0)


def test_header_token_ids_and_defaults(tmp_path, capsys):
    """eos list -> its first id, the others (and generation_config.json's) as end_ids in a version 2
    file; missing rope_theta / num_key_value_heads / head_dim -> defaults."""
    make_checkpoint(tmp_path / "hf", **TIED_MHA, extra_config={
        "eos_token_id": [7, 8, 9], "bos_token_id": 5, "rope_theta": None,
        "num_key_value_heads": None, "head_dim": None})
    (tmp_path / "hf/generation_config.json").write_text('{"eos_token_id": [9, 11]}')
    h, _, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert (h["bos_id"], h["eos_id"], h["rope_theta"], h["n_kv_heads"], h["head_dim"]) == (5, 7, 10000.0, 4, 12)
    assert (h["version"], h["end_ids"], h["reserved"]) == (2, [8, 9, 11], bytes(256 - 164))


def test_one_end_token_stays_version_1(tmp_path, capsys):
    make_checkpoint(tmp_path / "hf", **TIED_MHA, extra_config={"eos_token_id": [7]})
    (tmp_path / "hf/generation_config.json").write_text('{"eos_token_id": 7}')
    h, _, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert (h["version"], h["eos_id"], h["end_ids"]) == (1, 7, [])


@pytest.mark.parametrize("tie,has_head,shared", [(None, False, 1), (None, True, 0), (True, True, 1)])
def test_shared_classifier(tmp_path, capsys, tie, has_head, shared):
    make_checkpoint(tmp_path / "hf", **{**TIED_MHA, "tied": not has_head},
                    extra_config={"tie_word_embeddings": tie})
    h, t, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert h["shared_classifier"] == shared and ("wcls" in t) == (not shared)


def test_mistral_sliding_window(tmp_path, capsys):
    """Mistral's sliding_window slides every layer (version 3: the window in the header, the
    layer table marks each layer)."""
    make_checkpoint(tmp_path / "hf", **TIED_MHA, architecture="MistralForCausalLM",
                    extra_config={"sliding_window": 32})  # < max_pos 64
    h, t, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert (h["version"], h["family"], h["sliding_window"]) == (3, 1, 32)
    assert list(t["layer_kind"]) == [modelfile.LAYER_SLIDING] * 2


def test_partial_rotary_ignored_for_llama(tmp_path, capsys):
    """transformers 5.17's Llama turns every dimension whatever partial_rotary_factor says
    (data/families/llama-partial, tests/test_families.py): the export warns and does the same."""
    make_checkpoint(tmp_path / "hf", **TIED_MHA, extra_config={"partial_rotary_factor": 0.5})
    code, err = export_inprocess(capsys, tmp_path / "hf", tmp_path / "m.bin")
    assert code == 0 and "partial_rotary_factor is ignored" in err
    assert modelfile.read_header(open(tmp_path / "m.bin", "rb").read())["rot_dims"] == 0


# --- Layout ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_0", "bf16"])
def test_file_size_matches_layout(tmp_path, capsys, gqa_dir, dtype):
    out = tmp_path / "m.bin"
    h, _, _ = export_ok(capsys, gqa_dir, out, "--dtype", dtype)  # read_model checks padding and the end
    assert h["dtype"] == {"f32": 0, "f16": 1, "q8_0": 5, "q4_0": 3, "bf16": 6}[dtype]  # q8_0_r16, bf16_r16
    assert h["version"] == 1  # a new dtype needs no new version: older readers refuse 4, 5, 6 as unknown
    assert out.stat().st_size == modelfile.file_size(h)


# --- The q/k permutation -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [UNTIED_GQA, ODD_HEAD_DIM], ids=["gqa", "head-dim"])
def test_qk_rows_interleaved(tmp_path, capsys, shape):
    """out_row[h*hd + 2i + c] == hf_row[h*hd + c*hd/2 + i]; k with n_kv_heads heads. V, O and the
    rest are copied unchanged."""
    make_checkpoint(tmp_path / "hf", **shape, seed=11)
    hf = hf_weights(tmp_path / "hf")
    h, t, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    hd = h["head_dim"]
    for l in range(h["n_layers"]):
        p = f"model.layers.{l}."
        for ours, name, n_heads in (("wq", "self_attn.q_proj.weight", h["n_heads"]),
                                    ("wk", "self_attn.k_proj.weight", h["n_kv_heads"])):
            out, src = t[f"layers.{l}.{ours}"], hf[p + name]
            assert out.shape == src.shape == (n_heads * hd, h["dim"])
            for head in range(n_heads):
                for i in range(hd // 2):
                    for c in (0, 1):
                        np.testing.assert_array_equal(out[head * hd + 2 * i + c], src[head * hd + c * hd // 2 + i])
        for ours, name in (("wv", "self_attn.v_proj.weight"), ("wo", "self_attn.o_proj.weight"),
                           ("w1", "mlp.gate_proj.weight"), ("w2", "mlp.down_proj.weight"),
                           ("w3", "mlp.up_proj.weight"), ("rms_att", "input_layernorm.weight"),
                           ("rms_ffn", "post_attention_layernorm.weight")):
            np.testing.assert_array_equal(t[f"layers.{l}.{ours}"], hf[p + name])
    np.testing.assert_array_equal(t["token_embedding"], hf["model.embed_tokens.weight"])
    np.testing.assert_array_equal(t["rms_final"], hf["model.norm.weight"])
    np.testing.assert_array_equal(t["wcls"], hf["lm_head.weight"])


def read_legacy(path):
    """llama2.c's legacy (v0) file, as data/README.md describes it."""
    buf = open(path, "rb").read()
    config = dict(zip(modelfile.LEGACY_FIELDS, modelfile.LEGACY_HEADER.unpack_from(buf)))
    pos, w = modelfile.LEGACY_HEADER.size, {}
    for name, shape in modelfile.legacy_tensors(**config):
        n = int(np.prod(shape))
        w[name] = np.frombuffer(buf, "<f4", n, pos).reshape(shape)
        pos += 4 * n
    assert config["vocab_size"] > 0 and pos == len(buf)  # shared classifier: the file ends after freq_cis
    return config, w


def test_stories260K_matches_legacy(tmp_path, capsys):
    """The real stories260K: HF directory exported == llama2.c's own file, every tensor, bit for bit.
    Its wq/wk were never permuted (Meta layout), so equality proves the permutation (GQA 8/4)."""
    h, t, _ = export_ok(capsys, STORIES_HF, tmp_path / "m.bin")
    legacy_config, w = read_legacy(STORIES_LEGACY)
    assert {k: h[k] for k in legacy_config} == legacy_config
    assert (h["shared_classifier"], h["head_dim"], h["rope_theta"], h["norm_eps"]) == (1, 8, 10000.0, 1e-5)
    np.testing.assert_array_equal(t["token_embedding"], w["token_embedding"])
    np.testing.assert_array_equal(t["rms_final"], w["rms_final"])
    for l in range(h["n_layers"]):
        for name in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
            np.testing.assert_array_equal(t[f"layers.{l}.{name}"], w[name][l], err_msg=f"layer {l} {name}")
    # and the permutation really did something: HF's k_proj rows differ from the legacy ones
    assert not np.array_equal(hf_weights(STORIES_HF)["model.layers.0.self_attn.k_proj.weight"], w["wk"][0])


# --- Input dtypes and layouts; output dtypes --------------------------------------------------------

def test_every_input_format_gives_the_same_file(tmp_path, capsys):
    """F32/F16/BF16 and safetensors/sharded/bin/bin-sharded of the same (exactly representable)
    numbers all export to byte-identical f32 files."""
    outputs = {}
    for dtype, fmt in [("F32", "safetensors"), ("F16", "safetensors"), ("BF16", "safetensors"),
                       ("BF16", "sharded"), ("F16", "bin"), ("BF16", "bin-sharded"), ("F32", "sharded")]:
        d = tmp_path / f"{dtype}-{fmt}"
        make_checkpoint(d, **UNTIED_GQA, dtype=dtype, fmt=fmt, exact=True, seed=5)
        if fmt.endswith("sharded"):
            assert len([f for f in os.listdir(d) if "-of-" in f]) >= 2
        code, err = export_inprocess(capsys, d, tmp_path / f"{dtype}-{fmt}.bin")
        assert code == 0, err
        outputs[dtype, fmt] = (tmp_path / f"{dtype}-{fmt}.bin").read_bytes()
    reference = outputs["F32", "safetensors"]
    for key, data in outputs.items():
        assert data == reference, key


def test_f16_output(tmp_path, capsys, gqa_dir):
    _, t32, _ = export_ok(capsys, gqa_dir, tmp_path / "a.bin")
    _, t16, _ = export_ok(capsys, gqa_dir, tmp_path / "b.bin", "--dtype", "f16")
    for name, x in t32.items():
        expect = x if x.ndim == 1 else x.astype(np.float16).astype(np.float32)  # norms stay f32
        np.testing.assert_array_equal(t16[name], expect, err_msg=name)


def test_bf16_output_is_torch_rounding(tmp_path, capsys, gqa_dir):
    """--dtype bf16 from f32 weights: each matrix value is torch's bfloat16 of the f32 one (round to
    nearest, ties to even), norms stay f32. The control: truncation (the top 16 bits as they are)
    differs from torch on some values, so the check would catch an exporter that truncates."""
    torch = pytest.importorskip("torch")
    _, t32, _ = export_ok(capsys, gqa_dir, tmp_path / "a.bin")
    _, tb, _ = export_ok(capsys, gqa_dir, tmp_path / "b.bin", "--dtype", "bf16")
    truncation_wrong = 0
    for name, x in t32.items():
        expect = x if x.ndim == 1 else torch.tensor(x).to(torch.bfloat16).to(torch.float32).numpy()
        np.testing.assert_array_equal(tb[name], expect, err_msg=name)
        if x.ndim == 2:
            truncated = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
            truncation_wrong += int((truncated != expect).sum())
    assert truncation_wrong > 0


def test_bf16_checkpoint_copied_bit_for_bit(tmp_path, capsys):
    """A bf16 checkpoint exported --dtype bf16 keeps every bit: its matrices are the f32 export's
    values (exact: bf16 widens to f32 exactly), their low 16 bits zero, i.e. the checkpoint's own
    16 bits (rows of q and k in the file's order)."""
    make_checkpoint(tmp_path / "hf", **UNTIED_GQA, dtype="BF16", seed=9)
    _, t32, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "a.bin")
    _, tb, _ = export_ok(capsys, tmp_path / "hf", tmp_path / "b.bin", "--dtype", "bf16")
    for name, x in t32.items():
        np.testing.assert_array_equal(tb[name].view(np.uint32), x.view(np.uint32), err_msg=name)
        if x.ndim == 2:
            assert not (x.view(np.uint32) & 0xFFFF).any(), name  # the checkpoint was bf16
    # and the checkpoint's bits themselves, for a matrix the exporter does not permute
    raw = st.Checkpoint(str(tmp_path / "hf")).get("model.layers.0.mlp.down_proj.weight")
    np.testing.assert_array_equal(tb["layers.0.w2"].view(np.uint32), raw.view(np.uint32))


def test_bf16_beyond_range_refused(tmp_path, capsys):
    """An f32 weight that rounds past bf16's largest finite value (3.39e38) is refused, naming the
    tensor, with a hint; f16's overflow is refused the same way."""
    make_checkpoint(tmp_path / "hf", **UNTIED_GQA, seed=4)

    def huge(t):
        t["model.layers.1.mlp.up_proj.weight"][2, 3] = np.float32(3.4e38)

    edit_safetensors(tmp_path / "hf" / "model.safetensors", edit_tensors=huge)
    code, err = export_inprocess(capsys, tmp_path / "hf", tmp_path / "m.bin", "--dtype", "bf16")
    assert code != 0 and "layers.1.mlp.up_proj" in err and "beyond the bf16 range" in err and "hint" in err, err
    assert not (tmp_path / "m.bin").exists()
    assert export_inprocess(capsys, tmp_path / "hf", tmp_path / "m.bin")[0] == 0  # f32 holds it


def quantized_blocks(tmp_path, capsys, gqa_dir, dtype):
    """Export gqa_dir as f32 and as dtype; check that the norms are the f32 ones and the padding of
    every matrix is q = 0; yield (name, q (rows, cp/32, 32), d (rows, cp/32), f32 blocks likewise)."""
    _, t32, _ = export_ok(capsys, gqa_dir, tmp_path / "a.bin")
    _, tq, quantized = export_ok(capsys, gqa_dir, tmp_path / "q.bin", "--dtype", dtype)
    for name, x in t32.items():
        if x.ndim == 1:
            np.testing.assert_array_equal(tq[name], x, err_msg=name)
            continue
        q, d = quantized[name]
        rows, cols = x.shape
        cp = q.shape[1]
        assert cp == (cols + 31) // 32 * 32 and not q[:, cols:].any(), f"{name}: padding not zero"
        xp = np.zeros((rows, cp), np.float32)
        xp[:, :cols] = x
        yield name, q.reshape(rows, cp // 32, 32), d, xp.reshape(rows, cp // 32, 32)


def test_q8_0_output(tmp_path, capsys, gqa_dir):
    """Each block of 32 within max|x|/254 (half a quantization step) of f32; zero padding; norms f32."""
    for name, q, d, blocks in quantized_blocks(tmp_path, capsys, gqa_dir, "q8_0"):
        assert q.min() >= -127
        amax = np.abs(blocks).max(axis=2)
        np.testing.assert_allclose(d, amax / 127, rtol=1e-6, err_msg=name)
        err = np.abs(q * d[:, :, None] - blocks).max(axis=2)
        assert (err <= amax / 254 * (1 + 1e-5)).all(), f"{name}: max error {err.max()}"


def test_q4_0_output(tmp_path, capsys, gqa_dir):
    """ggml's Q4_0 per block of 32: d = (the value of largest magnitude) / -8 in f16, so that value
    is q = -8 exactly; every value within half a step |d| / 2 (plus the f16 rounding of d) of f32,
    but those near -big, which round to q = 7 instead of 8;
    padding q = 0 (nibble 8); norms f32."""
    for name, q, d, blocks in quantized_blocks(tmp_path, capsys, gqa_dir, "q4_0"):
        assert q.min() >= -8 and q.max() <= 7
        big = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[:, :, None], axis=2)[:, :, 0]
        np.testing.assert_allclose(d, big / -8, rtol=1e-3, err_msg=name)  # f16: 11 significant bits
        err = np.abs(q * d[:, :, None] - blocks).max(axis=2)
        # Half a step, except near -big, which would need q = +8 and gets 7: up to a whole step.
        assert (err <= np.abs(d) + 8 * np.abs(big) * 2**-11 + 1e-7).all(), f"{name}: max error {err.max()}"
        inside = np.abs(blocks - big[:, :, None] * -1) > np.abs(d)[:, :, None] / 2  # not near -big
        err_in = np.abs(q * d[:, :, None] - blocks)[inside]
        assert (err_in <= (np.abs(d)[:, :, None] / 2 + 8 * np.abs(big)[:, :, None] * 2**-11 + 1e-7)
                .repeat(32, axis=2)[inside]).all(), name


def test_q8_0_zero_block(tmp_path, capsys):
    """An all-zero block gets scale 0 and q 0 (no division by zero)."""
    q, d = exporter.quantize_q8_0(np.concatenate([np.zeros((2, 32)), np.ones((2, 8))], 1).astype(np.float32))
    assert q.shape == (2, 64) and d.shape == (2, 2)
    assert (d[:, 0] == 0).all() and not q[:, :32].any() and (q[:, 32:40] == 127).all() and not q[:, 40:].any()


# --- Refusals -----------------------------------------------------------------------------------------

def edit_safetensors(path, edit_header=None, edit_tensors=None):
    """Rewrite a .safetensors file: edit_tensors(dict of arrays) for well-formed changes,
    edit_header(header dict) to corrupt the header while keeping the data bytes."""
    f = st.SafetensorsFile(str(path))
    if edit_tensors:
        tensors = {n: f.get(n) for n in f.tensors}
        edit_tensors(tensors)
        st.save_file(str(path), tensors)
        return
    raw = open(path, "rb").read()
    header = json.loads(raw[8:f.data_start])
    edit_header(header)
    text = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + raw[f.data_start:])


def add_bias(t):
    t["model.layers.0.self_attn.q_proj.bias"] = np.zeros(48, np.float32)


def add_extra(t):
    t["model.layers.1.self_attn.q_norm.weight"] = np.ones(12, np.float32)


def make_int8(t):
    t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].astype(np.int8)


def make_nan(t):
    t["model.layers.1.mlp.down_proj.weight"][3, 4] = np.nan


def drop(name):
    return lambda t: t.pop(name)


def set_offsets(name, offsets):
    def edit(header):
        header[name]["data_offsets"] = offsets
    return edit


def set_key(name, key, value):
    def edit(header):
        header[name][key] = value
    return edit


def overlap(header):
    a, b = header["model.layers.0.input_layernorm.weight"], header["model.layers.0.post_attention_layernorm.weight"]
    b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + b["data_offsets"][1] - b["data_offsets"][0]]


def write_bytes(rel, data):
    def edit(d):
        (d / rel).write_bytes(data)
    return edit


def truncate_file(d):
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])


def bad_json(d):
    p = d / "model.safetensors"
    raw = bytearray(p.read_bytes())
    raw[8:12] = b"{{{{"
    p.write_bytes(bytes(raw))


def huge_header(d):
    p = d / "model.safetensors"
    raw = p.read_bytes()
    p.write_bytes(struct.pack("<Q", len(raw)) + raw[8:])


EMB = "model.embed_tokens.weight"
NORM0 = "model.layers.0.input_layernorm.weight"  # 48 floats = 192 bytes

# name: (extra_config, function(dir) that breaks the checkpoint, words the message must contain)
REFUSALS = {
    "unknown-architecture": ({"architectures": ["GPT2LMHeadModel"]}, None, ["architectures", "GPT2LMHeadModel"]),
    "unknown-model-type": ({"model_type": "qwen2"}, None, ["model_type", "qwen2"]),
    "quantization-config": ({"quantization_config": {"quant_method": "gptq"}}, None, ["quantization_config"]),
    "attention-bias": ({"attention_bias": True}, None, ["attention_bias"]),
    "mlp-bias": ({"mlp_bias": True}, None, ["mlp_bias"]),
    "hidden-act": ({"hidden_act": "gelu"}, None, ["hidden_act", "gelu"]),
    # Llama turns every dimension whatever partial_rotary_factor says (transformers 5.17), and could
    # not apply a scaled type's frequencies sized by a part of the head
    "partial-rotary-scaled": ({"partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                              None, ["partial_rotary_factor", "transformers cannot run it either"]),
    "longrope-factors": ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0] * 5,
                                           "long_factor": [2.0] * 6}}, None, ["short_factor", "list of 6 numbers"]),
    "longrope-bad-factor": ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0] * 6,
                                              "long_factor": [2.0] * 5 + [0]}}, None, ["long_factor", "> 0"]),
    "gemma": ({"model_type": "gemma3"}, None, ["gemma3", "vision tower", "Gemma3ForCausalLM"]),
    "moe": ({"model_type": "qwen3_moe"}, None, ["qwen3_moe", "mixture of experts"]),
    "layer-type": ({"layer_types": ["full_attention", "chunked_attention"]}, None, ["layer_types", "chunked_attention"]),
    "layer-types-count": ({"layer_types": ["full_attention"]}, None, ["layer_types", "each of the 2 layers"]),
    "sliding-without-window": ({"layer_types": ["full_attention", "sliding_attention"]}, None,
                               ["sliding_attention", "sliding_window is not set"]),
    "nope-not-smollm3": ({"no_rope_layers": [1, 0]}, None, ["no_rope_layers", "'llama'"]),
    "unknown-rope": ({"rope_scaling": {"type": "ntk-by-parts", "factor": 2.0}}, None, ["ntk-by-parts"]),
    "llama3-missing-key": ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 16}}, None, ["low_freq_factor"]),
    "rope-factor-missing": ({"rope_scaling": {"rope_type": "linear"}}, None, ["factor"]),
    "missing-config-key": ({"rms_norm_eps": None}, None, ["rms_norm_eps"]),
    "bad-kv-heads": ({"num_key_value_heads": 3}, None, ["num_key_value_heads"]),
    "eos-out-of-range": ({"eos_token_id": 70}, None, ["eos_token_id"]),
    "shape-mismatch": ({"intermediate_size": 80}, None, ["model.layers.0.mlp.gate_proj.weight", "[72, 48]", "[80, 48]"]),
    "untied-without-lm-head": ({"tie_word_embeddings": False}, None, ["lm_head.weight", "missing"]),
    "no-config": ({}, lambda d: (d / "config.json").unlink(), ["config.json"]),
    "no-weights": ({}, lambda d: (d / "model.safetensors").unlink(), ["model.safetensors"]),
    "bias-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors", edit_tensors=add_bias), ["q_proj.bias"]),
    "extra-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors", edit_tensors=add_extra), ["q_norm"]),
    "missing-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors",
                                                      edit_tensors=drop("model.layers.1.mlp.up_proj.weight")),
                       ["model.layers.1.mlp.up_proj.weight", "missing"]),
    "int8-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors", edit_tensors=make_int8),
                    ["model.layers.0.mlp.up_proj.weight", "I8"]),
    "nan": ({}, lambda d: edit_safetensors(d / "model.safetensors", edit_tensors=make_nan),
            ["model.layers.1.mlp.down_proj.weight", "NaN"]),
    "st-header-beyond-file": ({}, huge_header, ["model.safetensors", "header size"]),
    "st-truncated": ({}, truncate_file, ["model.safetensors", "outside the data buffer"]),
    "st-bad-json": ({}, bad_json, ["model.safetensors", "JSON"]),
    "st-offsets-outside": ({}, lambda d: edit_safetensors(d / "model.safetensors",
                                                          set_offsets(NORM0, [10**9, 10**9 + 192])),
                           [NORM0, "outside"]),
    "st-end-before-begin": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_offsets(NORM0, [192, 0])),
                            [NORM0, "end before"]),
    "st-size-mismatch": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_key(NORM0, "shape", [47])),
                         [NORM0, "needs 188"]),
    "st-overlap": ({}, lambda d: edit_safetensors(d / "model.safetensors", overlap), ["overlap", NORM0]),
    "st-unknown-dtype": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_key(EMB, "dtype", "F12")),
                         [EMB, "F12"]),
    "index-missing-shard": ({}, write_bytes("model.safetensors.index.json",
                                            b'{"weight_map": {"model.norm.weight": "model-00009-of-00009.safetensors"}}'),
                            ["model-00009-of-00009.safetensors", "missing"]),
    "corrupt-bin": ({}, lambda d: ((d / "model.safetensors").unlink(), (d / "pytorch_model.bin").write_bytes(b"junk")),
                    ["pytorch_model.bin", "torch.load"]),
}


# More hostile inputs (tests/test_hostile.py has the C loader's side): a safetensors file broken in
# every way its header can be, index files that point outside the directory, config.json values of
# the wrong type, and configs that the loader would refuse, which must not become a model file.

def write_header(d, text):
    """model.safetensors with this raw header (and the old data buffer after it)."""
    p = d / "model.safetensors"
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    p.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def write_config(text):
    return write_bytes("config.json", text)


def index_listing(shard_of):
    """An index file mapping every tensor of model.safetensors to a shard, with some remapped."""
    def edit(d):
        names = st.SafetensorsFile(str(d / "model.safetensors")).tensors
        weight_map = {n: shard_of.get(n, "model.safetensors") for n in names}
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        st.save_file(str(d / "other.safetensors"), {})
    return edit


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
REFUSALS.update({
    "st-too-short": ({}, write_bytes("model.safetensors", b"abc"), ["model.safetensors", "too short"]),
    "st-header-length-2^64": ({}, write_bytes("model.safetensors", struct.pack("<Q", 2**64 - 1)),
                              ["model.safetensors", "header size 18446744073709551615"]),
    "st-header-not-object": ({}, lambda d: write_header(d, b"[1, 2]"), ["model.safetensors", "not a JSON object"]),
    "st-header-not-utf8": ({}, lambda d: write_header(d, b"\xff\xfe{}"), ["model.safetensors", "not valid JSON"]),
    "st-header-deeply-nested": ({}, lambda d: write_header(d, b"[" * 100000 + b"]" * 100000),
                                ["model.safetensors", "not valid JSON"]),
    "st-entry-not-object": ({}, lambda d: edit_safetensors(d / "model.safetensors", lambda h: h.__setitem__(NORM0, 5)),
                            [NORM0, "not an object"]),
    "st-negative-shape": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_key(NORM0, "shape", [-48])),
                          [NORM0, "shape"]),
    "st-bool-shape": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_key(NORM0, "shape", [True])),
                      [NORM0, "shape"]),
    "st-offsets-not-pair": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_offsets(NORM0, [0])),
                            [NORM0, "data_offsets"]),
    "st-offsets-float": ({}, lambda d: edit_safetensors(d / "model.safetensors", set_offsets(NORM0, [0.0, 192.0])),
                         [NORM0, "data_offsets"]),
    "st-f8-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors", lambda h: h[EMB].update(
        dtype="F8_E4M3", shape=[70, 192])), [EMB, "F8_E4M3"]),
    "st-bool-tensor": ({}, lambda d: edit_safetensors(d / "model.safetensors", lambda h: h[NORM0].update(
        dtype="BOOL", shape=[192])), [NORM0, "BOOL"]),
    "index-not-json": ({}, write_bytes("model.safetensors.index.json", b"{"), ["index.json", "not a valid index"]),
    "index-path-traversal": ({}, write_bytes("model.safetensors.index.json",
                                             b'{"weight_map": {"model.norm.weight": "../model.safetensors"}}'),
                             ["model.norm.weight", "../model.safetensors", "not a file name"]),
    "index-tensor-not-in-shard": ({}, index_listing({"model.norm.weight": "other.safetensors"}),
                                  ["other.safetensors", "model.norm.weight", "not in the file"]),
    "config-not-object": ({}, write_config(b"[]"), ["config.json", "not a JSON object"]),
    "config-bad-json": ({}, write_config(b'{"hidden_size": 48,'), ["config.json", "not valid JSON"]),
    "config-deeply-nested": ({}, write_config(b"[" * 100000), ["config.json", "not valid JSON"]),
    "config-string-number": ({"hidden_size": "48"}, None, ["hidden_size", "'48'"]),
    "config-bool-number": ({"num_hidden_layers": True}, None, ["num_hidden_layers"]),
    "config-int32-overflow": ({"intermediate_size": 2**31}, None, ["intermediate_size", "2147483648"]),
    "config-negative-theta": ({"rope_theta": -1.0}, None, ["rope_theta"]),
    "architectures-nested-list": ({"architectures": [["LlamaForCausalLM"]]}, None, ["architectures"]),
    "model-type-list": ({"model_type": ["llama"]}, None, ["model_type"]),
    "sliding-window-string": ({"sliding_window": "4096"}, None, ["sliding_window", "'4096'"]),
    "tie-word-embeddings-string": ({"tie_word_embeddings": "no"}, None, ["tie_word_embeddings", "'no'"]),
    "rope-scaling-string": ({"rope_scaling": "linear"}, None, ["rope_scaling", "not an object"]),
    "rope-type-list": ({"rope_scaling": {"rope_type": ["yarn"], "factor": 2.0}}, None, ["rope_scaling", "rope type"]),
    "rope-factor-below-1": ({"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, None, ["factor", "below 1"]),
    "rope-factor-nan": ({"rope_scaling": {"rope_type": "linear", "factor": float("nan")}}, None, ["factor", "nan"]),
    # Values the C loader refuses (model.c check_shape, rope.c rope_params_check): no file is written.
    "max-pos-beyond-loader": ({"max_position_embeddings": 2**25}, None,
                              ["max_position_embeddings", "33554432", "16777216"]),
    "head-dim-beyond-loader": ({"head_dim": 2048}, None, ["head_dim", "2048", "1024"]),
    "rms-eps-1": ({"rms_norm_eps": 1.0}, None, ["rms_norm_eps", "below 1"]),
    "dynamic-head-dim-2": ({"head_dim": 2, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, None,
                           ["head_dim", "dynamic"]),
    "yarn-theta-1": ({"rope_theta": 1.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, None,
                     ["rope_theta", "yarn"]),
    "yarn-betas-swapped": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 1.0, "beta_slow": 2.0}},
                           None, ["beta_fast", "beta_slow"]),
    "llama3-orig-beyond-loader": ({"rope_scaling": {**LLAMA3, "original_max_position_embeddings": 2**25}}, None,
                                  ["original_max_position_embeddings", "33554432"]),
    "shape-mismatch-embedding": ({"vocab_size": 71}, None, [EMB, "[70, 48]", "[71, 48]"]),
    "shape-mismatch-kv-heads": ({"num_key_value_heads": 2}, None,
                                ["model.layers.0.self_attn.k_proj.weight", "[48, 48]", "[24, 48]"]),
})

# What this program does not run, by name (issue 49, item 8): refused whatever the rest of the config says.
PER_TYPE = {"full_attention": {"rope_type": "default", "rope_theta": 1e4},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e6}}
REFUSALS.update({
    "gemma3n": ({"model_type": "gemma3n_text", "architectures": ["Gemma3nForCausalLM"]}, None,
                ["gemma3n_text", "per-layer embeddings", "AltUp"]),
    "gemma3n-multimodal": ({"model_type": "gemma3n"}, None, ["gemma3n", "per-layer embeddings"]),
    "gemma4": ({"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"]}, None,
               ["gemma4_text", "proportional partial rotary", "second head_dim"]),
    "gemma4-head-dim-key": ({"global_head_dim": 512}, None, ["global_head_dim", "second head_dim"]),
    "moe-mixtral": ({"model_type": "mixtral"}, None, ["mixtral", "mixture of experts"]),
    "moe-olmoe": ({"model_type": "olmoe"}, None, ["olmoe", "mixture of experts"]),
    "moe-key": ({"num_local_experts": 8}, None, ["num_local_experts", "mixture of experts"]),
    "moe-routed-key": ({"n_routed_experts": 64}, None, ["n_routed_experts", "mixture of experts"]),
    "mla-deepseek": ({"model_type": "deepseek_v3"}, None, ["deepseek_v3", "multi-head latent attention (MLA)"]),
    "mla-key": ({"kv_lora_rank": 512}, None, ["kv_lora_rank", "latent attention"]),
    "deltanet-qwen3-next": ({"model_type": "qwen3_next"}, None, ["qwen3_next", "DeltaNet"]),
    "deltanet-qwen3.5": ({"model_type": "qwen3_5_text"}, None, ["qwen3_5_text", "DeltaNet"]),
    "deltanet-layer-type": ({"layer_types": ["full_attention", "linear_attention"]}, None,
                            ["layer_types", "'linear_attention'", "DeltaNet"]),
    "chunked-layer-type": ({"layer_types": ["chunked_attention", "full_attention"]}, None,
                           ["layer_types", "Llama 4's chunked attention"]),
    "bidirectional": ({"use_bidirectional_attention": True}, None, ["use_bidirectional_attention"]),
    # transformers 5's rope_parameters keyed by layer type
    "rope-per-type-unknown-type": ({"rope_parameters": {**PER_TYPE, "linear_attention": {"rope_type": "default"}}}, None,
                                   ["rope_parameters.linear_attention", "DeltaNet"]),
    "rope-per-type-on-one-rope-family": ({"rope_parameters": PER_TYPE}, None,
                                         ["rope_parameters", "'llama' turns every layer with one RoPE"]),
    "rope-per-type-no-type": ({"rope_parameters": {"full_attention": {"rope_theta": 1e4, "factor": 2.0}}}, None,
                              ["rope_parameters", "no rope_type"]),
})


def family_checkpoint(d, case, edits):
    """data/families2/case copied to d with edits merged into its config.json (a value of None deletes
    the key): a checkpoint of one of the per-layer families with one thing wrong."""
    shutil.copytree(REPO / "data" / "families2" / case, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(edits)
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))


GEMMA3_V5 = {"rope_theta": None, "rope_local_base_freq": None, "rope_scaling": None,
             "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
FAMILY_REFUSALS = {
    # softcaps: null is none; a number c caps scores at c tanh(s / c) and must be > 0 (and >= 1e-3, the
    # loader's range)
    "attn-softcap-0": ("gemma2-softcap", {"attn_logit_softcapping": 0}, ["attn_logit_softcapping", "positive"]),
    "final-softcap-negative": ("gemma2-softcap", {"final_logit_softcapping": -30.0},
                               ["final_logit_softcapping", "-30.0", "positive"]),
    "attn-softcap-tiny": ("gemma2-softcap", {"attn_logit_softcapping": 1e-4},
                          ["attn_logit_softcapping", "f_attn_logit_softcapping = 0.0001", "outside [0.001, 1e+06]"]),
    "gemma3-softcap-0": ("gemma3-two-bases", {"final_logit_softcapping": 0.0}, ["final_logit_softcapping"]),
    "query-pre-attn-scalar-0": ("gemma2-softcap", {"query_pre_attn_scalar": 0}, ["query_pre_attn_scalar", "positive"]),
    "query-pre-attn-scalar-negative": ("gemma3-two-bases", {"query_pre_attn_scalar": -32},
                                       ["query_pre_attn_scalar", "-32"]),
    "query-pre-attn-scalar-huge": ("gemma2-softcap", {"query_pre_attn_scalar": 1e14},
                                   ["query_pre_attn_scalar", "f_attention_scale", "outside"]),
    # Granite's muP multipliers
    "granite-embedding-0": ("granite-mup", {"embedding_multiplier": 0}, ["embedding_multiplier", "positive"]),
    "granite-attention-negative": ("granite-mup", {"attention_multiplier": -0.05}, ["attention_multiplier"]),
    "granite-residual-0": ("granite-mup", {"residual_multiplier": 0.0}, ["residual_multiplier"]),
    "granite-logits-0": ("granite-mup", {"logits_scaling": 0}, ["logits_scaling"]),
    "granite-embedding-huge": ("granite-mup", {"embedding_multiplier": 1e7},
                               ["embedding_multiplier", "f_embedding_scale", "outside [1e-06, 1e+06]"]),
    # the local RoPE's base: above 1 (the loader reads [1.0001, 1e12])
    "local-base-1": ("gemma3-two-bases", {"rope_local_base_freq": 1.0},
                     ["rope_local_base_freq", "rope_freq_base_train_swa = 1", "above 1"]),
    "local-base-half": ("gemma3-linear-global", {"rope_local_base_freq": 0.5}, ["rope_local_base_freq"]),
    "local-base-0": ("gemma3-linear-global", {"rope_local_base_freq": 0}, ["rope_local_base_freq", "positive"]),
    "local-base-v5": ("gemma3-two-bases", {**GEMMA3_V5, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1.0}}},
        ["rope_parameters.sliding_attention.rope_theta", "rope_freq_base_train_swa"]),
    "olmo3-local-base-v5": ("olmo3-swa-yarn", {"rope_scaling": None, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 0.9}}},
        ["rope_parameters.sliding_attention.rope_theta"]),
    "local-rope-scaled-v5": ("gemma3-two-bases", {**GEMMA3_V5, "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4}}},
        ["rope_parameters.sliding_attention.rope_type", "'linear'", "unscaled"]),
    # layer patterns that do not fit the layer count or contradict layer_types
    "pattern-longer-than-model": ("gemma3-two-bases", {"sliding_window_pattern": 7},
                                  ["sliding_window_pattern", "7", "num_hidden_layers is 6", "does not fit"]),
    "pattern-0": ("gemma3-two-bases", {"sliding_window_pattern": 0}, ["sliding_window_pattern", "positive integer"]),
    "pattern-letters-too-long": ("exaone4-global-nope", {"layer_types": None, "sliding_window_pattern": "LLLLG"},
                                 ["sliding_window_pattern", "'LLLLG'", "does not fit"]),
    "pattern-bad-letters": ("exaone4-global-nope", {"layer_types": None, "sliding_window_pattern": "LLXG"},
                            ["sliding_window_pattern", "'LLXG'"]),
    "pattern-contradicts-layer-types": ("gemma3-linear-global", {"sliding_window_pattern": 3},
                                        ["sliding_window_pattern", "layer 2 full", "layer_types says 'sliding_attention'"]),
    "pattern-contradicts-layer-types-letters": ("exaone4-global-nope", {"sliding_window_pattern": "LLGG"},
                                                ["sliding_window_pattern", "'LLGG' makes layer 2 full"]),
    "layer-types-count-family": ("gemma3-linear-global", {"layer_types": ["sliding_attention"] * 5 + ["full_attention"] * 2},
                                 ["layer_types", "each of the 6 layers"]),
    "layer-types-unknown-family": ("olmo3-swa-yarn", {"layer_types": ["sliding_attention"] * 3 + ["mamba"]},
                                   ["layer_types", "'mamba'"]),
    "sliding-window-beyond-loader": ("gemma2-softcap", {"sliding_window": 2**25}, ["sliding_window", "2^24"]),
    # Ministral 3's query temperature
    "beta-negative": ("ministral3-yarn-beta", {"rope_parameters": {**json.loads(
        (REPO / "data/families2/ministral3-yarn-beta/config.json").read_text())["rope_parameters"],
        "llama_4_scaling_beta": -0.1}}, ["rope_parameters: llama_4_scaling_beta", "-0.1"]),
    "beta-huge": ("ministral3-yarn-beta", {"rope_parameters": {**json.loads(
        (REPO / "data/families2/ministral3-yarn-beta/config.json").read_text())["rope_parameters"],
        "llama_4_scaling_beta": 1000.0}}, ["rope_parameters.llama_4_scaling_beta", "f_attn_temp_scale", "outside"]),
    "beta-other-family": ("granite-mup", {"rope_scaling": {"rope_type": "default", "llama_4_scaling_beta": 0.1}},
                          ["rope_scaling.llama_4_scaling_beta", "'granite'"]),
}


@pytest.mark.parametrize("case", list(FAMILY_REFUSALS))
def test_family_refusal(tmp_path, capsys, case):
    """Bad values of the per-layer families' keys, each refused by name before a byte is written: the
    loader would refuse the file (loader.c HPARAMS), or the model would not be the one transformers runs."""
    src, edits, words = FAMILY_REFUSALS[case]
    hf, out_dir = tmp_path / "hf", tmp_path / "out"
    family_checkpoint(hf, src, edits)
    out_dir.mkdir()
    code, err = export_inprocess(capsys, hf, out_dir / "m.bin")
    assert code == 1 and err.startswith("error: ") and str(hf / "config.json") in err and "(hint: " in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert os.listdir(out_dir) == [], "output or temp file left behind"


def test_family_pattern_longer_than_model_beside_layer_types_runs(tmp_path, capsys):
    """A pattern longer than the model beside layer_types (a 4-layer Gemma 3 that kept the class's 6) is
    what transformers ignores too: layer_types decides, and the export is that of layer_types alone."""
    for name, edits in (("with", {"sliding_window_pattern": 7}), ("without", {"sliding_window_pattern": None})):
        family_checkpoint(tmp_path / name, "gemma3-linear-global", edits)
        (tmp_path / f"out-{name}").mkdir()
        code, err = export_inprocess(capsys, tmp_path / name, tmp_path / f"out-{name}" / "m.bin")
        assert code == 0, err
    assert (tmp_path / "out-with" / "m.bin").read_bytes() == (tmp_path / "out-without" / "m.bin").read_bytes()


def test_family_null_softcaps_run(tmp_path, capsys):
    """null softcaps are no softcap (Gemma2Config: None): exported, with no softcap in the hparams table."""
    family_checkpoint(tmp_path / "hf", "gemma2-softcap", {})
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg.update(attn_logit_softcapping=None, final_logit_softcapping=None)  # the keys there, as null
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "out").mkdir()
    code, err = export_inprocess(capsys, tmp_path / "hf", tmp_path / "out" / "m.bin")
    assert code == 0, err
    h = modelfile.read_header((tmp_path / "out" / "m.bin").read_bytes())
    assert "f_attn_logit_softcapping" not in h["hparams"] and "f_final_logit_softcapping" not in h["hparams"]
    assert h["hparams"]["f_attention_scale"] == 24 ** -0.5


def test_hparam_ranges_are_the_loaders():
    """export.py's HPARAM_RANGES (what it refuses before writing) is loader.c's HPARAMS table (what ./run
    refuses when reading), name by name: a range changed on one side only fails here."""
    src = (REPO / "loader.c").read_text()
    table = src[src.index("} HPARAMS[] = {"):]
    table = table[:table.index("};")]
    consts = {"ACT_COUNT - 1": 1, "1 << 24": 2**24}
    loader = {}
    for name, lo, hi in re.findall(r'\{"(\w+)", offsetof\(Config, \w+\), \'\w\', ([^,]+), ([^}]+)\}', table):
        loader[name] = tuple(consts[v.strip()] if v.strip() in consts else float(v) for v in (lo, hi))
    assert loader == {k: tuple(float(x) for x in v) for k, v in exporter.HPARAM_RANGES.items()}
    assert set(loader) == set(modelfile.HPARAMS)


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusal(tmp_path, capsys, case):
    extra_config, breaker, words = REFUSALS[case]
    hf, out_dir = tmp_path / "hf", tmp_path / "out"
    make_checkpoint(hf, **TIED_MHA, extra_config=extra_config)
    if breaker:
        breaker(hf)
    out_dir.mkdir()
    code, err = export_inprocess(capsys, hf, out_dir / "m.bin")
    assert code == 1
    assert err.startswith("error: ") or "\nerror: " in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert os.listdir(out_dir) == [], "output or temp file left behind"


def test_rotary_inv_freq_buffers_ignored(tmp_path, capsys):
    """Old HF checkpoints saved the rotary_emb.inv_freq buffers; they are derived data, not weights."""
    make_checkpoint(tmp_path / "hf", **TIED_MHA)
    edit_safetensors(tmp_path / "hf/model.safetensors", edit_tensors=lambda t: t.__setitem__(
        "model.layers.0.self_attn.rotary_emb.inv_freq", np.ones(6, np.float32)))
    export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")


@pytest.mark.parametrize("out", ["missing-dir/m.bin", "."], ids=["no-such-dir", "a-directory"])
def test_bad_output_path(tmp_path, capsys, out):
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / out)
    assert code == 1 and err.startswith("error: ") and "directory" in err


def test_failure_while_writing_leaves_nothing(tmp_path, capsys):
    """A failure after the temp file exists (f16 overflow in the last layer) removes it, and an
    existing OUT is left as it was."""
    make_checkpoint(tmp_path / "hf", **TIED_MHA)
    edit_safetensors(tmp_path / "hf/model.safetensors",
                     edit_tensors=lambda t: t["model.layers.1.mlp.up_proj.weight"].__setitem__((0, 0), 1e6))
    out = tmp_path / "out" / "m.bin"
    out.parent.mkdir()
    out.write_bytes(b"previous")
    code, err = export_inprocess(capsys, tmp_path / "hf", out, "--dtype", "f16")
    assert code == 1 and "model.layers.1.mlp.up_proj.weight" in err and "f16" in err
    assert os.listdir(out.parent) == ["m.bin"] and out.read_bytes() == b"previous"


def test_interrupt_leaves_nothing(tmp_path, capsys, monkeypatch):
    make_checkpoint(tmp_path / "hf", **TIED_MHA)
    (tmp_path / "out").mkdir()
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
    monkeypatch.setattr(exporter, "write_tensor", interrupted)
    code, err = export_inprocess(capsys, tmp_path / "hf", tmp_path / "out/m.bin")
    assert code == 1 and "interrupted" in err and os.listdir(tmp_path / "out") == []


# --- The command line, as a real process ---------------------------------------------------------------

def test_cli_exit_codes(tmp_path):
    ok = run_export(STORIES_HF, tmp_path / "m.bin", "--dtype", "q8_0")
    assert ok.returncode == 0 and "wrote" in ok.stderr and ok.stdout == ""
    make_checkpoint(tmp_path / "hf", **TIED_MHA, extra_config={"architectures": ["FalconForCausalLM"]})
    bad = run_export(tmp_path / "hf", tmp_path / "x.bin")
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "FalconForCausalLM" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x.bin").exists()
    assert run_export(tmp_path / "hf", tmp_path / "x.bin", "--dtype", "q4").returncode == 2
    import subprocess
    assert subprocess.run([PYTHON, str(REPO / "export/export.py")], capture_output=True).returncode == 2


# --- The safetensors reader on its own ------------------------------------------------------------------

def test_safetensors_round_trip(tmp_path):
    x = np.array([[1.0, -2.5, 3.140625], [0.0, 1e-3, -65504.0]], np.float32)
    st.save_file(str(tmp_path / "a.safetensors"), {
        "f32": x, "f16": x.astype(np.float16), "bf16": st.Raw("BF16", (2, 3), st.bf16_bits(x)),
        "empty": np.zeros((0, 4), np.float32)})
    f = st.SafetensorsFile(str(tmp_path / "a.safetensors"))
    assert f.tensors["bf16"].dtype == "BF16" and f.tensors["empty"].shape == (0, 4)
    np.testing.assert_array_equal(f.get("f32"), x)
    np.testing.assert_array_equal(f.get("f16"), x.astype(np.float16).astype(np.float32))
    # bfloat16 = the top 16 bits of a float32: 1.0 is 0x3F80, and rounding is to nearest even
    assert st.bf16_bits(np.float32([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8])).tolist() == [0x3F80, 0x3F80, 0x3F82]
    np.testing.assert_allclose(f.get("bf16"), x, rtol=2**-8)


# --- the tokenizer goes beside the model ---------------------------------------------------------

def test_tokenizer_copied_beside_the_model(tmp_path):
    hf = STORIES_HF
    out = tmp_path / "m.bin"
    proc = run_export(hf, out)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "tokenizer.model").read_bytes() == (hf / "tokenizer.model").read_bytes()
    assert "copied" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin", "tokenizer.model"]


def snapshot(d):
    """{name: (file type, bytes of a regular file, symlink target)} of everything in d."""
    out = {}
    for p in sorted(d.iterdir()):
        mode = os.lstat(p).st_mode
        out[p.name] = (stat.S_IFMT(mode), p.read_bytes() if stat.S_ISREG(mode) else None,
                       os.readlink(p) if stat.S_ISLNK(mode) else None)
    return out


def other_model(tmp_path, tokenizer=LLAMA_TOK, **extra_files):
    """stories260K's weights with another tokenizer.model (or none) and extra files: a second model."""
    hf = tmp_path / "other-hf"
    hf.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(STORIES_HF / name, hf / name)
    if tokenizer:
        shutil.copy(tokenizer, hf / "tokenizer.model")
    for name, data in extra_files.items():
        (hf / name.replace("_json", ".json")).write_bytes(data)
    return hf


def test_existing_different_tokenizer_is_refused(tmp_path):
    """A tokenizer.model of another model beside OUT: refused before anything is written (neither
    OUT nor a temp file), the file left as it was, and the hint says to use a folder of its own."""
    other = LLAMA_TOK.read_bytes()
    (tmp_path / "tokenizer.model").write_bytes(other)
    proc = run_export(STORIES_HF, tmp_path / "m.bin")
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'tokenizer.model'}: is another model's" in proc.stderr, proc.stderr
    assert "export into a folder of its own (e.g. OUT_DIR/model-name/model.bin)" in proc.stderr
    assert os.listdir(tmp_path) == ["tokenizer.model"] and (tmp_path / "tokenizer.model").read_bytes() == other


def test_two_models_one_folder(tmp_path):
    """The issue's case: a second model with another tokenizer exported beside the first is refused,
    and the first's files are byte for byte what they were (its model file and its tokenizer)."""
    out = tmp_path / "out"
    out.mkdir()
    assert run_export(STORIES_HF, out / "a.bin").returncode == 0
    before = snapshot(out)
    assert sorted(before) == ["a.bin", "tokenizer.model"]
    proc = run_export(other_model(tmp_path), out / "b.bin")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"error: {out / 'tokenizer.model'}: is another model's" in proc.stderr, proc.stderr
    assert "folder of its own" in proc.stderr
    assert snapshot(out) == before


def test_same_model_twice_one_folder(tmp_path, capsys):
    """The same checkpoint exported twice into one folder (or two dtypes of it): the tokenizer
    already there is the same bytes, so it is left as it is and both exports succeed."""
    a, b = export_ok(capsys, STORIES_HF, tmp_path / "a.bin"), None
    tok = tmp_path / "tokenizer.model"
    stamp = os.stat(tok).st_mtime_ns, os.stat(tok).st_ino
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "b.bin", "--dtype", "q8_0")
    assert code == 0, err
    assert "copied" not in err and (os.stat(tok).st_mtime_ns, os.stat(tok).st_ino) == stamp
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "a.bin")  # over itself: the same bytes again
    assert code == 0, err
    assert read_model(tmp_path / "a.bin")[0] == a[0]
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "b.bin", "tokenizer.model"]


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_tokenizer_files_of_another_model_do_not_mix(tmp_path, capsys, name):
    """A tokenizer file of another name that this checkpoint does not have (another model's
    tokenizer.json, or a chat template) is not mixed with this model's tokenizer.model: ./run would
    pick the wrong tokenizer for one of the two models, or chat would take the other's template."""
    (tmp_path / name).write_bytes(b"{}")
    before = snapshot(tmp_path)
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "m.bin")
    assert code == 1 and err.startswith("error: "), err
    assert f"{tmp_path / name}: is another model's ({STORIES_HF} has no {name})" in err and "folder of its own" in err
    assert snapshot(tmp_path) == before


def test_tokenizer_file_of_this_checkpoint_is_accepted(tmp_path, capsys):
    """A checkpoint with tokenizer.model, tokenizer.json and tokenizer_config.json: tokenizer.model
    and the config are copied; the same checkpoint again finds the same bytes and is accepted, also
    when its tokenizer.json is there too (put there by hand)."""
    hf = other_model(tmp_path, tokenizer=STORIES_HF / "tokenizer.model", tokenizer_json=b'{"a": 1}',
                     tokenizer_config_json=b'{"chat_template": "x"}')
    out = tmp_path / "out"
    out.mkdir()
    export_ok(capsys, hf, out / "m.bin")
    assert sorted(os.listdir(out)) == ["m.bin", "tokenizer.model", "tokenizer_config.json"]
    assert (out / "tokenizer_config.json").read_bytes() == b'{"chat_template": "x"}'
    shutil.copy(hf / "tokenizer.json", out / "tokenizer.json")
    export_ok(capsys, hf, out / "m2.bin")
    (out / "tokenizer_config.json").write_bytes(b'{"chat_template": "y"}')  # now another model's
    code, err = export_inprocess(capsys, hf, out / "m3.bin")
    assert code == 1 and f"{out / 'tokenizer_config.json'}: is another model's (it differs from" in err, err
    assert not (out / "m3.bin").exists()


TOKM = (STORIES_HF / "tokenizer.model").read_bytes()
TJ, CFG = b'{"model": 1}', b'{"add_bos_token": false}'
# (the checkpoint's files, the files already beside OUT, the error): each of the three files ./run
# reads beside a model, added to a folder that lacks it, left in a folder by a checkpoint that lacks
# it, and different. "Added" is issue 47's case: a tokenizer_config.json with add_bos_token false
# copied beside the first model's tokenizer.model turned its BOS off.
MIXES = {
    "config-added": ({"tokenizer.model": TOKM, "tokenizer_config.json": CFG}, {"tokenizer.model": TOKM},
                     "tokenizer_config.json: is missing beside another model's tokenizer.model, and copying"),
    "config-left": ({"tokenizer.model": TOKM}, {"tokenizer.model": TOKM, "tokenizer_config.json": CFG},
                    "tokenizer_config.json: is another model's (HF has no tokenizer_config.json)"),
    "config-differs": ({"tokenizer.model": TOKM, "tokenizer_config.json": CFG},
                       {"tokenizer.model": TOKM, "tokenizer_config.json": b"{}"},
                       "tokenizer_config.json: is another model's (it differs from HF/tokenizer_config.json)"),
    "model-added": ({"tokenizer.model": TOKM, "tokenizer.json": TJ}, {"tokenizer.json": TJ},
                    "tokenizer.model: is missing beside another model's tokenizer.json, and copying"),
    "model-left": ({"tokenizer.json": TJ}, {"tokenizer.json": TJ, "tokenizer.model": TOKM},
                   "tokenizer.model: is another model's (HF has no tokenizer.model)"),
    "model-differs": ({"tokenizer.model": TOKM}, {"tokenizer.model": LLAMA_TOK.read_bytes()},
                      "tokenizer.model: is another model's (it differs from HF/tokenizer.model)"),
    "json-added": ({"tokenizer.json": TJ, "tokenizer_config.json": CFG}, {"tokenizer_config.json": CFG},
                   "tokenizer.json: is missing beside another model's tokenizer_config.json, and copying"),
    "json-left": ({"tokenizer.model": TOKM}, {"tokenizer.model": TOKM, "tokenizer.json": TJ},
                  "tokenizer.json: is another model's (HF has no tokenizer.json)"),
    "json-differs": ({"tokenizer.json": TJ}, {"tokenizer.json": b'{"model": 2}'},
                     "tokenizer.json: is another model's (it differs from HF/tokenizer.json)"),
}


@pytest.mark.parametrize("case", list(MIXES))
def test_tokenizer_files_never_change_another_model(tmp_path, capsys, case):
    """Whatever the order of the two exports, the files beside an earlier model stay what they were:
    refused with exit 1 and a hint the exporter accepts, nothing written; the hint's folder of its
    own then takes the export."""
    ours, theirs, words = MIXES[case]
    hf = tmp_path / "HF"
    hf.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(STORIES_HF / name, hf / name)
    for name, data in ours.items():
        (hf / name).write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    for name, data in theirs.items():
        (out / name).write_bytes(data)
    before = snapshot(out)
    code, err = export_inprocess(capsys, hf, out / "m.bin")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    assert f"{out}/{words}".replace("HF", str(hf)) in err, err
    assert err.endswith("(hint: export into a folder of its own (e.g. OUT_DIR/model-name/model.bin))\n"), err
    assert snapshot(out) == before
    (out / "model-name").mkdir()
    export_ok(capsys, hf, out / "model-name" / "model.bin")


def test_generation_config_beside_the_model_is_left_alone(tmp_path, capsys):
    """generation_config.json is never copied (its end ids go into the header, and ./run does not
    read the file): one beside OUT, from another model, is left as it is, and none is added."""
    hf = other_model(tmp_path, tokenizer=STORIES_HF / "tokenizer.model", generation_config_json=b'{"eos_token_id": 2}')
    out = tmp_path / "out"
    out.mkdir()
    export_ok(capsys, hf, out / "a.bin")
    assert sorted(os.listdir(out)) == ["a.bin", "tokenizer.model"]
    (out / "generation_config.json").write_bytes(b'{"eos_token_id": 7}')
    export_ok(capsys, STORIES_HF, out / "b.bin")
    assert (out / "generation_config.json").read_bytes() == b'{"eos_token_id": 7}'


# --- A python3 without numpy or torch: which interpreter has them, and how to install them ------

def shadowed(tmp_path, module):
    """A PYTHONPATH on which `import module` fails as it does where the package is not installed."""
    d = tmp_path / f"no-{module}"
    d.mkdir()
    (d / f"{module}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n")
    return {**os.environ, "PYTHONPATH": str(d)}


def test_no_numpy(tmp_path):
    """Issue 47: under a python3 without numpy the exporter ended in a traceback. Now one error line
    naming the interpreter and the packages, exit 1, nothing written."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(STORIES_HF), str(out / "m.bin")],
                          capture_output=True, text=True, env=shadowed(tmp_path, "numpy"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: export.py needs numpy, and {PYTHON} cannot import it "
                                  "(No module named 'numpy') (hint: apt-get install python3-numpy python3-torch "
                                  "(or ./setup.sh) installs them for /usr/bin/python3)"), proc.stderr
    assert os.listdir(out) == []


def test_no_torch_for_a_pytorch_checkpoint(tmp_path):
    """A pytorch_model.bin needs torch (safetensors does not): without it, the same kind of error."""
    make_checkpoint(tmp_path / "hf", fmt="bin", **TIED_MHA)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(tmp_path / "hf"), str(out / "m.bin")],
                          capture_output=True, text=True, env=shadowed(tmp_path, "torch"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == (f"error: {tmp_path / 'hf' / 'pytorch_model.bin'}: is a PyTorch pickle, and {PYTHON} "
                           "cannot import torch to read it (No module named 'torch') (hint: apt-get install "
                           "python3-numpy python3-torch (or ./setup.sh) installs them for /usr/bin/python3)\n")
    assert os.listdir(out) == []


def test_other_python_is_told_the_command_that_works(tmp_path, monkeypatch):
    """Under another python3 (pyenv's), the hint is the same command with /usr/bin/python3, and
    that command is accepted."""
    out = tmp_path / "m.bin"
    monkeypatch.setattr(sys, "executable", "/opt/pyenv/versions/3.11.7/bin/python3")
    monkeypatch.setattr(sys, "argv", ["export/export.py", str(STORIES_HF), str(out)])
    hint = install_hint()
    assert hint.startswith(f"run it with Debian's /usr/bin/python3, as the README does: /usr/bin/python3 "
                           f"export/export.py {STORIES_HF} {out}; apt-get install python3-numpy"), hint
    command = hint.split(": ", 1)[1].split(";")[0]
    proc = subprocess.run(shlex.split(command), cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and out.exists(), proc.stderr


def test_no_numpy_real_interpreter(tmp_path):
    """The same with a real python3 that has no numpy, where this machine has one (pyenv's python3
    first on PATH, as in the issue)."""
    lacking = [p for p in (shutil.which("python3"), os.path.expanduser("~/.pyenv/shims/python3"))
               if p and os.access(p, os.X_OK)
               and subprocess.run([p, "-c", "import numpy"], capture_output=True).returncode != 0]
    if not lacking:
        pytest.skip("every python3 here has numpy (test_no_numpy covers the message by shadowing it)")
    proc = subprocess.run([lacking[0], "export/export.py", str(STORIES_HF), str(tmp_path / "m.bin")], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot import it (No module named 'numpy') (hint: run it with Debian's /usr/bin/python3" in proc.stderr
    assert os.listdir(tmp_path) == []


# --- Where the model file goes: a regular file or a new path, checked before writing ---------------

def make_fifo(p):
    os.mkfifo(p)


def make_socket(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    return s


def make_symlink_to_fifo(p):
    os.mkfifo(p.parent / "fifo")
    os.symlink("fifo", p)


def make_symlink_to_directory(p):
    os.mkdir(p.parent / "d")
    os.symlink("d", p)


NOT_REGULAR = {  # name -> (make it at path p, words of the error)
    "fifo": (make_fifo, ["m.bin: is a FIFO, not a regular file"]),
    "socket": (make_socket, ["m.bin: is a socket, not a regular file"]),
    "directory": (os.mkdir, ["m.bin: is a directory, not a regular file"]),
    "symlink-to-fifo": (make_symlink_to_fifo, ["m.bin (a symlink to ", "fifo): is a FIFO"]),
    "symlink-to-directory": (make_symlink_to_directory, ["m.bin (a symlink to ", "/d): is a directory"]),
}


@pytest.mark.parametrize("case", list(NOT_REGULAR))
def test_output_not_a_regular_file(tmp_path, capsys, case):
    """OUT a FIFO, socket or directory (or a symlink to one): refused with exit 1 before anything is
    written; it is still what it was, and nothing else appeared (no temp file, no tokenizer)."""
    make, words = NOT_REGULAR[case]
    kept = make(tmp_path / "m.bin")
    try:
        before = snapshot(tmp_path)
        code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "m.bin")
        assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
        for w in words:
            assert w in err, f"{w!r} not in {err!r}"
        assert "(hint: give a path to a regular file or a new one)" in err
        assert snapshot(tmp_path) == before
    finally:
        if kept is not None:
            kept.close()


def test_output_character_device(capsys, monkeypatch):
    """/dev/null as OUT (a character device, like the issue's /dev/full): refused before any file
    is created or renamed. The writers are disabled first, so a broken check cannot replace the
    device even when the tests run as root."""
    def never(*args, **kwargs):
        raise AssertionError("the exporter tried to write")
    monkeypatch.setattr(exporter.tempfile, "mkstemp", never)
    monkeypatch.setattr(exporter.os, "replace", never)
    code, err = export_inprocess(capsys, STORIES_HF, "/dev/null")
    assert code == 1 and err == ("error: /dev/null: is a character device, not a regular file (hint: give a path "
                                 "to a regular file or a new one)\n"), err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_symlink_written_through(tmp_path, capsys):
    """OUT a symlink to a regular file: the target gets the new model (atomically, renamed over it in
    its own directory), the symlink stays a symlink to it, and the tokenizer goes beside the target.
    A dangling symlink is written through the same way: its target is created."""
    direct = tmp_path / "direct"
    direct.mkdir()
    export_ok(capsys, STORIES_HF, direct / "m.bin")
    store, links = tmp_path / "store", tmp_path / "links"
    store.mkdir()
    links.mkdir()
    (store / "m.bin").write_bytes(b"old model")
    os.symlink(store / "m.bin", links / "m.bin")
    code, err = export_inprocess(capsys, STORIES_HF, links / "m.bin")
    assert code == 0, err
    assert f"wrote {links / 'm.bin'} (through the symlink, to {store / 'm.bin'})" in err
    assert os.path.islink(links / "m.bin") and os.readlink(links / "m.bin") == str(store / "m.bin")
    assert (store / "m.bin").read_bytes() == (direct / "m.bin").read_bytes()
    assert sorted(os.listdir(store)) == ["m.bin", "tokenizer.model"] and os.listdir(links) == ["m.bin"]
    os.symlink("new.bin", store / "dangling.bin")
    export_ok(capsys, STORIES_HF, store / "dangling.bin")
    assert os.path.islink(store / "dangling.bin")
    assert (store / "new.bin").read_bytes() == (direct / "m.bin").read_bytes()


def test_tokenizer_destination_not_a_regular_file(tmp_path, capsys):
    """A directory where tokenizer.model would go: refused before OUT is written, and left as it is."""
    (tmp_path / "tokenizer.model").mkdir()
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "m.bin")
    assert code == 1 and f"{tmp_path / 'tokenizer.model'}: is a directory, not a regular file" in err, err
    assert "folder of its own" in err
    assert os.listdir(tmp_path) == ["tokenizer.model"] and (tmp_path / "tokenizer.model").is_dir()


def test_output_named_like_a_tokenizer_file(tmp_path, capsys):
    code, err = export_inprocess(capsys, STORIES_HF, tmp_path / "tokenizer.model")
    assert code == 1 and "is where a tokenizer file goes" in err and os.listdir(tmp_path) == []


# --- Context names: the trained context L against the largest one the scaling supports -----------

def test_trained_context_and_supported_context(tmp_path, capsys, c_tools):
    """A Llama-3.1-style config (max_position_embeddings 64, original_max_position_embeddings 16,
    llama3 scaling): the trained context L is 16, the default --ctx is L, and the banner says both."""
    make_checkpoint(tmp_path / "hf", dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
                    max_pos=64, rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    export_ok(capsys, tmp_path / "hf", tmp_path / "m.bin")
    proc = subprocess.run([str(REPO / "run"), str(tmp_path / "m.bin"), "-z", str(TOK512), "-n", "2", "-t", "0"],
                          capture_output=True, text=True, errors="replace", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "context: n_ctx_train 16 (n_ctx_max 64 with its scaling), n_ctx 16 |" in proc.stderr
    assert "trained context L = 16" in proc.stderr


def test_empty_paths(tmp_path, capsys, monkeypatch):
    """Issue 47: an empty OUT said ": is a directory" (the current one); an empty HF_DIR looked for
    config.json in the current directory. Each is named, nothing is written."""
    monkeypatch.chdir(tmp_path)
    code, err = export_inprocess(capsys, STORIES_HF, "")
    assert code == 1 and err == ("error: OUT.bin is an empty path (hint: give the model file to write: export.py "
                                 "HF_DIR OUT.bin)\n"), err
    code, err = export_inprocess(capsys, "", tmp_path / "m.bin")
    assert code == 1 and err.startswith("error: HF_DIR is an empty path (hint: "), err
    assert os.listdir(tmp_path) == []


def test_input_not_a_checkpoint_folder(tmp_path, capsys):
    """Issue 47: HF_DIR /dev/null ended in "/dev/null/config.json: Not a directory (hint: check the
    path and free disk space)". A device or FIFO is said not to be a checkpoint folder; a checkpoint
    that cannot be read is not a disk-space problem either."""
    os.mkfifo(tmp_path / "fifo")
    for path, kind in (("/dev/null", "character device"), (tmp_path / "fifo", "FIFO")):
        code, err = export_inprocess(capsys, path, tmp_path / "m.bin")
        assert code == 1 and err == (f"error: {path}: is a {kind}, not a checkpoint folder (hint: HF_DIR is a Hugging "
                                     "Face model directory, with config.json and the weights)\n"), err
    hf = tmp_path / "hf"
    hf.mkdir()
    shutil.copy(STORIES_HF / "config.json", hf / "config.json")
    (hf / "model.safetensors").mkdir()
    code, err = export_inprocess(capsys, hf, tmp_path / "m.bin")
    assert code == 1 and err == (f"error: {hf / 'model.safetensors'}: Is a directory (hint: HF_DIR must be a readable "
                                 "Hugging Face model directory)\n"), err
    assert sorted(os.listdir(tmp_path)) == ["fifo", "hf"]


def test_model_file_instead_of_directory(tmp_path, capsys):
    """Given llama2.c's .bin (a file, not a Hugging Face directory), the exporter says ./run reads it as
    it is, and writes nothing; the same .bin does run (the control that the hint is true)."""
    out = tmp_path / "m.bin"
    code, err = export_inprocess(capsys, STORIES_LEGACY, out)
    assert code == 1 and not out.exists()
    assert f"error: {STORIES_LEGACY} is a file" in err and "./run reads it directly" in err, err
    proc = subprocess.run([str(REPO / "run"), str(STORIES_LEGACY), "-n", "4", "-t", "0"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
