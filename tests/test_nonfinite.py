"""test_nonfinite.py - a model whose numbers are not finite is an error, never text or a perplexity.

A NaN or an infinity in a weight, or activations that overflow, make NaN logits; sampled they gave
whitespace with exit 0, and --ppl printed `perplexity: -nan` with exit 0 (issue 47, item 3). Here
copies of stories260K with one value changed, at a known place, must end with exit 1 naming the
position whose logits were not finite and where the numbers first went wrong (the layer, found by
running the tokens again with the residual stream checked after every layer), in generation, chat
and --ppl; --check-tensors must refuse the file at load naming the tensor, for each weight type
(f32, f16 and bf16 values, q8_0's float32 and q4_0's f16 scales). Controls: the clean model passes
--check-tensors, generates and gives a finite perplexity; a weight that is finite but overflows the
computation passes --check-tensors and still stops the run.
"""
import math
import re
import struct
import subprocess

import numpy as np
import pytest

from conftest import REPO, STORIES_BIN, STORIES_HF, TEXT, TOK512, run_export
from lrun.modelfile import LEGACY_FIELDS, LEGACY_HEADER, layout, legacy_tensors, read_header

RUN = str(REPO / "run")
NAN, INF = float("nan"), float("inf")


def run(model, *args, stdin=None):
    p = subprocess.run([RUN, str(model), "-z", str(TOK512), *map(str, args)], capture_output=True, timeout=120,
                       input=stdin)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def legacy_poke(dst, name, index, value):
    """A copy of stories260K.bin (llama2.c's legacy file: float32 tensors stacked over the layers) at
    dst with tensor `name`[index] set to value."""
    buf = bytearray(STORIES_BIN.read_bytes())
    h = dict(zip(LEGACY_FIELDS, LEGACY_HEADER.unpack_from(buf)))
    off = LEGACY_HEADER.size
    for tensor, shape in legacy_tensors(**h):
        if tensor == name:
            struct.pack_into("<f", buf, off + 4 * int(np.ravel_multi_index(index, shape)), value)
            dst.write_bytes(buf)
            return dst
        off += 4 * math.prod(shape)
    raise KeyError(name)


@pytest.fixture(scope="module")
def poked(tmp_path_factory, c_tools):
    d = tmp_path_factory.mktemp("nonfinite")
    return {"w2": legacy_poke(d / "nan_w2.bin", "w2", (2, 5, 3), NAN),          # layer 2's down_proj
            "embedding": legacy_poke(d / "nan_emb.bin", "token_embedding", (1, 0), NAN),  # BOS's row
            "rms_final": legacy_poke(d / "inf_final.bin", "rms_final", (7,), INF),
            "wq_huge": legacy_poke(d / "huge_wq.bin", "wq", (3, 0, 0), 3e38)}  # finite, overflows


NOT_FINITE = re.compile(r"error: the logits at position (\d+)(?: of window (\d+))? are not finite \((NaN|infinity)\): "
                        r"the numbers first went non-finite (?:there|at position (\d+)), in (.*?) \((?:hint|every)")


@pytest.mark.parametrize("case, place", [("w2", "layer 2's MLP"), ("embedding", "the token embedding (token id 1)"),
                                         ("rms_final", "the final norm and the classifier")])
def test_generate_stops_naming_position_and_layer(poked, case, place):
    code, out, err = run(poked[case], "-n", 20, "-t", 0, "-i", "Once upon")
    m = NOT_FINITE.search(err)
    assert code == 1 and m, err
    # the prompt is BOS, Once, upon: the last one's logits are the first sampled, at position 2; the
    # damage is at position 0 (BOS) for the weights every token passes, at 2 for the classifier's.
    assert m[1] == "2" and m[5] == place and (m[4] or m[1]) == ("2" if case == "rms_final" else "0"), err
    assert out == "Once upon", out  # the prompt's echo, and nothing sampled from NaN
    assert "hint: --check-tensors" in err


def test_ppl_stops_instead_of_nan(poked):
    code, out, err = run(poked["w2"], "--ppl", TEXT, "--ctx", 64, "--ppl-windows", 2)
    m = NOT_FINITE.search(err)
    assert code == 1 and m and m[1] == "0" and m[2] == "1" and m[5] == "layer 2's MLP", err
    assert "perplexity:" not in out and "nan" not in out.lower(), out
    # blocks of 4 tokens: the same position and layer
    code, _, err = run(poked["w2"], "--ppl", TEXT, "--ctx", 64, "-b", 4, "--ppl-windows", 1)
    m = NOT_FINITE.search(err)
    assert code == 1 and m and m[1] == "0" and m[5] == "layer 2's MLP", err


def test_chat_stops(poked):
    code, out, err = run(poked["w2"], "-m", "chat", "--chat-template", "llama2", "-n", 8, stdin=b"Hello\n")
    assert code == 1 and NOT_FINITE.search(err) and "layer 2's MLP" in err, err


def test_overflow_with_finite_weights(poked):
    """A weight of 3e38 is finite: --check-tensors passes it, and the run stops where the products
    overflow, saying the weights were checked."""
    code, out, err = run(poked["wq_huge"], "--check-tensors", "-n", 40, "-t", 0, "-i", "Once upon a time")
    m = NOT_FINITE.search(err)
    assert code == 1 and m and "layer 3's attention" in err, err
    assert "(every weight is finite, --check-tensors said" in err and "hint:" not in err, err


@pytest.mark.parametrize("case, tensor", [("w2", "tensor layers.2.w2 holds NaN at row 5, column 3"),
                                          ("embedding", "tensor token_embedding holds NaN at row 1, column 0"),
                                          ("rms_final", "tensor rms_final holds +infinity at index 7")])
def test_check_tensors_names_the_tensor(poked, case, tensor):
    code, out, err = run(poked[case], "--check-tensors", "-n", 4)
    assert code == 1 and out == "" and f"--check-tensors: {tensor}" in err, err
    assert "model:" not in err  # refused at load, before anything runs


def test_clean_model_passes(c_tools):
    code, out, err = run(STORIES_BIN, "--check-tensors", "-n", 30, "-t", 0, "-i", "Once upon a time")
    assert code == 0 and out.startswith("Once upon a time, there was a little girl named Lily"), err
    code, out, err = run(STORIES_BIN, "--check-tensors", "--ppl", TEXT, "--ctx", 64, "--ppl-windows", 2)
    ppl = float(re.search(r"^perplexity: (\S+)", out, re.M)[1])
    assert code == 0 and math.isfinite(ppl) and 1 < ppl < 100, (out, err)


# Our format, each weight type: where a value lives (model.h), changed to a non-finite one.
def pokes(dtype):
    """[(tensor, piece index, byte offset within the piece, bytes, message)] for one weight type: a
    value of f32/f16/bf16 rows, a scale of q8_0 (float32, at the start of a group of 16 rows' block)
    or q4_0 (f16, the second piece). The q8_0 and q4_0 ones are in wo and w2, whose products add to
    the residual stream: a NaN in a product's output that only feeds another quantized product (wv,
    w1, w3) is rounded to a finite 8-bit number there, and only --check-tensors sees it."""
    f16_nan, bf16_inf = struct.pack("<H", 0x7E00), struct.pack("<H", 0x7F80)
    return {"f32": [("layers.1.wk", 0, 4 * 7, struct.pack("<f", NAN), "NaN at row 0, column 7")],
            "f16": [("layers.3.w1", 0, 2 * 64, f16_nan, "NaN at row 1, column 0")],
            # bf16_r16: column c of row 16g + i at the uint16 16 cp g + 32 (c / 2) + 2 i + c % 2
            "bf16": [("layers.0.wo", 0, 2 * (32 * 1 + 2 * 3 + 0), bf16_inf, "+infinity at row 3, column 2")],
            # q8_0_r16: a group's block starts with its 16 rows' float32 scales: row 5's, block 0
            "q8_0": [("layers.4.w2", 0, 4 * 5, struct.pack("<f", INF), "at row 5, column 0")],
            # q4_0: the f16 scales follow the values, one per block of 32: row 2's first block
            "q4_0": [("layers.2.wo", 1, 2 * 2 * (64 // 32), f16_nan, "NaN at row 2, column 0")],
            }[dtype]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0", "q4_0"])
def test_check_tensors_every_weight_type(tmp_path, c_tools, dtype):
    out = tmp_path / "model.bin"
    proc = run_export(STORIES_HF, out, "--dtype", dtype)
    assert proc.returncode == 0, proc.stderr
    code, _, err = run(out, "--check-tensors", "-n", 2)
    assert code == 0, err  # the export as it is: every value finite
    buf = bytearray(out.read_bytes())
    pieces = {name: p for name, _, _, p in layout(read_header(buf))}
    for tensor, piece, offset, value, where in pokes(dtype):
        start, size = pieces[tensor][piece]
        assert offset + len(value) <= size
        bad = bytearray(buf)
        bad[start + offset:start + offset + len(value)] = value
        damaged = tmp_path / f"bad-{tensor}.bin"
        damaged.write_bytes(bad)
        code, _, err = run(damaged, "--check-tensors", "-n", 2)
        assert code == 1 and f"--check-tensors: tensor {tensor} holds " in err and where in err, err
        code, _, err = run(damaged, "-n", 8, "-t", 0)  # and without the flag the run stops at the logits
        assert code == 1 and NOT_FINITE.search(err), err
