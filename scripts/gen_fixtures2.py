# Checkpoints of the per-layer-attention families made and run by real transformers (random weights), for
# comparing the exporter and forward pass with the library itself (data/families2-hf/ was made by this, seed 3,
# transformers 5.17.0, torch 2.11; Cohere2 and Gemma 4 not kept). Needs transformers 5.x, torch, numpy.
# usage: python3 scripts/gen_fixtures2.py TOKENIZER.model OUTDIR SEED
#   OUTDIR/CASE/{config.json, model.safetensors (BF16), tokenizer.model, ids.bin, rows.bin, logits.bin, meta.json}
import json, os, shutil, sys, traceback
import numpy as np, torch, transformers
from transformers import AutoModelForCausalLM

TOK, OUT, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(OUT, exist_ok=True)
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
V, L = 512, 256
H = SEED == 7  # the hidden set is a little larger
BASE = dict(hidden_size=128 if H else 64, intermediate_size=256 if H else 160, num_hidden_layers=4,
            num_attention_heads=4 if H else 2, num_key_value_heads=2 if H else 1, head_dim=32,
            vocab_size=V, max_position_embeddings=L, rms_norm_eps=1e-6, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)
S, F = "sliding_attention", "full_attention"


def rope_of(c):
    return getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None)


def set_rope(c, per_type):
    """per_type: {layer_type or None: dict of rope keys}; merged into rope_parameters as the config keeps it."""
    rp = getattr(c, "rope_parameters", None)
    for lt, kv in per_type.items():
        if isinstance(rp, dict) and lt in rp and isinstance(rp[lt], dict):
            rp[lt].update(kv)
        elif isinstance(rp, dict) and lt is None:
            rp.update(kv)
        elif isinstance(rp, dict) and lt is not None and (S in rp or F in rp):
            rp[lt] = dict(kv)
        else:
            raise RuntimeError(f"cannot place rope keys for {lt}: rope_parameters={rp}")


def make(cls_name, over, rope=None, drop=()):
    C = getattr(transformers, cls_name)
    kw = dict(BASE, **over)
    for k in drop: kw.pop(k, None)
    c = C(**kw)
    if rope: set_rope(c, rope)
    return c


def perturb(m, g):
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            elif "norm" in n or "layernorm" in n:
                p.copy_(p + torch.randn(p.shape, generator=g) * 0.1)
            elif any(s in n for s in ("q_proj", "k_proj", "qkv_proj")):
                p.mul_(6.0)
            elif "sinks" in n:
                p.copy_(torch.randn(p.shape, generator=g))


LT4 = [S, S, S, F]
CASES = [
    # Gemma 2: alternating window/global, attention and final softcapping, query_pre_attn_scalar != head_dim, GeGLU, 4 norms
    ("gemma2-softcap", "Gemma2Config", dict(sliding_window=64, query_pre_attn_scalar=24, attn_logit_softcapping=50.0,
                                             final_logit_softcapping=30.0, layer_types=[S, F, S, F]), None, 300),
    # Gemma 3: local layers theta 10k, global 1M with linear x8 (the 4B+ recipe), q/k norm, window 64, 3:1 pattern
    ("gemma3-linear-global", "Gemma3TextConfig", dict(sliding_window=64, query_pre_attn_scalar=32, layer_types=LT4),
     {F: dict(rope_type="linear", factor=8.0, rope_theta=1e6), S: dict(rope_type="default", rope_theta=1e4)}, 1024),
    # Gemma 3 270M/1B recipe: no scaling, two bases
    ("gemma3-two-bases", "Gemma3TextConfig", dict(sliding_window=32, query_pre_attn_scalar=32, layer_types=[S, F, S, S],
                                                  tie_word_embeddings=True),
     {F: dict(rope_type="default", rope_theta=1e6), S: dict(rope_type="default", rope_theta=1e4)}, 400),
    # Ministral 3: YaRN x4 plus the position-dependent query scale (llama_4_scaling_beta)
    ("ministral3-yarn-beta", "Ministral3Config", dict(),
     {None: dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=L, rope_theta=1e6, beta_fast=32.0,
                 beta_slow=1.0, llama_4_scaling_beta=0.1)}, 1024),
    # OLMo 2: q/k norm over the whole projection, norms after attention and MLP (no pre-norm)
    ("olmo2-postnorm", "Olmo2Config", dict(), None, 300),
    # OLMo 3: 3:1 sliding window, YaRN on the full-attention layers only
    ("olmo3-swa-yarn", "Olmo3Config", dict(sliding_window=64, layer_types=LT4),
     {F: dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=L, rope_theta=5e5),
      S: dict(rope_type="default", rope_theta=5e5)}, 1024),
    # EXAONE 4 (32B recipe): local layers RoPE with a window, global layers NoPE; q/k norm; post-norms
    ("exaone4-global-nope", "Exaone4Config", dict(sliding_window=64, sliding_window_pattern="LLLG", layer_types=LT4), None, 300),
    # GLM-4: partial rotary 0.5 with interleaved pairs, fused gate_up, post-norms
    ("glm4-partial-interleaved", "Glm4Config", dict(partial_rotary_factor=0.5, attention_bias=True), None, 300),
    # Granite 3: muP multipliers (embedding, attention, residual, logits scaling)
    ("granite-mup", "GraniteConfig", dict(embedding_multiplier=12.0, attention_multiplier=0.05, residual_multiplier=0.22,
                                          logits_scaling=8.0), None, 300),
    # Cohere2 (R7B recipe): windowed RoPE layers, NoPE global layers, LayerNorm, parallel block, logit scale
    ("cohere2-swa-nope", "Cohere2Config", dict(sliding_window=64, layer_types=LT4, logit_scale=0.25), None, 300),
    # Gemma 4 text: proportional partial rotary on global layers (p-RoPE), other head_dim there; may need more keys
    ("gemma4-prope", "Gemma4TextConfig", dict(sliding_window=64, layer_types=LT4), None, 300),
]

rng = np.random.default_rng(SEED)
for name, cls, over, rope, n in CASES:
    try:
        g = torch.Generator().manual_seed(SEED * 1000 + sum(map(ord, name)))
        try:
            c = make(cls, over, rope)
        except TypeError as ex:  # an unknown keyword: retry without the shape keys it refused
            bad = [k for k in list(BASE) + list(over) if f"'{k}'" in str(ex)]
            print(f"  {name}: retry without {bad}: {ex}", flush=True)
            c = make(cls, {k: v for k, v in over.items() if k not in bad}, rope, drop=bad)
        m = AutoModelForCausalLM.from_config(c, attn_implementation="eager").float().eval()
        npar = sum(p.numel() for p in m.parameters())
        if npar > 12_000_000: raise RuntimeError(f"{npar} parameters: too big for a fixture (config defaults?)")
        perturb(m, g)
        with torch.no_grad():  # bf16-representable weights: the file is stored in bf16 (half the size), bit for bit
            for p in m.parameters(): p.copy_(p.bfloat16().float())
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        ids = np.concatenate([[1], rng.integers(3, V, n - 1)]).astype(np.int32)
        with torch.no_grad():
            lg = m(torch.tensor(ids[None].astype(np.int64))).logits[0].float().numpy()
        m.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)  # after the f32 forward (inv_freq stays f32 there)
        shutil.copy(TOK, os.path.join(d, "tokenizer.model"))
        rows = np.unique(np.concatenate([np.arange(0, n, 8), np.arange(n - 8, n)])).astype(np.int32)
        ids.tofile(os.path.join(d, "ids.bin")); rows.tofile(os.path.join(d, "rows.bin"))
        lg[rows].astype(np.float32).tofile(os.path.join(d, "logits.bin"))
        cj = json.load(open(os.path.join(d, "config.json")))
        json.dump(dict(case=name, n=int(n), vocab=V, arch=cj.get("architectures"), transformers=transformers.__version__),
                  open(os.path.join(d, "meta.json"), "w"))
        print(f"{name}: ok, {cj.get('architectures')}, n {n}, logits max {np.abs(lg).max():.3f}, "
              f"params {npar}; rope {json.dumps(rope_of(c), default=str)[:300]}; "
              f"layer_types {cj.get('layer_types')}", flush=True)
    except Exception as ex:
        print(f"{name}: ERROR {type(ex).__name__}: {str(ex)[:400]}", flush=True)
        traceback.print_exc(limit=3)
