"""tests/reference.py against the stored logits of data/families2/, the families whose layers differ by more
than a flag (issue 49, item 4: Gemma 2 and 3, OLMo 2 and 3, EXAONE 4, GLM-4, Granite 3, Ministral 3).

data/families2/ holds nine small random checkpoints in each family's config.json and tensor names, with the
logits of ANOTHER independent reference (a float32 forward pass written from transformers' modeling files,
data/families2/README.md) at some positions of one forward pass. reference.py was extended from the modeling
files on its own (it shares no code with that reference, nor with the C program), so agreement here is two
readings of the same files meeting:

- parity: float64 (the default) and float32 reference logits at those rows against the stored ones, max
  |diff| / max |logit| below TOL = 1e-4. Measured: 2.1e-7 (Granite) .. 6.5e-6 (Gemma 2), float64 and float32
  alike; the stored logits form RoPE angles in float32 and come from float32 arithmetic throughout.
- a negative control per feature: the same weights with one feature switched off in the reference (its
  keyword switches, or a RoPE override), which must miss by more than CONTROL = 1e-2: the other base on
  the local layers, no softcap, pre-norms in place of post-norms, rotate_half in place of interleaved pairs,
  no query temperature, ... A tolerance that also accepted the model without the feature would prove nothing
  about the feature. (Gemma's GeGLU with the exact erf GELU in place of the tanh one misses by only 2e-5 on
  these weights, below TOL: the control for the activation is SwiGLU.)
- what read_family makes of each config.json (windows, NoPE layers, the RoPE of each layer type, rotary
  dims, scales), so a wrong reading fails with a readable message, not only a number.
- token-by-token decoding with a KV cache (Decoder) gives the one-pass logits: the local RoPE, NoPE layers,
  softcaps, post-norms, interleaved pairs and the query temperature live in code both paths share.
- each config.json rewritten in the other transformers form (4.x rope_scaling / rope_theta /
  rope_local_base_freq against 5.x rope_parameters, Gemma 3's keyed by layer type; EXAONE's layer_types
  against its "LLLG" pattern) gives bit-identical logits, with a control that the keyed form is read.

Runtime: about 10 s of CPU, 25-30 s wall on two shared cores (a 1024-token case takes 0.3-0.9 s a forward
pass; the controls run in float32).
"""
import json
import math

import numpy as np
import pytest
import torch

import reference
from conftest import DATA
from families import reference_case, rel

FAMILIES2 = DATA / "families2"
TOL = 1e-4       # max |diff| / max |logit| against the stored logits
CONTROL = 1e-2   # a control must miss by more than this

# case: [(control name, feature switches, rope overrides)], each of which must miss.
CONTROLS = {
    "gemma2-softcap": [("no attention softcap", dict(attn_softcap=0), None),
                       ("no final softcap", dict(final_softcap=0), None),
                       ("norms x w, not x (1 + w)", dict(norm_plus_one=False), None),
                       ("SwiGLU in place of GeGLU", dict(hidden_act="silu"), None),
                       ("embeddings not x sqrt(hidden)", dict(embed_scale=1.0), None),
                       ("scores / sqrt(head_dim), not query_pre_attn_scalar", dict(attn_scale=32 ** -0.5), None),
                       ("pre-norms only", dict(norm_placement="pre"), None),
                       ("no window", dict(sliding_window=0), None),
                       ("window 47 (one short)", dict(sliding_window=47), None)],
    "gemma3-linear-global": [("the global RoPE on the local layers", dict(local_rope="main"), None),
                             ("no linear scaling on the global layer", {}, {"mode": "none"}),
                             ("without q_norm / k_norm", dict(qk_norm=False), None),
                             ("scores / sqrt(head_dim)", dict(attn_scale=32 ** -0.5), None),
                             ("no window", dict(sliding_window=0), None)],
    "gemma3-two-bases": [("base 1e6 on the local layers", dict(local_rope="main"), None),
                         ("norms x w, not x (1 + w)", dict(norm_plus_one=False), None),
                         ("window 31 (one short)", dict(sliding_window=31), None),
                         ("window 33 (one long)", dict(sliding_window=33), None)],
    "olmo2-postnorm": [("pre-norms in place of post-norms", dict(norm_placement="pre"), None),
                       ("q/k norm per head, not over the projection", dict(qk_norm="head"), None),
                       ("without q_norm / k_norm", dict(qk_norm=False), None)],
    "olmo3-swa-yarn": [("YaRN on every layer", dict(local_rope="main"), None),
                       ("no YaRN", {}, {"mode": "none"}),
                       ("YaRN attention factor 1", {}, {"attn_factor": 1.0}),
                       ("no window", dict(sliding_window=0), None),
                       ("pre-norms in place of post-norms", dict(norm_placement="pre"), None)],
    "exaone4-global-nope": [("the global layer rotated", dict(rope_layers="all"), None),
                            ("no window", dict(sliding_window=0), None),
                            ("without q_norm / k_norm", dict(qk_norm=False), None),
                            ("pre-norms in place of post-norms", dict(norm_placement="pre"), None)],
    "glm4-partial-interleaved": [("rotate_half in place of interleaved pairs", dict(interleaved=False), None),
                                 ("every dim rotated", dict(partial_rotary_factor=1.0), None),
                                 ("without the q/k/v biases", dict(biases=False), None),
                                 ("without the post-sublayer norms", dict(norm_placement="pre"), None)],
    "granite-mup": [("no embedding_multiplier", dict(embed_scale=1.0), None),
                    ("scores / sqrt(head_dim), not attention_multiplier", dict(attn_scale=32 ** -0.5), None),
                    ("no residual_multiplier", dict(residual_scale=1.0), None),
                    ("no logits_scaling", dict(logits_scale=1.0), None)],
    "ministral3-yarn-beta": [("no query scale", dict(query_temperature=False), None),
                             ("YaRN attention factor 0.1 ln 4 + 1 (mscale ignored)", {},
                              {"attn_factor": 0.1 * math.log(4.0) + 1.0}),
                             ("no YaRN", {}, {"mode": "none"})],
}
CASES = list(CONTROLS)


def fixture(name):
    """(directory, token ids, rows, the stored logits (len(rows), vocab) float64)."""
    return reference_case(FAMILIES2, name)


def test_every_case_is_tested():
    assert sorted(p.name for p in FAMILIES2.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", CASES)
def test_logits_match_the_stored_reference(name, dtype):
    d, ids, rows, want = fixture(name)
    m = reference.load(d, dtype)
    diff = rel(m.logits(ids)[rows], want)
    print(f"{name} ({m.family['family']}, {str(dtype)[6:]}): n {len(ids)}, {len(rows)} rows, "
          f"max |diff| / max |logit| {diff:.2e} (max |logit| {np.abs(want).max():.3f})")
    assert diff < TOL


@pytest.mark.parametrize("name", CASES)
def test_controls_miss(name):
    d, ids, rows, want = fixture(name)
    for what, switches, rope in CONTROLS[name]:
        miss = rel(reference.load(d, torch.float32, **switches).logits(ids, rope=rope)[rows], want)
        print(f"{name}, {what}: max |diff| / max |logit| {miss:.2e}")
        assert miss > CONTROL, f"{name}: the control '{what}' is within {miss:.2e}: the test has no power"


# What read_family, checkpoint_rope and local_rope_of make of each case's config.json.
SLIDE = "sliding_attention"
EXPECTED = {
    "gemma2-softcap": dict(family="gemma2", windows=[48, None, 48, None], norm_plus_one=True,
                           hidden_act="gelu_pytorch_tanh", embed_scale=8.0, attn_scale=24 ** -0.5,
                           attn_softcap=50.0, final_softcap=30.0, tied=True, layer_rope=["main"] * 4),
    "gemma3-linear-global": dict(family="gemma3", windows=[64] * 5 + [None], qk_norm_over="head",
                                 layer_rope=["local"] * 5 + ["main"], attn_scale=48 ** -0.5, attn_softcap=None,
                                 final_softcap=None, tied=False),
    "gemma3-two-bases": dict(family="gemma3", windows=[32] * 5 + [None], layer_rope=["local"] * 5 + ["main"],
                             tied=True),
    "olmo2-postnorm": dict(family="olmo2", qk_norm_over="whole", windows=[None] * 4,
                           norms=(None, "post_attention_layernorm", None, "post_feedforward_layernorm")),
    "olmo3-swa-yarn": dict(family="olmo3", windows=[64, 64, 64, None], layer_rope=["local"] * 3 + ["main"]),
    "exaone4-global-nope": dict(family="exaone4", windows=[64, 64, 64, None], rope_layers=[True] * 3 + [False],
                                qk_norm_over="head", qkv_bias=False),
    "glm4-partial-interleaved": dict(family="glm4", rotary_dim=16, interleaved=True, qkv_bias=True, o_bias=False,
                                     fused_gate_up=True, fused=False),
    "granite-mup": dict(family="granite", embed_scale=12.0, attn_scale=0.05, residual_scale=0.22,
                        logits_scale=8.0, tied=True),
    "ministral3-yarn-beta": dict(family="ministral3", query_temperature=(0.1, 256), windows=[None] * 4),
}
EXPECTED_ROPE = {  # the main RoPE; then the local one, where the family has it
    "gemma2-softcap": (dict(mode="none", base=10000.0), None),
    "gemma3-linear-global": (dict(mode="pi", factor=8.0, base=1e6), dict(mode="none", base=10000.0)),
    "gemma3-two-bases": (dict(mode="none", base=1e6), dict(mode="none", base=10000.0)),
    "olmo3-swa-yarn": (dict(mode="yarn", factor=4.0, orig_ctx=256, base=500000.0, attn_factor=1.138629436111989),
                       dict(mode="none", factor=1.0, base=500000.0)),
    "exaone4-global-nope": (dict(mode="none", base=1e6), None),
    "ministral3-yarn-beta": (dict(mode="yarn", factor=4.0, orig_ctx=256, base=1e6, attn_factor=1.0,
                                  beta_fast=32.0, beta_slow=1.0), None),
}


@pytest.mark.parametrize("name", CASES)
def test_config_reading(name):
    m = reference.load(FAMILIES2 / name)
    got = {k: m.family[k] for k in EXPECTED[name]}
    want_main, want_local = EXPECTED_ROPE.get(name, ({}, None))
    got_main = {k: m.trained_rope[k] for k in want_main}
    got_local = None if m.local_rope is None else {k: m.local_rope[k] for k in want_local or {}}
    print(f"{name}: {got} {got_main} {got_local}")
    assert got == EXPECTED[name]
    assert got_main == want_main
    assert got_local == want_local


@pytest.mark.parametrize("name", ["gemma2-softcap", "gemma3-two-bases", "olmo3-swa-yarn", "exaone4-global-nope",
                                  "glm4-partial-interleaved", "ministral3-yarn-beta"])
def test_cached_decoding_matches_one_pass(name):
    """Decoder with both kinds of key cache = logits() over the first 300 tokens: a prefill block of 260
    (past every window here, and past Ministral's L = 256, where the query scale steps up), then 40 tokens
    one at a time against that cache."""
    d, ids, _, _ = fixture(name)
    m = reference.load(d)
    ids = ids[:300]
    one_pass = m.logits(ids)
    for keys in ("raw", "rotated"):
        dec = reference.Decoder(m, m.resolve_rope(), len(ids), keys)
        cached = np.concatenate([dec.feed(ids[:260])] + [dec.feed([t]) for t in ids[260:]])
        diff = rel(cached, one_pass)
        print(f"{name}: cached ({keys} keys) against one pass, {diff:.1e}")
        assert diff < 1e-12


# --- the other config.json form of each case ---------------------------------------------------------

def other_form(cfg):
    """config.json in the other transformers form: 4.x (rope_theta, rope_scaling, Gemma 3's
    rope_local_base_freq) -> 5.x (rope_parameters with rope_theta inside; Gemma 3's keyed by layer type,
    as configuration_gemma3.py writes it), and 5.x -> 4.x."""
    cfg = dict(cfg)
    if cfg.get("rope_parameters"):
        params = dict(cfg.pop("rope_parameters"))
        cfg["rope_theta"] = params.pop("rope_theta")
        params.pop("max_position_embeddings", None)
        cfg["rope_scaling"] = params
        return cfg
    main = dict(cfg.pop("rope_scaling", None) or {"rope_type": "default"})
    main["rope_theta"] = cfg.pop("rope_theta")
    if cfg.get("model_type") == "gemma3_text":
        local = {"rope_type": "default", "rope_theta": cfg.pop("rope_local_base_freq")}
        cfg["rope_parameters"] = {"full_attention": main, "sliding_attention": local}
    else:
        cfg["rope_parameters"] = main
    return cfg


def write_case(src, dst, cfg):
    """A copy of case directory src at dst (the weights linked) with this config.json."""
    dst.mkdir()
    for f in ("model.safetensors", "tokenizer.model"):
        (dst / f).symlink_to(src / f)
    (dst / "config.json").write_text(json.dumps(cfg, indent=1))
    return dst


@pytest.mark.parametrize("name", CASES)
def test_config_forms_agree(name, tmp_path):
    """The case with config.json in the other transformers form: the same reading and bit-identical
    logits over 300 tokens."""
    d, ids, _, _ = fixture(name)
    ids = ids[:300]
    cfg = json.loads((d / "config.json").read_text())
    other = write_case(d, tmp_path / "other", other_form(cfg))
    a, b = reference.load(d), reference.load(other)
    print(f"{name}: {sorted(set(other_form(cfg)) - set(cfg))} in place of {sorted(set(cfg) - set(other_form(cfg)))}")
    assert a.family == b.family and a.trained_rope == b.trained_rope and a.local_rope == b.local_rope
    assert np.array_equal(a.logits(ids), b.logits(ids))


def test_config_forms_control(tmp_path):
    """Control for the test above: the keyed form's sliding_attention entry is read (its rope_theta set to
    the global one's changes the logits), so the agreement is not that of a key both readings ignore."""
    d, ids, _, _ = fixture("gemma3-two-bases")
    ids = ids[:300]
    v5 = other_form(json.loads((d / "config.json").read_text()))
    v5["rope_parameters"]["sliding_attention"]["rope_theta"] = v5["rope_parameters"]["full_attention"]["rope_theta"]
    miss = rel(reference.load(write_case(d, tmp_path / "v5", v5)).logits(ids), reference.load(d).logits(ids))
    print(f"gemma3 keyed rope_parameters, sliding_attention at base 1e6: {miss:.2e}")
    assert miss > CONTROL


@pytest.mark.parametrize("pattern", ["LLLG", 4])
def test_exaone_pattern_without_layer_types(pattern, tmp_path):
    """EXAONE 4 with sliding_window_pattern (the released configs' "LLLG", or an integer) and no
    layer_types reads as with them: layers 0-2 local with RoPE, layer 3 global NoPE; bit-identical logits.
    Control: pattern "LGLL" (layer 1 global and NoPE, layers 0 and 2 local; the last one global all the
    same) misses."""
    d, ids, _, _ = fixture("exaone4-global-nope")
    ids = ids[:300]
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("layer_types")
    want = reference.load(d).logits(ids)
    m = reference.load(write_case(d, tmp_path / "p", dict(cfg, sliding_window_pattern=pattern)))
    assert m.family["rope_layers"] == [True, True, True, False] and m.family["windows"] == [64, 64, 64, None]
    assert np.array_equal(m.logits(ids), want)
    c = reference.load(write_case(d, tmp_path / "c", dict(cfg, sliding_window_pattern="LGLL")))
    assert c.family["rope_layers"] == [True, False, True, False] and c.family["windows"] == [64, None, 64, None]
    miss = rel(c.logits(ids), want)
    print(f"exaone4, pattern {pattern!r}: identical; pattern LGLL {miss:.2e}")
    assert miss > CONTROL
