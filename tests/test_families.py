"""test_families.py - the families past Llama, exported and run by our C program, against the logits
Hugging Face transformers 5.17.0 itself computed for them.

data/families/ holds seven random checkpoints written by transformers' save_pretrained on another
machine, each with the logits transformers' own forward pass gave at chosen rows of one sequence
(data/families/README.md). Here each is exported (export/export.py) and run through model.c
(tests/tools/dump_logits), and the rows are compared: max |ours - theirs| / max |theirs| below
TOL. transformers forms its RoPE angles in float32 and this program in double, so at n = 1024 the
two differ by about 1e-6 of the largest logit (printed per case).

Each feature has a control that must fail: the same exported file with that feature taken out of
it (biases zeroed, NoPE layers rotated, the sliding window off, the other LongRoPE factor set),
which must be farther than CONTROL from transformers' logits; so a pass shows the feature is run,
not that the weights alone match. The weight types f16, q8_0 and q4_0 are held to our own f32 run
of the same checkpoint. LongRoPE's rotation-consistent cache (rope.c, rope_set_length) is shown
token by token past L against the reference's decoder that keeps raw keys, with transformers'
stale short-factor keys as the control.
"""
import shutil
import struct
import subprocess

import numpy as np
import pytest

from conftest import DATA, REPO, TOOLS, run_export
from lrun.modelfile import LAYER_NO_ROPE, LAYER_SLIDING, layout, read_header, set_field

FAMILIES = DATA / "families"
TOL = 1e-4      # of the largest logit: transformers' float32 angles against our double ones
CONTROL = 1e-2  # a control with the feature taken out must be at least this far off
CASES = ["qwen2-tied", "qwen3-yarn", "smollm3-nope", "phi3-longrope-long", "phi3-longrope-short", "mistral-swa",
         "llama-partial"]


def fixture(case):
    d = FAMILIES / case
    ids = np.fromfile(d / "ids.bin", np.int32)
    rows = np.fromfile(d / "rows.bin", np.int32)
    theirs = np.fromfile(d / "logits.bin", np.float32).reshape(len(rows), -1)
    return d, ids, rows, theirs


def ours(model, ids_path, n, tmp_path, *extra):
    out = tmp_path / "logits.bin"
    proc = subprocess.run([str(TOOLS / "dump_logits"), str(model), str(ids_path), str(out), "--ctx", str(n), *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, np.float32).reshape(n, -1)


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.fixture(scope="module")
def exported(tmp_path_factory, c_tools):
    """{case: path of its f32 export}, each in a folder of its own."""
    root = tmp_path_factory.mktemp("families")
    files = {}
    for case in CASES:
        (root / case).mkdir()
        proc = run_export(FAMILIES / case, root / case / "model.bin")
        assert proc.returncode == 0, proc.stderr
        files[case] = root / case / "model.bin"
    return files


@pytest.mark.parametrize("case", CASES)
def test_logits_equal_transformers(case, exported, tmp_path):
    d, ids, rows, theirs = fixture(case)
    got = ours(exported[case], d / "ids.bin", len(ids), tmp_path)[rows]
    diff = rel(got, theirs)
    print(f"{case}: n = {len(ids)}, {len(rows)} rows, max |ours - transformers| / max |logit| = {diff:.2e}")
    assert diff < TOL


def edited(src, dst, edit):
    """A copy of the model file src at dst with edit(bytearray, header, layout) applied."""
    buf = bytearray(src.read_bytes())
    h = read_header(buf)
    edit(buf, h, {name: pieces for name, _, _, pieces in layout(h)})
    dst.write_bytes(bytes(buf))
    return dst


def zero(buf, pieces):
    for off, n in pieces:
        buf[off:off + n] = bytes(n)


def set_kinds(buf, parts, f):
    (off, n), = parts["layer_kind"]
    kinds = list(struct.unpack_from(f"<{n // 4}i", buf, off))
    struct.pack_into(f"<{n // 4}i", buf, off, *[f(k) for k in kinds])


# case: (what the control takes out, the edit of the exported file)
CONTROLS = {
    "qwen2-tied": ("q/k/v biases zeroed", lambda b, h, p: [zero(b, v) for k, v in p.items() if k[-2:] in
                                                           ("bq", "bk", "bv")]),
    "smollm3-nope": ("every layer rotated", lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_NO_ROPE)),
    "mistral-swa": ("no sliding window", lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_SLIDING)),
    # L moved past n: the short factors for a text that needs the long ones
    "phi3-longrope-long": ("short factors past L", lambda b, h, p: set_field(b, "rope_orig_ctx", 4096)),
    "phi3-longrope-short": ("long factors below L", lambda b, h, p: set_field(b, "rope_orig_ctx", 100)),
    # Qwen3's norms weighted 1: still normalized, but not as trained
    "qwen3-yarn": ("q/k norm weights set to 1", lambda b, h, p: [
        struct.pack_into(f"<{n // 4}f", b, off, *([1.0] * (n // 4)))
        for k, v in p.items() if k.endswith(("q_norm", "k_norm")) for off, n in v]),
}


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_control_without_the_feature_fails(case, exported, tmp_path):
    d, ids, rows, theirs = fixture(case)
    what, edit = CONTROLS[case]
    model = edited(exported[case], tmp_path / "control.bin", edit)
    diff = rel(ours(model, d / "ids.bin", len(ids), tmp_path)[rows], theirs)
    print(f"{case} control ({what}): max diff / max logit = {diff:.2e}")
    assert diff > CONTROL


@pytest.mark.parametrize("dtype,bound", [("f16", 2e-3), ("q8_0", 4e-2), ("q4_0", 0.5)])
@pytest.mark.parametrize("case", ["qwen2-tied", "qwen3-yarn", "phi3-longrope-long", "mistral-swa"])
def test_weight_types(case, dtype, bound, exported, tmp_path):
    """Every weight type exports and runs for the new tensors (biases and norms stay f32); the
    logits stay near our f32 run of the same checkpoint (bounds: about twice what was measured; q4_0's
    4 bits on random weights whose q and k were scaled by 6 move logits by a third of the largest)."""
    d, ids, rows, _ = fixture(case)
    (tmp_path / "m").mkdir()
    proc = run_export(d, tmp_path / "m" / "model.bin", "--dtype", dtype)
    assert proc.returncode == 0, proc.stderr
    ref = ours(exported[case], d / "ids.bin", len(ids), tmp_path)[rows]
    diff = rel(ours(tmp_path / "m" / "model.bin", d / "ids.bin", len(ids), tmp_path)[rows], ref)
    print(f"{case} {dtype}: max diff / max logit against f32 = {diff:.2e}")
    assert diff < bound


def test_longrope_token_by_token_is_rotation_consistent(exported, tmp_path):
    """Generation past L (--growing: one token at a time, the RoPE length that far). Once the text is
    longer than L, every cached key is turned with the long factors (rope_set_length; keys cached
    un-rotated): the independent reference's decoder that keeps raw keys (reference.py
    logits_cached, keys="raw") gives the same logits. transformers' cache keeps each key rotated with
    the factors of its own step, so the first L keep the short ones (keys="rotated"): the control,
    which must differ. (Neither is one forward pass over the whole text: the values and deeper
    layers' keys of earlier positions were computed when the text was shorter.)"""
    import reference
    d, ids, _, _ = fixture("phi3-longrope-long")
    ids = ids[:320]  # past L = 256 by 64 tokens
    (tmp_path / "ids.bin").write_bytes(ids.astype("<i4").tobytes())
    grown = ours(exported["phi3-longrope-long"], tmp_path / "ids.bin", len(ids), tmp_path, "--growing", "--batch", "1")
    m = reference.load(d)
    raw, stale = (m.logits_cached(list(ids), keys=k) for k in ("raw", "rotated"))
    diff, control = rel(grown, raw), rel(grown, stale)
    print(f"longrope token by token to {len(ids)} (L 256): ours vs raw-key reference {diff:.2e}; "
          f"vs transformers' stale short keys {control:.2e}")
    assert diff < TOL and control > CONTROL


def test_banner_names_the_family_and_the_layers(exported):
    for case, expect in [("smollm3-nope", ["SmolLM3", "layers: RoPE in 0-2, none (NoPE) in 3"]),
                         ("mistral-swa", ["Mistral", "every layer sees the last 64 positions (sliding window)"]),
                         ("qwen2-tied", ["Qwen2", "q/k/v biases"]),
                         ("qwen3-yarn", ["Qwen3", "q/k RMSNorm per head", "rope: yarn"]),
                         ("phi3-longrope-long", ["Phi-3", "longrope", "24 of 32 dimensions turn"])]:
        model = exported[case]
        shutil.copy(DATA / "stories260K/tokenizer.model", model.parent / "tokenizer.model")
        proc = subprocess.run([str(REPO / "run"), str(model), "-i", "a", "-n", "2", "-t", "0"], capture_output=True,
                              text=True, errors="replace")
        assert proc.returncode == 0, proc.stderr
        for e in expect:
            assert e in proc.stderr, (case, e, proc.stderr)


def test_rerope_refused_with_a_sliding_window(exported):
    proc = subprocess.run([str(REPO / "run"), str(exported["mistral-swa"]), "-i", "a", "-n", "2",
                           "--rope-scaling", "rerope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "sliding-window layers (window 64)" in proc.stderr, proc.stderr


def test_longrope_refused_without_factors(exported):
    proc = subprocess.run([str(REPO / "run"), str(exported["qwen2-tied"]), "-i", "a", "-n", "2",
                           "--rope-scaling", "longrope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "needs a LongRoPE checkpoint's short and long factors" in proc.stderr, proc.stderr
