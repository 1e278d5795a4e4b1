"""export.py - convert a Hugging Face Llama (or Mistral) checkpoint into our model file.

Usage: /usr/bin/python3 export/export.py HF_DIR OUT.bin [--dtype f32|f16|q8_0|q4_0]

What this is: a reader of HF_DIR/config.json and its weights (model.safetensors, sharded
safetensors, or pytorch_model*.bin), a checker that every tensor is there with the shape the config
implies, and a writer of the format documented at the top of model.h (version 1): a 256-byte
header, then the tensors in a fixed order, each 64-byte aligned (the layout is lrun/modelfile.py,
the Hugging Face reader lrun/hf_checkpoint.py). Along the way the rows of q_proj
and k_proj are permuted from Hugging Face's rotate_half layout back to the interleaved layout that
rope.c rotates (see "The two RoPE layouts" below).
What this is not: a general converter. Anything this program cannot reproduce exactly is refused
with a message rather than approximated: other architectures, biases, activations other than
SiLU, partially rotated heads, longrope, already-quantized checkpoints. The tokenizer is not
converted: run.c reads SentencePiece's tokenizer.model itself, so it is copied beside OUT.

Errors go to stderr as `error: <what>: <why> (hint: <fix>)` with exit status 1, and no output file
is left behind: everything is written to OUT.tmp-XXXX and renamed over OUT only at the very end.
Where it writes is checked before anything is written: OUT must be a regular file or a new path
(a device, FIFO, socket or directory is refused and left as it is; a symlink is written through to
its target, which must pass the same checks), and the tokenizer files it copies beside OUT must not
replace another model's (see check_tokenizer_files).
"""
import argparse
import filecmp
import json
import math
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun.hf_checkpoint import FLOAT_DTYPES, Checkpoint, CheckpointError  # noqa: E402
from lrun.modelfile import (ALIGN, DTYPES, MAGIC, MAX_END_IDS, Q8_BLOCK, VERSION, pack_header,  # noqa: E402
                            tensors)

# RopeScaling in rope.h (the numbers are part of the file format). HF has no static "ntk" (2).
ROPE_TYPES = {"default": 0, "linear": 1, "dynamic": 3, "yarn": 4, "llama3": 5}
ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM"}
MODEL_TYPES = {"llama", "mistral"}


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


# --- Reading config.json --------------------------------------------------------------------------

def config_value(cfg, key, where, kind, default=None, positive=True):
    """cfg[key] checked to be a `kind` (int or float); `default` if missing or null (None: required)."""
    v = cfg.get(key)
    if v is None:
        if default is None:
            raise CheckpointError(f"{where}: {key}", "missing", f"add \"{key}\" from the model's card")
        return default
    ok = (type(v) is int) if kind is int else (type(v) in (int, float) and math.isfinite(v))
    if not ok or (positive and v <= 0) or (not positive and v < 0) or (kind is int and v >= 2**31):
        raise CheckpointError(f"{where}: {key}", f"{v!r} is not a {'positive' if positive else 'non-negative'} "
                              f"{'integer' if kind is int else 'number'} that fits the header")
    return kind(v)


def read_rope(cfg, where):
    """The checkpoint's own RoPE: rope_theta and rope_scaling -> the header's rope_* fields.

    Accepts the three spellings HF has used: {"rope_type": ...} (v4.43+), the legacy {"type": ...}
    and transformers v5's single "rope_parameters" dict that also carries rope_theta.
    """
    params = cfg.get("rope_parameters")
    if params is not None:
        key = "rope_parameters"
        if not isinstance(params, dict) or ("rope_type" not in params and "type" not in params):
            raise CheckpointError(f"{where}: rope_parameters", f"{params!r} has no rope_type",
                                  "per-layer-type RoPE parameters are not supported")
        scaling, theta_cfg = params, params if "rope_theta" in params else cfg
    else:
        key, scaling, theta_cfg = "rope_scaling", cfg.get("rope_scaling"), cfg
        if scaling is not None and not isinstance(scaling, dict):
            raise CheckpointError(f"{where}: rope_scaling", f"{scaling!r} is not an object or null")
    rope = {"rope_theta": config_value(theta_cfg, "rope_theta", where, float, default=10000.0),
            "rope_scaling": 0, "rope_orig_ctx": 0, "rope_factor": 1.0, "rope_attn_factor": 0.0,
            "rope_beta_fast": 0.0, "rope_beta_slow": 0.0,
            "rope_low_freq_factor": 0.0, "rope_high_freq_factor": 0.0}
    for d in (cfg, scaling or {}):  # top level (v4) or inside rope_parameters (v5)
        if d.get("partial_rotary_factor") not in (None, 1, 1.0):
            raise CheckpointError(f"{where}: partial_rotary_factor", f"is {d['partial_rotary_factor']!r}; "
                                  "only fully rotated heads (1.0) are supported")
    if not scaling:
        return rope
    rope_type = scaling.get("rope_type", scaling.get("type"))  # "type" is the pre-4.43 spelling
    if rope_type is None or rope_type == "default":
        return rope
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        raise CheckpointError(f"{where}: {key}", f"rope type {rope_type!r} is not supported",
                              "supported: default, linear, dynamic, yarn, llama3")
    for k in ("mscale", "mscale_all_dim", "short_factor", "long_factor"):
        if scaling.get(k) is not None:
            raise CheckpointError(f"{where}: {key}.{k}", "is not supported (DeepSeek/longrope variants)")
    if scaling.get("truncate", True) is not True:
        raise CheckpointError(f"{where}: {key}.truncate", "false is not supported (YaRN without rounding)")
    sub = f"{where}: {key}"
    rope["rope_scaling"] = ROPE_TYPES[rope_type]
    orig = config_value(scaling, "original_max_position_embeddings", sub, int, default=0, positive=False)
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


def read_config(hf_dir):
    """HF_DIR/config.json -> the header fields (minus dtype and shared_classifier)."""
    where = os.path.join(hf_dir, "config.json")
    try:
        with open(where) as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(where, "not found", "HF_DIR must be a Hugging Face model directory")
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly nested JSON
        raise CheckpointError(where, f"not valid JSON ({e})")
    if not isinstance(cfg, dict):
        raise CheckpointError(where, "is not a JSON object")

    # What kind of model: only the Llama architecture (Mistral's is the same network).
    archs = cfg.get("architectures") or []
    for arch in archs if isinstance(archs, list) else [archs]:
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise CheckpointError(f"{where}: architectures", f"{arch} is not supported",
                                  f"supported: {', '.join(sorted(ARCHITECTURES))}")
    if not isinstance(cfg.get("model_type"), str) or cfg["model_type"] not in MODEL_TYPES:
        raise CheckpointError(f"{where}: model_type", f"{cfg.get('model_type')!r} is not supported",
                              f"supported: {', '.join(sorted(MODEL_TYPES))}")
    qc = cfg.get("quantization_config")
    if qc is not None:
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else qc
        raise CheckpointError(f"{where}: quantization_config", f"the checkpoint is quantized ({method})",
                              "export the original float16/bfloat16 checkpoint instead")
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key):
            raise CheckpointError(f"{where}: {key}", "is true; our network has no biases")
    if cfg.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{where}: hidden_act", f"{cfg['hidden_act']!r} is not supported",
                              "the MLP is SwiGLU: silu(w1 x) * (w3 x)")

    c = {}
    c["dim"] = config_value(cfg, "hidden_size", where, int)
    c["hidden_dim"] = config_value(cfg, "intermediate_size", where, int)
    c["n_layers"] = config_value(cfg, "num_hidden_layers", where, int)
    c["n_heads"] = config_value(cfg, "num_attention_heads", where, int)
    c["n_kv_heads"] = config_value(cfg, "num_key_value_heads", where, int, default=c["n_heads"])
    c["head_dim"] = config_value(cfg, "head_dim", where, int, default=c["dim"] // c["n_heads"])
    c["vocab_size"] = config_value(cfg, "vocab_size", where, int)
    c["seq_len"] = config_value(cfg, "max_position_embeddings", where, int)
    c["norm_eps"] = config_value(cfg, "rms_norm_eps", where, float)
    window = cfg.get("sliding_window")
    if window is not None and type(window) is not int:
        raise CheckpointError(f"{where}: sliding_window", f"{window!r} is not an integer or null")
    if window is not None and window < c["seq_len"]:
        warn(f"sliding_window {window} is not implemented: attention sees the whole "
             f"context, so results match HF only up to {window} tokens")
    if c["n_heads"] % c["n_kv_heads"]:
        raise CheckpointError(f"{where}: num_key_value_heads", f"{c['n_kv_heads']} does not divide "
                              f"num_attention_heads {c['n_heads']}")
    if c["head_dim"] % 2:
        raise CheckpointError(f"{where}: head_dim", f"{c['head_dim']} is odd; RoPE rotates pairs")
    for key, default in (("bos_token_id", 1), ("eos_token_id", 2)):
        v = cfg.get(key)
        ids = v if isinstance(v, list) else [default if v is None else v]
        if key == "eos_token_id":  # Llama 3: a list, and generation_config.json may name more
            ids = ids + [i for i in generation_eos(hf_dir) if i not in ids]
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
    c.update(read_rope(cfg, where))
    check_limits(c, where)
    c["tie_word_embeddings"] = cfg.get("tie_word_embeddings")  # resolved against the tensors later
    if c["tie_word_embeddings"] is not None and type(c["tie_word_embeddings"]) is not bool:
        raise CheckpointError(f"{where}: tie_word_embeddings", f"{c['tie_word_embeddings']!r} is not true, "
                              "false or null")
    return c


# What ./run reads (model.c check_shape, rope.c rope_params_check). A file outside these limits
# would only be refused by the loader: refuse it here instead, naming the config.json key.
LIMITS = [("dim", "hidden_size", 65536), ("hidden_dim", "intermediate_size", 2**20),
          ("n_layers", "num_hidden_layers", 1024), ("n_heads", "num_attention_heads", 1024),
          ("head_dim", "head_dim", 1024), ("vocab_size", "vocab_size", 2**22),
          ("seq_len", "max_position_embeddings", 2**24),
          ("rope_orig_ctx", "original_max_position_embeddings", 2**24)]


def check_limits(c, where):
    for field, key, hi in LIMITS:
        lo = 0 if field == "rope_orig_ctx" else 1
        if not lo <= c[field] <= hi:
            raise CheckpointError(f"{where}: {key}", f"{c[field]} is outside [{lo}, {hi}], the range ./run "
                                  "reads")
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
            "rms_ffn": "post_attention_layernorm.weight", "w1": "mlp.gate_proj.weight",
            "w2": "mlp.down_proj.weight", "w3": "mlp.up_proj.weight"}


def tensor_plan(c):
    plan = []
    for ours, shape, kind in tensors(c):
        if ours.startswith("layers."):  # layers.L.NAME -> model.layers.L.<HF name of NAME>
            _, l, name = ours.split(".")
            hf, kind = f"model.layers.{l}.{HF_NAMES[name]}", {"wq": "q", "wk": "k"}.get(name, kind)
        else:
            hf = HF_NAMES[ours]
        plan.append((ours, hf, shape, kind))
    return plan


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
    expected = {hf for _, hf, _, _ in plan}
    biases = sorted(n for n in names if n.endswith(".bias"))
    if biases:
        raise CheckpointError(f"{hf_dir}: tensor {biases[0]}", f"bias tensors ({len(biases)}) are not "
                              "supported", "our network, like Llama's, has no biases")
    missing = [hf for _, hf, _, _ in plan if hf not in names]
    if missing:
        raise CheckpointError(f"{hf_dir}: tensor {missing[0]}", f"missing ({len(missing)} missing in all)",
                              "is config.json (num_hidden_layers, tie_word_embeddings) right?")
    ignored = lambda n: n.endswith("rotary_emb.inv_freq") or n == "lm_head.weight"  # buffers; tied head
    extra = sorted(n for n in names - expected if not ignored(n))
    if extra:
        raise CheckpointError(f"{hf_dir}: tensor {extra[0]}", f"not part of a Llama model "
                              f"({len(extra)} unexpected in all)", "is this really a Llama checkpoint?")
    for _, hf, shape, _ in plan:
        dtype, got = ckpt.info(hf)
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{hf_dir}: tensor {hf}", f"dtype {dtype} is not a float type",
                                  "quantized checkpoints are not supported; use the float one")
        if tuple(got) != shape:
            raise CheckpointError(f"{hf_dir}: tensor {hf}", f"shape {list(got)} but config.json implies "
                                  f"{list(shape)}", "config.json and the weights disagree")


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

def interleave_rows(w, n_heads, head_dim):
    """(n_heads*hd, dim) rows in rotate_half order -> interleaved order."""
    dim = w.shape[1]
    w = w.reshape(n_heads, 2, head_dim // 2, dim)  # [h, c, i, :] = hf_row[h*hd + c*hd/2 + i]
    return w.transpose(0, 2, 1, 3).reshape(n_heads * head_dim, dim)  # [h, i, c, :] -> row h*hd+2i+c


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


def write_tensor(f, w, kind, dtype, name):
    """One tensor at the next 64-byte boundary: norms as f32, matrices in `dtype` (model.h)."""
    pad_to_alignment(f)
    if kind == "norm" or dtype == "f32":
        f.write(np.ascontiguousarray(w, dtype="<f4").data)
    elif dtype == "f16":
        with np.errstate(over="ignore"):  # overflow is checked right below
            h = np.ascontiguousarray(w, dtype="<f2")
        if not np.isfinite(h).all():
            raise CheckpointError(f"tensor {name}", "has values beyond the f16 range (65504)",
                                  "export with --dtype f32 or q8_0")
        f.write(h.data)
    elif dtype == "q8_0":  # all int8 rows, then at the next 64-byte boundary all the scales
        q, d = quantize_q8_0(w)
        f.write(q.data)
        pad_to_alignment(f)
        f.write(np.ascontiguousarray(d, dtype="<f4").data)
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
    name = {v: k for k, v in ROPE_TYPES.items()}[c["rope_scaling"]]
    text = f"rope {'none' if name == 'default' else name} theta {c['rope_theta']:g}"
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
    tokenizer.model if it has one, else its tokenizer.json, and tokenizer_config.json (chat
    templates) with it, are copied to out_dir. Returns the [(source, destination)] still to copy.

    Another model's tokenizer files are never replaced or mixed with this one's: when something is
    copied, each of the three names already in out_dir must be the same bytes as the checkpoint's
    file of that name (a second export of the same model, or a model with the same tokenizer),
    otherwise this refuses, before anything is written."""
    names = [n for n in TOKENIZER_FILES[:2] if os.path.isfile(os.path.join(hf_dir, n))][:1]
    if not names:
        print(f"note: {hf_dir} has no tokenizer.model or tokenizer.json; give ./run one with -z", file=sys.stderr)
        return []
    if os.path.isfile(os.path.join(hf_dir, "tokenizer_config.json")):
        names.append("tokenizer_config.json")
    copies = []
    for name in TOKENIZER_FILES:
        src, dst = os.path.join(hf_dir, name), os.path.join(out_dir, name)
        dst, exists = destination(dst, f"move it away, or {OWN_FOLDER}")
        if not exists:
            if name in names:
                copies.append((src, dst))
        elif not os.path.isfile(src):
            raise CheckpointError(dst, f"is another model's ({hf_dir} has no {name}), and the two models' "
                                  "tokenizer files would mix", OWN_FOLDER)
        elif not filecmp.cmp(src, dst, shallow=False):
            raise CheckpointError(dst, f"is another model's (it differs from {src}), and would be replaced",
                                  OWN_FOLDER)
    return copies


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


def export(hf_dir, out, dtype):
    c = read_config(hf_dir)
    ckpt = Checkpoint(hf_dir)
    resolve_classifier(c, set(ckpt.names()))
    c.update(magic=MAGIC, version=VERSION, dtype=DTYPES[dtype])
    plan = tensor_plan(c)
    check_tensors(ckpt, plan, hf_dir)  # all checks done before a single byte is written

    # Where it goes: OUT (through a symlink: its target) and the tokenizer files beside it.
    link = os.path.islink(out)
    target, _ = destination(out, "give a path to a regular file or a new one")
    out_dir = os.path.dirname(target)
    if os.path.basename(target) in TOKENIZER_FILES:
        raise CheckpointError(out, "is where a tokenizer file goes beside the model", "call it model.bin")
    copies = check_tokenizer_files(hf_dir, out_dir)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".tmp-", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pack_header(c))  # 128 bytes of fields, 128 reserved zeros
            n_params = 0
            for k, (ours, hf, shape, kind) in enumerate(plan):
                w = ckpt.get(hf)  # float32, whatever the stored dtype; one tensor in memory at a time
                if not np.isfinite(w).all():
                    raise CheckpointError(f"{hf_dir}: tensor {hf}", "contains NaN or infinity",
                                          "the checkpoint is broken")
                if kind in ("q", "k"):
                    w = interleave_rows(w, c["n_heads" if kind == "q" else "n_kv_heads"], c["head_dim"])
                write_tensor(f, w, kind, dtype, hf)
                n_params += w.size
                print(f"[{k + 1:3d}/{len(plan)}] {ours:<18s} {str(shape):<14s} <- {hf}"
                      + (" (rows interleaved)" if kind in ("q", "k") else ""), file=sys.stderr)
                del w
            size = f.tell()
        publish(tmp, target)  # atomic: the same directory as the target
    except BaseException:  # including KeyboardInterrupt: never leave a half-written file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    print(f"wrote {out}{f' (through the symlink, to {target})' if link else ''}: dim {c['dim']} "
          f"hidden {c['hidden_dim']} layers {c['n_layers']} "
          f"heads {c['n_heads']}/{c['n_kv_heads']} kv head_dim {c['head_dim']} vocab {c['vocab_size']} "
          f"seq_len {c['seq_len']}, {'shared' if c['shared_classifier'] else 'separate'} classifier; "
          f"{n_params:,} params, {dtype}, {size:,} bytes; {describe_rope(c)}", file=sys.stderr)
    copy_tokenizer_files(copies)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a Hugging Face Llama checkpoint to our model "
                                 "file (format in model.h).")
    ap.add_argument("hf_dir", metavar="HF_DIR", help="directory with config.json and the weights")
    ap.add_argument("out", metavar="OUT.bin", help="the model file to write")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32",
                    help="type of the weight matrices (norms are always f32); default f32")
    args = ap.parse_args(argv)
    if Path(args.hf_dir).is_file():  # a model file already: llama2.c's .bin, or one of ours
        print(f"error: {args.hf_dir} is a file, and HF_DIR must be a Hugging Face model directory (hint: a "
              "llama2.c .bin or a file this exporter wrote needs no export: ./run reads it directly, "
              f"./run {args.hf_dir} -z TOKENIZER.model)", file=sys.stderr)
        return 1
    try:
        export(args.hf_dir, args.out, args.dtype)
        return 0
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
    except OSError as e:
        print(f"error: {e.filename or args.out}: {e.strerror or e} (hint: check the path and free "
              "disk space)", file=sys.stderr)
    except MemoryError:
        print("error: out of memory (hint: the largest tensor must fit in RAM about three times)",
              file=sys.stderr)
    except KeyboardInterrupt:
        print(f"error: interrupted: {args.out} was not written", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
