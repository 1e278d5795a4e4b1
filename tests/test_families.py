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
from families import case_data, edited, export_all, ours, rel, set_kinds
from lrun.modelfile import LAYER_NO_ROPE, LAYER_SLIDING, set_field

FAMILIES = DATA / "families"
TOL = 1e-4      # of the largest logit: transformers' float32 angles against our double ones
CONTROL = 1e-2  # a control with the feature taken out must be at least this far off
CASES = ["qwen2-tied", "qwen3-yarn", "smollm3-nope", "phi3-longrope-long", "phi3-longrope-short", "mistral-swa",
         "llama-partial"]


def fixture(case):
    return case_data(FAMILIES, case)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, c_tools):
    """{case: path of its f32 export}, each in a folder of its own."""
    files = export_all(tmp_path_factory.mktemp("families"), FAMILIES, CASES)
    return files


@pytest.mark.parametrize("case", CASES)
def test_logits_equal_transformers(case, exported, tmp_path):
    d, ids, rows, theirs = fixture(case)
    got = ours(exported[case], d / "ids.bin", len(ids), tmp_path)[rows]
    diff = rel(got, theirs)
    print(f"{case}: n = {len(ids)}, {len(rows)} rows, max |ours - transformers| / max |logit| = {diff:.2e}")
    assert diff < TOL




def zero(buf, pieces):
    for off, n in pieces:
        buf[off:off + n] = bytes(n)




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


# --- Random checkpoints of every family against the reference --------------------------------------
# lrun/hf_random.py writes a checkpoint of each family in either config form transformers writes (4.x's
# top-level rope_theta / rope_scaling, 5.x's rope_parameters); tests/reference.py (a PyTorch reading of
# transformers' modeling files) runs the Hugging Face directory itself. Beyond the fixtures' shapes:
# Qwen3 with n_heads * head_dim != hidden_size, SmolLM3 with NoPE every 2nd layer, Phi-3 with half of
# each head turned, Mistral with a window of 24 in some layers only (layer_types), and each run both
# as its config says and with a context-extension mode at 4x L on top.

SHAPE = dict(dim=48, hidden_dim=96, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=512, max_pos=64)
L = SHAPE["max_pos"]
RANDOM = {
    "qwen2": dict(architecture="Qwen2ForCausalLM", rope_theta=1e6),
    "qwen3": dict(architecture="Qwen3ForCausalLM", head_dim=16, tied=False,
                  rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L}),
    "smollm3": dict(architecture="SmolLM3ForCausalLM", extra_config={"no_rope_layer_interval": 2}),
    "phi3": dict(architecture="Phi3ForCausalLM", tied=False, partial_rotary_factor=0.5, max_pos=4 * L,
                 rope_scaling={"rope_type": "longrope", "original_max_position_embeddings": L,
                               "short_factor": [1.0 + 0.1 * i for i in range(3)],
                               "long_factor": [1.0 + 1.5 * i for i in range(3)]}),
    "mistral": dict(architecture="MistralForCausalLM", extra_config={
        "sliding_window": 24, "layer_types": ["sliding_attention", "full_attention"] * 2}),
    "gemma3": dict(architecture="Gemma3ForCausalLM", head_dim=16, extra_config={
        "sliding_window": 24, "sliding_window_pattern": 2}),  # bench's gemma3-1b preset, small
}
# the extension mode each also runs with, at 4L (Mistral: not rerope, which is refused with a window)
MODES = {"qwen2": "dynamic", "qwen3": "ntk", "smollm3": "leaky-rerope", "phi3": "yarn", "mistral": "pi",
         "gemma3": "yarn"}


def make_random(root, family, config_format):
    from lrun.hf_random import make_checkpoint
    d = root / f"{family}-{config_format}"
    args = {**SHAPE, **RANDOM[family]}
    make_checkpoint(d, **args, seed=5, qk_scale=6.0, config_format=config_format)
    return d


@pytest.fixture(scope="module")
def random_families(tmp_path_factory, c_tools):
    """{family: (HF directory in the 5.x form, our f32 export)}; the 4.x form must export to the same bytes."""
    root = tmp_path_factory.mktemp("random")
    out = {}
    for family in RANDOM:
        files = []
        for form in ("v4", "v5"):
            d = make_random(root, family, form)
            (root / f"{family}-{form}-out").mkdir()
            proc = run_export(d, root / f"{family}-{form}-out" / "model.bin")
            assert proc.returncode == 0, (family, form, proc.stderr)
            files.append(root / f"{family}-{form}-out" / "model.bin")
        assert files[0].read_bytes() == files[1].read_bytes(), f"{family}: the 4.x and 5.x config forms differ"
        out[family] = (d, files[1])
    return out


@pytest.mark.parametrize("family", sorted(RANDOM))
@pytest.mark.parametrize("mode", ["own", "extended"])
def test_random_family_equals_reference(family, mode, random_families, tmp_path):
    import reference
    hf, model = random_families[family]
    n = 4 * L if mode == "extended" else 3 * L // 2
    ids = np.random.default_rng(7).integers(3, 512, n).astype("<i4")
    (tmp_path / "ids.bin").write_bytes(ids.tobytes())
    extra, rope = ([], None) if mode == "own" else (["--rope-scaling", MODES[family]], {"mode": MODES[family]})
    got = ours(model, tmp_path / "ids.bin", n, tmp_path, *extra)
    want = reference.load(hf).logits(list(ids), rope=rope, ctx=n)
    diff = rel(got, want)
    print(f"{family} {mode}{' ' + MODES[family] if rope else ''}: n = {n}, max diff / max logit = {diff:.2e}")
    assert diff < TOL


def test_caches_and_shift_on_families(random_families, tmp_path):
    """The KV cache types and the context shift on the new paths: f16 keys with NoPE layers, f16 with
    a window, a shift past the end of a Phi-3 context (its keys un-rotated: longrope) and of Mistral's
    windowed one. ./run must generate to the end without a complaint."""
    for family, flags in [("smollm3", ["-ctk", "f16", "-ctv", "f16"]), ("mistral", ["-ctk", "f16"]),
                          ("phi3", ["-ctk", "f16", "-ctv", "f16"])]:
        _, model = random_families[family]
        shutil.copy(DATA / "stories260K/tokenizer.model", model.parent / "tokenizer.model")
        proc = subprocess.run([str(REPO / "run"), str(model), "-i", "Once upon a time", "-n", "200", "-t", "0",
                               "--ctx", "96", "--keep", "4", *flags], capture_output=True, text=True, errors="replace")
        assert proc.returncode == 0, (family, proc.stderr)
        assert "generation: 200 tokens" in proc.stderr and "shift" in proc.stderr.lower(), (family, proc.stderr)


def test_padded_vocabulary(tmp_path, c_tools):
    """Qwen2.5/3 and Phi-3 pad their embedding past the tokenizer (Phi-3: 32064 rows for 32011 ids):
    the model runs with its smaller tokenizer, the banner says so, and the sampler draws only the
    tokenizer's ids. The padded rows here are made to win every argmax (their lm_head rows are the
    largest), so a sampler that looked at them would emit an id the tokenizer cannot decode."""
    from lrun.hf_checkpoint import Checkpoint, save_file
    from lrun.hf_random import make_checkpoint
    hf = tmp_path / "hf"
    make_checkpoint(hf, **{**SHAPE, "vocab_size": 600}, architecture="Qwen2ForCausalLM", tied=False, seed=3)
    ck = Checkpoint(hf)
    tensors = {n: ck.get(n) for n in ck.names()}
    tensors["lm_head.weight"][512:] = 50 * np.abs(tensors["lm_head.weight"][512:])  # the padding wins argmax
    save_file(hf / "model.safetensors", tensors)
    (tmp_path / "m").mkdir()
    assert run_export(hf, tmp_path / "m" / "model.bin").returncode == 0
    proc = subprocess.run([str(REPO / "run"), str(tmp_path / "m" / "model.bin"), "-z", str(DATA / "stories260K/tokenizer.model"),
                           "-i", "Once upon a time", "-n", "64", "-t", "0"], capture_output=True, text=True, errors="replace")
    assert proc.returncode == 0, proc.stderr
    assert "(vocab 512; the model's 600 rows are padded)" in proc.stderr
    assert "generation: 64 tokens" in proc.stderr, proc.stderr
    # 64 tokens of the tokenizer's own: text (a sampler that drew the padding would print nothing)
    assert len(proc.stdout) > len("Once upon a time") + 32, proc.stdout


def test_longrope_follows_the_text_not_the_context(exported, tmp_path):
    """llama.cpp picks LongRoPE's factors once from the context size (n_ctx > L: long for the whole
    run). Here they follow the text: a 200-token text in a 1024-token context (L 256) still uses the
    short factors, and equals transformers' logits for it; the long factors there would be 0.29 off
    (test_control_without_the_feature_fails, phi3-longrope-short)."""
    d, ids, rows, theirs = fixture("phi3-longrope-short")
    out = tmp_path / "logits.bin"
    proc = subprocess.run([str(TOOLS / "dump_logits"), str(exported["phi3-longrope-short"]), str(d / "ids.bin"), str(out),
                           "--ctx", "1024"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(out, np.float32).reshape(len(ids), -1)[rows]
    diff = rel(got, theirs)
    print(f"longrope, 200 tokens in a 1024-token context: {diff:.2e} from transformers' short-factor logits")
    assert diff < TOL
