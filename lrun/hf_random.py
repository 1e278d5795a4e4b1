"""hf_random.py - write random Hugging Face checkpoint directories of the Llama family for tests and benchmarks.

What this is: config.json plus weights with Hugging Face's tensor names and shapes (q_proj/k_proj
rows are whatever HF would hold, i.e. the rotate_half layout: random numbers have no layout, but the
exporter treats them as such) in any of the four ways HF stores them: model.safetensors, sharded
safetensors with an index, pytorch_model.bin, sharded .bin with an index. Tensors are produced one
at a time, so a 1.1B-parameter safetensors checkpoint never sits in memory whole.
What this is not: a trained model. The numbers are N(0, std^2) (norm weights 1 + N(0, 0.1^2),
biases N(0, 0.2^2)), so a forward pass stays finite but produces no meaningful text.

Families (architecture=): LlamaForCausalLM (the default), MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, SmolLM3ForCausalLM, Phi3ForCausalLM, Gemma3ForCausalLM. The tensors are the ones
transformers' modules hold for the config written (modeling_<family>.py names): Qwen2's q/k/v biases
(always), Llama's, Qwen3's and SmolLM3's attention_bias / mlp_bias ones when extra_config turns them
on, Qwen3's and Gemma 3's self_attn.q_norm / k_norm (head_dim each), Gemma 3's norms before and
after the MLP (pre_feedforward_layernorm, post_feedforward_layernorm; its norm weights w scale by
1 + w, so theirs are N(0, 0.1^2)), Phi-3's fused self_attn.qkv_proj (rows q, k, v) and
mlp.gate_up_proj (rows gate, then up). config.json is written in either of the forms transformers
writes: config_format="v4" (top-level rope_theta, rope_scaling, partial_rotary_factor) or "v5" (one
rope_parameters dict holding rope_type, rope_theta and the rest, plus the layer_types that
transformers 5 derives and saves). The same arguments give the same model in both forms.
qk_scale multiplies the q and k projections (not v): with std 0.02 (transformers' initializer_range)
the scores are so flat that positions hardly matter; data/families/ was made with qk_scale 6.

Each tensor has its own random generator seeded from (seed, position in the model), so the same
seed gives the same numbers in every dtype, file layout and config form. With exact=True they are
also rounded to values that F32, F16 and BF16 all represent exactly (bfloat16 precision, no f16
subnormals), so every dtype exports to the same float32 bits.

From the repository root:
    /usr/bin/python3 -m lrun.hf_random OUT_DIR --preset 110m [--dtype F16] [--fmt sharded]
    /usr/bin/python3 -m lrun.hf_random OUT_DIR --dim 288 --hidden-dim 768 --layers 6 --heads 6 --vocab 32000
    /usr/bin/python3 -m lrun.hf_random OUT_DIR --dim 64 --hidden-dim 160 --layers 4 --heads 4 --kv-heads 1 \
        --vocab 512 --arch Qwen3ForCausalLM --config-format v5 --qk-scale 6
"""
import argparse
import functools
import json
import math
import os
import sys
import time

import numpy as np
import torch

from lrun.hf_checkpoint import Raw, save_file

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
TORCH_DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
FORMATS = ("safetensors", "sharded", "bin", "bin-sharded")
MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
               "Qwen3ForCausalLM": "qwen3", "SmolLM3ForCausalLM": "smollm3", "Phi3ForCausalLM": "phi3",
               "Gemma3ForCausalLM": "gemma3_text"}
CONFIG_FORMATS = ("v4", "v5")
BIAS_STD = 0.2  # as data/families/: biases large enough to matter

# Benchmark shapes: Karpathy's stories110M (Llama 2 tokenizer) and TinyLlama-1.1B (GQA 32/4), and
# Gemma 3 1B (google/gemma-3-1b-pt's config.json: 26 layers, 5 sliding of 512 : 1 global, 4 heads and
# one kv head of 256, a 262144-word vocabulary shared with the classifier).
PRESETS = {
    "110m": dict(dim=768, hidden_dim=2048, n_layers=12, n_heads=12, n_kv_heads=12,
                 vocab_size=32000, max_pos=1024, tied=True),
    "tinyllama": dict(dim=2048, hidden_dim=5632, n_layers=22, n_heads=32, n_kv_heads=4,
                      vocab_size=32000, max_pos=2048, tied=False),
    "gemma3-1b": dict(dim=1152, hidden_dim=6912, n_layers=26, n_heads=4, n_kv_heads=1, head_dim=256,
                      vocab_size=262144, max_pos=32768, tied=True, architecture="Gemma3ForCausalLM",
                      rope_theta=1000000.0),
}


def tensor_layout(config):
    """(family, qkv_bias, o_bias, mlp_bias) of a config.json dict: which nn.Linear of
    modeling_<family>.py has bias=True (Qwen2: q, k, v always; attention_bias: q, k, v and o for
    Llama, Qwen3, SmolLM3; mlp_bias: gate, up, down for Llama and SmolLM3)."""
    family = config.get("model_type")
    attention_bias, mlp_bias = bool(config.get("attention_bias")), bool(config.get("mlp_bias"))
    own = family in ("llama", "qwen3", "smollm3", "unknown")
    return (family, family == "qwen2" or (own and attention_bias), own and attention_bias,
            family in ("llama", "smollm3", "unknown") and mlp_bias)


def hf_tensors(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, tied,
               family="llama", qkv_bias=False, o_bias=False, mlp_bias=False):
    """[(HF name, shape, kind)] in the order HF's modules list them. kind: "weight", "norm",
    "bias", "q" / "k" (a query or key projection: qk_scale applies), "qkv" (Phi-3's fused one:
    qk_scale applies to its q and k rows)."""
    hd = head_dim or dim // n_heads
    t = [("model.embed_tokens.weight", (vocab_size, dim), "weight")]

    def linear(name, shape, kind, bias):
        return [(name + ".weight", shape, kind)] + ([(name + ".bias", shape[:1], "bias")] if bias else [])

    norm = "gemma_norm" if family == "gemma3_text" else "norm"  # Gemma's norms scale by 1 + w
    for l in range(n_layers):
        p = f"model.layers.{l}."
        if family == "phi3":
            t += linear(p + "self_attn.qkv_proj", ((n_heads + 2 * n_kv_heads) * hd, dim), "qkv", False)
        else:
            t += (linear(p + "self_attn.q_proj", (n_heads * hd, dim), "q", qkv_bias)
                  + linear(p + "self_attn.k_proj", (n_kv_heads * hd, dim), "k", qkv_bias)
                  + linear(p + "self_attn.v_proj", (n_kv_heads * hd, dim), "weight", qkv_bias))
        t += linear(p + "self_attn.o_proj", (dim, n_heads * hd), "weight", o_bias)
        if family in ("qwen3", "gemma3_text"):
            t += [(p + "self_attn.q_norm.weight", (hd,), norm), (p + "self_attn.k_norm.weight", (hd,), norm)]
        if family == "phi3":
            t += linear(p + "mlp.gate_up_proj", (2 * hidden_dim, dim), "weight", False)
        else:
            t += (linear(p + "mlp.gate_proj", (hidden_dim, dim), "weight", mlp_bias)
                  + linear(p + "mlp.up_proj", (hidden_dim, dim), "weight", mlp_bias))
        t += linear(p + "mlp.down_proj", (dim, hidden_dim), "weight", mlp_bias)
        t += [(p + "input_layernorm.weight", (dim,), norm),
              (p + "post_attention_layernorm.weight", (dim,), norm)]
        if family == "gemma3_text":
            t += [(p + "pre_feedforward_layernorm.weight", (dim,), norm),
                  (p + "post_feedforward_layernorm.weight", (dim,), norm)]
    t.append(("model.norm.weight", (dim,), norm))
    if not tied:
        t.append(("lm_head.weight", (vocab_size, dim), "weight"))
    return t


def random_tensor(shape, kind, index, seed, std, exact, qk_scale=1.0, qk_rows=0):
    """float32 torch tensor; the same for a given (seed, index) whatever else is generated.
    kind as hf_tensors; qk_rows: how many leading rows of a "qkv" tensor are q and k."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if kind == "norm":
        x = x.mul_(0.1).add_(1.0)
    elif kind == "gemma_norm":  # the norm scales by 1 + w
        x = x.mul_(0.1)
    elif kind == "bias":
        x = x.mul_(BIAS_STD)
    else:
        x = x.mul_(std)
        if kind in ("q", "k"):
            x = x.mul_(qk_scale)
        elif kind == "qkv":
            x[:qk_rows] *= qk_scale
    if exact:  # bfloat16 precision, and nothing f16 could only hold as a subnormal
        x = x.to(torch.bfloat16).to(torch.float32)
        x[x.abs() < 2.0 ** -14] = 0.0
    return x


def stored_bits(x, dtype):
    """float32 torch tensor -> numpy array holding its bytes in `dtype` (F32, F16 or BF16)."""
    if dtype == "BF16":  # numpy has no bfloat16: hand over its 16 bits
        return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return x.to(DTYPES[dtype]).numpy()


def split_shards(specs, n_shards):
    """Cut the tensor list into n_shards consecutive runs of about equal bytes."""
    sizes = [math.prod(shape) for _, shape, _ in specs]
    target, shards, current, acc = sum(sizes) / n_shards, [], [], 0
    for spec, size in zip(specs, sizes):
        current.append(spec)
        acc += size
        if acc >= target * (len(shards) + 1) and len(shards) < n_shards - 1:
            shards.append(current)
            current = []
    if current:
        shards.append(current)
    return shards


def rope_config(family, config_format, rope_theta, rope_scaling, partial_rotary_factor, max_pos):
    """The RoPE keys of config.json in the form asked for, from a v4-style rope_scaling dict (or None).
    v4: rope_theta and rope_scaling at the top level (and partial_rotary_factor); v5: rope_parameters
    = {rope_type, rope_theta, the scaling keys}, as transformers 5's `standardize_rope_params` leaves
    it (partial_rotary_factor moved in; original_max_position_embeddings filled in for llama3, yarn
    and longrope). Phi-3 keeps original_max_position_embeddings (and partial_rotary_factor) at the
    top level in both, as its config class has them (configuration_phi3.py)."""
    scaling = dict(rope_scaling) if rope_scaling else None
    out = {}
    if family == "phi3":
        out["original_max_position_embeddings"] = (scaling or {}).pop("original_max_position_embeddings", max_pos)
        if partial_rotary_factor is not None:
            out["partial_rotary_factor"] = partial_rotary_factor
    if config_format == "v4":
        out.update(rope_theta=rope_theta, rope_scaling=scaling)
        if partial_rotary_factor is not None:
            out["partial_rotary_factor"] = partial_rotary_factor
        return out
    params = dict(scaling or {})
    params["rope_type"] = params.pop("type", params.get("rope_type", "default"))
    params["rope_theta"] = rope_theta
    if partial_rotary_factor is not None:
        params["partial_rotary_factor"] = partial_rotary_factor
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        params.setdefault("original_max_position_embeddings", out.get("original_max_position_embeddings", max_pos))
    out["rope_parameters"] = dict(sorted(params.items()))
    return out


def derived_layer_types(config):
    """The layer_types transformers 5 derives when config.json has none, and saves (Qwen2 / Qwen3:
    sliding from max_window_layers on when use_sliding_window; SmolLM3: the NoPE layers when
    use_sliding_window). None for the families whose config has no layer_types."""
    n, family = config["num_hidden_layers"], config.get("model_type")
    window = config.get("sliding_window") if config.get("use_sliding_window") else None
    if family in ("qwen2", "qwen3"):
        return ["sliding_attention" if window is not None and i >= config.get("max_window_layers", 28)
                else "full_attention" for i in range(n)]
    if family == "smollm3":
        return ["sliding_attention" if window is not None and not config["no_rope_layers"][i]
                else "full_attention" for i in range(n)]
    if family == "gemma3_text":
        return ["full_attention" if (i + 1) % config.get("sliding_window_pattern", 6) == 0 else "sliding_attention"
                for i in range(n)]
    return None


def make_checkpoint(out_dir, *, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_pos,
                    head_dim=None, tied=True, dtype="F32", fmt="safetensors", rope_theta=10000.0,
                    rope_scaling=None, seed=0, architecture="LlamaForCausalLM", std=0.02,
                    exact=False, shard_bytes=2 * 10**9, extra_config=None, config_format="v4",
                    attention_bias=False, mlp_bias=False, partial_rotary_factor=None, qk_scale=1.0):
    """Write config.json and random weights into out_dir (created if needed); returns the config.

    fmt: "safetensors" (one model.safetensors), "sharded" (model-0000k-of-0000n.safetensors and
    model.safetensors.index.json), "bin" (pytorch_model.bin), "bin-sharded" (pytorch_model-0000k-
    of-0000n.bin and pytorch_model.bin.index.json). Sharded formats use at least 2 shards, more if
    a shard would exceed shard_bytes. architecture: one of MODEL_TYPES (the family); rope_scaling:
    a v4-style dict ({"rope_type" | "type": ..., "factor": ...}; Phi-3's top-level
    original_max_position_embeddings goes in it too), written in config_format "v4" or "v5" (see
    rope_config). attention_bias, mlp_bias: the config keys and the bias tensors they call for.
    qk_scale: multiplies q_proj and k_proj (Phi-3: the q and k rows of qkv_proj).
    extra_config is merged into config.json last (tests use it to set family keys such as
    sliding_window or no_rope_layers, or to break things); a value of None there deletes the key.
    It never changes which tensors are written. In the v5 form, layer_types is then derived from
    the merged config (derived_layer_types) unless extra_config gives it.
    """
    assert dtype in DTYPES and fmt in FORMATS and config_format in CONFIG_FORMATS, (dtype, fmt, config_format)
    os.makedirs(out_dir, exist_ok=True)
    family = MODEL_TYPES.get(architecture, "unknown")
    hd = head_dim or dim // n_heads
    config = {
        "architectures": [architecture], "model_type": family,
        "hidden_size": dim, "intermediate_size": hidden_dim, "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads,
        "head_dim": hd, "vocab_size": vocab_size,
        "max_position_embeddings": max_pos, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": tied,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": TORCH_DTYPE_NAMES[dtype],
    }
    # The family's own keys, as its config class writes them (its defaults made explicit).
    if family in ("llama", "mistral", "smollm3", "unknown"):
        config.update(attention_bias=attention_bias, mlp_bias=mlp_bias)
    elif family == "qwen3":
        config.update(attention_bias=attention_bias)
    elif attention_bias or mlp_bias:
        raise ValueError(f"{architecture} has no attention_bias / mlp_bias keys")
    if family in ("qwen2", "qwen3"):
        config.update(use_sliding_window=False, sliding_window=None, max_window_layers=28)
    elif family == "smollm3":
        config.update(no_rope_layers=[int((i + 1) % 4 != 0) for i in range(n_layers)], no_rope_layer_interval=4,
                      use_sliding_window=False, sliding_window=None)
    elif family == "phi3":
        config.update(sliding_window=None)
    elif family == "gemma3_text":  # configuration_gemma3.py's keys, as google/gemma-3-1b-pt writes them
        del config["hidden_act"]
        config.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=hd, sliding_window=512,
                      sliding_window_pattern=6, rope_local_base_freq=10000.0, attn_logit_softcapping=None,
                      final_logit_softcapping=None, rms_norm_eps=1e-6)
    config.update(rope_config(family, config_format, rope_theta, rope_scaling, partial_rotary_factor, max_pos))
    for k, v in (extra_config or {}).items():
        if v is None:
            config.pop(k, None)
        else:
            config[k] = v
    if config_format == "v5" and "layer_types" not in (extra_config or {}) and derived_layer_types(config):
        config["layer_types"] = derived_layer_types(config)
    if config_format == "v5" and family == "gemma3_text":  # a RoPE per layer type (configuration_gemma3.py)
        config.pop("sliding_window_pattern", None)
        config["rope_parameters"] = {"full_attention": config["rope_parameters"], "sliding_attention": {
            "rope_type": "default", "rope_theta": config.pop("rope_local_base_freq")}}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    _, qkv_bias, o_bias, mlp_bias = tensor_layout(dict(model_type=family, attention_bias=attention_bias,
                                                       mlp_bias=mlp_bias))
    specs = hf_tensors(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, tied,
                       family, qkv_bias, o_bias, mlp_bias)
    index_of = {name: i for i, (name, _, _) in enumerate(specs)}
    make = lambda name, shape, kind: random_tensor(shape, kind, index_of[name], seed, std, exact,  # noqa: E731
                                                   qk_scale, (n_heads + n_kv_heads) * hd)
    itemsize = 4 if dtype == "F32" else 2
    total = sum(math.prod(shape) for _, shape, _ in specs) * itemsize
    n_shards = 1 if fmt in ("safetensors", "bin") else max(2, math.ceil(total / shard_bytes))
    shards = split_shards(specs, n_shards)
    bin_format = fmt.startswith("bin")
    stem, ext = ("pytorch_model", "bin") if bin_format else ("model", "safetensors")
    weight_map = {}
    for k, shard in enumerate(shards):
        fname = f"{stem}.{ext}" if n_shards == 1 else f"{stem}-{k + 1:05d}-of-{n_shards:05d}.{ext}"
        path = os.path.join(out_dir, fname)
        if bin_format:  # a pickle is written whole: one shard in memory at a time
            torch.save({name: make(name, shape, kind).to(DTYPES[dtype]) for name, shape, kind in shard}, path)
        else:  # each tensor is generated when the writer reaches it
            produce = lambda name, shape, kind: stored_bits(make(name, shape, kind), dtype)  # noqa: E731
            tensors = {name: Raw(dtype, shape, functools.partial(produce, name, shape, kind))
                       for name, shape, kind in shard}
            save_file(path, tensors, metadata={"format": "pt"})
        weight_map.update({name: fname for name, _, _ in shard})
    if n_shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with open(os.path.join(out_dir, f"{stem}.{ext}.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    return config


def main():
    ap = argparse.ArgumentParser(description="Write a random Hugging Face Llama-family checkpoint directory.")
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="a benchmark shape; flags below override it")
    ap.add_argument("--dim", type=int)
    ap.add_argument("--hidden-dim", type=int)
    ap.add_argument("--layers", type=int, dest="n_layers")
    ap.add_argument("--heads", type=int, dest="n_heads")
    ap.add_argument("--kv-heads", type=int, dest="n_kv_heads")
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--vocab", type=int, dest="vocab_size")
    ap.add_argument("--max-pos", type=int)
    ap.add_argument("--tied", action=argparse.BooleanOptionalAction, default=None,
                    help="share the classifier with the embedding (--no-tied: write lm_head.weight); "
                         "default: the preset's, else tied")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="F32")
    ap.add_argument("--fmt", choices=FORMATS, default="safetensors")
    ap.add_argument("--rope-theta", type=float, help="default: the preset's, else 10000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=sorted(MODEL_TYPES), help="the family; default: the preset's, else Llama")
    ap.add_argument("--config-format", choices=CONFIG_FORMATS, default="v4",
                    help="config.json as transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters) writes it")
    ap.add_argument("--qk-scale", type=float, default=1.0, help="multiply the q and k projections")
    args = ap.parse_args()
    shape = dict(PRESETS.get(args.preset, {}))
    for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_pos",
              "tied"):
        if getattr(args, k) is not None:
            shape[k] = getattr(args, k)
    shape.setdefault("n_kv_heads", shape.get("n_heads"))
    shape.setdefault("max_pos", 2048)
    shape.setdefault("tied", True)
    preset_arch, preset_theta = shape.pop("architecture", "LlamaForCausalLM"), shape.pop("rope_theta", 10000.0)
    arch, theta = args.arch or preset_arch, args.rope_theta or preset_theta
    missing = [k for k in ("dim", "hidden_dim", "n_layers", "n_heads", "vocab_size") if shape.get(k) is None]
    if missing:
        ap.error(f"give --preset or all of --dim --hidden-dim --layers --heads --vocab (missing {missing})")
    t0 = time.monotonic()
    make_checkpoint(args.out_dir, **shape, dtype=args.dtype, fmt=args.fmt, rope_theta=theta,
                    seed=args.seed, architecture=arch, config_format=args.config_format, qk_scale=args.qk_scale)
    n = sum(math.prod(s) for _, s, _ in hf_tensors(shape["dim"], shape["hidden_dim"], shape["n_layers"],
            shape["n_heads"], shape["n_kv_heads"], shape["vocab_size"], shape.get("head_dim"),
            shape["tied"], MODEL_TYPES[arch], MODEL_TYPES[arch] == "qwen2"))
    print(f"wrote {args.out_dir}: {n:,} params, {args.dtype}, {args.fmt}, "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
