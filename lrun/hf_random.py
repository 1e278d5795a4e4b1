"""hf_random.py - write random Hugging Face Llama checkpoint directories for tests and benchmarks.

What this is: config.json plus weights with Hugging Face's tensor names and shapes (q_proj/k_proj
rows are whatever HF would hold, i.e. the rotate_half layout: random numbers have no layout, but the
exporter treats them as such) in any of the four ways HF stores them: model.safetensors, sharded
safetensors with an index, pytorch_model.bin, sharded .bin with an index. Tensors are produced one
at a time, so a 1.1B-parameter safetensors checkpoint never sits in memory whole.
What this is not: a trained model. The numbers are N(0, std^2) (norm weights 1 + N(0, 0.1^2)), so
a forward pass stays finite but produces no meaningful text.

Each tensor has its own random generator seeded from (seed, position in the model), so the same
seed gives the same numbers in every dtype and file layout. With exact=True they are also rounded
to values that F32, F16 and BF16 all represent exactly (bfloat16 precision, no f16 subnormals),
so every dtype exports to the same float32 bits.

From the repository root:
    /usr/bin/python3 -m lrun.hf_random OUT_DIR --preset 110m [--dtype F16] [--fmt sharded]
    /usr/bin/python3 -m lrun.hf_random OUT_DIR --dim 288 --hidden-dim 768 --layers 6 --heads 6 --vocab 32000
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
MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}

# Benchmark shapes: Karpathy's stories110M (Llama 2 tokenizer) and TinyLlama-1.1B (GQA 32/4).
PRESETS = {
    "110m": dict(dim=768, hidden_dim=2048, n_layers=12, n_heads=12, n_kv_heads=12,
                 vocab_size=32000, max_pos=1024, tied=True),
    "tinyllama": dict(dim=2048, hidden_dim=5632, n_layers=22, n_heads=32, n_kv_heads=4,
                      vocab_size=32000, max_pos=2048, tied=False),
}


def hf_tensors(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, tied):
    """[(HF name, shape, is_norm)] in the order HF's modules list them."""
    hd = head_dim or dim // n_heads
    t = [("model.embed_tokens.weight", (vocab_size, dim), False)]
    for l in range(n_layers):
        p = f"model.layers.{l}."
        t += [(p + "self_attn.q_proj.weight", (n_heads * hd, dim), False),
              (p + "self_attn.k_proj.weight", (n_kv_heads * hd, dim), False),
              (p + "self_attn.v_proj.weight", (n_kv_heads * hd, dim), False),
              (p + "self_attn.o_proj.weight", (dim, n_heads * hd), False),
              (p + "mlp.gate_proj.weight", (hidden_dim, dim), False),
              (p + "mlp.up_proj.weight", (hidden_dim, dim), False),
              (p + "mlp.down_proj.weight", (dim, hidden_dim), False),
              (p + "input_layernorm.weight", (dim,), True),
              (p + "post_attention_layernorm.weight", (dim,), True)]
    t.append(("model.norm.weight", (dim,), True))
    if not tied:
        t.append(("lm_head.weight", (vocab_size, dim), False))
    return t


def random_tensor(shape, is_norm, index, seed, std, exact):
    """float32 torch tensor; the same for a given (seed, index) whatever else is generated."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    x = x.mul_(0.1).add_(1.0) if is_norm else x.mul_(std)
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


def make_checkpoint(out_dir, *, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_pos,
                    head_dim=None, tied=True, dtype="F32", fmt="safetensors", rope_theta=10000.0,
                    rope_scaling=None, seed=0, architecture="LlamaForCausalLM", std=0.02,
                    exact=False, shard_bytes=2 * 10**9, extra_config=None):
    """Write config.json and random weights into out_dir (created if needed); returns the config.

    fmt: "safetensors" (one model.safetensors), "sharded" (model-0000k-of-0000n.safetensors and
    model.safetensors.index.json), "bin" (pytorch_model.bin), "bin-sharded" (pytorch_model-0000k-
    of-0000n.bin and pytorch_model.bin.index.json). Sharded formats use at least 2 shards, more if
    a shard would exceed shard_bytes. extra_config is merged into config.json last (tests use it to
    break things); a value of None there deletes the key.
    """
    assert dtype in DTYPES and fmt in FORMATS, (dtype, fmt)
    os.makedirs(out_dir, exist_ok=True)
    config = {
        "architectures": [architecture], "model_type": MODEL_TYPES.get(architecture, "unknown"),
        "hidden_size": dim, "intermediate_size": hidden_dim, "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads,
        "head_dim": head_dim or dim // n_heads, "vocab_size": vocab_size,
        "max_position_embeddings": max_pos, "rms_norm_eps": 1e-5, "rope_theta": rope_theta,
        "rope_scaling": rope_scaling, "hidden_act": "silu", "tie_word_embeddings": tied,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": TORCH_DTYPE_NAMES[dtype],
        "attention_bias": False, "mlp_bias": False,
    }
    for k, v in (extra_config or {}).items():
        if v is None:
            config.pop(k, None)
        else:
            config[k] = v
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    specs = hf_tensors(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, tied)
    index_of = {name: i for i, (name, _, _) in enumerate(specs)}
    make = lambda name, shape, is_norm: random_tensor(shape, is_norm, index_of[name], seed, std, exact)
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
            torch.save({name: make(name, shape, norm).to(DTYPES[dtype]) for name, shape, norm in shard}, path)
        else:  # each tensor is generated when the writer reaches it
            produce = lambda name, shape, norm: stored_bits(make(name, shape, norm), dtype)
            tensors = {name: Raw(dtype, shape, functools.partial(produce, name, shape, norm))
                       for name, shape, norm in shard}
            save_file(path, tensors, metadata={"format": "pt"})
        weight_map.update({name: fname for name, _, _ in shard})
    if n_shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with open(os.path.join(out_dir, f"{stem}.{ext}.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    return config


def main():
    ap = argparse.ArgumentParser(description="Write a random Hugging Face Llama checkpoint directory.")
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
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    shape = dict(PRESETS.get(args.preset, {}))
    for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_pos",
              "tied"):
        if getattr(args, k) is not None:
            shape[k] = getattr(args, k)
    shape.setdefault("n_kv_heads", shape.get("n_heads"))
    shape.setdefault("max_pos", 2048)
    shape.setdefault("tied", True)
    missing = [k for k in ("dim", "hidden_dim", "n_layers", "n_heads", "vocab_size") if shape.get(k) is None]
    if missing:
        ap.error(f"give --preset or all of --dim --hidden-dim --layers --heads --vocab (missing {missing})")
    t0 = time.monotonic()
    make_checkpoint(args.out_dir, **shape, dtype=args.dtype, fmt=args.fmt,
                    rope_theta=args.rope_theta, seed=args.seed)
    n = sum(math.prod(s) for _, s, _ in hf_tensors(shape["dim"], shape["hidden_dim"], shape["n_layers"],
            shape["n_heads"], shape["n_kv_heads"], shape["vocab_size"], shape.get("head_dim"),
            shape["tied"]))
    print(f"wrote {args.out_dir}: {n:,} params, {args.dtype}, {args.fmt}, "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
