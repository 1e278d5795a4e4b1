"""--f16-as-bf16: f16 weights multiplied as bf16, opt-in, with a stated bound (model.h, transformer_copy_weights).

At load every matrix is made bf16_r16 (kernels.h, matrix_to_r16): each weight rounded to
nearest even from f16 to bf16 (f16 has 11 significant bits, bf16 8: each weight moves by at most
2^-8 of itself), laid out as export.py writes bf16; each activation is rounded likewise and the
products run in bf16_r16's order, so a prompt's logits are still those of its tokens one at a time,
bit for bit. What is checked, on the bundled trained models exported as f16 (stories260K,
tiny64x512) and their held-out text (--ctx 512, every window):
  - the flag moves perplexity by less than 0.1% (the stated bound; measured 2026-11-26: stories260K
    6.116550 -> 6.115512, -0.017%; tiny64x512 7.890703 -> 7.890284, -0.005%), and does move it (the
    control: the rounding is done);
  - the f16 model with the flag gives the logits, bit for bit, of a bf16_r16 file written here from
    the f16 file by numpy (each weight widened, rounded to bf16, laid out by lrun/modelfile.py): the
    copy made at load is that file; the control: the same file unrounded (truncated) differs;
  - without the flag f16 is what it was before the flag existed, to the printed digit (the same
    numbers as commit b53d4dc's build; its logits matched bit for bit when the flag was added);
  - a prompt's logits with the flag equal its tokens fed one at a time, bit for bit (dump_logits);
  - the banner says the flag is on; on a model that is not f16 the flag is refused (exit 2).
"""
import re
import subprocess

import pytest

from conftest import HELDOUT, REPO, STORIES_HF, TINY64_HF, TOK512, TOOLS, run_export

# Perplexity of the f16 exports without the flag, as before it existed (commit b53d4dc).
BEFORE = {"stories260K": "6.116550", "tiny64x512": "7.890703"}
BOUND = 0.001  # the flag moves perplexity by less than this, relative
MODELS = {"stories260K": (STORIES_HF, TOK512), "tiny64x512": (TINY64_HF, TINY64_HF / "tokenizer.model")}


@pytest.fixture(scope="module")
def exports(c_tools, tmp_path_factory):
    """{name: (f16 model, tokenizer)}, and the f32 and bf16 stories260K exports."""
    tmp = tmp_path_factory.mktemp("f16b")
    out = {}
    for name, (hf, tok) in MODELS.items():
        model = tmp / f"{name}-f16.bin"
        proc = run_export(hf, model, "--dtype", "f16")
        assert proc.returncode == 0, proc.stderr
        out[name] = (model, tok)
    for dtype in ("f32", "bf16"):
        model = tmp / f"stories260K-{dtype}.bin"
        assert run_export(STORIES_HF, model, "--dtype", dtype).returncode == 0
        out[dtype] = (model, TOK512)
    return out


def ppl(model, tok, *flags):
    proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(tok), "--ppl", str(HELDOUT), "--ctx", "512",
                           *flags], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"^perplexity: ([\d.]+)$", proc.stdout, re.M)
    assert m, proc.stdout
    return m.group(1), proc.stderr


@pytest.mark.parametrize("name", list(MODELS))
def test_bound_and_unchanged_default(exports, name):
    model, tok = exports[name]
    plain, banner = ppl(model, tok)
    flagged, banner_flag = ppl(model, tok, "--f16-as-bf16")
    rel = abs(float(flagged) - float(plain)) / float(plain)
    print(f"{name}: f16 {plain}, --f16-as-bf16 {flagged} ({rel:.4%}; bound {BOUND:.1%})")
    assert plain == BEFORE[name], f"f16 without the flag moved: {plain}, before {BEFORE[name]}"
    assert rel < BOUND
    assert flagged != plain, "the flag changed nothing: the weights were not rounded"
    assert re.search(r"copied at load: f16 to bf16_r16, [\d.]+ MiB, multiplied as bf16: --f16-as-bf16", banner_flag)
    assert "as bf16" not in banner


def dump(model, ids, out, *flags):
    proc = subprocess.run([str(TOOLS / "dump_logits"), str(model), str(ids), str(out), *flags], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


@pytest.mark.parametrize("name", list(MODELS))
def test_prompt_equals_one_at_a_time(exports, name, tmp_path):
    model, _ = exports[name]
    ids = tmp_path / "ids.bin"
    state = 12345
    values = [1]
    for _ in range(200):  # token ids below the vocabulary of 512
        state = (state * 1103515245 + 12345) % 2**31
        values.append(3 + state % 509)
    ids.write_bytes(b"".join(v.to_bytes(4, "little") for v in values))
    prompt = dump(model, ids, tmp_path / "a.bin", "--f16-as-bf16", "--batch", "64")
    alone = dump(model, ids, tmp_path / "b.bin", "--f16-as-bf16", "--growing")
    assert prompt == alone, "a prompt's logits differ from its tokens one at a time"
    assert dump(model, ids, tmp_path / "c.bin", "--f16-as-bf16", "--batch", "7", "--threads", "1") == prompt
    assert dump(model, ids, tmp_path / "d.bin", "--batch", "64") != prompt  # the control: the flag is applied


def bf16_r16_of(f16_model, out, truncate=False):
    """The f16 model file rewritten as bf16_r16, each weight widened and rounded to nearest even (or,
    truncate, its top 16 bits as they are), by numpy and lrun/modelfile.py: not by the C code."""
    import numpy as np
    from lrun.hf_checkpoint import bf16_bits
    from lrun.modelfile import DTYPES, br16_from_rows, read_header, relayout
    data = f16_model.read_bytes()

    def parts(buf, shape):
        w = np.frombuffer(buf, "<f2", shape[0] * shape[1]).astype(np.float32).reshape(shape)
        bits = (w.view(np.uint32) >> 16).astype(np.uint16) if truncate else bf16_bits(w)
        return [br16_from_rows(np.ascontiguousarray(bits, dtype="<u2"))]
    out.write_bytes(relayout(data, read_header(data), DTYPES["bf16_r16"], parts))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_same_as_a_bf16_r16_file(exports, name, tmp_path):
    model, _ = exports[name]
    ids = tmp_path / "ids.bin"
    ids.write_bytes(b"".join(v.to_bytes(4, "little") for v in [1] + [3 + (i * 37) % 509 for i in range(100)]))
    flagged = dump(model, ids, tmp_path / "a.bin", "--f16-as-bf16")
    assert dump(bf16_r16_of(model, tmp_path / "r16.bin"), ids, tmp_path / "b.bin") == flagged
    assert dump(bf16_r16_of(model, tmp_path / "cut.bin", truncate=True), ids, tmp_path / "c.bin") != flagged


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_refused_on_other_types(exports, dtype):
    model, tok = exports[dtype]
    proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(tok), "-n", "4", "--f16-as-bf16"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    name = {"bf16": "bf16_r16"}.get(dtype, dtype)  # what export.py --dtype bf16 writes
    assert f"error: --f16-as-bf16 is for f16 models, and this one's weights are {name}" in proc.stderr
    assert proc.stdout == ""
