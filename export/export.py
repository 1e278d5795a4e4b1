"""export.py - convert a Hugging Face checkpoint into our model file.

The families: Llama, Mistral (sliding window), Qwen2/2.5 (q/k/v biases), Qwen3 (q/k norms),
SmolLM2 (a Llama), SmolLM3 (NoPE layers), Phi-3/3.5/4-mini (fused projections, partial rotary,
LongRoPE); and those whose layers differ by more than a flag, written as version 4 with an hparams
table: Gemma 2 and 3 (norms before and after each sublayer, softcaps, a local RoPE), OLMo 2 and 3
(post-norms, whole-projection q/k norms, YaRN on the full layers), EXAONE 4 (NoPE global layers),
GLM-4 (interleaved partial rotary), Granite 3 (muP multipliers), Ministral 3 (query temperature). What
each needs is read from config.json as transformers 4.x and 5.x write it (read_config, read_layers,
read_hparams).

Usage: /usr/bin/python3 export/export.py HF_DIR OUT.bin [--dtype f32|f16|bf16|q8_0|q4_0]
       /usr/bin/python3 export/export.py FILE.gguf OUT.bin [--dtype ...]   (llama.cpp's format: read as the
       Hugging Face checkpoint it was converted from, lrun/gguf_file.py; its tokenizer stays in it)

What this is: a reader of HF_DIR/config.json and its weights (model.safetensors, sharded
safetensors, or pytorch_model*.bin; the Hugging Face reader is lrun/hf_checkpoint.py), a checker that
every tensor is there with the shape the config implies, and a writer of the format documented at the
top of model.h: a 256-byte header, then the tensors in a fixed order, each 64-byte aligned (the layout
is lrun/modelfile.py; --dtype q8_0 writes q8_0 in groups of 16 rows, file dtype 5, q8_0_r16, and
--dtype bf16 bf16 in groups of 16 rows, file dtype 6, bf16_r16), in the lowest version that holds the
checkpoint (1; 2 with several end tokens; 3 past a plain Llama; 4 with hparams). Along the way the rows
of q_proj and k_proj are permuted from Hugging Face's rotate_half layout back to the interleaved layout
that rope.c rotates (see "The two RoPE layouts" below; GLM-4's are interleaved already).
What this is not: a general converter. Anything this program cannot reproduce exactly is refused
with a message rather than approximated: other architectures (Gemma 1, Gemma 3n and 4, Llama 4,
DeepSeek's MLA, the DeltaNet hybrids, MoE models: see NOT_SUPPORTED and NOT_SUPPORTED_KEYS), biases
other than Qwen2's and GLM-4's q/k/v ones, activations other than the family's, layer types other than
full and sliding attention, already-quantized checkpoints. The tokenizer is not converted: run.c reads
tokenizer.model or tokenizer.json itself, so they are copied beside OUT.

Errors go to stderr as `error: <what>: <why> (hint: <fix>)` with exit status 1, and no output file
is left behind: everything is written to OUT.tmp-XXXX and renamed over OUT only at the very end.
Where it writes is checked before anything is written: OUT must be a regular file or a new path
(a device, FIFO, socket or directory is refused and left as it is; a symlink is written through to
its target, which must pass the same checks), and the tokenizer files it copies beside OUT must not
replace, join or be missing from another model's (see check_tokenizer_files).
"""
import argparse
import errno
import filecmp
import json
import math
import os
import shutil
import stat
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun import install_hint  # noqa: E402

try:
    import numpy as np
except ImportError as e:  # a python3 without numpy (pyenv's): say which one has it, not a traceback
    print(f"error: export.py needs numpy, and {sys.executable} cannot import it ({e}) (hint: {install_hint()})",
          file=sys.stderr)
    sys.exit(1)
from lrun.gguf_file import GgufCheckpoint  # noqa: E402
from lrun.hf_checkpoint import FLOAT_DTYPES, Checkpoint, CheckpointError, bf16_bits  # noqa: E402
from lrun.modelfile import (ACT_GELU_TANH, ALIGN, EXPORT_DTYPES, FAMILIES, LAYER_NO_ROPE,  # noqa: E402
                            LAYER_ROPE_SWA, LAYER_SLIDING, MAGIC, NORM_ATTN, NORM_ATTN_POST, NORM_FFN, NORM_FFN_POST,
                            QK_NORM_ALL, QK_NORM_HEAD, HPARAMS, pack_hparams,
                            MAX_END_IDS, Q8_BLOCK, VERSION, br16_from_rows, file_version, pack_header,
                            r16_from_rows, tensors)

# RopeScaling in rope.h (the numbers are part of the file format). HF has no static "ntk" (2);
# "su" is Phi-3's first name for longrope.
ROPE_TYPES = {"default": 0, "linear": 1, "dynamic": 3, "yarn": 4, "llama3": 5, "longrope": 8, "su": 8}
# architectures -> model_type, whose number (lrun/modelfile.py FAMILIES) the header carries.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3", "SmolLM3ForCausalLM": "smollm3", "Phi3ForCausalLM": "phi3",
                 "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text", "Olmo2ForCausalLM": "olmo2",
                 "Olmo3ForCausalLM": "olmo3", "Exaone4ForCausalLM": "exaone4", "Glm4ForCausalLM": "glm4",
                 "GraniteForCausalLM": "granite", "Ministral3ForCausalLM": "ministral3"}
MODEL_TYPES = set(ARCHITECTURES.values())
# The keys a config.json may leave out that change what runs, as each family's configuration class
# fills them in (configuration_<family>.py).
CLASS_DEFAULTS = {"mistral": {"sliding_window": 4096}, "qwen2": {"sliding_window": 4096},
                  "qwen3": {"sliding_window": 4096}, "smollm3": {"rope_theta": 2000000.0},
                  "phi3": {"original_max_position_embeddings": 4096},
                  "gemma2": {"sliding_window": 4096, "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
                             "final_logit_softcapping": 30.0, "head_dim": 256, "tie_word_embeddings": True,
                             "hidden_activation": "gelu_pytorch_tanh"},
                  "gemma3_text": {"sliding_window": 4096, "query_pre_attn_scalar": 256, "head_dim": 256,
                                  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                                  "tie_word_embeddings": True,  # sliding_window_pattern 6: pattern_slides
                                  "hidden_activation": "gelu_pytorch_tanh"},
                  "olmo3": {"sliding_window": 4096}, "exaone4": {"sliding_window": 4096},
                  "glm4": {"partial_rotary_factor": 0.5, "attention_bias": True},
                  "granite": {"embedding_multiplier": 1.0, "attention_multiplier": 1.0, "residual_multiplier": 1.0,
                              "logits_scaling": 1.0}}
# The families whose layers normalize more than before each sublayer: our norm -> its name in the HF
# layer (modeling_<family>.py's decoder layer). Gemma 2 and 3 norm before and after both sublayers;
# OLMo 2 and 3 and EXAONE 4 only after (their post_attention_layernorm is on attention's output, not
# Llama's norm before the MLP); GLM-4 all four, under its own names.
LAYER_NORMS = {
    "gemma": {"rms_att": "input_layernorm", "post_att": "post_attention_layernorm",
              "rms_ffn": "pre_feedforward_layernorm", "post_ffn": "post_feedforward_layernorm"},
    "post": {"post_att": "post_attention_layernorm", "post_ffn": "post_feedforward_layernorm"},
    "glm": {"rms_att": "input_layernorm", "post_att": "post_self_attn_layernorm",
            "rms_ffn": "post_attention_layernorm", "post_ffn": "post_mlp_layernorm"},
}
FAMILY_NORMS = {"gemma2": "gemma", "gemma3_text": "gemma", "olmo2": "post", "olmo3": "post", "exaone4": "post",
                "glm4": "glm"}
NORM_BITS = {"rms_att": NORM_ATTN, "post_att": NORM_ATTN_POST, "rms_ffn": NORM_FFN, "post_ffn": NORM_FFN_POST}
# What is still not run, by model_type, and why (README, "RoPE in today's models").
NOT_SUPPORTED = {
    "gemma": "Gemma (1)'s norms and embedding scale (Gemma 2 and 3 run)",
    "gemma3": "Gemma 3's vision tower (export the text model: Gemma3ForCausalLM)",
    "llama4": "Llama 4's chunked attention, NoPE with temperature tuning and mixture of experts",
    "llama4_text": "Llama 4's chunked attention and mixture of experts",
    "deepseek_v2": "DeepSeek's multi-head latent attention (MLA) and mixture of experts",
    "deepseek_v3": "DeepSeek's multi-head latent attention (MLA) and mixture of experts",
    "qwen2_moe": "mixture of experts", "qwen3_moe": "mixture of experts", "mixtral": "mixture of experts",
    "phimoe": "mixture of experts", "phi": "Phi-1/2's parallel attention and GELU MLP",
    "glm": "GLM-Edge's GlmForCausalLM (GLM-4's layer without its post-norms) yet: no reference "
           "checkpoint of it here",
    "olmoe": "mixture of experts", "granitemoe": "mixture of experts", "gpt_oss": "mixture of experts",
    # configuration_gemma3n.py: per-layer embeddings (hidden_size_per_layer_input) added in every
    # layer, AltUp's altup_num_inputs predicted copies of the residual stream, LAuReL blocks
    "gemma3n": "Gemma 3n's per-layer embeddings and AltUp (alternating updates)",
    "gemma3n_text": "Gemma 3n's per-layer embeddings and AltUp (alternating updates)",
    # Gemma 4 (configuration_gemma4.py): its global layers turn a part of each head by "proportional"
    # RoPE, with a head_dim of their own (global_head_dim)
    "gemma4": "Gemma 4's proportional partial rotary with a second head_dim on its global layers",
    "gemma4_text": "Gemma 4's proportional partial rotary with a second head_dim on its global layers",
    # Qwen3-Next and Qwen3.5: layer_types "linear_attention" (Gated DeltaNet) beside gated full attention
    "qwen3_next": "a DeltaNet hybrid (Gated DeltaNet linear-attention layers) and mixture of experts",
    "qwen3_5": "a DeltaNet hybrid (Gated DeltaNet linear-attention layers)",
    "qwen3_5_text": "a DeltaNet hybrid (Gated DeltaNet linear-attention layers)",
    "qwen3_5_moe": "a DeltaNet hybrid (Gated DeltaNet linear-attention layers) and mixture of experts",
    "qwen3_5_moe_text": "a DeltaNet hybrid (Gated DeltaNet linear-attention layers) and mixture of experts",
}
# Keys that say what a config's model_type may not: experts (Mixtral's num_local_experts, Qwen's
# num_experts, DeepSeek's n_routed_experts), DeepSeek's multi-head latent attention (kv_lora_rank), Gemma
# 4's second head_dim. A model of a family that runs, with one of these, is still not run.
NOT_SUPPORTED_KEYS = {"num_local_experts": "mixture of experts", "num_experts": "mixture of experts",
                      "n_routed_experts": "mixture of experts",
                      "kv_lora_rank": "multi-head latent attention (MLA, DeepSeek's)",
                      "global_head_dim": "a second head_dim on some layers (Gemma 4's)"}
# Layer types (transformers' layer_types) that are not attention this program runs, by name.
LAYER_TYPES_REFUSED = {"linear_attention": "a DeltaNet hybrid's linear-attention layers (Qwen3-Next, Qwen3.5)",
                       "chunked_attention": "Llama 4's chunked attention"}


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


# --- Reading config.json --------------------------------------------------------------------------

def config_value(cfg, key, where, kind, default=None, positive=True, hint=None):
    """cfg[key] checked to be a `kind` (int or float); `default` if missing or null (None: required);
    hint: what to say when it is not."""
    v = cfg.get(key)
    if v is None:
        if default is None:
            raise CheckpointError(f"{where}: {key}", "missing", f"add \"{key}\" from the model's card")
        return default
    ok = (type(v) is int) if kind is int else (type(v) in (int, float) and math.isfinite(v))
    if not ok or (positive and v <= 0) or (not positive and v < 0) or (kind is int and v >= 2**31):
        raise CheckpointError(f"{where}: {key}", f"{v!r} is not a {'positive' if positive else 'non-negative'} "
                              f"{'integer' if kind is int else 'number'} that fits the header", hint)
    return kind(v)


# The families whose sliding layers turn with a RoPE of their own (LAYER_ROPE_SWA): Gemma 3's at
# rope_local_base_freq, OLMo 3's at rope_theta without the full layers' YaRN.
LOCAL_ROPE = ("gemma3_text", "olmo3")


def rope_by_layer_type(cfg, where, model_type):
    """transformers 5's rope_parameters keyed by layer type -> the one form read_rope reads.

    Where a model's layer types turn differently, transformers 5 keeps a RoPE per type and saves it so:
    {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}, "full_attention": {"rope_type":
    "linear", "factor": 8.0, "rope_theta": 1000000.0}} (configuration_gemma3.py and modular_olmo3.py,
    convert_rope_params_to_dict: 4.x's rope_scaling goes into the full layers' entry only, rope_theta
    becomes its base, Gemma 3's rope_local_base_freq the sliding layers' one). Returns (cfg with
    rope_parameters the full layers' entry, the sliding layers' base or None when it does not give one).
    The sliding layers' entry must be unscaled (a local layer never sees a key farther than its window)
    and is read only for LOCAL_ROPE's families; any other family turns all its layers with one RoPE, so
    its entries must be the same."""
    params = cfg.get("rope_parameters")
    if not isinstance(params, dict) or not params or not all(v is None or isinstance(v, dict) for v in params.values()):
        return cfg, None  # the one-dict form (or none): read_rope reads it
    key = f"{where}: rope_parameters"
    for t in params:
        if t not in LAYER_TYPES:
            raise CheckpointError(f"{key}.{t}", f"layer type {t!r} is not supported"
                                  + (f": this program does not run {LAYER_TYPES_REFUSED[t]}" if t in LAYER_TYPES_REFUSED
                                     else ""), "supported: full_attention, sliding_attention")
    full, sliding = params.get("full_attention"), params.get("sliding_attention")
    local = None
    if sliding is not None and model_type in LOCAL_ROPE:
        rope_type = sliding.get("rope_type", sliding.get("type", "default"))
        if rope_type != "default":
            raise CheckpointError(f"{key}.sliding_attention.rope_type", f"{rope_type!r}: the sliding layers turn "
                                  f"unscaled in model_type {model_type!r} (a key is never farther than the window)",
                                  "scale the full_attention entry only, as transformers does with rope_scaling")
        if sliding.get("partial_rotary_factor") != (full or {}).get("partial_rotary_factor"):
            raise CheckpointError(f"{key}.sliding_attention.partial_rotary_factor", "differs from the full layers' "
                                  "one, and a model's layers turn one part of each head here")
        if sliding.get("rope_theta") is not None:
            local = config_value(sliding, "rope_theta", f"{key}.sliding_attention", float,
                                 hint="the sliding layers' base, Gemma 3's 10000")
    elif sliding is not None and full is not None and sliding != full:
        raise CheckpointError(key, f"gives sliding_attention {sliding!r} and full_attention {full!r}, and model_type "
                              f"{model_type!r} turns every layer with one RoPE", "give one rope_parameters object")
    return dict(cfg, rope_parameters=dict(full or sliding or {"rope_type": "default"})), local


def read_rope(cfg, where, head_dim, model_type):
    """The checkpoint's own RoPE: rope_theta, partial_rotary_factor and rope_scaling -> the header's
    rope_* fields and rot_dims.

    Accepts the three spellings HF has used: {"rope_type": ...} (v4.43+), the legacy {"type": ...}
    and transformers v5's single "rope_parameters" dict that also carries rope_theta.
    """
    params = cfg.get("rope_parameters")
    if params is not None:
        key = "rope_parameters"
        if not isinstance(params, dict) or ("rope_type" not in params and "type" not in params):
            raise CheckpointError(f"{where}: rope_parameters", f"{params!r} has no rope_type",
                                  "give rope_type, or one object per layer type (full_attention, sliding_attention)")
        scaling, theta_cfg = params, params if "rope_theta" in params else cfg
    else:
        key, scaling, theta_cfg = "rope_scaling", cfg.get("rope_scaling"), cfg
        if scaling is not None and not isinstance(scaling, dict):
            raise CheckpointError(f"{where}: rope_scaling", f"{scaling!r} is not an object or null")
    rope = {"rope_theta": config_value(theta_cfg, "rope_theta", where, float, default=10000.0),
            "rope_scaling": 0, "rope_orig_ctx": 0, "rope_factor": 1.0, "rope_attn_factor": 0.0,
            "rope_beta_fast": 0.0, "rope_beta_slow": 0.0,
            "rope_low_freq_factor": 0.0, "rope_high_freq_factor": 0.0, "rot_dims": 0}
    # Partial rotary (top level in v4, inside rope_parameters in v5): transformers turns the first
    # int(head_dim * factor) dimensions of each head (modeling_rope_utils.py, dim = ...).
    for d in (cfg, scaling or {}):
        prf = d.get("partial_rotary_factor")
        if prf is None or prf == 1:
            continue
        if type(prf) not in (int, float) or not 0 < prf < 1:
            raise CheckpointError(f"{where}: partial_rotary_factor", f"{prf!r} is not a number in (0, 1]")
        rot = int(head_dim * prf)
        if rot < 2 or rot % 2:
            raise CheckpointError(f"{where}: partial_rotary_factor", f"{prf!r} of head_dim {head_dim} turns {rot} "
                                  "dimensions; RoPE turns pairs, so it must be even and at least 2")
        rope["rot_dims"] = rot
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type"))  # "type": the pre-4.43 spelling
    if model_type == "phi3" and rope_type == "yarn":  # configuration_phi3.py reads its old "yarn" as longrope
        rope_type = "longrope"
    if rope["rot_dims"] and model_type not in ("phi3", "glm4"):
        # Only Phi-3's and GLM-4's attention turn part of a head (modeling_phi3.py, modeling_glm4.py
        # split q_rot / q_pass); the
        # others' default RoPE sizes its frequencies by the whole head_dim and turns all of it
        # (transformers 5.17's own logits, data/families/llama-partial, show it), and their scaled
        # types would size them by the part and fail to apply them.
        if rope_type not in (None, "default"):
            raise CheckpointError(f"{where}: partial_rotary_factor", f"with rope type {rope_type!r} on "
                                  f"model_type {model_type!r}: transformers cannot run it either")
        warn(f"partial_rotary_factor is ignored, as transformers ignores it for model_type {model_type!r}: "
             "every dimension of a head turns")
        rope["rot_dims"] = 0
    if not scaling:
        return rope
    if rope_type is None or rope_type == "default":
        return rope
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        raise CheckpointError(f"{where}: {key}", f"rope type {rope_type!r} is not supported",
                              "supported: default, linear, dynamic, yarn, llama3, longrope")
    if rope_type != "yarn":
        for k in ("mscale", "mscale_all_dim"):
            if scaling.get(k) is not None:
                raise CheckpointError(f"{where}: {key}.{k}", f"belongs to yarn, and the rope type is {rope_type!r}")
    if scaling.get("truncate", True) is not True:
        raise CheckpointError(f"{where}: {key}.truncate", "false is not supported (YaRN without rounding)")
    sub = f"{where}: {key}"
    rope["rope_scaling"] = ROPE_TYPES[rope_type]
    orig = config_value(scaling, "original_max_position_embeddings", sub, int, default=0, positive=False)
    if rope_type in ("longrope", "su", "yarn") and model_type == "phi3":
        return read_longrope(cfg, scaling, sub, rope, orig, head_dim)
    if rope_type in ("longrope", "su"):
        return read_longrope(cfg, scaling, sub, rope, orig, head_dim)
    for k in ("short_factor", "long_factor"):
        if scaling.get(k) is not None:
            raise CheckpointError(f"{sub}.{k}", f"belongs to longrope, and the rope type is {rope_type!r}")
    if rope_type == "yarn" and scaling.get("factor") is None and orig:
        # newer HF: factor defaults to the ratio of the extended and the original context
        rope["rope_factor"] = config_value(cfg, "max_position_embeddings", where, int) / orig
    else:
        rope["rope_factor"] = config_value(scaling, "factor", sub, float)
    if rope["rope_factor"] < 1:
        raise CheckpointError(f"{sub}.factor", f"{rope['rope_factor']} is below 1", "a factor stretches context")
    if rope_type == "yarn":
        rope["rope_orig_ctx"] = orig  # 0 = max_position_embeddings, as in HF before v4.5x
        rope["rope_attn_factor"] = config_value(scaling, "attention_factor", sub, float, default=0.0)
        ms, ms_all = (config_value(scaling, k, sub, float, default=0.0) for k in ("mscale", "mscale_all_dim"))
        if not rope["rope_attn_factor"] and ms and ms_all:
            # DeepSeek's and Ministral 3's keys (modeling_rope_utils.py, _compute_yarn_parameters): the
            # attention factor is get_mscale(s, mscale) / get_mscale(s, mscale_all_dim), with
            # get_mscale(s, m) = 0.1 m ln(s) + 1 (1 for s <= 1); equal keys make it 1
            mscale = lambda m: 1.0 if rope["rope_factor"] <= 1 else 0.1 * m * math.log(rope["rope_factor"]) + 1.0
            rope["rope_attn_factor"] = mscale(ms) / mscale(ms_all)
        rope["rope_beta_fast"] = config_value(scaling, "beta_fast", sub, float, default=0.0)
        rope["rope_beta_slow"] = config_value(scaling, "beta_slow", sub, float, default=0.0)
    elif rope_type == "llama3":
        rope["rope_orig_ctx"] = config_value(scaling, "original_max_position_embeddings", sub, int)
        rope["rope_low_freq_factor"] = config_value(scaling, "low_freq_factor", sub, float)
        rope["rope_high_freq_factor"] = config_value(scaling, "high_freq_factor", sub, float)
        if rope["rope_high_freq_factor"] <= rope["rope_low_freq_factor"]:
            raise CheckpointError(f"{sub}.high_freq_factor", "must be larger than low_freq_factor")
    elif orig and orig != cfg.get("max_position_embeddings"):
        # HF's linear and dynamic read max_position_embeddings as L and ignore this key.
        warn(f"{key}.original_max_position_embeddings {orig} is ignored by HF's {rope_type} "
             "scaling; L = max_position_embeddings")
    return rope


def read_longrope(cfg, scaling, sub, rope, orig, head_dim):
    """LongRoPE (Phi-3): a factor per rotated pair for short and for long texts, as transformers'
    _compute_longrope_parameters reads them. L is original_max_position_embeddings (the top-level
    key, else rope_parameters'); the stretch s (rope_scaling's factor, else max_position_embeddings
    / L) sets the default attention factor (rope.c)."""
    # the top-level key first (transformers' standardize_rope_params; Phi-3's class default 4096)
    orig = config_value(cfg, "original_max_position_embeddings", sub, int, default=0) or orig
    max_pos = config_value(cfg, "max_position_embeddings", sub, int)
    rope["rope_orig_ctx"] = orig
    rope["rope_factor"] = config_value(scaling, "factor", sub, float, default=max_pos / (orig or max_pos))
    if rope["rope_factor"] < 1:
        raise CheckpointError(f"{sub}.factor", f"{rope['rope_factor']} is below 1", "a factor stretches context")
    rope["rope_attn_factor"] = config_value(scaling, "attention_factor", sub, float, default=0.0)
    pairs = (rope["rot_dims"] or head_dim) // 2
    for k in ("short_factor", "long_factor"):
        v = scaling.get(k)
        if not isinstance(v, list) or len(v) != pairs:
            raise CheckpointError(f"{sub}.{k}", f"must be a list of {pairs} numbers, one per rotated pair "
                                  f"(got {type(v).__name__}{f' of {len(v)}' if isinstance(v, list) else ''})")
        if not all(type(x) in (int, float) and math.isfinite(x) and x > 0 for x in v):
            raise CheckpointError(f"{sub}.{k}", "every factor must be a finite number > 0")
        rope[f"rope_{k}"] = [float(x) for x in v]
    return rope


def generation_eos(hf_dir):
    """The eos_token_id of HF_DIR/generation_config.json as a list ([] if none): what
    transformers' generate() stops at, and Llama 3 instruct models list <|eot_id|> there."""
    where = os.path.join(hf_dir, "generation_config.json")
    try:
        with open(where) as f:
            gen = json.load(f)
    except FileNotFoundError:
        return []
    except (ValueError, RecursionError) as e:
        raise CheckpointError(where, f"not valid JSON ({e})")
    v = gen.get("eos_token_id") if isinstance(gen, dict) else None
    return [] if v is None else v if isinstance(v, list) else [v]


def read_config(hf_dir, cfg=None):
    """HF_DIR/config.json, or the one cfg given for it (a GGUF file's), -> the header fields (minus
    dtype and shared_classifier)."""
    where = os.path.join(hf_dir, "config.json") if cfg is None else f"{hf_dir} (its metadata as a config.json)"
    try:
        if cfg is None:
            with open(where) as f:
                cfg = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(where, "not found", "HF_DIR must be a Hugging Face model directory")
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly nested JSON
        raise CheckpointError(where, f"not valid JSON ({e})")
    if not isinstance(cfg, dict):
        raise CheckpointError(where, "is not a JSON object")

    # What kind of model: the Llama family (lrun/modelfile.py FAMILIES); the rest is refused by name.
    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type in NOT_SUPPORTED:
        raise CheckpointError(f"{where}: model_type", f"{model_type!r} is not supported: this program does not "
                              f"run {NOT_SUPPORTED[model_type]}", "README, \"RoPE in today's models\", lists what runs")
    archs = cfg.get("architectures") or []
    for arch in archs if isinstance(archs, list) else [archs]:
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise CheckpointError(f"{where}: architectures", f"{arch} is not supported",
                                  f"supported: {', '.join(sorted(ARCHITECTURES))}")
        if ARCHITECTURES[arch] != model_type:
            raise CheckpointError(f"{where}: architectures", f"{arch} does not go with model_type {model_type!r}")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type", f"{model_type!r} is not supported",
                              f"supported: {', '.join(sorted(MODEL_TYPES))}")
    for key, what in NOT_SUPPORTED_KEYS.items():
        v = cfg.get(key)
        if v is not None and v is not False and v != 0:
            raise CheckpointError(f"{where}: {key}", f"is {v!r}: this program does not run {what}",
                                  "README, \"RoPE in today's models\", lists what runs")
    if cfg.get("use_bidirectional_attention"):  # EmbeddingGemma (configuration_gemma3.py): not causal
        raise CheckpointError(f"{where}: use_bidirectional_attention", "is true: an encoder's attention (every "
                              "token sees the later ones too) is not run", "export a causal language model")
    # The keys a config.json may leave out, as each family's config class fills them in
    # (configuration_<family>.py): only the ones that change what runs.
    cfg = {**CLASS_DEFAULTS.get(model_type, {}), **cfg}
    cfg, local_theta = rope_by_layer_type(cfg, where, model_type)
    qc = cfg.get("quantization_config")
    if qc is not None:
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else qc
        raise CheckpointError(f"{where}: quantization_config", f"the checkpoint is quantized ({method})",
                              "export the original float16/bfloat16 checkpoint instead")
    # Biases: Qwen2 has them on q, k and v (always; its config has no key for it), GLM-4 too when
    # attention_bias is true (modeling_glm4.py: o_proj has none); attention_bias elsewhere (Llama,
    # Qwen3) puts one on o_proj too, and mlp_bias on the MLP: neither is run here.
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key) and not (key == "attention_bias" and model_type == "glm4"):
            raise CheckpointError(f"{where}: {key}", "is true; of the biases only Qwen2's and GLM-4's on q, k "
                                  "and v are run")
    # The MLP's activation: Gemma's configs name it hidden_activation (modeling_gemma2.py reads that)
    gemma = model_type in ("gemma2", "gemma3_text")
    act_key = "hidden_activation" if gemma and cfg.get("hidden_activation") else "hidden_act"
    want = "gelu_pytorch_tanh" if gemma else "silu"
    if cfg.get(act_key, want) != want:
        raise CheckpointError(f"{where}: {act_key}", f"{cfg[act_key]!r} is not supported",
                              f"this family's MLP is run with {want}")

    c = {}
    c["dim"] = config_value(cfg, "hidden_size", where, int)
    c["hidden_dim"] = config_value(cfg, "intermediate_size", where, int)
    c["n_layers"] = config_value(cfg, "num_hidden_layers", where, int)
    c["n_heads"] = config_value(cfg, "num_attention_heads", where, int)
    c["n_kv_heads"] = config_value(cfg, "num_key_value_heads", where, int, default=c["n_heads"])
    c["head_dim"] = config_value(cfg, "head_dim", where, int, default=c["dim"] // c["n_heads"])
    c["family"] = FAMILIES[model_type]
    c["qkv_bias"] = int(model_type == "qwen2" or (model_type == "glm4" and bool(cfg.get("attention_bias"))))
    c["qk_norm"] = {"qwen3": QK_NORM_HEAD, "gemma3_text": QK_NORM_HEAD, "exaone4": QK_NORM_HEAD,
                    "olmo2": QK_NORM_ALL, "olmo3": QK_NORM_ALL}.get(model_type, 0)
    c["vocab_size"] = config_value(cfg, "vocab_size", where, int)
    c["seq_len"] = config_value(cfg, "max_position_embeddings", where, int)
    c["norm_eps"] = config_value(cfg, "rms_norm_eps", where, float)
    check_limit(c, where, "n_layers")  # first: read_layers makes a list per layer (2^31 of them took minutes)
    read_layers(cfg, where, model_type, c)
    if c["n_heads"] % c["n_kv_heads"]:
        raise CheckpointError(f"{where}: num_key_value_heads", f"{c['n_kv_heads']} does not divide "
                              f"num_attention_heads {c['n_heads']}")
    if c["head_dim"] % 2:
        raise CheckpointError(f"{where}: head_dim", f"{c['head_dim']} is odd; RoPE rotates pairs")
    for key, default in (("bos_token_id", 1), ("eos_token_id", 2)):
        v = cfg.get(key)
        ids = v if isinstance(v, list) else [default if v is None else v]
        if key == "eos_token_id":  # Llama 3: a list, and generation_config.json may name more
            ids = ids + [i for i in (generation_eos(hf_dir) if os.path.isdir(hf_dir) else []) if i not in ids]
        if not ids:
            ids = [default]
        for i in ids:
            if type(i) is not int or not 0 <= i < c["vocab_size"]:
                raise CheckpointError(f"{where}: {key}", f"{i!r} is not a token id below vocab_size "
                                      f"{c['vocab_size']}")
        if key == "bos_token_id" and len(ids) > 1:
            raise CheckpointError(f"{where}: {key}", f"{v!r}: a model starts with one BOS token")
        if len(ids) > 1 + MAX_END_IDS:
            raise CheckpointError(f"{where}: {key}", f"{len(ids)} end tokens, the file holds at most "
                                  f"{1 + MAX_END_IDS}")
        c[key.replace("_token", "")] = ids[0]
        if key == "eos_token_id":
            c["end_ids"] = ids[1:]  # more than one: a version 2 file (model.h)
    c.update(read_rope(cfg, where, c["head_dim"], model_type))
    read_hparams(cfg, where, model_type, c, local_theta)
    check_limits(c, where)
    c["tie_word_embeddings"] = cfg.get("tie_word_embeddings")  # resolved against the tensors later
    if c["tie_word_embeddings"] is not None and type(c["tie_word_embeddings"]) is not bool:
        raise CheckpointError(f"{where}: tie_word_embeddings", f"{c['tie_word_embeddings']!r} is not true, "
                              "false or null")
    return c


LAYER_TYPES = {"full_attention": 0, "sliding_attention": LAYER_SLIDING}


def read_layers(cfg, where, model_type, c):
    """Which layers slide and which have no RoPE -> c["sliding_window"], c["layer_kind"].

    Sliding window (transformers' masking_utils: a query at i sees keys j with i - j < W): layer_types
    when config.json lists them (transformers 5 writes them for Mistral, Qwen2/3, SmolLM3); else
    Mistral and Phi-3 slide in every layer when sliding_window is set, and Qwen2/3 and SmolLM3 only
    with use_sliding_window, from layer max_window_layers on (their configs' rule).
    NoPE (SmolLM3): no_rope_layers[l] is 1 where layer l uses RoPE, 0 where it does not; else
    no_rope_layer_interval k: every k-th layer (l + 1 divisible by k) has none."""
    n = c["n_layers"]
    window = cfg.get("sliding_window")
    if window is not None and (type(window) is not int or window < 1):
        raise CheckpointError(f"{where}: sliding_window", f"{window!r} is not a positive integer or null")
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            raise CheckpointError(f"{where}: layer_types", f"must list one type for each of the {n} layers",
                                  "one of full_attention, sliding_attention per layer, num_hidden_layers in all")
        for t in types:
            if t not in LAYER_TYPES:
                raise CheckpointError(f"{where}: layer_types", f"{t!r} is not supported"
                                      + (f": this program does not run {LAYER_TYPES_REFUSED[t]}"
                                         if isinstance(t, str) and t in LAYER_TYPES_REFUSED else ""),
                                      "supported: full_attention, sliding_attention")
        kinds = [LAYER_TYPES[t] for t in types]
    elif model_type in ("qwen2", "qwen3", "smollm3"):
        start = cfg.get("max_window_layers", n) if cfg.get("use_sliding_window") else n
        if type(start) is not int:
            raise CheckpointError(f"{where}: max_window_layers", f"{start!r} is not an integer")
        kinds = [LAYER_SLIDING if window and l >= start else 0 for l in range(n)]
    elif model_type in PATTERN_FAMILIES:  # local and global layers without layer_types: pattern_slides
        kinds = [LAYER_SLIDING if window and slide else 0 for slide in pattern_slides(cfg, where, model_type, n)]
    else:
        kinds = [LAYER_SLIDING if window else 0 for _ in range(n)]
    if any(kinds) and not window:
        raise CheckpointError(f"{where}: layer_types", "names sliding_attention layers, and sliding_window is "
                              "not set", "give sliding_window, or make every layer full_attention")
    if types is not None and window and model_type in PATTERN_FAMILIES and cfg.get("sliding_window_pattern") is not None:
        # both given (Gemma 3's and EXAONE 4's released configs carry both): transformers reads
        # layer_types alone, so a pattern that says otherwise is a config that contradicts itself (one
        # longer than the model says nothing layer_types could contradict: it is left as transformers leaves it)
        slides = pattern_slides(cfg, where, model_type, n, fit=False) or []
        for l, (t, slide) in enumerate(zip(types, slides)):
            if (t == "sliding_attention") != slide:
                raise CheckpointError(f"{where}: sliding_window_pattern", f"{cfg['sliding_window_pattern']!r} makes "
                                      f"layer {l} {'sliding' if slide else 'full'}, and layer_types says {t!r}",
                                      "make the two agree, or leave sliding_window_pattern out")
    if any(kinds) and window > 2**24:  # loader.c reads sliding_window in [0, 2^24]
        raise CheckpointError(f"{where}: sliding_window", f"{window} is above 2^24, the range ./run reads",
                              "a window past the context is no window: set it to null")
    c["sliding_window"] = window if any(kinds) else 0
    if model_type == "smollm3":
        rope_layers = cfg.get("no_rope_layers")
        interval = cfg.get("no_rope_layer_interval", 4)
        if rope_layers is None:
            if type(interval) is not int or interval < 1:
                raise CheckpointError(f"{where}: no_rope_layer_interval", f"{interval!r} is not a positive integer")
            rope_layers = [int((l + 1) % interval != 0) for l in range(n)]
        if not isinstance(rope_layers, list) or len(rope_layers) != n or any(v not in (0, 1) for v in rope_layers):
            raise CheckpointError(f"{where}: no_rope_layers", f"must list 1 (RoPE) or 0 (none) for each of the "
                                  f"{n} layers")
        kinds = [k | (0 if r else LAYER_NO_ROPE) for k, r in zip(kinds, rope_layers)]
    else:
        for key in ("no_rope_layers", "no_rope_layer_interval"):
            if cfg.get(key) is not None:
                raise CheckpointError(f"{where}: {key}", f"is not read for model_type {model_type!r}")
    if model_type == "exaone4" and window:
        # modeling_exaone4.py, Exaone4Attention: with a sliding window set, only the sliding layers
        # rotate; the global ones attend without any position signal (NoPE)
        kinds = [k if k & LAYER_SLIDING else k | LAYER_NO_ROPE for k in kinds]
    if model_type in ("gemma3_text", "olmo3"):
        # The sliding layers rotate with a RoPE of their own, unscaled: Gemma 3's at rope_local_base_freq
        # (modeling_gemma3.py, rotary_emb_local), OLMo 3's at rope_theta without the YaRN of the full
        # layers (the OLMo 3 paper; vLLM; modeling_olmo3.py, a rotary embedding per layer type, and
        # 5.x's modular_olmo3.py, which puts a 4.x rope_scaling on full_attention only)
        kinds = [k | LAYER_ROPE_SWA if k & LAYER_SLIDING else k for k in kinds]
    c["layer_kind"] = kinds


PATTERN_FAMILIES = ("gemma2", "gemma3_text", "olmo3", "exaone4")  # a pattern of local and global layers


def pattern_slides(cfg, where, model_type, n, fit=True):
    """Which of the n layers slide by the family's pattern, when config.json has no layer_types: every
    `pattern`-th layer (l + 1 divisible by it) is global (configuration_gemma3.py, sliding_window_pattern;
    Gemma 2 alternates from a sliding layer 0; OLMo 3 has 3 sliding : 1 full); EXAONE 4 may spell the
    pattern as letters, "LLLG": layer l is local where letter l mod 4 is L. A pattern longer than the
    model (Gemma 3's default 6 on 4 layers) leaves it without a global layer: refused, not guessed
    (with fit False: None)."""
    pattern = cfg.get("sliding_window_pattern", {"gemma2": 2, "olmo3": 4, "exaone4": 4}.get(model_type, 6))
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        period, slides = len(pattern), [pattern[l % len(pattern)] == "L" for l in range(n)]
    elif type(pattern) is int and pattern >= 1:
        period, slides = pattern, [(l + 1) % pattern != 0 for l in range(n)]
    else:
        raise CheckpointError(f"{where}: sliding_window_pattern", f"{pattern!r} is not a positive integer "
                              "or a string of L and G", "Gemma 3's is 6 (5 local : 1 global), EXAONE 4's \"LLLG\"")
    if period > n and not fit:
        return None
    if period > n:
        raise CheckpointError(f"{where}: sliding_window_pattern", f"{pattern!r} is a pattern of {period} layers, "
                              f"and num_hidden_layers is {n}: it does not fit the layer count",
                              "give layer_types, one entry per layer")
    return slides


def read_hparams(cfg, where, model_type, c, local_theta=None):
    """What the family's layers do besides Llama's -> c["hparams"] (lrun/modelfile.py HPARAMS, named as
    llama.cpp names them), c["layer_norms"] (our norm -> its HF name in a layer) and c["norm_plus_one"]
    (Gemma's norms multiply by 1 + w: modeling_gemma2.py, Gemma2RMSNorm; the file stores 1 + w)."""
    h = {}
    norms = LAYER_NORMS.get(FAMILY_NORMS.get(model_type), {"rms_att": "input_layernorm",
                                                           "rms_ffn": "post_attention_layernorm"})
    c["layer_norms"] = norms
    h["norms"] = sum(NORM_BITS[k] for k in norms)
    c["norm_plus_one"] = model_type in ("gemma2", "gemma3_text")
    keys = {}  # hparam -> the config.json key it comes from, for check_hparams
    if model_type in ("gemma2", "gemma3_text"):
        h["act"] = ACT_GELU_TANH
        # Gemma2Model: embeddings times sqrt(hidden_size), in the model's float type (float32 here)
        h["f_embedding_scale"] = float(np.float32(c["dim"] ** 0.5))
        keys["f_embedding_scale"] = "hidden_size"
        # Gemma2Attention: scaling = query_pre_attn_scalar ** -0.5, in place of head_dim ** -0.5
        h["f_attention_scale"] = config_value(cfg, "query_pre_attn_scalar", where, float,
                                              hint="scores are scaled by its -1/2 power: Gemma's use 256 or "
                                              "head_dim") ** -0.5
        keys["f_attention_scale"] = "query_pre_attn_scalar"
        # Gemma2Attention and Gemma2ForCausalLM: null is no softcap; a number c caps at c tanh(x / c),
        # which for c <= 0 is no cap at all (or a sign flip): refused
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            h[f"f_{key}"] = config_value(cfg, key, where, float, default=0.0,
                                         hint="null for no softcap; Gemma 2 caps scores at 50 and logits at 30")
            keys[f"f_{key}"] = key
    if model_type == "gemma3_text":  # the sliding layers' base: rope_by_layer_type's, else 4.x's key
        if local_theta is None:
            h["rope_freq_base_train_swa"] = config_value(cfg, "rope_local_base_freq", where, float,
                                                         hint="Gemma 3's local layers turn at base 10000")
            keys["rope_freq_base_train_swa"] = "rope_local_base_freq"
        else:
            h["rope_freq_base_train_swa"] = local_theta
            keys["rope_freq_base_train_swa"] = "rope_parameters.sliding_attention.rope_theta"
    if model_type == "olmo3":  # the full layers' base unless transformers 5's sliding entry gives one
        h["rope_freq_base_train_swa"] = c["rope_theta"] if local_theta is None else local_theta
        keys["rope_freq_base_train_swa"] = ("rope_theta" if local_theta is None
                                            else "rope_parameters.sliding_attention.rope_theta")
    if model_type == "granite":  # modeling_granite.py: the four multipliers of its muP training
        for name, key in (("f_embedding_scale", "embedding_multiplier"), ("f_attention_scale", "attention_multiplier"),
                          ("f_residual_scale", "residual_multiplier"), ("f_logit_scale", "logits_scaling")):
            h[name], keys[name] = config_value(cfg, key, where, float, hint="muP's multipliers are > 0; 1 "
                                               "is none (Llama's)"), key
    # Ministral 3's llama_4_scaling_beta: in rope_parameters (transformers 5), or in rope_scaling where a
    # config has the 4.x form (standardize_rope_params moves rope_scaling's keys into rope_parameters)
    for form in ("rope_parameters", "rope_scaling"):
        params = cfg.get(form) if isinstance(cfg.get(form), dict) else {}
        if params.get("llama_4_scaling_beta") is None:
            continue
        # modeling_ministral3.py, get_llama_4_attn_scale: queries times 1 + beta ln(1 + floor(pos / L)),
        # L = original_max_position_embeddings
        if model_type != "ministral3":
            raise CheckpointError(f"{where}: {form}.llama_4_scaling_beta", f"is not read for model_type {model_type!r}",
                                  "only Ministral 3 scales its queries by position")
        h["f_attn_temp_scale"] = config_value(params, "llama_4_scaling_beta", f"{where}: {form}", float,
                                              positive=False, hint="Ministral 3's is 0.1; 0 is no temperature")
        h["n_attn_temp_floor_scale"] = config_value(params, "original_max_position_embeddings", f"{where}: {form}",
                                                    int)
        keys.update(f_attn_temp_scale=f"{form}.llama_4_scaling_beta",
                    n_attn_temp_floor_scale=f"{form}.original_max_position_embeddings")
        break
    check_hparams(h, keys, where)
    c["hparams"] = h


# The range of each hparam that ./run reads (loader.c, HPARAMS: test_export.py holds the two tables
# equal). A value written out of range would only be refused by the loader: refuse it here instead.
HPARAM_RANGES = {"norms": (1, 15), "act": (0, 1), "f_embedding_scale": (1e-6, 1e6), "f_attention_scale": (1e-6, 1e6),
                 "f_attn_logit_softcapping": (1e-3, 1e6), "f_residual_scale": (1e-6, 1e6),
                 "f_logit_scale": (1e-6, 1e6), "f_final_logit_softcapping": (1e-3, 1e6),
                 "rope_freq_base_train_swa": (1.0001, 1e12), "f_attn_temp_scale": (1e-6, 100),
                 "n_attn_temp_floor_scale": (1, 2**24)}


RANGE_HINTS = {"rope_freq_base_train_swa": "a RoPE base must be above 1 (at 1 nothing turns): Gemma 3's local "
                                           "layers use 10000",
               "f_attn_logit_softcapping": "a softcap this small flattens every score; null for none",
               "f_final_logit_softcapping": "a softcap this small flattens the logits; null for none",
               "f_attention_scale": "scores are scaled by query_pre_attn_scalar^-1/2: Gemma's use 256 or head_dim",
               "f_attn_temp_scale": "Ministral 3's llama_4_scaling_beta is 0.1"}


def check_hparams(h, keys, where):
    """Each hparam that will be written (one that differs from Llama's default) within HPARAM_RANGES,
    else refused naming the config.json key it comes from."""
    for name, v in h.items():
        lo, hi = HPARAM_RANGES[name]
        if v != HPARAMS[name] and not lo <= v <= hi:
            raise CheckpointError(f"{where}: {keys.get(name, name)}", f"gives {name} = {v:g}, outside [{lo:g}, {hi:g}], "
                                  "the range ./run reads",
                                  RANGE_HINTS.get(name, "check it against the model card"))


# What ./run reads (model.c check_shape, rope.c rope_params_check). A file outside these limits
# would only be refused by the loader: refuse it here instead, naming the config.json key.
LIMITS = [("dim", "hidden_size", 65536), ("hidden_dim", "intermediate_size", 2**20),
          ("n_layers", "num_hidden_layers", 1024), ("n_heads", "num_attention_heads", 1024),
          ("head_dim", "head_dim", 1024), ("vocab_size", "vocab_size", 2**22),
          ("seq_len", "max_position_embeddings", 2**24),
          ("rope_orig_ctx", "original_max_position_embeddings", 2**24)]


def check_limit(c, where, field):
    key, hi = next((key, hi) for f, key, hi in LIMITS if f == field)
    lo = 0 if field == "rope_orig_ctx" else 1
    if not lo <= c[field] <= hi:
        raise CheckpointError(f"{where}: {key}", f"{c[field]} is outside [{lo}, {hi}], the range ./run reads")


def check_limits(c, where):
    for field, _, _ in LIMITS:
        check_limit(c, where, field)
    if not c["norm_eps"] < 1:
        raise CheckpointError(f"{where}: rms_norm_eps", f"{c['norm_eps']} is not below 1")
    mode = c["rope_scaling"]
    if mode == ROPE_TYPES["dynamic"] and c["head_dim"] < 4:
        raise CheckpointError(f"{where}: head_dim", f"{c['head_dim']} is too small for dynamic RoPE scaling "
                              "(its base change has the exponent d/(d-2))")
    if mode == ROPE_TYPES["yarn"]:
        fast, slow = c["rope_beta_fast"] or 32.0, c["rope_beta_slow"] or 1.0  # rope.c's defaults for 0
        if not c["rope_theta"] > 1:
            raise CheckpointError(f"{where}: rope_theta", f"{c['rope_theta']} must be above 1 for yarn scaling")
        if not fast > slow:
            raise CheckpointError(f"{where}: beta_fast", f"{fast} must be larger than beta_slow {slow}")


# --- Which Hugging Face tensor goes where ------------------------------------------------------
# (our name, HF name, shape, kind) in the file's order (lrun/modelfile.py); kind "norm" is written
# as f32, "matrix" in the chosen dtype, "q" and "k" are matrices whose rows are permuted first.

HF_NAMES = {"token_embedding": "model.embed_tokens.weight", "rms_final": "model.norm.weight",
            "wcls": "lm_head.weight", "rms_att": "input_layernorm.weight", "wq": "self_attn.q_proj.weight",
            "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight",
            "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
            "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
            "rms_ffn": "post_attention_layernorm.weight", "w1": "mlp.gate_proj.weight",
            "w2": "mlp.down_proj.weight", "w3": "mlp.up_proj.weight"}
# Which tensors are permuted with q's and k's rows (the two RoPE layouts, below): kind "q" has
# n_heads heads, "k" n_kv_heads; q_norm and k_norm are one head's weights, shared by all heads
# (over the whole projection, QK_NORM_ALL, they are as many as q's and k's rows: kind "q" and "k").
PERMUTED = {"wq": "q", "bq": "q", "wk": "k", "bk": "k", "q_norm": "norm", "k_norm": "norm"}
NORMS = {"rms_att", "post_att", "rms_ffn", "post_ffn", "rms_final", "q_norm", "k_norm"}  # Gemma's 1 + w


def fused_rows(c, name):
    """Phi-3 stores q, k and v as one qkv_proj (rows q, then k, then v) and gate and up as one
    gate_up_proj (gate rows first: modeling_phi3.py, Phi3MLP's chunk(2)). (fused HF name, row slice)
    of our tensor, or None when it is a tensor of its own."""
    qd, kvd, F = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"], c["hidden_dim"]
    rows = {"wq": ("self_attn.qkv_proj.weight", 0, qd), "wk": ("self_attn.qkv_proj.weight", qd, qd + kvd),
            "wv": ("self_attn.qkv_proj.weight", qd + kvd, qd + 2 * kvd),
            "w1": ("mlp.gate_up_proj.weight", 0, F), "w3": ("mlp.gate_up_proj.weight", F, 2 * F)}
    if c["family"] == FAMILIES["glm4"]:  # GLM-4 fuses only gate and up (modeling_glm4.py, Glm4MLP)
        return rows.get(name) if name in ("w1", "w3") else None
    return rows.get(name) if c["family"] == FAMILIES["phi3"] else None


def tensor_plan(c):
    """[(our name, HF source, shape, kind)]: the source is an HF tensor name, (name, first row, end
    row) of a fused one, or the value itself for version 3's tables."""
    plan = []
    for ours, shape, kind in tensors(c):
        if kind in ("i32", "f64", "hparams"):  # layer_kind, rope_short_factor, rope_long_factor, hparams
            plan.append((ours, c.get(ours), shape, kind))
            continue
        if ours.startswith("layers."):  # layers.L.NAME -> model.layers.L.<HF name of NAME>
            _, l, name = ours.split(".")
            fused = fused_rows(c, name)
            hf_layer = f"{c['layer_norms'][name]}.weight" if name in c["layer_norms"] else HF_NAMES[name]
            hf = (f"model.layers.{l}.{fused[0]}", fused[1], fused[2]) if fused else f"model.layers.{l}.{hf_layer}"
            kind = PERMUTED.get(name, kind)
            if c["qk_norm"] == QK_NORM_ALL and name in ("q_norm", "k_norm"):
                kind = name[0]  # a weight per row of q (k): permuted as those rows
        else:
            hf = HF_NAMES[ours]
        plan.append((ours, hf, shape, kind))
    return plan


def hf_name(source):
    return source[0] if isinstance(source, tuple) else source


def resolve_classifier(c, names):
    """shared_classifier: tied if config says so, or if it says nothing and there is no lm_head."""
    tied, has_head = c.pop("tie_word_embeddings"), "lm_head.weight" in names
    if tied is None:  # HF's default is untied, but a checkpoint without lm_head can only be tied
        c["shared_classifier"] = int(not has_head)
    else:
        c["shared_classifier"] = int(bool(tied))  # false + no lm_head fails as a missing tensor
        if tied and has_head:
            warn("lm_head.weight is ignored: tie_word_embeddings is true, so HF uses the embedding")


def check_tensors(ckpt, plan, hf_dir):
    """Every planned tensor present, float, and of the shape config.json implies; nothing else."""
    names = set(ckpt.names())
    sources = [(hf, shape) for _, hf, shape, kind in plan if kind not in ("i32", "f64", "hparams")]
    expected = {hf_name(hf) for hf, _ in sources}
    biases = sorted(n for n in names - expected if n.endswith(".bias"))
    if biases:
        raise CheckpointError(f"{hf_dir}: tensor {biases[0]}", f"bias tensors ({len(biases)}) are not "
                              "supported", "of the biases only Qwen2's on q, k and v are run")
    missing = [hf_name(hf) for hf, _ in sources if hf_name(hf) not in names]
    if missing:
        raise CheckpointError(f"{hf_dir}: tensor {missing[0]}", f"missing ({len(missing)} missing in all)",
                              "is config.json (num_hidden_layers, tie_word_embeddings, model_type) right?")
    ignored = lambda n: n.endswith("rotary_emb.inv_freq") or n == "lm_head.weight"  # buffers; tied head
    extra = sorted(n for n in names - expected if not ignored(n))
    if extra:
        raise CheckpointError(f"{hf_dir}: tensor {extra[0]}", f"not part of this model "
                              f"({len(extra)} unexpected in all)", "is config.json's model_type right?")
    fused = {}  # a fused tensor's rows: the slices must cover it exactly
    for hf, shape in sources:
        if isinstance(hf, tuple):
            name, first, end = hf
            entry = fused.setdefault(name, [0, shape[1:]])
            entry[0] = max(entry[0], end)
            continue
        dtype, got = ckpt.info(hf)
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{hf_dir}: tensor {hf}", f"dtype {dtype} is not a float type",
                                  "quantized checkpoints are not supported; use the float one")
        if tuple(got) != shape:
            raise CheckpointError(f"{hf_dir}: tensor {hf}", f"shape {list(got)} but config.json implies "
                                  f"{list(shape)}", "config.json and the weights disagree")
    for name, (rows, rest) in fused.items():
        dtype, got = ckpt.info(name)
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{hf_dir}: tensor {name}", f"dtype {dtype} is not a float type",
                                  "quantized checkpoints are not supported; use the float one")
        if tuple(got) != (rows, *rest):
            raise CheckpointError(f"{hf_dir}: tensor {name}", f"shape {list(got)} but config.json implies "
                                  f"{[rows, *rest]}", "config.json and the weights disagree")


# --- The two RoPE layouts -------------------------------------------------------------------------
# RoPE rotates pairs of coordinates of each head (rope.h). Meta's code and rope.c pair neighbours:
# pair i = (x[2i], x[2i+1]). HF's rotate_half pairs the two halves: pair i = (x[i], x[i + hd/2]).
# Since q.k is unchanged when q and k get the same permutation, HF's converter simply permuted the
# rows of W_q and W_k (convert_llama_weights_to_hf.py, `permute`):
#     w.view(n_heads, hd // 2, 2, dim).transpose(1, 2).reshape(n_heads * hd, dim)
# i.e. HF_row[h*hd + c*hd/2 + i] = Meta_row[h*hd + 2i + c] for head h, pair i, c in {0, 1}.
# We undo it (llama2.c export.py's `permute_reverse` does the same):
#     out_row[h*hd + 2i + c] = hf_row[h*hd + c*hd/2 + i]
# W_k has n_kv_heads heads, not n_heads (grouped-query attention; llama2.c issue #431).

# Partial rotary (rot_dims = rd < hd): HF's rotate_half pairs (x[i], x[i + rd/2]) within the first rd
# coordinates of a head and leaves the rest; so only those rd rows are permuted, the same way.
# Biases of q and k are permuted as their rows, and Qwen3's q_norm / k_norm weights (one head's
# worth, shared by every head) as the rows of one head: RMSNorm does not care about the order of
# what it normalizes, only each weight must stay with its coordinate.

def interleaved(c):
    """Whether the checkpoint's q and k rows are already in the interleaved layout: GLM-4's
    apply_rotary_pos_emb turns adjacent pairs (x[0::2], x[1::2]: modeling_glm4.py, rotate_half_llm),
    as rope.c does, so its rows are written as they are."""
    return c["family"] == FAMILIES["glm4"]


def interleave_rows(w, n_heads, head_dim, rot_dims=0):
    """(n_heads*hd, ...) rows in rotate_half order -> interleaved order, in the first rot_dims rows
    of each head (all of them when 0). A vector (n_heads*hd,) is permuted the same way."""
    rd, shape = rot_dims or head_dim, w.shape
    w = w.reshape(n_heads, head_dim, -1).copy()
    turned = w[:, :rd].reshape(n_heads, 2, rd // 2, -1)  # [h, c, i, :] = hf_row[h*hd + c*rd/2 + i]
    w[:, :rd] = turned.transpose(0, 2, 1, 3).reshape(n_heads, rd, -1)  # [h, i, c, :] -> row h*hd+2i+c
    return w.reshape(shape)


# --- Writing ----------------------------------------------------------------------------------------

def pad_to_alignment(f):
    """Zeros up to the next multiple of ALIGN bytes from the start of the file."""
    f.write(b"\0" * (-f.tell() % ALIGN))


def quantize_q8_0(w):
    """(rows, cols) float32 -> int8 (rows, cp) and float32 scales (rows, cp/32), cp = cols rounded
    up to 32. Per block of 32: d = max|x| / 127, q = round(x / d), so x ~ q * d (ggml's Q8_0)."""
    rows, cols = w.shape
    cp = -(-cols // Q8_BLOCK) * Q8_BLOCK
    x = np.zeros((rows, cp), np.float32)
    x[:, :cols] = w  # the zero padding quantizes to q = 0
    blocks = x.reshape(rows, cp // Q8_BLOCK, Q8_BLOCK)  # (rows, cp/32, 32)
    d = np.abs(blocks).max(axis=2) / np.float32(127)  # (rows, cp/32); 0 for an all-zero block
    q = np.divide(blocks, d[:, :, None], out=np.zeros_like(blocks), where=d[:, :, None] > 0)
    q = np.clip(np.rint(q), -127, 127).astype(np.int8).reshape(rows, cp)
    return q, d.astype(np.float32)


def quantize_q4_0(w):
    """(rows, cols) float32 -> packed 4-bit values uint8 (rows, cp/2) and f16 scales (rows, cp/32).
    Per block of 32 (ggml's Q4_0): m = the value of largest magnitude, d = m / -8, q = min(15,
    floor(x / d + 8.5)) in [0, 15], so x ~ (q - 8) * d; byte j of a block holds q_j in its low 4 bits
    and q_(j+16) in its high 4 bits."""
    rows, cols = w.shape
    cp = -(-cols // Q8_BLOCK) * Q8_BLOCK
    x = np.zeros((rows, cp), np.float32)
    x[:, :cols] = w
    blocks = x.reshape(rows, cp // Q8_BLOCK, Q8_BLOCK)
    at = np.abs(blocks).argmax(axis=2)[:, :, None]
    d = (np.take_along_axis(blocks, at, axis=2)[:, :, 0] / np.float32(-8)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, np.floor(blocks * inv[:, :, None] + np.float32(8.5))).astype(np.uint8)
    packed = q[:, :, :16] | (q[:, :, 16:] << 4)  # (rows, cp/32, 16)
    return packed.reshape(rows, cp // 2), d


def read_tensor(ckpt, source):
    """An HF tensor as float32, or rows first..end of a fused one (Phi-3's qkv_proj, gate_up_proj)."""
    if isinstance(source, tuple):
        name, first, end = source
        return np.ascontiguousarray(ckpt.get(name)[first:end])
    return ckpt.get(source)


def write_tensor(f, w, kind, dtype, name):
    """One tensor at the next 64-byte boundary: norms as f32, matrices in `dtype` (model.h)."""
    pad_to_alignment(f)
    if kind == "f64":  # LongRoPE's factors
        f.write(np.ascontiguousarray(w, dtype="<f8").data)
    elif kind == "i32":  # layer_kind
        f.write(np.ascontiguousarray(w, dtype="<i4").data)
    elif w.ndim == 1 or dtype == "f32":  # norms, biases: always f32
        f.write(np.ascontiguousarray(w, dtype="<f4").data)
    elif dtype == "f16":
        with np.errstate(over="ignore"):  # overflow is checked right below
            h = np.ascontiguousarray(w, dtype="<f2")
        if not np.isfinite(h).all():
            raise CheckpointError(f"tensor {name}", "has values beyond the f16 range (65504)",
                                  "export with --dtype f32 or q8_0")
        f.write(h.data)
    elif dtype == "bf16":  # rounded to nearest even; a bf16 checkpoint's values come back bit for bit
        # (NaN and infinity were refused when the tensor was read)
        b = np.ascontiguousarray(bf16_bits(w), dtype="<u2")
        if ((b & 0x7F80) == 0x7F80).any():
            raise CheckpointError(f"tensor {name}", "has values that round beyond the bf16 range (3.39e38)",
                                  "export with --dtype f32")
        f.write(br16_from_rows(b))  # in groups of 16 rows, pairs of columns interleaved (bf16_r16)
    elif dtype == "q8_0":  # in groups of 16 rows, each block's 16 scales before its values (q8_0_r16)
        q, d = quantize_q8_0(w)
        f.write(r16_from_rows(q, d))
    else:  # q4_0: all packed rows, then at the next 64-byte boundary all the f16 scales
        q, d = quantize_q4_0(w)
        f.write(np.ascontiguousarray(q).data)
        pad_to_alignment(f)
        with np.errstate(over="ignore"):
            h = np.ascontiguousarray(d, dtype="<f2")
        if not np.isfinite(h).all():
            raise CheckpointError(f"tensor {name}", "has a q4_0 block scale beyond the f16 range",
                                  "export with --dtype f32 or q8_0")
        f.write(h.data)


def describe_rope(c):
    name = {v: k for k, v in ROPE_TYPES.items() if k != "su"}[c["rope_scaling"]]
    text = f"rope {'none' if name == 'default' else name} theta {c['rope_theta']:g}"
    if c["rot_dims"]:
        text += f" on {c['rot_dims']} of {c['head_dim']} dimensions"
    if c["rope_scaling"]:
        text += f" factor {c['rope_factor']:g}"
        if c["rope_orig_ctx"]:
            text += f" original_max_position_embeddings {c['rope_orig_ctx']}"
    return text


# --- Where the files go: checked before anything is written ------------------------------------

TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json")
OWN_FOLDER = "export into a folder of its own (e.g. OUT_DIR/model-name/model.bin)"


def file_kind(mode):
    """What a non-regular file is, in words."""
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISLNK, "symlink that does not resolve (a loop?)")):
        if test(mode):
            return kind
    return "special file"


def destination(path, hint):
    """The file that writing `path` replaces: `path` itself, or the target of a symlink (written
    through, so the link stays a link). Returns (the resolved path, whether it exists); refuses
    anything but a regular file or a new path in an existing directory, before a byte is written."""
    real = os.path.realpath(path)
    where = f"{path} (a symlink to {real})" if os.path.islink(path) else path
    try:
        mode = os.lstat(real).st_mode
    except FileNotFoundError:
        parent = os.path.dirname(real)
        if not os.path.isdir(parent):
            raise CheckpointError(where, f"its directory {parent} does not exist or is not a directory",
                                  "give a file path in an existing directory")
        return real, False
    except NotADirectoryError:
        raise CheckpointError(where, f"its directory {os.path.dirname(real)} is not a directory",
                              "give a file path in an existing directory")
    if not stat.S_ISREG(mode):
        raise CheckpointError(where, f"is a {file_kind(mode)}, not a regular file", hint)
    return real, True


def check_tokenizer_files(hf_dir, out_dir):
    """./run looks for its tokenizer beside the model file: the checkpoint's SentencePiece
    tokenizer.model if it has one, else its tokenizer.json, and tokenizer_config.json (BOS / EOS,
    chat templates) with it, are copied to out_dir. Returns the [(source, destination)] still to copy.
    generation_config.json is not copied (its end ids are in the header) and ./run does not read
    it, so one beside OUT is left as it is and changes nothing.

    Another model's tokenizer files are never replaced or mixed with this one's, in either order.
    Whatever of the three names out_dir already has serves a model there, so each must be the same
    bytes as the checkpoint's file of that name, and nothing may be added beside them (a
    tokenizer_config.json added beside another model's tokenizer.model would change its BOS, a
    tokenizer.model added beside its tokenizer.json which tokenizer it runs with). An out_dir with
    none of them gets this checkpoint's; one with all of them and the same bytes (the same model
    again, or one with the same tokenizer files) is left as it is. Otherwise this refuses, before
    anything is written."""
    names = [n for n in TOKENIZER_FILES[:2] if os.path.isfile(os.path.join(hf_dir, n))][:1]
    if names and os.path.isfile(os.path.join(hf_dir, "tokenizer_config.json")):
        names.append("tokenizer_config.json")
    there = {}
    for name in TOKENIZER_FILES:
        dst, exists = destination(os.path.join(out_dir, name), f"move it away, or {OWN_FOLDER}")
        there[name] = (dst, exists)
    for name, (dst, exists) in there.items():
        src = os.path.join(hf_dir, name)
        if not exists:
            continue
        if not os.path.isfile(src):
            raise CheckpointError(dst, f"is another model's ({hf_dir} has no {name}), and the two models' "
                                  "tokenizer files would mix", OWN_FOLDER)
        if not filecmp.cmp(src, dst, shallow=False):
            raise CheckpointError(dst, f"is another model's (it differs from {src}), and would be replaced",
                                  OWN_FOLDER)
    present = [name for name, (_, exists) in there.items() if exists]
    if present:
        for name in names:
            if not there[name][1]:
                raise CheckpointError(there[name][0], f"is missing beside another model's {' and '.join(present)}, "
                                      f"and copying {hf_dir}'s {name} there would change how that model runs",
                                      OWN_FOLDER)
    if not names:
        print(f"note: {hf_dir} has no tokenizer.model or tokenizer.json; give ./run one with -z", file=sys.stderr)
    return [(os.path.join(hf_dir, name), there[name][0]) for name in names if not there[name][1]]


def publish(tmp, dst):
    """Rename the finished temp file over dst, with the permissions a new file would have (mkstemp
    makes 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, dst)


def copy_tokenizer_files(copies):
    for src, dst in copies:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(dst) + ".tmp-", dir=os.path.dirname(dst))
        try:
            with os.fdopen(fd, "wb") as f, open(src, "rb") as g:
                shutil.copyfileobj(g, f)
            publish(tmp, dst)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        print(f"copied {src} to {dst}", file=sys.stderr)


def is_gguf(path):
    """Whether path is a file in llama.cpp's format (its first bytes "GGUF"); an unreadable one is not."""
    try:
        with open(path, "rb") if Path(path).is_file() else nullcontext() as f:
            return f is not None and f.read(4) == b"GGUF"
    except OSError:
        return False


def export(hf_dir, out, dtype):
    gguf = is_gguf(hf_dir)  # read as the checkpoint it was converted from (lrun/gguf_file.py)
    ckpt = GgufCheckpoint(hf_dir) if gguf else Checkpoint(hf_dir)
    c = read_config(hf_dir, ckpt.config() if gguf else None)
    if gguf:
        c["norm_plus_one"] = False  # the converter stored Gemma's norms as 1 + w already
    resolve_classifier(c, set(ckpt.names()))
    c.update(magic=MAGIC, version=VERSION, dtype=EXPORT_DTYPES[dtype])
    c["version"] = file_version(c)
    plan = tensor_plan(c)
    check_tensors(ckpt, plan, hf_dir)  # all checks done before a single byte is written

    # Where it goes: OUT (through a symlink: its target) and the tokenizer files beside it.
    link = os.path.islink(out)
    target, _ = destination(out, "give a path to a regular file or a new one")
    out_dir = os.path.dirname(target)
    if os.path.basename(target) in TOKENIZER_FILES:
        raise CheckpointError(out, "is where a tokenizer file goes beside the model", "call it model.bin")
    copies = [] if gguf else check_tokenizer_files(hf_dir, out_dir)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".tmp-", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pack_header(c))  # 128 bytes of fields, 128 reserved zeros
            n_params = 0
            for k, (ours, hf, shape, kind) in enumerate(plan):
                if kind == "hparams":  # version 4's table, right after the header
                    f.write(pack_hparams(c))
                    continue
                if kind in ("i32", "f64"):  # a table of version 3: the value itself
                    write_tensor(f, np.array(hf), kind, dtype, ours)
                    continue
                w = read_tensor(ckpt, hf)  # float32, whatever the stored dtype; one tensor in memory at a time
                if not np.isfinite(w).all():
                    raise CheckpointError(f"{hf_dir}: tensor {hf_name(hf)}", "contains NaN or infinity",
                                          "the checkpoint is broken")
                if c["norm_plus_one"] and ours.split(".")[-1] in NORMS:
                    w = w + np.float32(1)  # Gemma: x * (1 + w), in float32 as Gemma2RMSNorm computes it
                if kind in ("q", "k", "norm") and ours.split(".")[-1] in PERMUTED and not interleaved(c):
                    heads = {"q": c["n_heads"], "k": c["n_kv_heads"], "norm": 1}[kind]
                    w = interleave_rows(w, heads, c["head_dim"], c["rot_dims"])
                write_tensor(f, w, kind, dtype, hf_name(hf))
                n_params += w.size
                src = f"{hf[0]} rows {hf[1]}:{hf[2]}" if isinstance(hf, tuple) else hf
                print(f"[{k + 1:3d}/{len(plan)}] {ours:<18s} {str(shape):<14s} <- {src}"
                      + (" (rows interleaved)" if ours.split(".")[-1] in PERMUTED and not interleaved(c) else "")
                      + (" (1 + w)" if c["norm_plus_one"] and ours.split(".")[-1] in NORMS else ""),
                      file=sys.stderr)
                del w
            size = f.tell()
        publish(tmp, target)  # atomic: the same directory as the target
    except BaseException:  # including KeyboardInterrupt: never leave a half-written file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    family = {v: k for k, v in FAMILIES.items()}[c["family"]]
    layers = "".join(f"; layers {', '.join(str(l) for l, k in enumerate(c['layer_kind']) if k & bit)} {what}"
                     for bit, what in ((LAYER_NO_ROPE, "without RoPE"),
                                       (LAYER_SLIDING, f"with a sliding window of {c['sliding_window']}"))
                     if any(k & bit for k in c["layer_kind"]))
    print(f"wrote {out}{f' (through the symlink, to {target})' if link else ''}: {family} (version {c['version']}), dim {c['dim']} "
          f"hidden {c['hidden_dim']} layers {c['n_layers']} "
          f"heads {c['n_heads']}/{c['n_kv_heads']} kv head_dim {c['head_dim']} vocab {c['vocab_size']} "
          f"seq_len {c['seq_len']}, {'shared' if c['shared_classifier'] else 'separate'} classifier; "
          f"{n_params:,} params, {dtype}, {size:,} bytes; {describe_rope(c)}{layers}", file=sys.stderr)
    copy_tokenizer_files(copies)
    if gguf:
        print(f"the tokenizer stays in the GGUF file: ./run {out} -z {hf_dir}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a Hugging Face checkpoint, or a GGUF file, to our model file "
                                 "(format in model.h).")
    ap.add_argument("hf_dir", metavar="HF_DIR", help="directory with config.json and the weights, or a GGUF file")
    ap.add_argument("out", metavar="OUT.bin", help="the model file to write")
    ap.add_argument("--dtype", choices=sorted(EXPORT_DTYPES), default="f32",
                    help="type of the weight matrices (norms are always f32); default f32")
    args = ap.parse_args(argv)
    for name, path, what in (("HF_DIR", args.hf_dir, "the Hugging Face checkpoint folder to read"),
                             ("OUT.bin", args.out, "the model file to write")):
        if not path:  # "" would be read as the current directory
            print(f"error: {name} is an empty path (hint: give {what}: export.py HF_DIR OUT.bin)", file=sys.stderr)
            return 1
    if os.path.exists(args.hf_dir) and not os.path.isdir(args.hf_dir) and not os.path.isfile(args.hf_dir):
        print(f"error: {args.hf_dir}: is a {file_kind(os.stat(args.hf_dir).st_mode)}, not a checkpoint folder (hint: "
              "HF_DIR is a Hugging Face model directory, with config.json and the weights)", file=sys.stderr)
        return 1
    if Path(args.hf_dir).is_file() and not is_gguf(args.hf_dir):  # a model file already: llama2.c's, or ours
        print(f"error: {args.hf_dir} is a file, and HF_DIR must be a Hugging Face model directory (hint: a "
              "llama2.c .bin or a file this exporter wrote needs no export: ./run reads it directly, "
              f"./run {args.hf_dir} -z TOKENIZER.model)", file=sys.stderr)
        return 1
    try:
        export(args.hf_dir, args.out, args.dtype)
        return 0
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
    except OSError as e:  # the hint for where it happened: reading the checkpoint, or writing
        read = e.filename and os.path.abspath(e.filename).startswith(os.path.join(os.path.abspath(args.hf_dir), ""))
        hint = ("HF_DIR must be a readable Hugging Face model directory" if read
                else "free disk space" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "check the path")
        print(f"error: {e.filename or args.out}: {e.strerror or e} (hint: {hint})", file=sys.stderr)
    except MemoryError:
        print("error: out of memory (hint: the largest tensor must fit in RAM about three times)",
              file=sys.stderr)
    except KeyboardInterrupt:
        print(f"error: interrupted: {args.out} was not written", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
