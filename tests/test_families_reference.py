"""tests/reference.py against transformers 5.17 itself, on the six families it reads (issue 37).

data/families/ holds seven small random checkpoints that real transformers 5.17 wrote and ran
(data/README.md, "families/"): with each, the logits transformers computed at some positions of one
forward pass. Here the reference reads the same directory and must give the same numbers:

- parity: float64 (the default) and float32 reference logits at those rows against transformers',
  max |diff| / max |logit| below TOL. Measured: 3.5e-7 .. 1.2e-6 (transformers forms RoPE angles in
  float32, the reference in float64; nothing else differs at this size), so TOL = 1e-5 leaves 8x.
- a negative control per fixture: the same weights with the family's feature switched off (the
  reference's keyword switches), which must miss by more than 100 TOL. A tolerance that also
  accepted the model without the feature would prove nothing about the feature.
- what read_family makes of each config.json (the family, biases, windows, NoPE layers, rotary dims,
  the LongRoPE parameters), so a wrong reading fails with a readable message, not only a number.
- token-by-token decoding with a KV cache (Decoder) gives the one-pass logits: the family features
  live in code that both paths share, and the window in a cache is tested past W.
- a random checkpoint of each family (lrun/hf_random.py), written once in transformers 4's
  config.json form (rope_theta, rope_scaling) and once in 5's (rope_parameters), gives the same
  reading and bit-identical logits.

Each fixture runs in well under a second.
"""
import numpy as np
import pytest
import torch

import reference
from conftest import DATA
from families import reference_case, rel
from lrun.hf_random import make_checkpoint

FAMILIES_DIR = DATA / "families"
TOL = 1e-5     # max |diff| / max |logit| against transformers' logits
CONTROL = 100 * TOL  # a control must miss by more than this

# Phi-3 fixtures: 12 factors (rotary_dim 24 of head_dim 32). Fully rotated needs 16: the 4 extra
# pairs are left unscaled.
PHI3_SHORT = [1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.45, 1.5, 1.55]
PHI3_LONG = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5]
PHI3_FULL = dict(switches=dict(partial_rotary_factor=1.0),
                 rope={"short_factor": PHI3_SHORT + [1.0] * 4, "long_factor": PHI3_LONG + [1.0] * 4})

# fixture: [(control name, feature switches, rope overrides)], each of which must miss.
CONTROLS = {
    "qwen2-tied": [("without the q/k/v biases", dict(biases=False), None)],
    "qwen3-yarn": [("without q_norm / k_norm", dict(qk_norm=False), None),
                   ("without YaRN", {}, {"mode": "none"})],
    "smollm3-nope": [("every layer rotated", dict(rope_layers="all"), None)],
    "phi3-longrope-long": [("short factors at n > L", dict(longrope_factors="short"), None),
                           ("fully rotated", PHI3_FULL["switches"], PHI3_FULL["rope"]),
                           ("attention factor 1", {}, {"attn_factor": 1.0})],
    "phi3-longrope-short": [("long factors at n <= L", dict(longrope_factors="long"), None),
                            ("fully rotated", PHI3_FULL["switches"], PHI3_FULL["rope"])],
    "mistral-swa": [("without the window", dict(sliding_window=0), None),
                    ("window 63 (one short)", dict(sliding_window=63), None),
                    ("window 65 (one long)", dict(sliding_window=65), None)],
    # transformers 5.17's Llama ignores partial_rotary_factor (its logits are a full rotation's):
    # the control is the rotation of half a head that the config asks for.
    "llama-partial": [("half of each head rotated", dict(partial_rotary_factor=0.5), None)],
}
FIXTURES = list(CONTROLS)


def fixture(name):
    """(directory, token ids, rows, transformers' logits (len(rows), vocab) float64)."""
    return reference_case(FAMILIES_DIR, name)


def test_every_fixture_is_tested():
    assert sorted(p.name for p in FAMILIES_DIR.iterdir() if p.is_dir()) == sorted(FIXTURES)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", FIXTURES)
def test_logits_match_transformers(name, dtype):
    d, ids, rows, want = fixture(name)
    m = reference.load(d, dtype)
    diff = rel(m.logits(ids)[rows], want)
    print(f"{name} ({m.family['family']}, {str(dtype)[6:]}): n {len(ids)}, {len(rows)} rows, "
          f"max |diff| / max |logit| {diff:.2e} (max |logit| {np.abs(want).max():.3f})")
    assert diff < TOL


@pytest.mark.parametrize("name", FIXTURES)
def test_controls_miss(name):
    d, ids, rows, want = fixture(name)
    for what, switches, rope in CONTROLS[name]:
        miss = rel(reference.load(d, **switches).logits(ids, rope=rope)[rows], want)
        print(f"{name}, {what}: max |diff| / max |logit| {miss:.2e}")
        assert miss > CONTROL, f"{name}: the control '{what}' is within {miss:.2e}: the test has no power"


# What read_family and checkpoint_rope make of each fixture's config.json.
EXPECTED = {
    "qwen2-tied": dict(family="qwen2", qkv_bias=True, o_bias=False, tied=True, windows=[None] * 4),
    "qwen3-yarn": dict(family="qwen3", qk_norm=True, qkv_bias=False, tied=False),
    "smollm3-nope": dict(family="smollm3", rope_layers=[True, True, True, False]),
    "phi3-longrope-long": dict(family="phi3", fused=True, rotary_dim=24, head_dim=32),
    "phi3-longrope-short": dict(family="phi3", fused=True, rotary_dim=24),
    "mistral-swa": dict(family="mistral", windows=[64] * 4, qkv_bias=False),
    "llama-partial": dict(family="llama", rotary_dim=32, windows=[None] * 4),
}
EXPECTED_ROPE = {
    "qwen2-tied": dict(mode="none", base=1e6),
    "qwen3-yarn": dict(mode="yarn", factor=4.0, orig_ctx=256, base=1e6),
    "smollm3-nope": dict(mode="none", base=5e6),
    "phi3-longrope-long": dict(mode="longrope", factor=4.0, orig_ctx=256, short_factor=PHI3_SHORT,
                               long_factor=PHI3_LONG),
    "mistral-swa": dict(mode="none", base=1e4),
}


@pytest.mark.parametrize("name", FIXTURES)
def test_config_reading(name):
    m = reference.load(FAMILIES_DIR / name)
    got = {k: m.family[k] for k in EXPECTED[name]}
    got_rope = {k: m.trained_rope[k] for k in EXPECTED_ROPE.get(name, {})}
    print(f"{name}: {got} {got_rope}")
    assert got == EXPECTED[name]
    assert got_rope == EXPECTED_ROPE.get(name, {})


@pytest.mark.parametrize("name", ["qwen2-tied", "qwen3-yarn", "smollm3-nope", "phi3-longrope-short",
                                  "mistral-swa"])
def test_cached_decoding_matches_one_pass(name):
    """Decoder (one token at a time, both kinds of key cache) = logits() over 100 tokens: past the
    window of 64, and below every L (LongRoPE's short factors throughout)."""
    d, ids, _, _ = fixture(name)
    m = reference.load(d)
    ids = ids[:100]
    one_pass = m.logits(ids)
    for keys in ("raw", "rotated"):
        diff = rel(m.logits_cached(ids, keys=keys), one_pass)
        print(f"{name}: cached ({keys} keys) against one pass, {diff:.1e}")
        assert diff < 1e-12


# --- transformers 4's config.json form against 5's, on random checkpoints of every family ------------

SHAPE = dict(dim=64, hidden_dim=96, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=128, max_pos=32,
             std=0.02, qk_scale=6.0, seed=5, tied=False)
RANDOM = {  # family: make_checkpoint arguments beyond SHAPE, and what the reading must show
    "llama": (dict(architecture="LlamaForCausalLM", attention_bias=True, mlp_bias=True, rope_theta=50000.0,
                   rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
              dict(o_bias=True, mlp_bias=True), dict(mode="llama3", orig_ctx=16, base=50000.0)),
    "mistral": (dict(architecture="MistralForCausalLM", extra_config={"sliding_window": 8},
                     rope_scaling={"type": "linear", "factor": 2.0}),
                dict(windows=[8] * 4), dict(mode="pi", factor=2.0)),
    "qwen2": (dict(architecture="Qwen2ForCausalLM", rope_theta=1e6,
                   extra_config={"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2}),
              dict(qkv_bias=True, windows=[None, None, 8, 8]), dict(mode="none", base=1e6)),
    "qwen3": (dict(architecture="Qwen3ForCausalLM", attention_bias=True,
                   rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
              dict(qk_norm=True, o_bias=True), dict(mode="yarn", factor=4.0, orig_ctx=16)),
    "smollm3": (dict(architecture="SmolLM3ForCausalLM", rope_theta=5e6),
                dict(rope_layers=[True, True, True, False]), dict(mode="none", base=5e6)),
    "phi3": (dict(architecture="Phi3ForCausalLM", partial_rotary_factor=0.5, max_pos=64,
                  rope_scaling={"type": "longrope", "original_max_position_embeddings": 16,
                                "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [1.0, 2.0, 3.0, 4.0]}),
              dict(fused=True, rotary_dim=8), dict(mode="longrope", factor=4.0, orig_ctx=16)),
}


@pytest.mark.parametrize("family", list(RANDOM))
def test_config_forms_agree(family, tmp_path):
    """The same random checkpoint with config.json in transformers 4's form and in 5's: the same
    family reading and RoPE, the family's features present, and bit-identical logits over 40 tokens
    (past every L here, so LongRoPE's long factors and YaRN's scaling are in play)."""
    args, want_family, want_rope = RANDOM[family]
    ids = np.random.default_rng(3).integers(0, SHAPE["vocab_size"], 40).tolist()
    out = {}
    for form in ("v4", "v5"):
        make_checkpoint(tmp_path / form, **{**SHAPE, **args}, config_format=form)
        m = reference.load(tmp_path / form)
        out[form] = m.family, m.trained_rope, m.logits(ids)
        assert {k: m.family[k] for k in want_family} == want_family, form
        assert {k: m.trained_rope[k] for k in want_rope} == want_rope, form
    v4, v5 = out["v4"], out["v5"]
    assert "rope_scaling" in (tmp_path / "v4/config.json").read_text()
    assert "rope_parameters" in (tmp_path / "v5/config.json").read_text()
    print(f"{family}: {v5[0]}, rope {v5[1]['mode']}; max |logit| {np.abs(v5[2]).max():.3f}")
    assert v4[0] == v5[0] and v4[1] == v5[1]
    assert np.array_equal(v4[2], v5[2])


def test_config_forms_control(tmp_path):
    """Control for the test above: the reading does look at the RoPE keys of each form (dropping
    them changes the logits), so their agreement is not that of two configs both read as default."""
    args = RANDOM["qwen3"][0]
    ids = np.random.default_rng(3).integers(0, SHAPE["vocab_size"], 40).tolist()
    for form, key in (("v4", "rope_scaling"), ("v5", "rope_parameters")):
        make_checkpoint(tmp_path / form, **{**SHAPE, **args}, config_format=form)
        make_checkpoint(tmp_path / (form + "-plain"), **{**SHAPE, **args}, config_format=form,
                        extra_config={key: None})
        a = reference.load(tmp_path / form).logits(ids)
        b = reference.load(tmp_path / (form + "-plain")).logits(ids)
        miss = rel(a, b)
        print(f"{form} without {key}: {miss:.2e}")
        assert miss > CONTROL
