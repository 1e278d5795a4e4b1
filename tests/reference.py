"""reference.py - an independent PyTorch reference of Hugging Face's Llama-family forward pass.

What this is: the forward-pass semantics of transformers' LlamaForCausalLM (modeling_llama.py) and of
thirteen relatives that differ from it in named places (Mistral, Qwen2, Qwen3, SmolLM3, Phi-3, and the
per-layer families Gemma 2, Gemma 3, OLMo 2, OLMo 3, EXAONE 4, GLM-4, Granite, Ministral 3; see
"Families" below), written out plainly for one sequence, reading a Hugging Face directory (config.json
+ weights via lrun/hf_checkpoint.py), with every RoPE scaling mode of our C program taken from
lrun/rope_ref.py. It runs in float64 by default, so a difference against the float32 C program is the
C program's error alone. Tests use it for logits parity, golden greedy text and perplexity;
tests/test_families_reference.py checks it against logits that transformers 5.17 itself computed
(data/families/), tests/test_families2_reference.py against another independent reading of the
modeling files (data/families2/).
What this is not: transformers (not installed here, and none of its code is used), fast, or batched.

Three ways to run a sequence, identical for every mode except dynamic NTK past L (whose base
depends on the current length) and LongRoPE across L (whose factors do):
    logits          one forward, all positions with the frequencies of length n (HF prefill);
    logits_growing  row t from a full forward of tokens[0..t] with the base of length t+1;
    logits_cached   one token at a time with a KV cache holding un-rotated keys ("raw", what our
                    model.c does) or rotated ones ("rotated", HF's cache). Even "raw" is not
                    logits_growing: values and deeper layers' keys keep their earlier bases.

    import reference
    m = reference.load("data/stories260K-hf")
    logits = m.logits(ids, rope={"mode": "pi"}, ctx=2048)        # (n, vocab) numpy float64
    text = m.decode(m.generate([m.bos_id], 200))                  # greedy
    q3 = reference.load("data/families/qwen3-yarn", qk_norm=False)  # a family feature switched off

Where HF deliberately rounds to float32 we do not (documented at each place): RoPE angles are
m * inv_freq in float64 (HF: float32 inv_freq and a float32 matmul), RMSNorm and softmax run in
float64 when the model does (HF: always float32). With dtype=torch.float32 the arithmetic is HF's
except for the angles.

The forward pass, for tokens x_0 .. x_{n-1} at positions 0 .. n-1 (modeling_llama.py names; the
per-layer families' differences in brackets):
    h = embed_tokens[x]                      [x sqrt(hidden_size): Gemma; x embedding_multiplier: Granite]
    per layer l:  a = RMSNorm(h) (input_layernorm)                     [none: OLMo 2/3, EXAONE 4]
                  q, k, v = a Wq^T + bq, a Wk^T + bk, a Wv^T + bv     (biases: Qwen2, attention_bias)
                  q, k = RMSNorm_hd(q), RMSNorm_hd(k) per head         (Qwen3's q_norm, k_norm;
                          Gemma 3, EXAONE 4; OLMo 2/3: over the whole projection before the head split)
                  q, k rotated (rotate_half layout) over their first rotary_dim dims,
                          unless layer l is a NoPE layer                (SmolLM3; EXAONE 4's global layers)
                          [GLM-4: interleaved pairs (2i, 2i+1); Gemma 3, OLMo 3: the sliding layers
                          with their own RoPE ("local"), the others with the checkpoint's ("main")]
                          [Ministral 3: then q x (1 + beta ln(1 + floor(pos / L)))]
                  k, v repeated n_heads / n_kv_heads times (repeat_kv)
                  h = h + o_proj(softmax(q k^T / sqrt(head_dim) + mask_l) v)
                          mask_l: causal, and for a sliding layer also key > query - W
                          [Gemma: x query_pre_attn_scalar^-0.5, Granite: x attention_multiplier;
                          Gemma 2: tanh(s / c) c before the mask; OLMo, EXAONE, Gemma, GLM-4: o_proj's
                          output RMSNormed before the add; Granite: x residual_multiplier]
                  h = h + down_proj(silu(gate_proj(RMSNorm(h))) * up_proj(RMSNorm(h)))
                          [Gemma: gelu tanh (GeGLU); norms placed as for attention (NORMS)]
    logits = RMSNorm(h) (model.norm) lm_head^T   (lm_head = embed_tokens when tied)
                          [/ logits_scaling: Granite; tanh(l / c) c: Gemma 2]
    Gemma's every RMSNorm multiplies by (1 + w), not w.

Families: how config.json is read (transformers 5.17, `configuration_<family>.py` and
`modeling_<family>.py`; `read_family` does it, the keys below are config.json's). The family is
`architectures[0]` (else `model_type`); a key that is absent takes that config class's default.
  LlamaForCausalLM    q/k/v/o biases if attention_bias, MLP biases if mlp_bias; head_dim may be given
                      apart from hidden_size / num_attention_heads. No sliding window. A
                      partial_rotary_factor is IGNORED: Llama's default RoPE
                      (`compute_default_rope_parameters`, dim = head_dim) and apply_rotary_pos_emb
                      turn every dim. transformers 5.17 did so on data/families/llama-partial
                      (factor 0.5): its logits are those of a full rotation (1e-6), not of half
                      (0.4). With a scaled rope type the factor is refused (see read_family).
                      Mistral, Qwen2, Qwen3 and SmolLM3 are read the same way: their rotary
                      embedding and apply_rotary_pos_emb come from Llama's (modular_<family>.py);
                      no fixture checks it for them.
  MistralForCausalLM  no biases; sliding_window W (class default 4096; null: none) on every layer.
                      With layer_types in config.json, transformers 5 loads it as Ministral
                      (models/auto/configuration_auto.py, "mistral model with layer_types"): the
                      window only on the "sliding_attention" layers.
  Qwen2ForCausalLM    q/k/v biases always (no o bias); the window is sliding_window only when
                      use_sliding_window (else none), and layer_types, when config.json has none,
                      is "sliding_attention" for layers i >= max_window_layers (default 28) when a
                      window is set (configuration_qwen2.py `__post_init__`).
  Qwen3ForCausalLM    as Qwen2 for windows; q/k/v/o biases if attention_bias; q_norm and k_norm, an
                      RMSNorm over head_dim with one weight vector shared by all heads, applied to
                      each head's q and k BEFORE RoPE (modeling_qwen3.py Qwen3Attention.forward).
  SmolLM3ForCausalLM  no_rope_layers[l] = 1: layer l rotates, 0: it does not (NoPE); when absent,
                      every no_rope_layer_interval-th layer (default 4) is NoPE
                      (configuration_smollm3.py); rope_theta default 2e6; tied by default.
  Phi3ForCausalLM     fused self_attn.qkv_proj (rows q, then k, then v) and mlp.gate_up_proj (first
                      half gate, second half up: modeling_phi3.py Phi3MLP `chunk(2)`); rope_type
                      "longrope" ("su", "yarn" read as longrope: configuration_phi3.py);
                      partial_rotary_factor (top level, else in rope_parameters): only rotary_dim =
                      int(head_dim * factor) dims of each head turn, rotate_half within them
                      (modeling_phi3.py apply_rotary_pos_emb: q_rot, q_pass), inv_freq over
                      dim = rotary_dim (modeling_rope_utils.py `_compute_*_parameters`); the
                      top-level original_max_position_embeddings (class default 4096) overrides the
                      one in rope_parameters (modeling_rope_utils.py `standardize_rope_params`);
                      sliding_window (default none) on every layer.
  Gemma2ForCausalLM   four norms a layer (NORMS "sandwich"), (1 + w); GeGLU (hidden_activation);
                      embeddings x sqrt(hidden_size); scores x query_pre_attn_scalar^-0.5;
                      attn_logit_softcapping before the mask and final_logit_softcapping on the
                      logits (defaults 50, 30); even layers slide (layer_types, else i % 2 == 0);
                      tied by default.
  Gemma3ForCausalLM   Gemma 2's layer without the caps (defaults None) and with per-head q/k norm;
                      (i + 1) % sliding_window_pattern != 0 slides (default 6) when there are no
                      layer_types; sliding layers: default RoPE, base rope_local_base_freq (10000);
                      global layers: rope_theta (1e6) with rope_scaling. transformers 5's
                      rope_parameters keyed by layer type is read too (local_rope_of).
  Olmo2ForCausalLM    no pre-norms: h + RMSNorm(attn(h)), h + RMSNorm(mlp(h)) (post_attention_ and
                      post_feedforward_layernorm); q_norm over H * head_dim, k_norm over KV * head_dim.
  Olmo3ForCausalLM    OLMo 2's layer; (i + 1) % 4 != 0 slides; rope_scaling on the full layers only
                      (transformers 4.57, the OLMo 3 paper), the sliding ones plain rope_theta.
  Exaone4ForCausalLM  OLMo 2's norms, per-head q/k norm; with a sliding_window, the sliding layers
                      rotate and the global ones are NoPE; layer_types, else sliding_window_pattern
                      (an integer as Gemma 3's, or a string such as "LLLG", L = local).
  Glm4ForCausalLM     four norms (input_layernorm, post_self_attn_layernorm, post_attention_layernorm,
                      post_mlp_layernorm); q/k/v biases (attention_bias, default true), no o bias; fused
                      gate_up_proj; partial_rotary_factor (default 0.5) of each head turned in adjacent
                      pairs (interleaved), the rest passed.
  GraniteForCausalLM  Llama with embedding_multiplier, attention_multiplier (in place of
                      1 / sqrt(head_dim)), residual_multiplier (each sublayer's output) and logits
                      / logits_scaling; biases as Llama's.
  Ministral3ForCausalLM  Mistral's window (none by default); YaRN with every key (mscale /
                      mscale_all_dim: attention factor get_mscale(s, mscale) / get_mscale(s,
                      mscale_all_dim); truncate); queries x (1 + llama_4_scaling_beta ln(1 + floor(pos
                      / original_max_position_embeddings))) after RoPE.
The window (masking_utils.py `sliding_window_overlay`): query i sees key j when j <= i and
j > i - W, i.e. itself and the W - 1 keys before it. A run's RoPE overrides (resolve_rope) change
the main RoPE only: Gemma 3's and OLMo 3's sliding layers keep theirs, as their own rule scales the
global layers only; rerope, selfextend and dca are refused with a local RoPE, interleaved pairs or a
query temperature.

Feature switches (keyword options of load() / Reference(), for controls and for parity tests of a C
program that implements these families; None = as config.json says):
  biases=False                  drop every bias (q/k/v/o and MLP)
  qk_norm=False                 skip Qwen3's q_norm / k_norm
  rope_layers="all" | [0/1...]  rotate every layer, or exactly the layers marked 1
  sliding_window=0 | W          no window anywhere, or window W on the layers that slide (Mistral
                                without layer_types and Phi-3: every layer; a config with no sliding
                                layer: every layer)
  partial_rotary_factor=f       rotate the first int(head_dim * f) dims in any family (1.0: all)
  longrope_factors="short" | "long"   LongRoPE's factors whatever the length ("auto" = by length)
  qk_norm="head"                OLMo's whole-projection q/k norm weights applied one head at a time
  local_rope="main"             the main RoPE on the sliding layers too (Gemma 3, OLMo 3: YaRN on
                                every layer)
  norm_placement="pre"          each sublayer's norm moved before it (post-norm weights as pre-norms)
  norm_plus_one=False | True    RMSNorm weight w in place of 1 + w (or the reverse)
  hidden_act="silu" | "gelu_pytorch_tanh" | "gelu"   the gated MLP's activation
  embed_scale=e, attn_scale=c, residual_scale=r, logits_scale=d   the family's multipliers replaced
                                (attn_scale: scores x c in place of the family's scale)
  attn_softcap=0, final_softcap=0   no soft cap (or another c > 0)
  interleaved=False | True      rotate_half pairs in place of adjacent ones (or the reverse)
  query_temperature=False       no Ministral 3 query scale
"""
import argparse
import json
import math
import os
import sys

from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun import rope_ref  # noqa: E402  (inverse frequencies of every mode, independent of rope.c)
from lrun.hf_checkpoint import Checkpoint  # noqa: E402  (our own reader of HF weights)

# HF's rope_type names -> ours (rope.h). HF has no static "ntk".
HF_ROPE_TYPES = {"default": "none", "linear": "pi", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
                 "longrope": "longrope"}
ROPE_KEYS = ("mode", "factor", "base", "alpha", "orig_ctx", "attn_factor", "beta_fast", "beta_slow",
             "low_freq_factor", "high_freq_factor", "window", "short_factor", "long_factor", "longrope_factors",
             "group", "chunk", "truncate")
FAR_MODES = ("rerope", "leaky-rerope", "selfextend", "dca")  # a window, and keys scored another way past it


# --- Families: what config.json means for each architecture ---------------------------------------------

# config.json "architectures"[0] -> family; "model_type" names the same families (MODEL_TYPES: the
# model_type strings that differ from our family name).
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3", "SmolLM3ForCausalLM": "smollm3", "Phi3ForCausalLM": "phi3",
                 "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3", "Olmo2ForCausalLM": "olmo2",
                 "Olmo3ForCausalLM": "olmo3", "Exaone4ForCausalLM": "exaone4", "Glm4ForCausalLM": "glm4",
                 "GraniteForCausalLM": "granite", "Ministral3ForCausalLM": "ministral3"}
FAMILIES = tuple(dict.fromkeys(ARCHITECTURES.values()))
MODEL_TYPES = {"gemma3_text": "gemma3"}

# The class defaults (configuration_<family>.py) of the keys a config.json may leave out.
_COMMON = dict(tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=None,
               attention_bias=False, mlp_bias=False)
FAMILY_DEFAULTS = {
    "llama": dict(_COMMON),
    "mistral": dict(_COMMON, sliding_window=4096),
    "qwen2": dict(_COMMON, sliding_window=4096, use_sliding_window=False, max_window_layers=28),
    "qwen3": dict(_COMMON, sliding_window=4096, use_sliding_window=False, max_window_layers=28),
    "smollm3": dict(_COMMON, tie_word_embeddings=True, rope_theta=2000000.0, use_sliding_window=False,
                    no_rope_layer_interval=4),
    "phi3": dict(_COMMON, rms_norm_eps=1e-5, original_max_position_embeddings=4096),
    # configuration_gemma2.py: Gemma2Config.__init__ defaults
    "gemma2": dict(_COMMON, tie_word_embeddings=True, sliding_window=4096, query_pre_attn_scalar=256,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh"),
    # configuration_gemma3.py: Gemma3TextConfig.__init__ defaults (sliding_window_pattern 6: 5 local : 1 global)
    "gemma3": dict(_COMMON, tie_word_embeddings=True, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   sliding_window=4096, sliding_window_pattern=6, query_pre_attn_scalar=256,
                   attn_logit_softcapping=None, final_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh"),
    "olmo2": dict(_COMMON, rms_norm_eps=1e-5),
    "olmo3": dict(_COMMON, rms_norm_eps=1e-5, sliding_window=4096),
    "exaone4": dict(_COMMON, rms_norm_eps=1e-5, sliding_window=4096, sliding_window_pattern=4),
    "glm4": dict(_COMMON, rms_norm_eps=1.5625e-07, attention_bias=True, partial_rotary_factor=0.5),
    "granite": dict(_COMMON, embedding_multiplier=1.0, attention_multiplier=1.0, residual_multiplier=1.0,
                    logits_scaling=1.0),
    "ministral3": dict(_COMMON, rms_norm_eps=1e-5, rope_theta=1000000.0),
}
SWITCHES = ("biases", "qk_norm", "rope_layers", "sliding_window", "partial_rotary_factor", "longrope_factors",
            "local_rope", "norm_placement", "norm_plus_one", "hidden_act", "embed_scale", "attn_scale",
            "attn_softcap", "final_softcap", "residual_scale", "logits_scale", "interleaved", "query_temperature")

# Where each family puts its RMSNorms in a layer: the weight names of the four places (None: no norm
# there): before attention, on attention's output (before the residual add), before the MLP, on the
# MLP's output. "pre" is Llama's (modeling_llama.py LlamaDecoderLayer.forward); "post" OLMo 2's
# (modeling_olmo2.py Olmo2DecoderLayer.forward: h + post_attention_layernorm(attn(h)), no pre-norm;
# EXAONE 4 and OLMo 3 take that layer, modular_exaone4.py Exaone4DecoderLayer(Olmo2DecoderLayer));
# "sandwich" Gemma's (modeling_gemma2.py Gemma2DecoderLayer.forward: four norms); "glm4" GLM-4's
# (modeling_glm4.py Glm4DecoderLayer.forward: the same four places under other names).
NORM_PLACES = ("attn_in", "attn_out", "mlp_in", "mlp_out")
NORMS = {"pre": ("input_layernorm", None, "post_attention_layernorm", None),
         "post": (None, "post_attention_layernorm", None, "post_feedforward_layernorm"),
         "sandwich": ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                      "post_feedforward_layernorm"),
         "glm4": ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm")}
FAMILY_NORMS = {"gemma2": "sandwich", "gemma3": "sandwich", "olmo2": "post", "olmo3": "post", "exaone4": "post",
                "glm4": "glm4"}
# q_norm / k_norm: "head" = one RMSNorm over head_dim shared by the heads (modeling_qwen3.py,
# modeling_gemma3.py Gemma3Attention, modeling_exaone4.py Exaone4Attention: q_norm(q.view(heads))),
# "whole" = one over the whole projection, H * head_dim features (modeling_olmo2.py Olmo2Attention.forward:
# q_norm(q_proj(x)) before the view).
QK_NORM = {"qwen3": "head", "gemma3": "head", "exaone4": "head", "olmo2": "whole", "olmo3": "whole"}
# Gemma's RMSNorm multiplies by (1 + weight) (modeling_gemma2.py Gemma2RMSNorm.forward), every norm of it.
NORM_PLUS_ONE = ("gemma2", "gemma3")
# The families whose config.json partial_rotary_factor is obeyed (see read_family).
PARTIAL_ROTARY = ("phi3", "glm4")


def family_of(cfg):
    """The family name of a config.json dict: architectures[0], else model_type, else llama."""
    archs = cfg.get("architectures") or []
    if archs:
        if archs[0] not in ARCHITECTURES:
            raise ValueError(f"config.json: architecture {archs[0]!r} is not one the reference knows "
                             f"({', '.join(ARCHITECTURES)})")
        return ARCHITECTURES[archs[0]]
    model_type = MODEL_TYPES.get(cfg.get("model_type"), cfg.get("model_type"))
    return model_type if model_type in FAMILIES else "llama"


def config_value(cfg, key, family=None):
    """cfg[key], or the family's class default when config.json leaves it out."""
    return cfg[key] if key in cfg else FAMILY_DEFAULTS[family or family_of(cfg)].get(key)


LAYER_TYPES = ("full_attention", "sliding_attention")


def keyed_by_layer_type(d):
    """True when a rope_parameters dict is transformers 5's per-layer-type form, {"full_attention": {...},
    "sliding_attention": {...}} (configuration_gemma3.py writes it so; modeling_rope_utils.py
    `standardize_rope_params` reads either)."""
    return bool(d) and set(d) <= set(LAYER_TYPES)


def rope_dict(cfg, layer_type="full_attention"):
    """transformers 5's rope_parameters from either form of config.json: the v4 `rope_scaling` (it
    wins when set: `convert_rope_params_to_dict`, rope_scaling or rope_parameters) or v5's
    `rope_parameters` (checkpoint_rope takes a missing rope_theta from the top level). When
    rope_parameters is keyed by layer type, the entry of `layer_type` (the global layers' by default:
    the RoPE a run-time --rope-scaling stands for)."""
    d = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
    if keyed_by_layer_type(d):
        d = dict(d.get(layer_type) or {})
    return d


def rotary_fraction(cfg):
    """The fraction of head_dim that rotates: the top-level key (an attribute of the config, which
    `standardize_rope_params` writes over the dict's), else rope_parameters', else 1."""
    f = cfg.get("partial_rotary_factor")
    if f is None:
        f = rope_dict(cfg).get("partial_rotary_factor")
    return 1.0 if f is None else float(f)


def pattern_layer_types(cfg, fam, n_layers, W):
    """layer_types when config.json has none, for the families that describe their layers by a pattern:
      gemma2   layer i slides when i is even ((i + 1) % 2: configuration_gemma2.py __init__);
      gemma3   (i + 1) % sliding_window_pattern != 0 slides (default 6: 5 local : 1 global;
               configuration_gemma3.py __init__, the pattern read from kwargs);
      olmo3    (i + 1) % 4 != 0 slides (configuration_olmo3.py __init__: 3 sliding : 1 full);
      exaone4  an integer sliding_window_pattern as gemma3; a string such as "LLLG" (as the released
               EXAONE 4.0 configs write it beside layer_types) read letter by letter, cyclically, L =
               sliding, G = global, the last layer always global (transformers' configuration_exaone4.py
               computes (i + 1) % pattern, which a string cannot be: its released configs always carry
               layer_types; the ports that read the string, e.g. TensorRT-LLM's check_is_sliding, make
               the last layer global); no sliding_window: every layer full (configuration_exaone4.py:
               pattern 0).
    None for the other families."""
    pattern = {"gemma2": 2, "olmo3": 4}.get(fam)
    if fam in ("gemma3", "exaone4"):
        pattern = config_value(cfg, "sliding_window_pattern", fam)
    if pattern is None:
        return None
    if fam == "exaone4" and W is None:
        return ["full_attention"] * n_layers
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise ValueError(f"sliding_window_pattern {pattern!r}: want letters L (local) and G (global)")
        return ["sliding_attention" if pattern[l % len(pattern)] == "L" and l < n_layers - 1 else "full_attention"
                for l in range(n_layers)]
    return ["sliding_attention" if (l + 1) % int(pattern) else "full_attention" for l in range(n_layers)]


def read_family(cfg, biases=None, qk_norm=None, rope_layers=None, sliding_window=None,
                partial_rotary_factor=None, longrope_factors=None, local_rope=None, norm_placement=None,
                norm_plus_one=None, hidden_act=None, embed_scale=None, attn_scale=None, attn_softcap=None,
                final_softcap=None, residual_scale=None, logits_scale=None, interleaved=None,
                query_temperature=None):
    """What the network of this config.json is, after the feature switches (see the module
    docstring): dict(family, head_dim, rotary_dim, qkv_bias, o_bias, mlp_bias, qk_norm, qk_norm_over,
    fused, fused_gate_up, rope_layers (one bool per layer), layer_rope (one "main" / "local" per
    layer), layer_types, windows (one W or None per layer), tied, longrope_factors, norms (the
    four places' weight names), norm_plus_one, hidden_act, embed_scale, attn_scale (None: 1 /
    sqrt(head_dim)), attn_softcap, final_softcap, residual_scale, logits_scale, interleaved,
    query_temperature ((beta, L) or None)). `tied`: tie_word_embeddings (the loader also ties when
    there is no lm_head.weight)."""
    fam = family_of(cfg)
    get = lambda key: config_value(cfg, key, fam)  # noqa: E731
    n_layers, n_heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    prf = rotary_fraction(cfg)
    if fam == "glm4" and "partial_rotary_factor" not in cfg and "partial_rotary_factor" not in rope_dict(cfg):
        prf = float(get("partial_rotary_factor"))  # configuration_glm4.py: default 0.5
    if fam not in PARTIAL_ROTARY and prf != 1.0:
        # Only Phi-3 and GLM-4 rotate part of a head (Phi3 apply_rotary_pos_emb's q_rot / q_pass;
        # modeling_glm4.py apply_rotary_pos_emb, rotary_dim = cos.shape[-1]). The others'
        # default RoPE builds head_dim / 2 frequencies whatever the factor (Llama's
        # compute_default_rope_parameters: dim = head_dim), and their apply_rotary_pos_emb turns all
        # of q: transformers 5.17 rotates every dim (data/families/llama-partial shows it). The
        # scaled rope types would build int(head_dim * factor) / 2 frequencies for that full-width
        # rotation, a shape mismatch: no meaning to reproduce.
        rope_type = rope_dict(cfg).get("rope_type", rope_dict(cfg).get("type")) or "default"
        if rope_type != "default":
            raise ValueError(f"partial_rotary_factor {prf} with rope type {rope_type!r} in a {fam} checkpoint: "
                             "transformers 5.17 cannot run it (rotary_dim frequencies, head_dim rotation)")
        prf = 1.0
    if partial_rotary_factor is not None:
        prf = float(partial_rotary_factor)
    rotary_dim = int(head_dim * prf)  # HF: dim = int(head_dim * partial_rotary_factor)
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"partial_rotary_factor {prf} gives rotary_dim {rotary_dim}: "
                         f"it must be even, in 2..{head_dim}")

    # Biases: which linear layers carry one (the nn.Linear(..., bias=...) of each family's modules;
    # GLM-4: q/k/v only, modeling_glm4.py Glm4Attention; EXAONE 4 and Ministral 3: none).
    attention_bias, mlp_bias = bool(get("attention_bias")), bool(get("mlp_bias"))
    qkv_bias = {"qwen2": True, "mistral": False, "phi3": False, "exaone4": False,
                "ministral3": False}.get(fam, attention_bias)
    o_bias = attention_bias if fam in ("llama", "qwen3", "smollm3", "gemma2", "gemma3", "olmo2", "olmo3",
                                       "granite") else False
    mlp_bias = mlp_bias if fam in ("llama", "smollm3", "granite") else False
    if biases is False:
        qkv_bias = o_bias = mlp_bias = False

    # q_norm / k_norm: per head, or over the whole projection; the switch "head" reads OLMo's
    # whole-projection weights one head at a time (a control), False drops them.
    if qk_norm and fam not in QK_NORM:
        raise ValueError(f"qk_norm: the {fam} family has no q_norm / k_norm")
    has_qk_norm = fam in QK_NORM and qk_norm is not False
    qk_norm_over = (qk_norm if isinstance(qk_norm, str) else QK_NORM.get(fam)) if has_qk_norm else None
    if qk_norm_over not in (None, "head", "whole"):
        raise ValueError(f"qk_norm: False, 'head' or 'whole', got {qk_norm!r}")

    W = get("sliding_window")
    config_types = cfg.get("layer_types") or pattern_layer_types(cfg, fam, n_layers, W)
    # NoPE layers. SmolLM3: no_rope_layers[l] = 1 means layer l uses RoPE. EXAONE 4: with a
    # sliding_window set, only the sliding layers rotate, the global ones have no position at all
    # (modeling_exaone4.py Exaone4Attention.forward: `if self.sliding_window is None or
    # self.is_sliding: apply_rotary_pos_emb`, sliding_window being the config's).
    if fam == "smollm3":
        interval = get("no_rope_layer_interval")
        config_rope = cfg.get("no_rope_layers") or [int((l + 1) % interval != 0) for l in range(n_layers)]
    elif fam == "exaone4":
        config_rope = [int(W is None or t == "sliding_attention") for t in config_types[:n_layers]]
    else:
        config_rope = [1] * n_layers
    if rope_layers is None:
        rope_layers = config_rope
    elif isinstance(rope_layers, str):
        if rope_layers != "all":
            raise ValueError(f"rope_layers: 'all' or a list of 0/1 per layer, got {rope_layers!r}")
        rope_layers = [1] * n_layers
    if len(rope_layers) < n_layers:
        raise ValueError(f"rope_layers / no_rope_layers: {len(rope_layers)} entries for {n_layers} layers")
    rope_layers = [bool(r) for r in rope_layers[:n_layers]]

    # A RoPE per layer type. Gemma 3's sliding layers turn with rope_local_base_freq and no scaling
    # (modeling_gemma3.py Gemma3TextModel: rotary_emb_local from a config copy with rope_theta =
    # rope_local_base_freq and rope_scaling default; transformers 5: rope_parameters["sliding_attention"]).
    # OLMo 3's sliding layers turn with rope_theta unscaled, rope_scaling only on the full ones
    # (transformers 4.57 modeling_olmo3.py a0699c97, Olmo3Model: rotary_embs per layer type, the
    # sliding one built without rope_scaling; the OLMo 3 paper; transformers 5's one rotary_emb
    # scales every layer: local_rope="main" is that reading). "main": the checkpoint's RoPE
    # (checkpoint_rope, what a run's overrides change); "local": local_rope_of(cfg).
    has_local = fam in ("gemma3", "olmo3")
    if local_rope not in (None, "main"):
        raise ValueError(f"local_rope: None or 'main', got {local_rope!r}")
    layer_rope = ["local" if has_local and local_rope is None and t == "sliding_attention" else "main"
                  for t in config_types[:n_layers]] if config_types else ["main"] * n_layers

    # Sliding windows: the layer types, then W on the sliding ones.
    if fam in ("qwen2", "qwen3"):
        W = W if get("use_sliding_window") else None  # configuration_qwen2.py __post_init__
        types = cfg.get("layer_types") or ["sliding_attention" if W is not None and l >= get("max_window_layers")
                                           else "full_attention" for l in range(n_layers)]
    elif fam == "smollm3":
        types = cfg.get("layer_types") or [
            "sliding_attention" if get("use_sliding_window") and W is not None and not config_rope[l]
            else "full_attention" for l in range(n_layers)]
    elif fam in ("mistral", "ministral3") and cfg.get("layer_types"):  # loaded as Ministral
        types = cfg["layer_types"]
    elif fam in ("mistral", "phi3", "ministral3"):  # create_sliding_window_causal_mask for all layers when W is set
        types = ["sliding_attention" if W is not None else "full_attention"] * n_layers
    elif config_types:  # gemma2, gemma3, olmo3, exaone4: by layer_types or their pattern
        types = config_types
    else:  # llama, olmo2, glm4, granite: create_causal_mask only
        types, W = ["full_attention"] * n_layers, None
    if sliding_window is not None:  # the switch: 0 = no window; W = W on the sliding layers, or on all
        W = int(sliding_window) or None
        if W and "sliding_attention" not in types[:n_layers]:
            types = ["sliding_attention"] * n_layers
    if len(types) < n_layers or set(types) - {"full_attention", "sliding_attention"}:
        raise ValueError(f"layer_types: {types!r}: want one full_attention / sliding_attention per layer")
    windows = [W if t == "sliding_attention" else None for t in types[:n_layers]]
    if fam in ("qwen2", "qwen3", "mistral", "smollm3", "gemma2", "gemma3", "olmo3", "exaone4") \
            and sliding_window is None and cfg.get("layer_types") and "sliding_attention" in types and W is None:
        # masking_utils.py create_sliding_window_causal_mask: "Could not find a `sliding_window`"
        raise ValueError("layer_types has sliding_attention layers but no sliding_window is set")

    # The layer's norms, and what each family scales.
    placement = FAMILY_NORMS.get(fam, "pre")
    norms = NORMS[placement]
    if norm_placement == "pre":  # a control: the same weights as pre-norms (before each sublayer)
        norms = (norms[0] or norms[1], None, norms[2] or norms[3], None)
    elif norm_placement is not None:
        raise ValueError(f"norm_placement: None or 'pre', got {norm_placement!r}")
    plus_one = fam in NORM_PLUS_ONE if norm_plus_one is None else bool(norm_plus_one)
    act = get("hidden_activation") if fam in ("gemma2", "gemma3") else cfg.get("hidden_act", "silu")
    act = hidden_act or act
    if act not in ("silu", "gelu_pytorch_tanh", "gelu"):
        raise ValueError(f"hidden activation {act!r}: silu, gelu_pytorch_tanh and gelu are implemented")
    # Embeddings: Gemma x sqrt(hidden_size) (modeling_gemma2.py Gemma2Model.forward `normalizer`;
    # modeling_gemma3.py Gemma3TextScaledWordEmbedding), Granite x embedding_multiplier
    # (modeling_granite.py GraniteModel.forward).
    emb = cfg["hidden_size"] ** 0.5 if fam in ("gemma2", "gemma3") else \
        float(get("embedding_multiplier")) if fam == "granite" else 1.0
    # Scores: Gemma x query_pre_attn_scalar^-0.5 (Gemma2Attention.__init__ `scaling`), Granite x
    # attention_multiplier (GraniteAttention.__init__ `scaling`), else 1 / sqrt(head_dim).
    scale = float(get("query_pre_attn_scalar")) ** -0.5 if fam in ("gemma2", "gemma3") else \
        float(get("attention_multiplier")) if fam == "granite" else None
    # Gemma's soft caps: tanh(s / c) * c of the scores before the mask (modeling_gemma2.py
    # eager_attention_forward `softcap`) and of the logits (Gemma2ForCausalLM.forward).
    caps = [get("attn_logit_softcapping"), get("final_logit_softcapping")] if fam in ("gemma2", "gemma3") \
        else [None, None]
    for i, switch in enumerate((attn_softcap, final_softcap)):
        if switch is not None:
            caps[i] = switch or None
    for c in caps:
        if c is not None and not c > 0:
            raise ValueError(f"a logit softcap must be > 0, got {c}")
    # Granite: each sublayer's output x residual_multiplier, logits / logits_scaling
    # (modeling_granite.py GraniteDecoderLayer.forward, GraniteForCausalLM.forward).
    residual = float(get("residual_multiplier")) if fam == "granite" else 1.0
    logits_div = float(get("logits_scaling")) if fam == "granite" else 1.0
    # Ministral 3: queries x (1 + beta ln(1 + floor(pos / L))) after RoPE, beta = llama_4_scaling_beta
    # and L = original_max_position_embeddings of rope_parameters (modeling_ministral3.py
    # Ministral3Attention.forward, _get_llama_4_attn_scale).
    temp = None
    beta = rope_dict(cfg).get("llama_4_scaling_beta") if fam == "ministral3" else None
    if beta:
        L = rope_dict(cfg).get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        temp = (float(beta), int(L))
    if query_temperature is False:
        temp = None

    if longrope_factors not in (None, "auto", "short", "long"):
        raise ValueError(f"longrope_factors: auto, short or long, got {longrope_factors!r}")
    tied = bool(get("tie_word_embeddings"))
    return dict(family=fam, head_dim=head_dim, rotary_dim=rotary_dim, qkv_bias=qkv_bias, o_bias=o_bias,
                mlp_bias=mlp_bias, qk_norm=has_qk_norm, qk_norm_over=qk_norm_over, fused=fam == "phi3",
                fused_gate_up=fam in ("phi3", "glm4"), rope_layers=rope_layers, layer_rope=layer_rope,
                layer_types=list(types[:n_layers]), windows=windows, tied=tied,
                longrope_factors=longrope_factors or "auto", norms=norms, norm_plus_one=plus_one, hidden_act=act,
                embed_scale=emb if embed_scale is None else float(embed_scale),
                attn_scale=scale if attn_scale is None else float(attn_scale),
                attn_softcap=caps[0], final_softcap=caps[1],
                residual_scale=residual if residual_scale is None else float(residual_scale),
                logits_scale=logits_div if logits_scale is None else float(logits_scale),
                # GLM-4 turns adjacent pairs (2i, 2i + 1) (modeling_glm4.py rotate_half: x[..., 0::2],
                # x[..., 1::2]; cos[..., :r/2].repeat_interleave(2)), the others (i, i + r/2).
                interleaved=(fam == "glm4") if interleaved is None else bool(interleaved),
                query_temperature=temp)


# --- RoPE parameters ---------------------------------------------------------------------------------

def local_rope_of(cfg):
    """The RoPE of the sliding layers of a family that gives them their own (read_family's layer_rope
    "local"), as checkpoint_rope's dict, or None. Gemma 3: rope_parameters["sliding_attention"] in
    transformers 5's form, else the default RoPE with base rope_local_base_freq (4.x). OLMo 3: the
    default RoPE with the checkpoint's rope_theta (no rope_scaling)."""
    fam = family_of(cfg)
    if fam not in ("gemma3", "olmo3"):
        return None
    params = cfg.get("rope_parameters") or {}
    if keyed_by_layer_type(params) and params.get("sliding_attention"):
        return checkpoint_rope(cfg, dict(params["sliding_attention"]))
    if fam == "gemma3":
        base = config_value(cfg, "rope_local_base_freq", fam)
    else:
        base = rope_dict(cfg).get("rope_theta", cfg.get("rope_theta")) or FAMILY_DEFAULTS[fam]["rope_theta"]
    return checkpoint_rope(cfg, {"rope_type": "default", "rope_theta": base})


def checkpoint_rope(cfg, scaling=None):
    """The checkpoint's own RoPE from config.json, as a dict of ROPE_KEYS (0 = unset/default);
    `scaling`: read this rope dict instead of the config's (local_rope_of).

    Reads rope_theta and rope_scaling ({"rope_type"| legacy "type", "factor", ...}) or transformers
    v5's single "rope_parameters" dict (rope_dict). L (orig_ctx) is what HF uses as the trained
    context: original_max_position_embeddings for llama3, yarn and longrope (the top-level key when
    config.json has one, else the dict's, else max_position_embeddings: `standardize_rope_params`;
    Phi-3's class default is 4096), else max_position_embeddings (HF's linear and dynamic ignore
    the original_* key; see the TODO in `_compute_dynamic_ntk_parameters`). yarn and longrope
    without a factor: max_position_embeddings / L (`_compute_yarn_parameters`,
    `_compute_longrope_parameters`). Phi-3's legacy "su" and "yarn" are longrope
    (configuration_phi3.py `convert_rope_params_to_dict`).
    """
    fam = family_of(cfg)
    scaling = rope_dict(cfg) if scaling is None else scaling
    theta = scaling.get("rope_theta", cfg.get("rope_theta")) or FAMILY_DEFAULTS[fam]["rope_theta"]
    max_pos = cfg["max_position_embeddings"]
    rope = dict(mode="none", factor=1.0, base=float(theta), alpha=0.0, orig_ctx=max_pos, attn_factor=0.0,
                beta_fast=0.0, beta_slow=0.0, low_freq_factor=0.0, high_freq_factor=0.0, window=0,
                short_factor=None, long_factor=None, longrope_factors="auto", truncate=True)
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if fam == "phi3" and rope_type in ("su", "yarn"):
        rope_type = "longrope"
    if rope_type in (None, "default"):
        return rope
    if rope_type not in HF_ROPE_TYPES:
        raise ValueError(f"config.json: rope type {rope_type!r} is not supported by the reference")
    rope["mode"] = HF_ROPE_TYPES[rope_type]
    orig = cfg.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings") \
        or FAMILY_DEFAULTS[fam].get("original_max_position_embeddings")
    if rope_type in ("yarn", "longrope") and scaling.get("factor") is None:
        rope["factor"] = max_pos / (orig or max_pos)
    else:
        rope["factor"] = float(scaling["factor"])
    if rope_type in ("yarn", "longrope"):
        rope["orig_ctx"] = int(orig or max_pos)
        rope["attn_factor"] = float(scaling.get("attention_factor") or 0.0)
    if rope_type == "yarn":
        rope["beta_fast"] = float(scaling.get("beta_fast") or 0.0)
        rope["beta_slow"] = float(scaling.get("beta_slow") or 0.0)
        # DeepSeek's keys, as Ministral 3's configs carry them: with no attention_factor and both
        # mscale and mscale_all_dim set, the factor is get_mscale(s, mscale) / get_mscale(s,
        # mscale_all_dim), get_mscale(s, m) = 0.1 m ln(s) + 1 for s > 1 (1 for s <= 1): 1.0 when the
        # two are equal (modeling_rope_utils.py `_compute_yarn_parameters`, inner get_mscale).
        # truncate (default true): floor / ceil the correction range (its find_correction_range).
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if not rope["attn_factor"] and mscale and mscale_all_dim:
            s = rope["factor"]
            get_mscale = lambda m: 0.1 * m * math.log(s) + 1.0 if s > 1 else 1.0  # noqa: E731
            rope["attn_factor"] = get_mscale(float(mscale)) / get_mscale(float(mscale_all_dim))
        rope["truncate"] = bool(scaling.get("truncate", True))
    elif rope_type == "llama3":
        rope["orig_ctx"] = int(orig)
        rope["low_freq_factor"] = float(scaling["low_freq_factor"])
        rope["high_freq_factor"] = float(scaling["high_freq_factor"])
    elif rope_type == "longrope":
        rope["short_factor"] = [float(f) for f in scaling["short_factor"]]
        rope["long_factor"] = [float(f) for f in scaling["long_factor"]]
    return rope


def resolve_rope(trained, rope=None, ctx=None):
    """The RoPE parameters of a run: the checkpoint's (`trained`) with the user's overrides on top,
    following rope.h's RopeOverrides / rope_params_resolve:
      mode    the checkpoint's unless given; a different mode starts from that mode's defaults;
      factor  1 for none (giving one is an error); else given, else the checkpoint's own (same
              mode), else ctx / L when ctx > L, else 1;
      base    given, else rope_theta;  alpha  given (ntk only), else 0 = factor;
      window  rerope, leaky-rerope and selfextend only: W, given, else L // 4 (at least 1);
              leaky-rerope's factor K defaults to (ctx - W) / (L - W) when ctx > L (ctx maps to
              L), else 1;
      chunk   dca only: the chunk size S, given, else 3 L // 4 (ChunkLlama's default); dca's window
              is its local window w, given, else L // 16 (at least 1), and its chunks c = S - w;
      group   selfextend only: G, given, else the smallest G for which the farthest grouped
              distance, (ctx - 1) // G + W - W // G, stays below L (LongLM's capacity); it is the
              factor. dynamic-yarn's factor is 1 (its s follows the length: rope_ref).
    ctx is the run's context (the C program's --ctx); None means L, the trained context.
    Also accepted (tests only; the C command line has no flag for them): orig_ctx, attn_factor,
    beta_fast, beta_slow, low_freq_factor, high_freq_factor, and longrope's short_factor,
    long_factor and longrope_factors ("auto": by length; "short", "long": forced), and yarn's
    truncate. A fully resolved dict passed back in resolves to itself. Defaults are filled in as rope_params_defaults
    does: yarn beta 32/1, llama3 low/high 1/4."""
    rope = dict(rope or {})
    unknown = set(rope) - set(ROPE_KEYS)
    if unknown:
        raise ValueError(f"unknown RoPE keys {sorted(unknown)}; known: {ROPE_KEYS}")
    out = dict(trained)
    L = out["orig_ctx"]
    ctx = L if ctx is None else ctx
    if rope.get("base"):
        out["base"] = float(rope["base"])
    mode = rope.get("mode")
    if mode is not None and rope_ref.canonical_mode(mode) != out["mode"]:
        out.update(mode=rope_ref.canonical_mode(mode), factor=0.0, attn_factor=0.0, beta_fast=0.0,
                   beta_slow=0.0, low_freq_factor=0.0, high_freq_factor=0.0)
    if out["mode"] == "selfextend" and rope.get("factor") and not rope.get("group"):  # a resolved dict: factor is G
        rope["group"] = int(rope.pop("factor"))
    if out["mode"] in ("none", "rerope", "selfextend", "dynamic-yarn", "dca") and rope.get("factor") and rope["factor"] != 1:
        raise ValueError("a factor needs a scaling mode other than none, rerope, selfextend and dynamic-yarn")
    if rope.get("group") and out["mode"] != "selfextend":
        raise ValueError("a group size is used only by selfextend")
    out["alpha"] = float(rope.get("alpha") or 0.0)
    if out["alpha"] and out["mode"] != "ntk":
        raise ValueError("alpha is used only by mode ntk")
    if rope.get("window") and out["mode"] not in FAR_MODES:
        raise ValueError("a window is used only by rerope, leaky-rerope and selfextend")
    out["window"] = (int(rope.get("window") or max(1, L // (16 if out["mode"] == "dca" else 4)))
                     if out["mode"] in FAR_MODES else 0)
    if rope.get("chunk") and out["mode"] != "dca":
        raise ValueError("a chunk size is used only by dca")
    out["chunk"] = int(rope.get("chunk") or 3 * L // 4) if out["mode"] == "dca" else 0
    if out["mode"] in ("none", "rerope", "dynamic-yarn", "dca"):
        out["factor"] = 1.0
    elif out["mode"] == "selfextend":
        W, G = out["window"], int(rope.get("group") or 1)
        while not rope.get("group") and W < L and G < ctx and (ctx - 1) // G + W - W // G > L - 1:
            G += 1
        out["factor"] = float(G)
    elif rope.get("factor"):
        out["factor"] = float(rope["factor"])
    elif out["mode"] == "leaky-rerope":
        W = out["window"]
        out["factor"] = (ctx - W) / (L - W) if ctx > L and W < L else 1.0
    elif not out["factor"] and out["mode"] == "dynamic":  # alpha(l) = l / L (rope.c rope_params_resolve)
        out["factor"] = 1.0
    elif not out["factor"]:  # a mode the checkpoint does not carry: stretch L to the context
        out["factor"] = ctx / L if ctx > L else 1.0
    for k in ("orig_ctx", "attn_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor",
              "short_factor", "long_factor", "longrope_factors"):
        if rope.get(k):
            out[k] = rope[k]
    if out["mode"] in ("yarn", "dynamic-yarn"):
        out["beta_fast"] = out["beta_fast"] or 32.0
        out["beta_slow"] = out["beta_slow"] or 1.0
    if out["mode"] == "llama3":
        out["low_freq_factor"] = out["low_freq_factor"] or 1.0
        out["high_freq_factor"] = out["high_freq_factor"] or 4.0
    if out["factor"] < 1:
        raise ValueError(f"factor {out['factor']} is below 1")
    return out


def rope_tables(p, rotary_dim, length):
    """(inv_freq (rotary_dim/2) float64, mscale) for resolved parameters p at sequence length
    `length` (only dynamic and longrope look at it). rotary_dim: the dims of a head that turn
    (head_dim unless partial_rotary_factor < 1). longrope_factors "short" / "long" force longrope's
    choice, which is otherwise long_factor exactly when length > L (HF's `longrope_frequency_update`
    compares max(position_ids) + 1 with original_max_position_embeddings)."""
    forced = p.get("longrope_factors", "auto")
    if p["mode"] == "longrope" and forced in ("short", "long"):
        length = p["orig_ctx"] + 1 if forced == "long" else None
    if p["mode"] == "yarn" and p.get("truncate") is False:
        # YaRN with truncate false: the correction range's real bounds, not floored / ceiled
        # (modeling_rope_utils.py `_compute_yarn_parameters`, find_correction_range); else rope_ref's.
        d, base, L, s = rotary_dim, p["base"], p["orig_ctx"], p["factor"]
        lo = max(rope_ref.yarn_correction_dim(p["beta_fast"] or 32.0, d, base, L), 0.0)
        hi = min(rope_ref.yarn_correction_dim(p["beta_slow"] or 1.0, d, base, L), d - 1.0)
        g = 1.0 - rope_ref.yarn_ramp(lo, hi, d // 2)                                # (d/2) extrapolated share
        theta = rope_ref.default_inv_freq(d, base)                                  # (d/2)
        return theta / s * (1.0 - g) + theta * g, p["attn_factor"] or 0.1 * math.log(s) + 1.0
    return rope_ref.inv_freq(p["mode"], rotary_dim, p["base"], p["orig_ctx"], p["factor"], alpha=p["alpha"],
                             length=length, beta_fast=p["beta_fast"], beta_slow=p["beta_slow"],
                             low_freq_factor=p["low_freq_factor"], high_freq_factor=p["high_freq_factor"],
                             attn_factor=p["attn_factor"], short_factor=p.get("short_factor"),
                             long_factor=p.get("long_factor"))


def relative_position(p):
    """ReRoPE's relative position as a function of the distance r = m - n >= 0, or None for the modes
    that rotate q and k by their absolute positions. rerope: r below the window W, else W;
    leaky-rerope: r below W, else W + (r - W) / K (Su 2023, kexue.fm/archives/9706 and 9708;
    bojone/rerope rerope_patch.py, leaky_rerope_patch.py)."""
    W, K = p["window"], p["factor"]
    if p["mode"] == "rerope":
        return lambda r: np.minimum(r, W).astype(np.float64)
    if p["mode"] == "leaky-rerope":
        return lambda r: np.where(r < W, r, W + (r - W) / K).astype(np.float64)
    return None


def relative_phases(rel, inv_freq, n):
    """cos and sin of rel(r) theta_i for every distance r = 0 .. n-1 and pair i: two (n, hd/2)."""
    angle = rel(np.arange(n))[:, None] * np.asarray(inv_freq, dtype=np.float64)[None, :]
    return torch.from_numpy(np.cos(angle)), torch.from_numpy(np.sin(angle))


def relative_scores(q, k, phases, scale=None):
    """Causal attention scores (H, n, n) of raw (un-rotated) queries q (H, n, hd) against raw keys k
    (H, n, hd), positions 0 .. n-1, each pair rotated by the explicit relative position of the two:
        score(m, n) = (R(rel(m - n) theta) q_m) . k_n / sqrt(hd),
    filled one distance r = m - n at a time (the r-th diagonal below the main one; above it stays 0,
    for the mask): the queries m = r .. n-1, every pair i = (x_i, x_{i+d/2}) of the rotate_half layout
    turned by rel(r) theta_i, dotted with the keys m - r. In the complex view (README, "RoPE, from the
    math to the code") that is Re sum_i q_i[m] e^{i rel(r) theta_i} conj(k_i[m - r]).
    phases: relative_phases, row r for distance r. No absolute position is used. scale: the score
    scale in place of 1 / sqrt(hd) (Gemma, Granite)."""
    H, n, hd = q.shape
    h = hd // 2
    q0, q1 = (x.to(torch.float64).contiguous() for x in (q[..., :h], q[..., h:]))           # (H, n, h)
    k0, k1 = (x.to(torch.float64).contiguous() for x in (k[..., :h], k[..., h:]))           # (H, n, h)
    cos, sin = phases
    out = torch.zeros(H, n, n, dtype=torch.float64)
    for r in range(n):  # queries m = r .. n-1 against keys m - r, all turned by rel(r)
        c, s = cos[r], sin[r]                                                             # (h)
        a0, a1 = q0[:, r:], q1[:, r:]                                                     # (H, n-r, h)
        out.diagonal(-r, 1, 2)[:] = ((a0 * c - a1 * s) * k0[:, :n - r] + (a0 * s + a1 * c) * k1[:, :n - r]).sum(-1)
    return out / math.sqrt(hd) if scale is None else out * scale


# --- The model -----------------------------------------------------------------------------------------

def rotate_half(x):
    """modeling_llama.py rotate_half: cat(-x2, x1) over the last axis (halves x1, x2)."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def cos_sin(inv_freq, mscale, positions, dtype):
    """cos and sin (len(positions), rotary_dim) of the rotate_half layout (LlamaRotaryEmbedding.forward):
    freqs = m * inv_freq, emb = cat(freqs, freqs), both times the attention scaling (yarn's and
    longrope's m_s). Angles in float64 here, float32 in HF."""
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)             # (n, r/2)
    emb = torch.from_numpy(np.concatenate([freqs, freqs], axis=-1))                 # (n, r)
    return (emb.cos() * mscale).to(dtype), (emb.sin() * mscale).to(dtype)


def causal_mask(t0, t1, n_keys, window, dtype):
    """Additive mask (t1 - t0, n_keys) for queries at positions t0 .. t1-1: 0 where query i sees key j,
    -inf elsewhere. Causal: j <= i; with a window W also j > i - W (masking_utils.py
    causal_mask_function and sliding_window_overlay: `kv_idx > q_idx - sliding_window`), so a query
    sees W keys, itself included. Row r is query i = t0 + r: j > i is j - r >= t0 + 1 (triu), and
    j <= i - W is j - r <= t0 - W (tril)."""
    mask = torch.full((t1 - t0, n_keys), float("-inf"), dtype=dtype).triu(t0 + 1)
    if window:
        mask += torch.full((t1 - t0, n_keys), float("-inf"), dtype=dtype).tril(t0 - window)
    return mask


class Reference:
    """A Hugging Face directory of one of the families (see the module docstring), loaded whole into
    torch tensors of `dtype`. Keyword options: the feature switches of read_family."""

    def __init__(self, hf_dir, dtype=torch.float64, **switches):
        unknown = set(switches) - set(SWITCHES)
        if unknown:
            raise TypeError(f"unknown feature switches {sorted(unknown)}; known: {SWITCHES}")
        self.dir = hf_dir
        self.dtype = dtype
        # HF does norms and softmax in float32 at least; we keep float64 when the model is float64.
        self.acc = torch.promote_types(dtype, torch.float32)
        with open(os.path.join(hf_dir, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        fam = self.family = read_family(cfg, **switches)
        self.dim = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv_heads = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = fam["head_dim"]
        self.rotary_dim = fam["rotary_dim"]
        self.vocab_size = cfg["vocab_size"]
        self.eps = config_value(cfg, "rms_norm_eps", fam["family"])
        self.seq_len = cfg["max_position_embeddings"]
        self.bos_id = cfg.get("bos_token_id", 1)
        self.eos_id = cfg.get("eos_token_id", 2)
        self.trained_rope = checkpoint_rope(cfg)
        self.trained_rope["longrope_factors"] = fam["longrope_factors"]
        # The sliding layers' own RoPE (Gemma 3, OLMo 3), fixed: a run's overrides change the main one.
        self.local_rope = resolve_rope(local_rope_of(cfg)) if "local" in fam["layer_rope"] else None

        ck = Checkpoint(hf_dir)
        names = set(ck.names())

        def w(name):  # (out, in) for matrices, like nn.Linear.weight
            return torch.from_numpy(np.array(ck.get(name))).to(dtype)

        H, KV, hd, F = self.n_heads, self.n_kv_heads, self.head_dim, cfg["intermediate_size"]
        one = 1.0 if fam["norm_plus_one"] else 0.0  # Gemma's x * (1 + w), folded into the weight

        def norm_weight(name):
            return w(name) + one

        self.embed = w("model.embed_tokens.weight")  # (V, D)
        self.layers = []
        for l in range(self.n_layers):
            p = f"model.layers.{l}."
            lw = {"o_proj": w(p + "self_attn.o_proj.weight"),                            # (D, H*hd)
                  "down_proj": w(p + "mlp.down_proj.weight")}                            # (D, F)
            for place, name in zip(NORM_PLACES, fam["norms"]):
                if name:
                    lw[place] = norm_weight(p + name + ".weight")                        # (D)
            if fam["fused"]:  # Phi-3: qkv_proj rows are q, k, v
                qkv = w(p + "self_attn.qkv_proj.weight")                                 # (H*hd + 2*KV*hd, D)
                lw["q_proj"], lw["k_proj"], lw["v_proj"] = qkv.split([H * hd, KV * hd, KV * hd])
            else:
                for name in ("q_proj", "k_proj", "v_proj"):
                    lw[name] = w(p + f"self_attn.{name}.weight")                         # (H*hd | KV*hd, D)
            if fam["fused_gate_up"]:  # Phi-3, GLM-4: gate_up_proj rows gate, then up (`chunk(2)`)
                lw["gate_proj"], lw["up_proj"] = w(p + "mlp.gate_up_proj.weight").split([F, F])  # (F, D) each
            else:
                for name in ("gate_proj", "up_proj"):
                    lw[name] = w(p + f"mlp.{name}.weight")                               # (F, D)
            biased = ([f"self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj")] if fam["qkv_bias"] else []) \
                + (["self_attn.o_proj"] if fam["o_bias"] else []) \
                + ([f"mlp.{n}" for n in ("gate_proj", "up_proj", "down_proj")] if fam["mlp_bias"] else [])
            for module in biased:
                lw[module.split(".")[1] + "_bias"] = w(p + module + ".bias")
            if fam["qk_norm"]:
                lw["q_norm"] = norm_weight(p + "self_attn.q_norm.weight")                # (hd) | (H*hd) whole
                lw["k_norm"] = norm_weight(p + "self_attn.k_norm.weight")                # (hd) | (KV*hd) whole
            self.layers.append(lw)
        self.norm = norm_weight("model.norm.weight")  # (D)
        tied = fam["tied"] or "lm_head.weight" not in names
        self.lm_head = self.embed if tied else w("lm_head.weight")  # (V, D)
        self._sp = None

    # --- tokenizer ---
    def _tokenizer(self):
        if self._sp is None:
            import sentencepiece as spm
            self._sp = spm.SentencePieceProcessor(model_file=os.path.join(self.dir, "tokenizer.model"))
        return self._sp

    def encode(self, text, bos=True):
        """SentencePiece ids of text (tokenizer.model in the HF directory), BOS first if bos."""
        return ([self.bos_id] if bos else []) + list(self._tokenizer().encode(text))

    def decode(self, ids):
        return self._tokenizer().decode([int(i) for i in ids if i not in (self.bos_id, self.eos_id)])

    # --- RoPE ---
    def resolve_rope(self, rope=None, ctx=None):
        return resolve_rope(self.trained_rope, rope, ctx)

    # --- the pieces of a layer (shared by forward and Decoder) ---
    def rmsnorm(self, x, weight):
        """LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) over the last axis, computed in `acc`, back to
        dtype, times weight. Also the q_norm / k_norm, over head_dim or the whole projection. Gemma's
        (1 + w) is in the loaded weight (Gemma2RMSNorm multiplies in float32 before the cast back:
        the same in float32 and float64)."""
        xf = x.to(self.acc)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(self.dtype)

    @staticmethod
    def linear(x, lw, name):
        """nn.Linear: x W^T, plus the bias when the layer has one."""
        y = x @ lw[name].T
        bias = lw.get(name + "_bias")
        return y if bias is None else y + bias

    def qkv(self, lw, a):
        """q (H, n, hd), k (KV, n, hd), v (KV, n, hd) of normed hidden states a (n, D), before RoPE:
        projections (+ biases), then q_norm / k_norm. Per head (modeling_qwen3.py:
        q_norm(q_proj(x).view(hidden_shape)), before apply_rotary_pos_emb; Gemma 3, EXAONE 4 alike),
        or over the whole projection before the view (modeling_olmo2.py Olmo2Attention.forward:
        q_norm(q_proj(x)), a weight of H * hd). qk_norm="head" on OLMo: that weight read per head."""
        n, hd, H, KV = a.shape[0], self.head_dim, self.n_heads, self.n_kv_heads
        q = self.linear(a, lw, "q_proj")                                            # (n, H*hd)
        k = self.linear(a, lw, "k_proj")                                            # (n, KV*hd)
        v = self.linear(a, lw, "v_proj").view(n, KV, hd)                            # (n, KV, hd)
        over = self.family["qk_norm_over"]
        if over == "whole":
            q, k = self.rmsnorm(q, lw["q_norm"]), self.rmsnorm(k, lw["k_norm"])
        q, k = q.view(n, H, hd), k.view(n, KV, hd)                                  # (n, H|KV, hd)
        if over == "head":  # one weight per head's dims: (hd), or (H*hd) read as (H, hd)
            q = self.rmsnorm(q, lw["q_norm"] if lw["q_norm"].numel() == hd else lw["q_norm"].view(H, hd))
            k = self.rmsnorm(k, lw["k_norm"] if lw["k_norm"].numel() == hd else lw["k_norm"].view(KV, hd))
        return q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)

    def rotate(self, l, x, cos, sin):
        """apply_rotary_pos_emb for layer l on x (heads, n, hd), over the first rotary_dim dims, the
        rest passed through (modeling_phi3.py: q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]).
        rotate_half layout: x*cos + rotate_half(x)*sin, pair i = (x[i], x[i + r/2]). Interleaved
        (GLM-4): pair i = (x[2i], x[2i + 1]) turned by angle i (modeling_glm4.py apply_rotary_pos_emb,
        cos[..., :r/2] repeated twice each and its rotate_half over x[0::2], x[1::2]). A NoPE layer
        (SmolLM3, EXAONE 4's global layers) returns x unturned. cos, sin: (n, r), cos_sin's layout."""
        if not self.family["rope_layers"][l]:
            return x
        r = self.rotary_dim
        if self.family["interleaved"]:
            c, s = cos[..., : r // 2], sin[..., : r // 2]                           # (n, r/2) angle i
            x0, x1 = x[..., 0:r:2], x[..., 1:r:2]                                   # (heads, n, r/2)
            turned = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).flatten(-2)  # (heads, n, r)
        else:
            turned = x[..., :r] * cos + rotate_half(x[..., :r]) * sin
        return turned if r == self.head_dim else torch.cat([turned, x[..., r:]], dim=-1)

    def mlp(self, lw, a):
        """down_proj(act(gate_proj(a)) * up_proj(a)) (LlamaMLP; Phi3MLP and Glm4MLP with gate_up_proj
        split): act silu (SwiGLU), or Gemma's gelu_pytorch_tanh (GeGLU: 0.5 x (1 + tanh(sqrt(2/pi)
        (x + 0.044715 x^3))), activations.py PytorchGELUTanh)."""
        g = self.linear(a, lw, "gate_proj")
        act = self.family["hidden_act"]
        g = torch.nn.functional.silu(g) if act == "silu" else \
            torch.nn.functional.gelu(g, approximate="tanh" if act == "gelu_pytorch_tanh" else "none")
        return self.linear(g * self.linear(a, lw, "up_proj"), lw, "down_proj")

    def pre(self, lw, part, x):
        """The input of sublayer part ("attn" or "mlp"): x, normed when the family has a norm there."""
        w = lw.get(part + "_in")
        return x if w is None else self.rmsnorm(x, w)

    def post(self, lw, part, y):
        """What sublayer part adds to the residual stream: its output y, normed when the family norms
        it (OLMo 2, Gemma, GLM-4), times Granite's residual_multiplier."""
        w = lw.get(part + "_out")
        y = y if w is None else self.rmsnorm(y, w)
        return y if self.family["residual_scale"] == 1.0 else y * self.family["residual_scale"]

    def scaled(self, qk):
        """Scores from q k^T: / sqrt(head_dim), or times the family's scale (Gemma's
        query_pre_attn_scalar^-0.5, Granite's attention_multiplier)."""
        scale = self.family["attn_scale"]
        return qk / math.sqrt(self.head_dim) if scale is None else qk * scale

    def softcap(self, s, cap):
        """Gemma's soft cap: tanh(s / cap) * cap (none when cap is None)."""
        return s if cap is None else torch.tanh(s / cap) * cap

    def embed_ids(self, ids):
        """(n, D) embeddings, times the family's embedding scale (Gemma: sqrt(D), in the hidden dtype;
        Granite: embedding_multiplier)."""
        x = self.embed[ids]
        e = self.family["embed_scale"]
        return x if e == 1.0 else x * torch.tensor(e, dtype=self.dtype)

    def head(self, x):
        """Logits (n, V) of the last hidden states: final norm, lm_head, / Granite's logits_scaling,
        Gemma 2's final soft cap."""
        y = self.rmsnorm(x, self.norm) @ self.lm_head.T
        if self.family["logits_scale"] != 1.0:
            y = y / self.family["logits_scale"]
        return self.softcap(y, self.family["final_softcap"])

    def query_temperature(self, positions):
        """(n) factors for the queries at these positions: Ministral 3's 1 + beta ln(1 + floor(pos / L))
        (modeling_ministral3.py _get_llama_4_attn_scale), or None."""
        t = self.family["query_temperature"]
        if t is None:
            return None
        beta, L = t
        pos = np.asarray(positions, dtype=np.float64)
        return torch.from_numpy(1.0 + beta * np.log1p(np.floor(pos / L))).to(self.dtype)

    def layer_tables(self, cos, sin, positions):
        """{"main": (cos, sin), "local": the sliding layers' own} for these positions."""
        tabs = {"main": (cos, sin)}
        if self.local_rope is not None:
            inv, ms = rope_tables(self.local_rope, self.rotary_dim, len(positions))
            tabs["local"] = cos_sin(inv, ms, positions, self.dtype)
        return tabs

    # --- the forward pass ---
    def forward(self, ids, inv_freq, mscale, logn_L=None, rel=None, grouped=None, chunked=None):
        """Logits (n, V) in dtype for token ids at positions 0 .. n-1 with the given RoPE table; with
        logn_L, log-n attention scaling: queries times max(1, ln(m + 1) / ln(logn_L)) (bojone/rerope);
        with rel (relative_position: ReRoPE), q and k are not rotated by their positions, and the
        scores rotate each pair by rel(m - n) instead (relative_scores). With grouped = (W, G),
        Self-Extend as LongLM's self_extend_patch writes it (Jin et al. 2024, arXiv 2401.01325): two
        score matrices, the "neighbor" one of q and k rotated at their positions m and n and the
        "group" one of q rotated at m // G + W - W // G and k at n // G, and each score taken from
        the first where m - n < W, else from the second (torch.where on a neighbour mask). With
        chunked = (S, w), dual chunk attention as ChunkLlama defines it (An et al. 2024, arXiv
        2402.17463; HKUNLP/ChunkLlama chunkllama_attn_replace.py): chunks of c = S - w positions,
        every key rotated at n mod c, and the query at m rotated by the chunk of the key: the same
        chunk (intra) at m mod c, the previous one (successive) at min(m mod c + c, S), any earlier
        one (inter) at S; three score matrices, each score taken from the one its pair belongs to."""
        ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        n, hd, H, KV = ids.shape[0], self.head_dim, self.n_heads, self.n_kv_heads
        if rel is not None and self.rotary_dim != hd:
            raise ValueError("rerope modes with partial_rotary_factor < 1 are not implemented")
        if (rel is not None or grouped is not None or chunked is not None) and \
                (self.local_rope is not None or self.family["interleaved"] or self.family["query_temperature"]):
            raise ValueError("rerope modes, selfextend and dca are not implemented with a local RoPE per layer, "
                             "interleaved pairs or a query temperature")
        cos, sin = cos_sin(inv_freq, mscale, range(n), self.dtype)                  # (n, r)
        tabs = self.layer_tables(cos, sin, range(n))                                # {kind: (n, r) twice}
        temp = self.query_temperature(range(n))                                     # (n) or None
        masks = {W: causal_mask(0, n, n, W, self.acc) for W in set(self.family["windows"])}      # (n, n)
        phases = relative_phases(rel, inv_freq, n) if rel is not None else None     # (n, hd/2) ReRoPE
        if grouped is not None:  # Self-Extend: the group positions' tables, and where the neighbours are
            W, G = grouped
            pos = np.arange(n)
            gq_cos, gq_sin = cos_sin(inv_freq, mscale, pos // G + W - W // G, self.dtype)
            gk_cos, gk_sin = cos_sin(inv_freq, mscale, pos // G, self.dtype)
            neighbour = torch.from_numpy(pos[:, None] - pos[None, :] < W)                # (n, n)
        if chunked is not None:  # DCA: the key and the three query tables, and which pair is which
            S, w = chunked
            c = S - w
            pos = np.arange(n)
            k_cos, k_sin = cos_sin(inv_freq, mscale, pos % c, self.dtype)
            q_tabs = [cos_sin(inv_freq, mscale, qpos, self.dtype)
                      for qpos in (pos % c, np.minimum(pos % c + c, S), np.full(n, S))]
            gap = pos[:, None] // c - pos[None, :] // c                                # (n, n) chunks apart
            which = torch.from_numpy(np.where(gap == 0, 0, np.where(gap == 1, 1, 2)))  # intra, successive, inter

        x = self.embed_ids(ids)                                                     # (n, D)
        for l, lw in enumerate(self.layers):
            a = self.pre(lw, "attn", x)                                             # (n, D)
            q, k, v = self.qkv(lw, a)                                               # (H|KV, n, hd)
            relative = rel is not None and self.family["rope_layers"][l]
            group = grouped is not None and self.family["rope_layers"][l]
            chunk = chunked is not None and self.family["rope_layers"][l]
            if chunk:  # DCA: keys at n mod c, the query three ways; nothing else rotates
                kc = self.rotate(l, k, k_cos, k_sin).repeat_interleave(H // KV, dim=0)      # (H, n, hd)
                qcs = [self.rotate(l, q, qc, qs) for qc, qs in q_tabs]
            if group:  # the group path's q and k, from the raw ones
                qg, kg = self.rotate(l, q, gq_cos, gq_sin), self.rotate(l, k, gk_cos, gk_sin)
            if not relative:
                lcos, lsin = tabs[self.family["layer_rope"][l]]                     # this layer's RoPE
                q, k = self.rotate(l, q, lcos, lsin), self.rotate(l, k, lcos, lsin)
            if temp is not None:  # Ministral 3: after RoPE (Ministral3Attention.forward)
                q = q * temp[None, :, None]
            if logn_L:  # per position m: max(1, ln(m + 1) / ln(L)), a rotation commutes with it
                grow = np.maximum(1.0, np.log(np.arange(1, n + 1, dtype=np.float64)) / math.log(logn_L))
                q = q * torch.from_numpy(grow).to(self.dtype)[None, :, None]
                if group:
                    qg = qg * torch.from_numpy(grow).to(self.dtype)[None, :, None]
                if chunk:
                    qcs = [x * torch.from_numpy(grow).to(self.dtype)[None, :, None] for x in qcs]
            if group:
                kg = kg.repeat_interleave(H // KV, dim=0)                           # (H, n, hd)
            # repeat_kv: query head h reads kv head h // (H/KV)
            k = k.repeat_interleave(H // KV, dim=0)                                 # (H, n, hd)
            v = v.repeat_interleave(H // KV, dim=0)                                 # (H, n, hd)
            win = self.family["windows"][l]
            mask = masks[win]
            out = torch.empty(H, n, hd, dtype=self.dtype)
            # Query rows per block: ~64 MB of scores at most, and at most 256 rows, so that skipping
            # the keys no row of a block sees (past its last query; before its first query's window)
            # skips most of the masked half: their weights are exactly 0 either way.
            step = max(1, min(256, (1 << 23) // max(1, H * n)))
            scores = relative_scores(q, k, phases, self.family["attn_scale"]).to(self.dtype) if relative else None
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                k0 = max(0, r0 - win + 1) if win else 0                               # keys k0 .. r1-1
                if not relative:
                    s = self.scaled(q[:, r0:r1] @ k[:, k0:r1].transpose(1, 2))     # (H, r, keys)
                else:
                    s = scores[:, r0:r1, k0:r1]
                if group:  # Self-Extend: the group score wherever the key is not a neighbour
                    far = self.scaled(qg[:, r0:r1] @ kg[:, k0:r1].transpose(1, 2))
                    s = torch.where(neighbour[r0:r1, k0:r1], s, far)
                if chunk:  # DCA: each pair's score from its own query rotation
                    three = [self.scaled(qx[:, r0:r1] @ kc[:, k0:r1].transpose(1, 2)) for qx in qcs]
                    sel = which[r0:r1, k0:r1]
                    s = torch.where(sel == 0, three[0], torch.where(sel == 1, three[1], three[2]))
                s = self.softcap(s, self.family["attn_softcap"])  # Gemma 2: before the mask
                s = s.to(self.acc) + mask[r0:r1, k0:r1]
                out[:, r0:r1] = torch.softmax(s, dim=-1).to(self.dtype) @ v[:, k0:r1]  # (H, r, hd)
            o = out.transpose(0, 1).reshape(n, H * hd)                              # (n, H*hd)
            x = x + self.post(lw, "attn", self.linear(o, lw, "o_proj"))             # (n, D)
            x = x + self.post(lw, "mlp", self.mlp(lw, self.pre(lw, "mlp", x)))      # (n, D)
        return self.head(x)                                                         # (n, V)


    @torch.no_grad()
    def logits(self, token_ids, rope=None, ctx=None, logn=False):
        """(n, V) float64 numpy logits of one forward pass over token_ids. All positions use the
        frequencies for sequence length n, as HF's single prefill does (matters for dynamic and
        longrope). logn: log-n attention scaling past the trained context (run's --attn-logn)."""
        p = self.resolve_rope(rope, ctx)
        inv, ms = rope_tables(p, self.rotary_dim, len(token_ids))
        grouped = (p["window"], int(p["factor"])) if p["mode"] == "selfextend" else None
        chunked = (p["chunk"], p["window"]) if p["mode"] == "dca" else None
        return self.forward(token_ids, inv, ms, p["orig_ctx"] if logn else None,
                            relative_position(p), grouped, chunked).to(torch.float64).numpy()

    @torch.no_grad()
    def logits_growing(self, token_ids, rope=None, ctx=None):
        """(n, V) logits where row t comes from a full forward of tokens[0..t] with the frequencies
        for length t+1: dynamic NTK with every hidden state of every earlier token recomputed with
        the current base (HF without a cache); LongRoPE with the short factors up to L and the long
        ones past it. A KV cache, even of un-rotated keys, does not give
        this past the first layer (see logits_cached). For the other modes this equals logits().
        Cost: one forward per position past L (O(n^3) work; tiny models only: about 4 minutes for
        stories260K at n = 1024, L = 512). Lengths up to L all share the unscaled frequencies, so
        those rows come from one forward."""
        p = self.resolve_rope(rope, ctx)
        n = len(token_ids)
        if p["mode"] not in ("dynamic", "longrope", "dynamic-yarn"):
            return self.logits(token_ids, p, ctx)
        L = p["orig_ctx"]
        out = np.empty((n, self.vocab_size))
        head = min(n, L)
        inv, ms = rope_tables(p, self.rotary_dim, head)
        out[:head] = self.forward(token_ids[:head], inv, ms).to(torch.float64).numpy()
        for t in range(head, n):
            inv, ms = rope_tables(p, self.rotary_dim, t + 1)
            out[t] = self.forward(token_ids[: t + 1], inv, ms)[-1].to(torch.float64).numpy()
        return out

    @torch.no_grad()
    def logits_cached(self, token_ids, rope=None, ctx=None, keys="raw"):
        """(n, V) logits of token-by-token decoding with a KV cache, the RoPE length set to t+1
        before token t (as generation does). Differs from logits() only for dynamic (and longrope
        across L), where the result depends on what the cache holds:
          keys="raw"      un-rotated keys, all rotated with the current base at every step (the
                          YaRN paper's "cache the kv-embeddings before applying RoPE"; our model.c's
                          key_raw). The values, and the keys of layers past the first, still come
                          from hidden states computed at earlier steps with earlier bases, so this
                          is NOT logits_growing's full recomputation.
          keys="rotated"  keys rotated once with the base of their own step and kept (HF's
                          DynamicCache; transformers issue #25104).
        Cost O(n^2): one token per step."""
        dec = Decoder(self, self.resolve_rope(rope, ctx), len(token_ids), keys)
        return np.concatenate([dec.feed([t]) for t in token_ids])

    @torch.no_grad()
    def generate(self, prompt_ids, n_new, rope=None, ctx=None, stop=None, cache="raw"):
        """Greedy (temperature 0) continuation: up to n_new new ids (argmax, lowest id on ties),
        stopping after a token in `stop` (default: BOS and EOS; llama2.c stops on BOS).
        cache="raw" or "rotated": the prompt is one prefill block (every prompt position uses the
        frequencies of the prompt length, as HF does), then one token per step with a KV cache of
        that kind (see logits_cached; "raw" is what our C program does). cache="recompute": a full
        forward of the whole sequence per step (logits_growing's rule). All three agree except for
        dynamic past L. Returns the new ids only."""
        p = self.resolve_rope(rope, ctx)
        stop = {self.bos_id, self.eos_id} if stop is None else set(stop)
        ids, new = list(prompt_ids), []
        if cache == "recompute":
            step = lambda: self.forward(ids, *rope_tables(p, self.rotary_dim, len(ids)))[-1]  # noqa: E731
        else:
            dec = Decoder(self, p, len(ids) + n_new, cache)
            step = lambda: dec.feed(ids[dec.pos:])[-1]  # noqa: E731
        for _ in range(n_new):
            nxt = int(np.argmax(np.asarray(step())))
            new.append(nxt)
            ids.append(nxt)
            if nxt in stop:
                break
        return new

    @torch.no_grad()
    def perplexity(self, tokens, window, rope=None, ctx=None, how="prefill", max_windows=None):
        """Mean next-token NLL over consecutive non-overlapping windows of `window` tokens.

        tokens: ids (the caller tokenizes with BOS first, e.g. encode(text)) or a str to encode so.
        Each window is evaluated on its own from position 0, its first token replaced by BOS (as
        ./run and llama.cpp's perplexity do: each window is scored as the start of a text), giving
        window-1 predictions: position j predicts token j+1. how: "prefill" one forward (logits), "recompute" logits_growing,
        "raw" / "rotated" logits_cached with that kind of key cache (they differ only for dynamic).
        A trailing partial window is dropped. Predictions are bucketed by j: [0, L), [L, 2L), [2L, 4L), ... (L = the
        trained context), the last bucket cut at window-1.
        Returns dict(nll_mean, ppl, count, nll_sum, windows, buckets=[dict(lo, hi, count, nll_sum,
        nll_mean)])."""
        if isinstance(tokens, str):
            tokens = self.encode(tokens, bos=True)
        tokens = np.asarray(tokens, dtype=np.int64)
        p = self.resolve_rope(rope, ctx)
        L = p["orig_ctx"]
        edges = [0, L]
        while edges[-1] < window - 1:
            edges.append(edges[-1] * 2)
        edges[-1] = min(edges[-1], window - 1)
        edges = [e for i, e in enumerate(edges) if i == 0 or e > edges[i - 1]]
        run = {"prefill": lambda seq: self.logits(seq, p, ctx),
               "recompute": lambda seq: self.logits_growing(seq, p, ctx),
               "raw": lambda seq: self.logits_cached(seq, p, ctx, keys="raw"),
               "rotated": lambda seq: self.logits_cached(seq, p, ctx, keys="rotated")}[how]
        counts = np.zeros(len(edges) - 1, dtype=np.int64)
        sums = np.zeros(len(edges) - 1)
        n_windows = len(tokens) // window
        if max_windows is not None:
            n_windows = min(n_windows, max_windows)
        for w in range(n_windows):
            seq = tokens[w * window:(w + 1) * window].copy()
            seq[0] = self.bos_id
            lg = run(seq)                                                          # (window, V)
            lg = lg[:-1]
            lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
            nll = lse - lg[np.arange(window - 1), seq[1:]]                         # (window-1)
            j = np.arange(window - 1)
            for b in range(len(edges) - 1):
                sel = (j >= edges[b]) & (j < edges[b + 1])
                counts[b] += sel.sum()
                sums[b] += nll[sel].sum()
        total, count = float(sums.sum()), int(counts.sum())
        mean = total / count if count else float("nan")
        return {"nll_mean": mean, "ppl": math.exp(mean) if count else float("nan"), "count": count,
                "nll_sum": total, "windows": n_windows,
                "buckets": [{"lo": edges[b], "hi": edges[b + 1], "count": int(counts[b]), "nll_sum": float(sums[b]),
                             "nll_mean": float(sums[b] / counts[b]) if counts[b] else float("nan")}
                            for b in range(len(edges) - 1)]}


class Decoder:
    """Incremental decoding with a KV cache: feed(ids) runs a block of tokens at the next positions
    with the RoPE length set to the number of tokens so far (positions of the block included), and
    returns their logits. keys="raw" caches un-rotated keys and rotates all of them with the current
    frequencies at every call; keys="rotated" caches keys rotated with the frequencies of the call
    that computed them. The same arithmetic as Reference.forward (the same qkv, rotate, mlp), with
    the past read from the cache; a sliding layer's queries see only the last W keys of it."""

    def __init__(self, model, p, n_max, keys="raw"):
        if keys not in ("raw", "rotated"):
            raise ValueError("keys must be 'raw' or 'rotated'")
        if relative_position(p) is not None or p["mode"] in ("selfextend", "dca"):
            raise ValueError("the Decoder rotates by absolute positions; rerope modes, selfextend, dca: use logits()")
        m = self.m = model
        self.p, self.keys, self.pos = p, keys, 0
        self.k = [torch.zeros(m.n_kv_heads, n_max, m.head_dim, dtype=m.dtype) for _ in m.layers]  # (KV, n_max, hd)
        self.v = [torch.zeros(m.n_kv_heads, n_max, m.head_dim, dtype=m.dtype) for _ in m.layers]  # (KV, n_max, hd)

    @torch.no_grad()
    def feed(self, ids):
        m, hd, H, KV = self.m, self.m.head_dim, self.m.n_heads, self.m.n_kv_heads
        t0, t1 = self.pos, self.pos + len(ids)
        inv, ms = rope_tables(self.p, m.rotary_dim, t1)
        cos, sin = cos_sin(inv, ms, range(t1), m.dtype)                              # (t1, r)
        tabs = m.layer_tables(cos, sin, range(t1))                                   # {kind: (t1, r) twice}
        temp = m.query_temperature(range(t0, t1))                                    # (b) or None
        masks = {W: causal_mask(t0, t1, t1, W, m.acc) for W in set(m.family["windows"])}  # (b, t1)
        x = m.embed_ids(torch.as_tensor(np.asarray(ids, dtype=np.int64)))           # (b, D)
        b = len(ids)
        for l, (lw, kc, vc) in enumerate(zip(m.layers, self.k, self.v)):
            q, k, v = m.qkv(lw, m.pre(lw, "attn", x))                               # (H|KV, b, hd)
            cos, sin = tabs[m.family["layer_rope"][l]]                              # this layer's RoPE
            vc[:, t0:t1] = v
            q = m.rotate(l, q, cos[t0:t1], sin[t0:t1])
            if temp is not None:
                q = q * temp[None, :, None]
            if self.keys == "raw":
                kc[:, t0:t1] = k
                kk = m.rotate(l, kc[:, :t1], cos, sin)                              # (KV, t1, hd)
            else:
                kc[:, t0:t1] = m.rotate(l, k, cos[t0:t1], sin[t0:t1])
                kk = kc[:, :t1]                                                     # (KV, t1, hd)
            kk = kk.repeat_interleave(H // KV, dim=0)                               # (H, t1, hd)
            vv = vc[:, :t1].repeat_interleave(H // KV, dim=0)                       # (H, t1, hd)
            s = m.softcap(m.scaled(q @ kk.transpose(1, 2)), m.family["attn_softcap"])  # (H, b, t1)
            o = torch.softmax(s.to(m.acc) + masks[m.family["windows"][l]], dim=-1).to(m.dtype) @ vv  # (H, b, hd)
            x = x + m.post(lw, "attn", m.linear(o.transpose(0, 1).reshape(b, H * hd), lw, "o_proj"))  # (b, D)
            x = x + m.post(lw, "mlp", m.mlp(lw, m.pre(lw, "mlp", x)))               # (b, D)
        self.pos = t1
        return m.head(x).to(torch.float64).numpy()                                  # (b, V)


def load(hf_dir, dtype=torch.float64, **switches):
    """Load a Hugging Face directory of one of the families (config.json, weights, optional
    tokenizer.model). switches: biases, qk_norm, rope_layers, sliding_window, partial_rotary_factor,
    longrope_factors (module docstring, "Feature switches"); none given = what config.json says."""
    return Reference(hf_dir, dtype, **switches)


# --- command line (for looking, not for tests) -----------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="Hugging Face Llama-family semantics in PyTorch (float64).")
    ap.add_argument("hf_dir")
    ap.add_argument("--prompt", default="", help="text after BOS (greedy generation)")
    ap.add_argument("--steps", type=int, default=200, help="new tokens to generate")
    ap.add_argument("--ctx", type=int, default=None)
    ap.add_argument("--rope-scaling", default=None)
    ap.add_argument("--rope-factor", type=float, default=None)
    ap.add_argument("--rope-base", type=float, default=None)
    ap.add_argument("--rope-alpha", type=float, default=None)
    ap.add_argument("--ppl", default=None, help="text file: report perplexity instead of generating")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    a = ap.parse_args()
    m = load(a.hf_dir, getattr(torch, a.dtype))
    rope = {k: v for k, v in (("mode", a.rope_scaling), ("factor", a.rope_factor), ("base", a.rope_base),
                              ("alpha", a.rope_alpha)) if v is not None}
    print(f"family: {m.family}", file=sys.stderr)
    print(f"rope: {m.resolve_rope(rope, a.ctx)}", file=sys.stderr)
    if a.ppl:
        with open(a.ppl) as f:
            r = m.perplexity(f.read(), a.window, rope, a.ctx, max_windows=a.max_windows)
        print(json.dumps(r, indent=1))
    else:
        ids = m.encode(a.prompt) if a.prompt else [m.bos_id]
        print(m.decode(ids + m.generate(ids, a.steps, rope, a.ctx)))


if __name__ == "__main__":
    main()
