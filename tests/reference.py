"""reference.py - an independent PyTorch reference of Hugging Face LlamaForCausalLM's forward pass.

What this is: the forward-pass semantics of transformers' LlamaForCausalLM (modeling_llama.py),
written out plainly for one sequence, reading a Hugging Face directory (config.json + weights via
lrun/hf_checkpoint.py), with every RoPE scaling mode of our C program taken from lrun/rope_ref.py.
It runs in float64 by default, so a difference against the float32 C program is the C program's
error alone. Tests use it for logits parity, golden greedy text and perplexity.
What this is not: transformers (not installed here, and none of its code is used), fast, or batched.

Three ways to run a sequence, identical for every mode except dynamic NTK past L (whose base
depends on the current length):
    logits          one forward, all positions with the frequencies of length n (HF prefill);
    logits_growing  row t from a full forward of tokens[0..t] with the base of length t+1;
    logits_cached   one token at a time with a KV cache holding un-rotated keys ("raw", what our
                    model.c does) or rotated ones ("rotated", HF's cache). Even "raw" is not
                    logits_growing: values and deeper layers' keys keep their earlier bases.

    import reference
    m = reference.load("data/stories260K-hf")
    logits = m.logits(ids, rope={"mode": "pi"}, ctx=2048)        # (n, vocab) numpy float64
    text = m.decode(m.generate([m.bos_id], 200))                  # greedy

Where HF deliberately rounds to float32 we do not (documented at each place): RoPE angles are
m * inv_freq in float64 (HF: float32 matmul), RMSNorm and softmax run in float64 when the model
does (HF: always float32). With dtype=torch.float32 the arithmetic is HF's except for the angles.

The forward pass, for tokens x_0 .. x_{n-1} at positions 0 .. n-1 (modeling_llama.py names):
    h = embed_tokens[x]
    per layer:  a = RMSNorm(h) (input_layernorm)
                q, k, v = a Wq^T, a Wk^T, a Wv^T; q, k rotated (rotate_half layout)
                k, v repeated n_heads / n_kv_heads times (repeat_kv)
                h = h + o_proj(softmax(q k^T / sqrt(head_dim) + causal mask) v)
                h = h + down_proj(silu(gate_proj(RMSNorm(h))) * up_proj(RMSNorm(h)))
    logits = RMSNorm(h) (model.norm) lm_head^T   (lm_head = embed_tokens when tied)
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
HF_ROPE_TYPES = {"default": "none", "linear": "pi", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3"}
ROPE_KEYS = ("mode", "factor", "base", "alpha", "orig_ctx", "attn_factor", "beta_fast", "beta_slow",
             "low_freq_factor", "high_freq_factor", "window")


# --- RoPE parameters ---------------------------------------------------------------------------------

def checkpoint_rope(cfg):
    """The checkpoint's own RoPE from config.json, as a dict of ROPE_KEYS (0 = unset/default).

    Reads rope_theta and rope_scaling ({"rope_type"| legacy "type", "factor", ...}) or transformers
    v5's single "rope_parameters" dict. L (orig_ctx) is what HF uses as the trained context:
    original_max_position_embeddings for llama3 and (when present) yarn, else
    max_position_embeddings (HF's linear and dynamic ignore the original_* key; see the TODO in
    `_compute_dynamic_ntk_parameters`). yarn without a factor: max_position_embeddings / original
    (newer `_compute_yarn_parameters`).
    """
    scaling = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = scaling.get("rope_theta", cfg.get("rope_theta")) or 10000.0
    max_pos = cfg["max_position_embeddings"]
    rope = dict(mode="none", factor=1.0, base=float(theta), alpha=0.0, orig_ctx=max_pos, attn_factor=0.0,
                beta_fast=0.0, beta_slow=0.0, low_freq_factor=0.0, high_freq_factor=0.0, window=0)
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type in (None, "default"):
        return rope
    if rope_type not in HF_ROPE_TYPES:
        raise ValueError(f"config.json: rope type {rope_type!r} is not supported by the reference")
    rope["mode"] = HF_ROPE_TYPES[rope_type]
    orig = scaling.get("original_max_position_embeddings")
    if rope_type == "yarn" and scaling.get("factor") is None and orig:
        rope["factor"] = max_pos / orig
    else:
        rope["factor"] = float(scaling["factor"])
    if rope_type == "yarn":
        rope["orig_ctx"] = orig or max_pos
        rope["attn_factor"] = float(scaling.get("attention_factor") or 0.0)
        rope["beta_fast"] = float(scaling.get("beta_fast") or 0.0)
        rope["beta_slow"] = float(scaling.get("beta_slow") or 0.0)
    elif rope_type == "llama3":
        rope["orig_ctx"] = int(orig)
        rope["low_freq_factor"] = float(scaling["low_freq_factor"])
        rope["high_freq_factor"] = float(scaling["high_freq_factor"])
    return rope


def resolve_rope(trained, rope=None, ctx=None):
    """The RoPE parameters of a run: the checkpoint's (`trained`) with the user's overrides on top,
    following rope.h's RopeOverrides / rope_params_resolve:
      mode    the checkpoint's unless given; a different mode starts from that mode's defaults;
      factor  1 for none (giving one is an error); else given, else the checkpoint's own (same
              mode), else ctx / L when ctx > L, else 1;
      base    given, else rope_theta;  alpha  given (ntk only), else 0 = factor;
      window  rerope and leaky-rerope only: W, given, else L // 4 (at least 1); leaky-rerope's
              factor K defaults to (ctx - W) / (L - W) when ctx > L (ctx maps to L), else 1.
    ctx is the run's context (the C program's --ctx); None means L, the trained context.
    Also accepted (tests only; the C command line has no flag for them): orig_ctx, attn_factor,
    beta_fast, beta_slow, low_freq_factor, high_freq_factor. A fully resolved dict passed back in
    resolves to itself. Defaults are filled in as rope_params_check does: yarn beta 32/1,
    llama3 low/high 1/4."""
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
    if out["mode"] in ("none", "rerope") and rope.get("factor") and rope["factor"] != 1:
        raise ValueError("a factor needs a scaling mode other than none and rerope (rope.c)")
    out["alpha"] = float(rope.get("alpha") or 0.0)
    if out["alpha"] and out["mode"] != "ntk":
        raise ValueError("alpha is used only by mode ntk")
    if rope.get("window") and out["mode"] not in ("rerope", "leaky-rerope"):
        raise ValueError("a window is used only by rerope and leaky-rerope")
    out["window"] = (int(rope.get("window") or max(1, L // 4))) if out["mode"] in ("rerope", "leaky-rerope") else 0
    if out["mode"] in ("none", "rerope"):
        out["factor"] = 1.0
    elif rope.get("factor"):
        out["factor"] = float(rope["factor"])
    elif out["mode"] == "leaky-rerope":
        W = out["window"]
        out["factor"] = (ctx - W) / (L - W) if ctx > L and W < L else 1.0
    elif not out["factor"] and out["mode"] == "dynamic":  # alpha(l) = l / L (rope.c rope_params_resolve)
        out["factor"] = 1.0
    elif not out["factor"]:  # a mode the checkpoint does not carry: stretch L to the context
        out["factor"] = ctx / L if ctx > L else 1.0
    for k in ("orig_ctx", "attn_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
        if rope.get(k):
            out[k] = rope[k]
    if out["mode"] == "yarn":
        out["beta_fast"] = out["beta_fast"] or 32.0
        out["beta_slow"] = out["beta_slow"] or 1.0
    if out["mode"] == "llama3":
        out["low_freq_factor"] = out["low_freq_factor"] or 1.0
        out["high_freq_factor"] = out["high_freq_factor"] or 4.0
    if out["factor"] < 1:
        raise ValueError(f"factor {out['factor']} is below 1")
    return out


def rope_tables(p, head_dim, length):
    """(inv_freq (head_dim/2) float64, mscale) for resolved parameters p at sequence length
    `length` (only dynamic looks at it)."""
    return rope_ref.inv_freq(p["mode"], head_dim, p["base"], p["orig_ctx"], p["factor"], alpha=p["alpha"],
                             length=length, beta_fast=p["beta_fast"], beta_slow=p["beta_slow"],
                             low_freq_factor=p["low_freq_factor"], high_freq_factor=p["high_freq_factor"],
                             attn_factor=p["attn_factor"])


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


def relative_scores(q, k, phases):
    """Causal attention scores (H, n, n) of raw (un-rotated) queries q (H, n, hd) against raw keys k
    (H, n, hd), positions 0 .. n-1, each pair rotated by the explicit relative position of the two:
        score(m, n) = (R(rel(m - n) theta) q_m) . k_n / sqrt(hd),
    filled one distance r = m - n at a time (the r-th diagonal below the main one; above it stays 0,
    for the mask): the queries m = r .. n-1, every pair i = (x_i, x_{i+d/2}) of the rotate_half layout
    turned by rel(r) theta_i, dotted with the keys m - r. In the complex view (README, "RoPE, from the
    math to the code") that is Re sum_i q_i[m] e^{i rel(r) theta_i} conj(k_i[m - r]).
    phases: relative_phases, row r for distance r. No absolute position is used."""
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
    return out / math.sqrt(hd)


# --- The model -----------------------------------------------------------------------------------------

def rotate_half(x):
    """modeling_llama.py rotate_half: cat(-x2, x1) over the last axis (halves x1, x2)."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Reference:
    """A Hugging Face Llama directory, loaded whole into torch tensors of `dtype`."""

    def __init__(self, hf_dir, dtype=torch.float64):
        self.dir = hf_dir
        self.dtype = dtype
        # HF does norms and softmax in float32 at least; we keep float64 when the model is float64.
        self.acc = torch.promote_types(dtype, torch.float32)
        with open(os.path.join(hf_dir, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.dim = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv_heads = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = cfg.get("head_dim") or self.dim // self.n_heads
        self.vocab_size = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.seq_len = cfg["max_position_embeddings"]
        self.bos_id = cfg.get("bos_token_id", 1)
        self.eos_id = cfg.get("eos_token_id", 2)
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {cfg['hidden_act']!r}: only silu (SwiGLU) is implemented")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ValueError("attention_bias / mlp_bias checkpoints are not implemented")
        self.trained_rope = checkpoint_rope(cfg)

        ck = Checkpoint(hf_dir)
        names = set(ck.names())

        def w(name):  # (out, in) for matrices, like nn.Linear.weight
            return torch.from_numpy(np.array(ck.get(name))).to(dtype)

        self.embed = w("model.embed_tokens.weight")  # (V, D)
        self.layers = []
        for l in range(self.n_layers):
            p = f"model.layers.{l}."
            self.layers.append({
                "input_layernorm": w(p + "input_layernorm.weight"),                   # (D)
                "q_proj": w(p + "self_attn.q_proj.weight"),                           # (H*hd, D)
                "k_proj": w(p + "self_attn.k_proj.weight"),                           # (KV*hd, D)
                "v_proj": w(p + "self_attn.v_proj.weight"),                           # (KV*hd, D)
                "o_proj": w(p + "self_attn.o_proj.weight"),                           # (D, H*hd)
                "post_attention_layernorm": w(p + "post_attention_layernorm.weight"), # (D)
                "gate_proj": w(p + "mlp.gate_proj.weight"),                           # (F, D)
                "up_proj": w(p + "mlp.up_proj.weight"),                               # (F, D)
                "down_proj": w(p + "mlp.down_proj.weight"),                           # (D, F)
            })
        self.norm = w("model.norm.weight")  # (D)
        tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in names
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

    # --- the forward pass ---
    def rmsnorm(self, x, weight):
        """LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), computed in `acc`, back to dtype, times weight."""
        xf = x.to(self.acc)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * xf.to(self.dtype)

    def forward(self, ids, inv_freq, mscale, logn_L=None, rel=None):
        """Logits (n, V) in dtype for token ids at positions 0 .. n-1 with the given RoPE table; with
        logn_L, log-n attention scaling: queries times max(1, ln(m + 1) / ln(logn_L)) (bojone/rerope);
        with rel (relative_position: ReRoPE), q and k are not rotated by their positions, and the
        scores rotate each pair by rel(m - n) instead (relative_scores)."""
        ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        n, hd, H, KV = ids.shape[0], self.head_dim, self.n_heads, self.n_kv_heads
        # RoPE (LlamaRotaryEmbedding.forward): freqs = m * inv_freq, emb = cat(freqs, freqs), cos and
        # sin times the attention scaling (yarn's m_s). Angles in float64 here, float32 in HF.
        freqs = np.outer(np.arange(n, dtype=np.float64), inv_freq)                 # (n, hd/2)
        emb = torch.from_numpy(np.concatenate([freqs, freqs], axis=-1))             # (n, hd)
        cos = (emb.cos() * mscale).to(self.dtype)                                   # (n, hd)
        sin = (emb.sin() * mscale).to(self.dtype)                                   # (n, hd)
        mask = torch.full((n, n), float("-inf"), dtype=self.acc).triu(1)            # (n, n) causal
        phases = relative_phases(rel, inv_freq, n) if rel is not None else None     # (n, hd/2) ReRoPE

        x = self.embed[ids]                                                         # (n, D)
        for lw in self.layers:
            a = self.rmsnorm(x, lw["input_layernorm"])                              # (n, D)
            q = (a @ lw["q_proj"].T).view(n, H, hd).transpose(0, 1)                 # (H, n, hd)
            k = (a @ lw["k_proj"].T).view(n, KV, hd).transpose(0, 1)                # (KV, n, hd)
            v = (a @ lw["v_proj"].T).view(n, KV, hd).transpose(0, 1)                # (KV, n, hd)
            # apply_rotary_pos_emb: q*cos + rotate_half(q)*sin (pair i = (x[i], x[i+hd/2]))
            if rel is None:
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            if logn_L:  # per position m: max(1, ln(m + 1) / ln(L)), a rotation commutes with it
                grow = np.maximum(1.0, np.log(np.arange(1, n + 1, dtype=np.float64)) / math.log(logn_L))
                q = q * torch.from_numpy(grow).to(self.dtype)[None, :, None]
            # repeat_kv: query head h reads kv head h // (H/KV)
            k = k.repeat_interleave(H // KV, dim=0)                                 # (H, n, hd)
            v = v.repeat_interleave(H // KV, dim=0)                                 # (H, n, hd)
            out = torch.empty(H, n, hd, dtype=self.dtype)
            step = max(1, (1 << 23) // max(1, H * n))  # query rows per block: ~64 MB of scores
            scores = relative_scores(q, k, phases).to(self.dtype) if rel is not None else None  # (H, n, n)
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                if rel is None:
                    s = (q[:, r0:r1] @ k.transpose(1, 2)) / math.sqrt(hd)          # (H, r, n)
                else:
                    s = scores[:, r0:r1]
                s = s.to(self.acc) + mask[r0:r1]
                out[:, r0:r1] = torch.softmax(s, dim=-1).to(self.dtype) @ v         # (H, r, hd)
            o = out.transpose(0, 1).reshape(n, H * hd)                              # (n, H*hd)
            x = x + o @ lw["o_proj"].T                                              # (n, D)
            a = self.rmsnorm(x, lw["post_attention_layernorm"])                     # (n, D)
            g = torch.nn.functional.silu(a @ lw["gate_proj"].T) * (a @ lw["up_proj"].T)  # (n, F)
            x = x + g @ lw["down_proj"].T                                           # (n, D)
        x = self.rmsnorm(x, self.norm)                                              # (n, D)
        return x @ self.lm_head.T                                                   # (n, V)

    @torch.no_grad()
    def logits(self, token_ids, rope=None, ctx=None, logn=False):
        """(n, V) float64 numpy logits of one forward pass over token_ids. All positions use the
        frequencies for sequence length n, as HF's single prefill does (matters only for dynamic).
        logn: log-n attention scaling past the trained context (run's --attn-logn)."""
        p = self.resolve_rope(rope, ctx)
        inv, ms = rope_tables(p, self.head_dim, len(token_ids))
        return self.forward(token_ids, inv, ms, p["orig_ctx"] if logn else None,
                            relative_position(p)).to(torch.float64).numpy()

    @torch.no_grad()
    def logits_growing(self, token_ids, rope=None, ctx=None):
        """(n, V) logits where row t comes from a full forward of tokens[0..t] with the frequencies
        for length t+1: dynamic NTK with every hidden state of every earlier token recomputed with
        the current base (HF without a cache). A KV cache, even of un-rotated keys, does not give
        this past the first layer (see logits_cached). For the other modes this equals logits().
        Cost: one forward per position past L (O(n^3) work; tiny models only: about 4 minutes for
        stories260K at n = 1024, L = 512). Lengths up to L all share the unscaled frequencies, so
        those rows come from one forward."""
        p = self.resolve_rope(rope, ctx)
        n = len(token_ids)
        if p["mode"] != "dynamic":
            return self.logits(token_ids, p, ctx)
        L = p["orig_ctx"]
        out = np.empty((n, self.vocab_size))
        head = min(n, L)
        inv, ms = rope_tables(p, self.head_dim, head)
        out[:head] = self.forward(token_ids[:head], inv, ms).to(torch.float64).numpy()
        for t in range(head, n):
            inv, ms = rope_tables(p, self.head_dim, t + 1)
            out[t] = self.forward(token_ids[: t + 1], inv, ms)[-1].to(torch.float64).numpy()
        return out

    @torch.no_grad()
    def logits_cached(self, token_ids, rope=None, ctx=None, keys="raw"):
        """(n, V) logits of token-by-token decoding with a KV cache, the RoPE length set to t+1
        before token t (as generation does). Differs from logits() only for dynamic, where the
        result depends on what the cache holds:
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
            step = lambda: self.forward(ids, *rope_tables(p, self.head_dim, len(ids)))[-1]  # noqa: E731
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
    that computed them. The same arithmetic as Reference.forward, with the past read from the cache."""

    def __init__(self, model, p, n_max, keys="raw"):
        if keys not in ("raw", "rotated"):
            raise ValueError("keys must be 'raw' or 'rotated'")
        if relative_position(p) is not None:
            raise ValueError("the Decoder rotates by absolute positions; rerope modes: use logits()")
        m = self.m = model
        self.p, self.keys, self.pos = p, keys, 0
        self.k = [torch.zeros(m.n_kv_heads, n_max, m.head_dim, dtype=m.dtype) for _ in m.layers]  # (KV, n_max, hd)
        self.v = [torch.zeros(m.n_kv_heads, n_max, m.head_dim, dtype=m.dtype) for _ in m.layers]  # (KV, n_max, hd)

    @torch.no_grad()
    def feed(self, ids):
        m, hd, H, KV = self.m, self.m.head_dim, self.m.n_heads, self.m.n_kv_heads
        t0, t1 = self.pos, self.pos + len(ids)
        inv, ms = rope_tables(self.p, hd, t1)
        freqs = np.outer(np.arange(t1, dtype=np.float64), inv)                     # (t1, hd/2)
        emb = torch.from_numpy(np.concatenate([freqs, freqs], axis=-1))             # (t1, hd)
        cos, sin = (emb.cos() * ms).to(m.dtype), (emb.sin() * ms).to(m.dtype)       # (t1, hd)
        mask = torch.full((t1, t1), float("-inf"), dtype=m.acc).triu(1)[t0:t1]      # (b, t1)
        x = m.embed[torch.as_tensor(np.asarray(ids, dtype=np.int64))]              # (b, D)
        b = len(ids)
        for lw, kc, vc in zip(m.layers, self.k, self.v):
            a = m.rmsnorm(x, lw["input_layernorm"])                                 # (b, D)
            q = (a @ lw["q_proj"].T).view(b, H, hd).transpose(0, 1)                # (H, b, hd)
            k = (a @ lw["k_proj"].T).view(b, KV, hd).transpose(0, 1)               # (KV, b, hd)
            vc[:, t0:t1] = (a @ lw["v_proj"].T).view(b, KV, hd).transpose(0, 1)
            q = q * cos[t0:t1] + rotate_half(q) * sin[t0:t1]
            if self.keys == "raw":
                kc[:, t0:t1] = k
                kk = kc[:, :t1] * cos + rotate_half(kc[:, :t1]) * sin               # (KV, t1, hd)
            else:
                kc[:, t0:t1] = k * cos[t0:t1] + rotate_half(k) * sin[t0:t1]
                kk = kc[:, :t1]                                                     # (KV, t1, hd)
            kk = kk.repeat_interleave(H // KV, dim=0)                               # (H, t1, hd)
            vv = vc[:, :t1].repeat_interleave(H // KV, dim=0)                       # (H, t1, hd)
            s = (q @ kk.transpose(1, 2)) / math.sqrt(hd)                            # (H, b, t1)
            o = torch.softmax(s.to(m.acc) + mask, dim=-1).to(m.dtype) @ vv          # (H, b, hd)
            x = x + o.transpose(0, 1).reshape(b, H * hd) @ lw["o_proj"].T           # (b, D)
            a = m.rmsnorm(x, lw["post_attention_layernorm"])
            x = x + (torch.nn.functional.silu(a @ lw["gate_proj"].T) * (a @ lw["up_proj"].T)) @ lw["down_proj"].T
        self.pos = t1
        return (m.rmsnorm(x, m.norm) @ m.lm_head.T).to(torch.float64).numpy()      # (b, V)


def load(hf_dir, dtype=torch.float64):
    """Load a Hugging Face Llama directory (config.json, weights, optional tokenizer.model)."""
    return Reference(hf_dir, dtype)


# --- command line (for looking, not for tests) -----------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="Hugging Face Llama semantics in PyTorch (float64).")
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
