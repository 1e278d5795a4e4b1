"""gguf_file.py - a GGUF file (llama.cpp's format: its docs/gguf.md) read in Python, once, from the
format's definition: the metadata and where each tensor's bytes are. No code is shared with gguf.c, so
the tests that check ./run's reading of a GGUF file against this one check two readers.

What this is: read_gguf; the sizes of the ggml types the program runs (GGML_SIZES, for bench/versus.py,
which counts the bytes a decode step reads); dequantize, each of those types to float64 from its block
definition (tests/test_gguf.py's reference); and GgufCheckpoint, a GGUF file as the Hugging Face
checkpoint llama.cpp's converter made it from (its config.json and its tensors by their names), which is
how export/export.py reads one. What this is not: a checker of hostile files (gguf.c is, for ./run;
this one trusts the file's structure and asserts only the magic and the version).
"""
import math
import mmap
import struct

import numpy as np

from lrun.hf_checkpoint import CheckpointError

# Metadata value types (gguf.h) with a fixed size: their struct codes. 8 is a string, 9 an array.
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

# ggml's (values per block, bytes per block) of the tensor types ./run reads (ggml-common.h's block
# structs): F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16.
GGML_SIZES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210),
              30: (1, 2)}


def read_gguf(path):
    """(metadata {key: value}, tensors {name: (ggml type, ne, data)}) of a GGUF v2/v3 file; data is
    a view of the mapped file from the tensor's first byte to the file's end (no copy)."""
    with open(path, "rb") as f:
        raw = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    at = 0

    def take(fmt):
        nonlocal at
        v = struct.unpack_from(fmt, raw, at)[0]
        at += struct.calcsize(fmt)
        return v

    def string():
        nonlocal at
        n = take("<Q")
        at += n
        return bytes(raw[at - n:at]).decode("utf-8", "surrogateescape")

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            elem, count = take("<I"), take("<Q")
            return [value(elem) for _ in range(count)]
        return take(SCALARS[t])

    assert raw[:4] == b"GGUF" and take("<4s") and take("<I") in (2, 3)
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name, dims = string(), take("<I")
        ne = [take("<Q") for _ in range(dims)]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    start = (at + align - 1) // align * align
    return meta, {name: (kind, ne, raw[start + off:]) for name, ne, kind, off in infos}


def tensor_bytes(kind, ne):
    """The bytes of a tensor of ggml type kind and dimensions ne (rows of whole blocks)."""
    n = 1
    for d in ne:
        n *= d
    block, nbytes = GGML_SIZES[kind]
    return n // block * nbytes


def dequantize(kind, ne, data, control=False):
    """A tensor's values as float64, shape (ne[1], ne[0]) or (ne[0],). control: K-quants read with
    their nibbles swapped (a wrong layout the comparison must see)."""
    n = int(np.prod(ne))
    if kind == 0:    # F32
        x = np.frombuffer(data, "<f4", n)
    elif kind == 1:  # F16
        x = np.frombuffer(data, "<f2", n)
    elif kind == 30:  # BF16: the top half of a float32
        x = (np.frombuffer(data, "<u2", n).astype(np.uint32) << 16).view("<f4")
    elif kind == 8:  # Q8_0: blocks of 32 values, each an f16 d then 32 int8 q; value = q * d
        blocks = np.frombuffer(data, np.dtype([("d", "<f2"), ("q", "i1", 32)]), n // 32)
        x = blocks["q"].astype(np.float64) * blocks["d"].astype(np.float64)[:, None]
    elif kind == 2:  # Q4_0: blocks of 32, an f16 d then 16 bytes: value j in the low nibble of byte j,
        # value j + 16 in its high nibble, each an unsigned q; value = (q - 8) * d
        blocks = np.frombuffer(data, np.dtype([("d", "<f2"), ("qs", "u1", 16)]), n // 32)
        q = np.concatenate([blocks["qs"] & 15, blocks["qs"] >> 4], axis=1).astype(np.float64) - 8
        x = q * blocks["d"].astype(np.float64)[:, None]
    elif kind in (12, 13):  # Q4_K, Q5_K: super-blocks of 256 in 8 sub-blocks of 32, value d sc q - dmin m
        x = k_quant(kind, data, n // 256, control)
    elif kind == 14:  # Q6_K: 256 values in 16 groups of 16, value d s (q - 32)
        x = q6_k(data, n // 256, control)
    else:
        raise ValueError(f"ggml type {kind} is not read here")
    return np.asarray(x, np.float64).reshape(list(reversed(ne)))


def k_quant(kind, data, nb, control=False):
    """Q4_K (block_q4_K: f16 d, f16 dmin, 12 bytes of scales, 128 of 4-bit q) and Q5_K (the same with
    32 bytes qh before the q) as ggml-common.h lays them out and ggml-quants.c's dequantize_row_q4_K /
    _q5_K read them. Sub-block j's scale and min are 6 bits: for j < 4 bytes j and j + 4 of the 12
    (low 6 bits); for j >= 4 the low and high nibble of byte j + 4, topped with the high 2 bits of
    bytes j - 4 and j. Each 32 bytes of q hold two sub-blocks, the low nibbles first; Q5_K's fifth
    bit of value l of sub-block j is bit j of qh[l]. control: the nibbles taken high first."""
    fields = [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12)] + ([("qh", "u1", 32)] if kind == 13 else [])
    b = np.frombuffer(data, np.dtype(fields + [("qs", "u1", 128)]), nb)
    s = b["scales"].astype(np.int64)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | (s[:, 0:4] >> 6) << 4], axis=1)  # (nb, 8)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | (s[:, 4:8] >> 6) << 4], axis=1)
    qs = b["qs"].reshape(nb, 4, 1, 32).astype(np.int64)
    halves = [qs >> 4, qs & 15] if control else [qs & 15, qs >> 4]
    q = np.concatenate(halves, axis=2).reshape(nb, 8, 32)                                     # (nb, j, l)
    if kind == 13:
        q = q + 16 * ((b["qh"].astype(np.int64)[:, None, :] >> np.arange(8)[None, :, None]) & 1)
    d, dmin = b["d"].astype(np.float64)[:, None, None], b["dmin"].astype(np.float64)[:, None, None]
    return (d * sc[:, :, None] * q - dmin * mn[:, :, None]).reshape(-1)


def q6_k(data, nb, control=False):
    """Q6_K (block_q6_K: 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d; ggml-quants.c's
    dequantize_row_q6_K): each half of 128 values takes 64 bytes of ql and 32 of qh; its quarter u's
    value l has low 4 bits from ql[l] (u = 0, 2) or ql[l + 32] (u = 1, 3), the low nibble for u < 2,
    and high 2 bits from bits 2u, 2u + 1 of qh[l]; q - 32 times d times scale 8h + 2u + l // 16.
    control: the nibbles taken high first."""
    b = np.frombuffer(data, np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]), nb)
    ql = b["ql"].reshape(nb, 2, 2, 32).astype(np.int64)            # (nb, half, first or second 32, l)
    qh = b["qh"].reshape(nb, 2, 1, 32).astype(np.int64)
    lo, hi = (ql >> 4, ql & 15) if control else (ql & 15, ql >> 4)
    low = np.concatenate([lo, hi], axis=2)                          # quarters u = 0, 1, 2, 3
    high = np.concatenate([(qh >> 2 * u) & 3 for u in range(4)], axis=2)
    q = (low | high << 4) - 32                                      # (nb, 2, 4, 32)
    scale = np.repeat(b["scales"].astype(np.int64).reshape(nb, 2, 4, 2), 16, axis=3)
    return (b["d"].astype(np.float64)[:, None, None, None] * scale * q).reshape(-1)


# --- A GGUF file as the Hugging Face checkpoint it was converted from ------------------------------
# The inverse of llama.cpp's convert_hf_to_gguf.py (c392e50) for the architectures ./run reads from GGUF
# (loader.c, GGUF_ARCHS, keeps the same facts for the C side): a config.json dict and the tensors by
# their Hugging Face names, so that export/export.py reads a GGUF file with the code, the checks and
# the messages it reads a checkpoint folder with. What llama.cpp's graph assumes and the file does not
# say is put back in the config.json keys transformers reads it from.

ARCHS = {  # general.architecture: (model_type, architectures[0])
    "llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"), "phi3": ("phi3", "Phi3ForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"), "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "olmo2": ("olmo2", "Olmo2ForCausalLM"), "exaone4": ("exaone4", "Exaone4ForCausalLM"),
    "glm4": ("glm4", "Glm4ForCausalLM"), "granite": ("granite", "GraniteForCausalLM"),
    "mistral3": ("ministral3", "Ministral3ForCausalLM")}
LLAMA_ROWS = ("llama", "granite", "mistral3")  # converted by LlamaModel: q and k rows in interleaved pairs

# blk.L.NAME -> model.layers.L.NAME (gguf-py's tensor_mapping.py, read backwards). Hugging Face's
# post_attention_layernorm is the norm before the MLP in a Llama (llama.cpp's ffn_norm) and the norm
# after attention in Gemma, OLMo 2 and EXAONE 4 (post_attention_norm), whose norm before the MLP is Gemma's
# pre_feedforward_layernorm; GLM-4 names its four norms its own way; Phi-3's q, k, v and gate, up are
# fused, GLM-4's gate, up.
LAYER_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
               "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm",
               "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
               "attn_qkv": "self_attn.qkv_proj"}
LAYER_NAMES_BY_ARCH = {"gemma2": {"ffn_norm": "pre_feedforward_layernorm"},
                       "gemma3": {"ffn_norm": "pre_feedforward_layernorm"},
                       "phi3": {"ffn_up": "mlp.gate_up_proj"},
                       "glm4": {"ffn_up": "mlp.gate_up_proj", "post_attention_norm": "post_self_attn_layernorm",
                                "post_ffw_norm": "post_mlp_layernorm"}}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}


def refusing(method):
    """A GgufCheckpoint method whose reading of a damaged file (a truncated one, a key of the wrong type,
    a tensor past the end) raises CheckpointError naming the file, never a traceback: read_gguf trusts
    the file's structure, and gguf.c, which does not, says what exactly is wrong."""
    def guarded(self, *args):
        try:
            return method(self, *args)
        except (AssertionError, struct.error, ValueError, TypeError, IndexError, KeyError, AttributeError,
                UnicodeDecodeError, OverflowError, ZeroDivisionError, RecursionError) as e:
            raise CheckpointError(str(self.path), f"is not a GGUF file this exporter can read ({type(e).__name__}: "
                                  f"{str(e)[:80]})", f"./run {self.path} says what is wrong with it")
    return guarded


def unpermute(x, heads):
    """The rows of q or k of `heads` heads from llama.cpp's interleaved pairs back to Hugging Face's
    halves (the inverse of convert_hf_to_gguf.py's LlamaModel.permute): row h hd + c hd/2 + i from row
    h hd + 2i + c."""
    return x.reshape(heads, x.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(x.shape)


class GgufCheckpoint:
    """A GGUF file's tensors by their Hugging Face names, as float32 (dequantized one at a time), q and
    k rows in Hugging Face's rotate_half order (llama.cpp's LlamaModel.permute undone for LLAMA_ROWS'
    files); config() the config.json it came from. The names(), info(), get() of
    lrun/hf_checkpoint.py's Checkpoint; norms stay as the file has them (Gemma's: 1 + w)."""

    @refusing
    def __init__(self, path):
        self.path = str(path)
        self.meta, self.tensors = read_gguf(path)
        self.arch = self.meta.get("general.architecture")
        if self.arch not in ARCHS:
            raise CheckpointError(f"{path}: general.architecture", f"{self.arch!r} is not one this exporter reads",
                                  f"it reads {', '.join(ARCHS)}")
        self.hf = {}  # Hugging Face name -> GGUF name
        for name in self.tensors:
            if name in TOP_NAMES:
                self.hf[TOP_NAMES[name]] = name
            elif name.startswith("blk.") and name.count(".") == 3:
                _, layer, part, kind = name.split(".")
                part = LAYER_NAMES_BY_ARCH.get(self.arch, {}).get(part, LAYER_NAMES.get(part))
                if part is None:
                    raise CheckpointError(f"{path}: tensor {name}", "is not one this exporter knows for a "
                                          f"{self.arch} model", "./run refuses it too; it may be another architecture")
                self.hf[f"model.layers.{layer}.{part}.{kind}"] = name
            elif name not in ("rope_factors_short.weight", "rope_factors_long.weight", "rope_freqs.weight"):  # config()
                raise CheckpointError(f"{path}: tensor {name}", "has no place in a Hugging Face checkpoint here",
                                      "./run reads the file directly: ./run " + self.path)

    def key(self, name, default=None):
        return self.meta.get(f"{self.arch}.{name}", default)

    def names(self):
        return list(self.hf)

    @refusing
    def info(self, name):
        kind, ne, data = self.tensors[self.hf[name]]
        if kind not in GGML_SIZES:
            raise CheckpointError(f"{self.path}: tensor {self.hf[name]}", f"has ggml type {kind}, which is not "
                                  "read here", "./run names the types it reads from GGUF")
        if tensor_bytes(kind, ne) > len(data):
            raise CheckpointError(f"{self.path}: tensor {self.hf[name]}", "runs past the end of the file",
                                  "the file is truncated; download or convert it again")
        return "F32", tuple(reversed(ne))

    @refusing
    def get(self, name):
        x = dequantize(*self.tensors[self.hf[name]]).astype(np.float32)
        heads = {"self_attn.q_proj": self.key("attention.head_count"),
                 "self_attn.k_proj": self.key("attention.head_count_kv", self.key("attention.head_count"))}
        part = name.split(".", 3)[-1].rsplit(".", 1)[0] if name.startswith("model.layers.") else ""
        if self.arch in LLAMA_ROWS and part in heads:
            x = unpermute(x, heads[part])
        return x

    @refusing
    def config(self):
        """The config.json the file was converted from, as far as the file says, with what llama.cpp
        assumes where it does not (loader.c, GGUF_ARCHS)."""
        a, key, meta = self.arch, self.key, self.meta
        model_type, cls = ARCHS[a]
        dim, heads = key("embedding_length"), key("attention.head_count")
        head_dim = key("attention.key_length", dim // heads if dim and heads else None)
        cfg = {"architectures": [cls], "model_type": model_type, "hidden_size": dim,
               "intermediate_size": key("feed_forward_length"), "num_hidden_layers": key("block_count"),
               "num_attention_heads": heads, "num_key_value_heads": key("attention.head_count_kv", heads),
               "head_dim": head_dim, "max_position_embeddings": key("context_length"),
               "rms_norm_eps": key("attention.layer_norm_rms_epsilon", 1e-5), "rope_theta": key("rope.freq_base", 1e4),
               "vocab_size": self.tensors["token_embd.weight"][1][1] if "token_embd.weight" in self.tensors else None,
               "tie_word_embeddings": "output.weight" not in self.tensors,
               "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
               "eos_token_id": [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                                  "tokenizer.ggml.eom_token_id") if k in meta]}
        cfg["eos_token_id"] = list(dict.fromkeys(cfg["eos_token_id"])) or None
        if key("expert_count", 0):
            raise CheckpointError(f"{self.path}: {a}.expert_count", f"{key('expert_count')} experts (a mixture "
                                  "of experts)", "this program does not run them")
        rot = key("rope.dimension_count")
        if rot and head_dim and rot != head_dim:
            cfg["partial_rotary_factor"] = rot / head_dim
        window = key("attention.sliding_window", 4096 if a == "gemma2" else 0)
        local_global = a in ("gemma2", "gemma3", "olmo2", "exaone4")  # loader.c's `slides` > 1: a pattern
        pattern = key("attention.sliding_window_pattern") if local_global else None
        if window and (local_global or a in ("llama", "phi3")):  # loader.c's `slides` column, not 0
            cfg["sliding_window"] = window
            if isinstance(pattern, list):  # one bool per layer: layer_types
                cfg["layer_types"] = ["sliding_attention" if b else "full_attention" for b in pattern]
            elif pattern is not None:
                cfg["sliding_window_pattern"] = pattern
            if a == "llama":  # Mistral's rule: every layer
                cfg.update(architectures=["MistralForCausalLM"], model_type="mistral")
            if a == "olmo2":  # OLMo 3: three sliding layers of four, YaRN on the full ones only
                cfg.update(architectures=["Olmo3ForCausalLM"], model_type="olmo3")
        elif window and window < cfg["max_position_embeddings"]:
            raise CheckpointError(f"{self.path}: {a}.attention.sliding_window", f"{window}, below the context, and the "
                                  "file does not say which layers slide", "./run refuses it too")
        scaling = key("rope.scaling.type", "none")
        factors = ("rope_factors_short.weight" in self.tensors, "rope_factors_long.weight" in self.tensors)
        if "rope_freqs.weight" in self.tensors:
            raise CheckpointError(f"{self.path}: tensor rope_freqs.weight", "a llama3 rope_scaling worked out per "
                                  "pair, which has no config.json form (low_freq_factor and high_freq_factor are gone)",
                                  "./run reads the file directly: ./run " + self.path)
        if any(factors):
            short, long = (dequantize(*self.tensors[f"rope_factors_{k}.weight"]).tolist() for k in ("short", "long"))
            cfg["original_max_position_embeddings"] = key("rope.scaling.original_context_length")
            cfg["rope_scaling"] = {"type": "longrope", "short_factor": short, "long_factor": long}
            if key("rope.scaling.attn_factor") is not None:
                cfg["rope_scaling"]["attention_factor"] = key("rope.scaling.attn_factor")
        elif scaling in ("linear", "yarn"):
            cfg["rope_scaling"] = {"rope_type": scaling, "factor": key("rope.scaling.factor")}
            if scaling == "yarn":
                cfg["rope_scaling"]["original_max_position_embeddings"] = key("rope.scaling.original_context_length")
                for k in ("beta_fast", "beta_slow"):
                    if key(f"rope.scaling.yarn_{k}"):
                        cfg["rope_scaling"][k] = key(f"rope.scaling.yarn_{k}")
        neutrals = (("yarn_attn_factor", 1.0), ("yarn_ext_factor", 1.0)) + ((("yarn_log_multiplier", 0.0),)
                                                                          if a != "mistral3" else ())
        for k, neutral in neutrals + ((("attn_factor", 1.0),) if not any(factors) else ()):
            unset = -1.0 if k == "yarn_ext_factor" else neutral  # llama.cpp's "unset" ramp: 1 under YaRN
            if key(f"rope.scaling.{k}", neutral) not in (neutral, unset):  # loader.c refuses them the same way
                raise CheckpointError(f"{self.path}: {a}.rope.scaling.{k}", f"{key(f'rope.scaling.{k}')} is not read "
                                      f"({neutral:g}, the neutral value, is)", "./run refuses it too")
        if scaling not in ("none", "linear", "yarn"):
            raise CheckpointError(f"{self.path}: {a}.rope.scaling.type", f"{scaling!r} is not read",
                                  "./run refuses it too")
        if a in ("gemma2", "gemma3"):  # llama.cpp's query scale: head_dim, or dim / heads in the 27B models
            big = key("block_count") == {"gemma2": 46, "gemma3": 62}[a]
            cfg["query_pre_attn_scalar"] = dim // heads if big else head_dim
            cfg["hidden_activation"] = "gelu_pytorch_tanh"
        if a == "gemma2":
            cfg["attn_logit_softcapping"] = key("attn_logit_softcapping", 50.0)
            cfg["final_logit_softcapping"] = key("final_logit_softcapping", 30.0)
        if a == "gemma3":
            cfg.update(rope_local_base_freq=key("rope.freq_base_swa", 10000.0), final_logit_softcapping=key(
                "final_logit_softcapping"))
            if "layer_types" not in cfg:
                cfg.setdefault("sliding_window_pattern", 6)
            if not window:  # no window: every layer global (llama.cpp), as a pattern of 1 is in transformers
                cfg.update(sliding_window_pattern=1, sliding_window=None)
        if a == "granite":  # muP's multipliers; no attention.scale is the usual 1/sqrt(head_dim), as in ./run
            cfg.update(attention_multiplier=key("attention.scale", 1 / math.sqrt(head_dim)),
                       embedding_multiplier=key("embedding_scale", 1.0), residual_multiplier=key("residual_scale", 1.0),
                       logits_scaling=key("logit_scale", 1.0))
        if a == "glm4":
            cfg["attention_bias"] = "blk.0.attn_q.bias" in self.tensors
        if a == "mistral3":  # Ministral 3: yarn_log_multiplier is mscale_all_dim (mscale 1), and the queries'
            # temperature steps at the original context (loader.c: mscale_all_dim, f_attn_temp_scale)
            rope = cfg.setdefault("rope_scaling", {"rope_type": "default"})
            if key("rope.scaling.yarn_log_multiplier"):
                rope.update(mscale=1.0, mscale_all_dim=key("rope.scaling.yarn_log_multiplier"))
            if key("attention.temperature_scale"):
                rope.update(llama_4_scaling_beta=key("attention.temperature_scale"),
                            original_max_position_embeddings=key("rope.scaling.original_context_length",
                                                                 key("context_length")))
        return cfg
