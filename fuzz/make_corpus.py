"""make_corpus.py - write the checked-in seed corpus of the fuzz targets (fuzz/corpus/NAME/).

    /usr/bin/python3 fuzz/make_corpus.py          (rewrites fuzz/corpus; commit the result)

A fuzzer mutates its seeds, so the seeds decide which code it reaches quickly. Each target gets a
few small valid inputs and a few hand-made edge cases:
  model/      tiny models (vocab 32, dim 8, two layers, grouped-query attention; a few KB each) in
              every dtype and RoPE mode, made from a random Hugging Face checkpoint
              (lrun/hf_random.py) by export/export.py (q8_0 and bf16 in their 16-row groups, and
              once more in the first layouts: ok-q8_0-rows, ok-bf16-rows); five version 4 files from
              data/families2 in q4_0 (ok-v4-*: every hparam in one of them; version4_seeds(DIR)
              rewrites only these); two tiny llama2.c legacy files (shared and
              separate classifier); and broken files: a header alone, a bare magic, "ak42".
  tokenizer/  the first byte picks the tokenizer (bit 0) and BOS (bit 1); the rest is text (ASCII,
              UTF-8, invalid UTF-8, NULs) that is also read as int32 ids (in and out of range); with
              bit 2 set, the rest is a tokenizer_config.json (BOS and EOS settings) instead.
  cli/        command lines, arguments separated by NUL bytes.
  gguf/       a tiny llama GGUF file (llama.cpp's format, written here) in F32, F16, BF16, Q8_0, Q4_0,
              the K-quants (Q4_K, Q5_K, Q6_K: the same llama at dim 256),
              a Qwen2 (biases, q and k rows in halves), a Qwen3 (q/k norms, YaRN), byte-level BPE vocabularies (gpt2) with each
              pre-tokenizer name read,
              one with metadata of every value type (arrays of arrays, a 64-byte alignment, linear
              RoPE scaling), one with the vocabulary only; and broken files.
  bpe/        a tiny byte-level tokenizer.json (256 bytes and a few merges) in each arrangement
              bpe.c reads (GPT-2's ByteLevel regex; Llama 3's Split + ByteLevel, ignore_merges,
              merges as pairs, special tokens, a BOS template; Digits; a String split; Qwen's NFC
              normalizer; Split Removed, inverted as in o200k and not; added tokens with lstrip and
              rstrip), then a NUL and a text; and broken files.
tests/test_hostile.py checks that the valid models load and run and the broken ones are refused.
What this is not: a fuzzer (fuzz/fuzz_*.c are, run by fuzz/run.sh) or a test.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun.hf_random import make_checkpoint  # noqa: E402
from lrun.modelfile import HEADER_SIZE, LEGACY_HEADER, MAGIC, bf16_rows, legacy_tensors, q8_0_rows  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TINY = dict(dim=8, hidden_dim=12, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=32, max_pos=16)

# name: (make_checkpoint arguments on top of TINY, export dtype)
MODELS = {
    "ok-f32-tied": ({}, "f32"),
    "ok-f16-untied": ({"tied": False}, "f16"),
    "ok-q8_0": ({}, "q8_0"),
    "ok-bf16-untied": ({"tied": False}, "bf16"),
    "ok-pi": ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "f32"),
    # trained on 2 positions: the fuzz target's 6th token makes dynamic NTK re-rotate the 5 cached keys
    "ok-dynamic": ({"max_pos": 2, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "f32"),
    "ok-yarn": ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}},
                "f16"),
    "ok-llama3": ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 4}}, "q8_0"),
    # version 3 (model.h): biases, q/k norms, NoPE and sliding layers, partial rotary, LongRoPE's factors
    "ok-qwen2": ({"architecture": "Qwen2ForCausalLM"}, "f32"),
    "ok-qwen3": ({"architecture": "Qwen3ForCausalLM", "head_dim": 8}, "q8_0"),
    "ok-smollm3": ({"architecture": "SmolLM3ForCausalLM", "extra_config": {"no_rope_layer_interval": 2}}, "f16"),
    "ok-mistral-window": ({"architecture": "MistralForCausalLM", "extra_config": {"sliding_window": 3}}, "f32"),
    "ok-phi3-longrope": ({"architecture": "Phi3ForCausalLM", "partial_rotary_factor": 0.5, "tied": False,
                          "max_pos": 8, "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 4,
                                                         "short_factor": [1.0], "long_factor": [2.0]}}, "q4_0"),
}


def legacy(shared, seed):
    """A tiny llama2.c legacy (version 0) file: 7 int32, then f32 weights in llama2.c's order."""
    header = (8, 12, 2, 2, 1, 32 if shared else -32, 4)  # dim hidden layers heads kv_heads vocab seq_len
    n = sum(math.prod(shape) for _, shape in legacy_tensors(*header))
    weights = np.random.default_rng(seed).normal(0, 0.1, n).astype("<f4")
    return LEGACY_HEADER.pack(*header) + weights.tobytes()


def tokenizer_seeds():
    text = {
        "ascii": b"Once upon a time, there was a little girl named Lily.",
        "utf8": "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \U0001f642 \u2581x".encode(),
        "invalid-utf8": b"\xff\xfe abc \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf",
        "nul-and-control": b"a\x00b\x01\x1b[0m\r\n\t end",
        "digits-spaces": b"  12345   67\n\n\n  ",
        "empty": b"",
    }
    seeds = {}
    for k, (name, body) in enumerate(text.items()):
        seeds[name] = bytes([k & 3]) + body
    # out-of-range ids, and valid ids right after them (an out-of-range previous id)
    ids = [-1, 0, 1, 2, 3, 13, 100, 259, 511, 512, 31999, 32000, 13, -(2**31), 2**31 - 1, 5]
    seeds["ids"] = b"\x01" + struct.pack(f"<{len(ids)}i", *ids)
    seeds["ids-tok512"] = b"\x00" + struct.pack("<7i", 1, 300, 259, 2, 511, 512, 300)
    # tokenizer_config.json (first byte bit 2; bit 3: the checkpoint has BOS 1 and EOS 2)
    configs = {
        "config-llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        "config-add-both": {"add_bos_token": True, "add_eos_token": True, "bos_token": {"content": "<s>"}},
        "config-no-bos": {"add_bos_token": False, "bos_token": None, "tokenizer_class": "GPT2Tokenizer"},
        "config-unknown-name": {"bos_token": "<nope>", "add_eos_token": True, "eos_token": 7},
        # refused (a key of the wrong type) with a tokenizer_class beside it: read before the refusal
        "config-wrong-type": {"add_bos_token": "yes", "tokenizer_class": "GPT2Tokenizer"},
    }
    for k, (name, cfg) in enumerate(configs.items()):
        seeds[name] = bytes([4 | (k & 1) | (8 if k & 2 else 0)]) + json.dumps(cfg).encode()
    seeds["config-not-json"] = b"\x0c{\"add_bos_token\": tru"
    return seeds


def byte_char(b):
    """GPT-2's byte-level map (bpe.c has the same): printable Latin-1 bytes stand for themselves,
    the other 68 become U+0100.. in byte order."""
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or 0xAE <= x <= 0xFF  # noqa: E731
    return chr(b) if printable(b) else chr(256 + sum(not printable(x) for x in range(b)))


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")


def tiny_tokenizer(pre, merges_as_pairs=False, added=(), ignore_merges=False, post=None, normalizer=None):
    """added: (content, special) or (content, special, lstrip, rstrip)."""
    vocab = {byte_char(b): b for b in range(256)}
    merges = []
    for left, right in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("in", "g"), ("1", "2"), ("Ġ", "Ġ"),
                        ("Ċ", "Ċ"), ("'", "s"), ("l", "l"), ("ll", "o")]:
        vocab.setdefault(left + right, len(vocab))
        merges.append([left, right] if merges_as_pairs else f"{left} {right}")
    added_tokens = []
    for content, special, *strip in added:
        lstrip, rstrip = strip or (False, False)
        added_tokens.append({"id": len(vocab) + len(added_tokens), "content": content, "single_word": False,
                             "lstrip": lstrip, "rstrip": rstrip, "normalized": False, "special": special})
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges}
    if ignore_merges:
        model["ignore_merges"] = True
    spec = {"version": "1.0", "added_tokens": added_tokens, "normalizer": normalizer, "pre_tokenizer": pre,
            "post_processor": post, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                                                "trim_offsets": True, "use_regex": True}, "model": model}
    return json.dumps(spec, ensure_ascii=False).encode()


def metaspace_tokenizer(llama2=False):
    """The SentencePiece kind (byte fallback, '▁' for spaces): Gemma 3's arrangement, or with llama2
    Llama 2's and Mistral's (Prepend("▁") before the Replace, Strip(" ", 1, 0) last in the decoder)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    merges = []
    for left, right in [("\u2581", "t"), ("h", "e"), ("\u2581t", "he"), ("i", "n"), ("in", "g"), ("\u2581", "\u2581"),
                        ("l", "l"), ("ll", "o"), ("\u00e9", "t")]:
        for word in (left, right, left + right):
            vocab.setdefault(word, len(vocab))
        merges.append([left, right])
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    decoder = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
               {"type": "Fuse"}]
    if llama2:
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace]}
        pre = None
        decoder.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    else:
        normalizer = replace
        pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
    added = [{"id": k, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for c, k in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]
    # In Llama 2's arrangement one not marked special: the text after it starts with a '▁' too, and
    # decoding keeps that space (Hugging Face's Strip takes only the first)
    added.append({"id": len(vocab), "content": "<start_of_turn>", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": not llama2})
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab, "merges": merges}
    spec = {"version": "1.0", "added_tokens": added, "normalizer": normalizer, "pre_tokenizer": pre,
            "post_processor": None, "decoder": {"type": "Sequence", "decoders": decoder}, "model": model}
    return json.dumps(spec, ensure_ascii=False).encode()


# --- gguf/: GGUF files (llama.cpp's format: gguf.h), written here from the format's definition

GGUF_SCALARS = {"u8": (0, "<B"), "i8": (1, "<b"), "u16": (2, "<H"), "i16": (3, "<h"), "u32": (4, "<I"),
                "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?"), "u64": (10, "<Q"), "i64": (11, "<q"),
                "f64": (12, "<d")}


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    """(type number, bytes) of a metadata value: kind a scalar name, "str", or ("arr", element kind)."""
    if kind == "str":
        return 8, gguf_string(v)
    if isinstance(kind, tuple):
        elem, items = kind[1], [gguf_value(kind[1], x) for x in v]
        number = items[0][0] if items else GGUF_SCALARS.get(elem, (8,))[0]
        return 9, struct.pack("<IQ", number, len(v)) + b"".join(b for _, b in items)
    number, fmt = GGUF_SCALARS[kind]
    return number, struct.pack(fmt, v)


def gguf_file(meta, tensors, align=32):
    """A GGUF v3 file: meta [(key, kind, value)], tensors [(name, ne, ggml type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, kind, v in meta:
        number, raw = gguf_value(kind, v)
        out += gguf_string(key) + struct.pack("<I", number) + raw
    offset, blobs = 0, b""
    for name, ne, kind, data in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", kind, offset)
        pad = (-len(data)) % align
        blobs += data + bytes(pad)
        offset += len(data) + pad
    out += bytes((-len(out)) % align)
    return out + blobs


def gguf_q8_0(x):
    """ggml's block_q8_0 for each 32 values of x (a row's length a multiple of 32): f16 d, 32 int8."""
    out = b""
    for block in x.reshape(-1, 32):
        d = np.abs(block).max() / 127
        q = np.round(block / d).astype(np.int8) if d else np.zeros(32, np.int8)
        out += np.float16(d).tobytes() + q.tobytes()
    return out


def gguf_q4_0(x):
    """ggml's block_q4_0 for each 32 values of x: f16 d, then value j in the low nibble of byte j and
    value j + 16 in its high nibble, q = x / d + 8 in [0, 15]."""
    out = b""
    for block in x.reshape(-1, 32):
        d = np.abs(block).max() / 7
        q = (np.clip(np.round(block / d), -8, 7) + 8).astype(np.uint8) if d else np.full(32, 8, np.uint8)
        out += np.float16(d).tobytes() + (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
    return out


def gguf_seeds():
    """A tiny llama (dim 32, one layer, 2 heads / 1 kv head of 16, vocab 274) in each tensor type this
    program reads, one with metadata of every value type, and broken files."""
    rng = np.random.default_rng(3)
    words = ["\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "H", "e", "l", "o", "\u2581H", "ll", "llo", "\u2581w"]
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + words  # byte fallback: all 256
    types = [2, 3, 3] + [6] * 256 + [1] * len(words)
    V = len(pieces)
    vocab_meta = [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", ("arr", "str"), pieces),
                  ("tokenizer.ggml.scores", ("arr", "f32"), [0.0] * 259 + [-float(i) for i in range(len(words))]),
                  ("tokenizer.ggml.token_type", ("arr", "i32"), types),
                  ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2)]
    meta = [("general.architecture", "str", "llama"), ("llama.embedding_length", "u32", 32),
            ("llama.feed_forward_length", "u32", 64), ("llama.block_count", "u32", 1),
            ("llama.attention.head_count", "u32", 2), ("llama.attention.head_count_kv", "u32", 1),
            ("llama.context_length", "u32", 64), ("llama.rope.freq_base", "f32", 10000.0),
            ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5)] + vocab_meta
    shapes = [("token_embd.weight", (V, 32)), ("output_norm.weight", (32,)), ("blk.0.attn_norm.weight", (32,)),
              ("blk.0.attn_q.weight", (32, 32)), ("blk.0.attn_k.weight", (16, 32)), ("blk.0.attn_v.weight", (16, 32)),
              ("blk.0.attn_output.weight", (32, 32)), ("blk.0.ffn_norm.weight", (32,)),
              ("blk.0.ffn_gate.weight", (64, 32)), ("blk.0.ffn_down.weight", (32, 64)), ("blk.0.ffn_up.weight", (64, 32))]

    def tensors(kind):
        out = []
        for name, shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32) * 0.2
            ne = list(reversed(shape))
            if len(shape) == 1:
                out.append((name, ne, 0, (x + 1).tobytes()))
            elif kind == "f16":
                out.append((name, ne, 1, x.astype(np.float16).tobytes()))
            elif kind == "bf16":
                out.append((name, ne, 30, (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()))
            elif kind == "q8_0":
                out.append((name, ne, 8, gguf_q8_0(x)))
            elif kind == "q4_0":
                out.append((name, ne, 2, gguf_q4_0(x)))
            else:
                out.append((name, ne, 0, x.tobytes()))
        return out

    seeds = {f"ok-{kind}.gguf": gguf_file(meta, tensors(kind)) for kind in ("f32", "f16", "bf16", "q8_0", "q4_0")}
    # The K-quants need rows of whole blocks of 256: the same llama at dim 256 (4 heads of 64), its
    # matrices Q4_K, Q5_K and Q6_K in turn (random bits, small f16 scales: ggml's block layouts).
    wide = [(k, kind, {"llama.embedding_length": 256, "llama.feed_forward_length": 256,
                       "llama.attention.head_count": 4, "llama.attention.head_count_kv": 4}.get(k, v))
            for k, kind, v in meta]
    k_tensors, krng = [], np.random.default_rng(5)  # its own generator: the other seeds stay as they were
    for i, (name, shape) in enumerate(shapes):
        shape = tuple(256 if n in (16, 32, 64) else n for n in shape)
        ne = list(reversed(shape))
        if len(shape) == 1:
            k_tensors.append((name, ne, 0, np.ones(shape, np.float32).tobytes()))
            continue
        kind, size = [(12, 144), (13, 176), (14, 210)][i % 3]
        blocks = krng.integers(0, 256, (shape[0] * shape[1] // 256, size), dtype=np.uint8)
        d = (krng.standard_normal((len(blocks), 2)) * 1e-3).astype(np.float16).view(np.uint8)
        if kind == 14:
            blocks[:, 208:210] = d[:, :2]  # Q6_K: d last
        else:
            blocks[:, 0:4] = d  # Q4_K, Q5_K: d and dmin first
        k_tensors.append((name, ne, kind, blocks.tobytes()))
    seeds["ok-k-quants.gguf"] = gguf_file(wide, k_tensors)
    qwen2 = [(k.replace("llama.", "qwen2."), kind, "qwen2" if k == "general.architecture" else v)
             for k, kind, v in meta]  # Qwen2: q and k rows in halves (interleaved at load), q/k/v biases
    biases = [(f"blk.0.attn_{x}.bias", [n], 0, rng.standard_normal(n).astype(np.float32).tobytes())
              for x, n in (("q", 32), ("k", 16), ("v", 16))]
    seeds["ok-qwen2-f16.gguf"] = gguf_file(qwen2, tensors("f16") + biases)
    qwen3 = [(k.replace("qwen2.", "qwen3."), kind, "qwen3" if k == "general.architecture" else v) for k, kind, v in qwen2]
    qwen3 += [("qwen3.rope.scaling.type", "str", "yarn"), ("qwen3.rope.scaling.factor", "f32", 4.0),
              ("qwen3.rope.scaling.original_context_length", "u32", 16)]  # Qwen3: q/k norms per head, YaRN
    norms = [(f"blk.0.attn_{x}_norm.weight", [16], 0, (rng.standard_normal(16) + 1).astype(np.float32).tobytes())
             for x in ("q", "k")]
    seeds["ok-qwen3-q8_0.gguf"] = gguf_file(qwen3, tensors("q8_0") + norms)
    every = [(f"general.x_{kind}", kind, 1) for kind in GGUF_SCALARS] + [
        ("general.x_str", "str", "text"), ("general.x_arrays", ("arr", ("arr", "u8")), [[1, 2], [3]]),
        ("general.x_f64s", ("arr", "f64"), [0.5, 2.0]), ("general.alignment", "u32", 64),
        ("tokenizer.ggml.add_bos_token", "bool", False), ("tokenizer.ggml.add_space_prefix", "bool", True),
        ("llama.rope.scaling.type", "str", "linear"), ("llama.rope.scaling.factor", "f32", 2.0),
        ("llama.rope.dimension_count", "u32", 8)]
    seeds["ok-every-type.gguf"] = gguf_file(meta + every, tensors("q8_0"), align=64)
    # Llama 3.1's RoPE as llama.cpp's converter writes it: a divisor per pair of the 16-wide heads
    divisors = [("rope_freqs.weight", [8], 0, np.array([1, 1, 1.5, 2, 3, 4, 4, 4], np.float32).tobytes())]
    seeds["ok-rope-freqs.gguf"] = gguf_file(meta, tensors("f16") + divisors)
    # The other architectures (loader.c, GGUF_ARCHS): the same llama renamed, with what each adds
    def renamed(arch, extra):
        return [(k.replace("llama.", arch + "."), kind, arch if k == "general.architecture" else v)
                for k, kind, v in meta] + [(k, kind, v) for k, kind, v in extra]

    def vector(name, n):
        return (name, [n], 0, (rng.standard_normal(n) * 0.1 + 1).astype(np.float32).tobytes())

    plain = {name: (name, ne, kind, data) for name, ne, kind, data in tensors("f16")}
    fused = [t for name, t in plain.items() if name not in ("blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                                            "blk.0.attn_v.weight", "blk.0.ffn_gate.weight",
                                                            "blk.0.ffn_up.weight")]
    fused += [("blk.0.attn_qkv.weight", [32, 64], 1, rng.standard_normal((64, 32)).astype(np.float16).tobytes()),
              ("blk.0.ffn_up.weight", [32, 128], 1, rng.standard_normal((128, 32)).astype(np.float16).tobytes()),
              vector("rope_factors_short.weight", 8), vector("rope_factors_long.weight", 8)]
    seeds["ok-phi3-f16.gguf"] = gguf_file(renamed("phi3", [("phi3.attention.sliding_window", "u32", 32),
                                                           ("phi3.rope.scaling.original_context_length", "u32", 16),
                                                           ("phi3.rope.scaling.attn_factor", "f32", 1.2)]), fused)
    post = [vector("blk.0.post_attention_norm.weight", 32), vector("blk.0.post_ffw_norm.weight", 32)]
    seeds["ok-gemma2-f16.gguf"] = gguf_file(renamed("gemma2", [("gemma2.attn_logit_softcapping", "f32", 50.0),
                                                               ("gemma2.attention.sliding_window", "u32", 8)]),
                                            tensors("f16") + post)
    seeds["ok-gemma3-q8_0.gguf"] = gguf_file(renamed("gemma3", [("gemma3.attention.sliding_window", "u32", 8),
                                                                ("gemma3.rope.scaling.type", "str", "linear"),
                                                                ("gemma3.rope.scaling.factor", "f32", 8.0)]),
                                             tensors("q8_0") + post + norms)
    olmo2 = [t for t in tensors("f32") if "attn_norm" not in t[0] and "ffn_norm" not in t[0]]
    olmo2_norms = [vector("blk.0.attn_q_norm.weight", 32), vector("blk.0.attn_k_norm.weight", 16)]
    seeds["ok-olmo2-f32.gguf"] = gguf_file(renamed("olmo2", []), olmo2 + post + olmo2_norms)
    seeds["ok-olmo3-f32.gguf"] = gguf_file(renamed("olmo2", [  # OLMo 3: a window, YaRN on the full layers
        ("olmo2.attention.sliding_window", "u32", 8), ("olmo2.rope.scaling.type", "str", "yarn"),
        ("olmo2.rope.scaling.factor", "f32", 4.0), ("olmo2.rope.scaling.original_context_length", "u32", 16),
        ("olmo2.rope.scaling.yarn_ext_factor", "f32", -1.0)]), olmo2 + post + olmo2_norms)
    seeds["ok-granite-q4_0.gguf"] = gguf_file(renamed("granite", [
        ("granite.attention.scale", "f32", 0.05), ("granite.embedding_scale", "f32", 12.0),
        ("granite.residual_scale", "f32", 0.22), ("granite.logit_scale", "f32", 8.0)]), tensors("q4_0"))
    seeds["ok-exaone4-f16.gguf"] = gguf_file(renamed("exaone4", [  # post-norms only, the global layers NoPE
        ("exaone4.attention.sliding_window", "u32", 8), ("exaone4.attention.sliding_window_pattern", ("arr", "bool"),
                                                         [True])]),
        [t for t in tensors("f16") if "attn_norm" not in t[0] and "ffn_norm" not in t[0]] + post + norms)
    glm4 = [t for name, t in plain.items() if name not in ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight")]
    seeds["ok-glm4-f16.gguf"] = gguf_file(renamed("glm4", [("glm4.rope.dimension_count", "u32", 8)]), glm4 + biases + post + [
        ("blk.0.ffn_up.weight", [32, 128], 1, rng.standard_normal((128, 32)).astype(np.float16).tobytes())])
    seeds["ok-mistral3-q8_0.gguf"] = gguf_file(renamed("mistral3", [  # Ministral 3: YaRN, query temperature
        ("mistral3.rope.scaling.type", "str", "yarn"), ("mistral3.rope.scaling.factor", "f32", 4.0),
        ("mistral3.rope.scaling.original_context_length", "u32", 16),
        ("mistral3.rope.scaling.yarn_log_multiplier", "f32", 1.0),
        ("mistral3.attention.temperature_scale", "f32", 0.1)]), tensors("q8_0"))
    seeds["ok-vocab-only.gguf"] = gguf_file(vocab_meta, [])
    byte_level = json.loads(tiny_tokenizer({"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                                           added=[("<|eot|>", True, False, False)]))
    words = sorted(byte_level["model"]["vocab"], key=byte_level["model"]["vocab"].get) + ["<|eot|>"]
    for pre in ("llama-bpe", "qwen2", "gpt-2"):  # tokenizer.ggml.model gpt2: a byte-level BPE, vocabulary only
        seeds[f"ok-gpt2-{pre}.gguf"] = gguf_file(
            [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", pre),
             ("tokenizer.ggml.tokens", ("arr", "str"), words),
             ("tokenizer.ggml.merges", ("arr", "str"), [" ".join(m) if isinstance(m, list) else m
                                                        for m in byte_level["model"]["merges"]]),
             ("tokenizer.ggml.token_type", ("arr", "i32"), [1] * (len(words) - 1) + [3]),
             ("tokenizer.ggml.bos_token_id", "u32", len(words) - 1)], [])
    whole = seeds["ok-f16.gguf"]
    seeds["bad-truncated.gguf"] = whole[:len(whole) - 100]
    seeds["bad-magic-only.gguf"] = b"GGUF"
    seeds["bad-version-1.gguf"] = b"GGUF" + struct.pack("<III", 1, 0, 0)
    return seeds


def bpe_seeds():
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    no_regex = dict(byte_level, use_regex=False)
    bos = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [], "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [267], "tokens": ["<|bos|>"]}}}
    files = {
        "gpt2": tiny_tokenizer(byte_level, added=[("<|endoftext|>", True)]),
        "llama3": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False}, no_regex]},
            merges_as_pairs=True, added=[("<|bos|>", True), ("<|eot_id|>", True), ("<tool>", False)],
            ignore_merges=True, post=bos),
        "digits": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}),
        "split-string": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "ll"}, "behavior": "Isolated", "invert": False}, no_regex]}),
        # Qwen2/3: NFC, then Qwen's regex; <think> is an added token that is not special
        "qwen-nfc": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_REGEX}, "behavior": "Isolated", "invert": False}, no_regex]},
            added=[("<|im_end|>", True), ("<think>", False)], normalizer={"type": "NFC"}),
        # o200k (Phi-4-mini): the matches are the pieces, the gaps between them dropped
        "removed-invert": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}{1,3}"}, "behavior": "Removed", "invert": True},
            no_regex]}),
        # added tokens that take the white space beside them along (Phi-3's rstrip)
        "strip": tiny_tokenizer({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False}, byte_level]},
            added=[("<|end|>", True, False, True), ("<|l|>", True, True, False), ("<|lr|>", False, True, True)]),
        # the SentencePiece kind: Gemma 3's tokenizer.json, and Llama 2's / Mistral's
        "metaspace-gemma": metaspace_tokenizer(),
        "metaspace-llama2": metaspace_tokenizer(llama2=True),
    }
    texts = [b"Hello the thing's 12345 \n\n  well", "caf\u00e9 \U0001f642 \u65e5\u672c <|eot_id|><tool>".encode(),
             b"\xff\xfe abc \xc3 \xed\xa0\x80 1\t2", b"<|endoftext|>   <|bos|>the",
             "cafe\u0301 \u1100\u1161\u11a8 <|im_end|>\n<think>\u0301 \u212b".encode(), b"ab  12345 c!d",
             "x <|end|> \n y \u3000<|l|>z<|lr|>\t\n".encode(),
             "  the thing\u00e9t <start_of_turn>\x00\U0010fffd hello\u2581 ".encode(), b"<s>hello  </s> \xff the<start_of_turn>well"]
    seeds = {}
    for k, (name, data) in enumerate(files.items()):
        seeds[name] = data + b"\0" + texts[k % len(texts)]
    seeds["bad-not-json"] = b"{not json\0text"
    seeds["bad-empty-object"] = b"{}\0text"
    seeds["bad-truncated"] = files["gpt2"][:300]
    return seeds


def cli_seeds():
    lines = {
        "generate": ["model.bin", "-i", "Once upon a time", "-n", "16", "-t", "0.8", "-p", "0.9", "-s", "42"],
        "greedy-short-flags": ["-z", "tok.model", "m.bin", "-t", "0", "-c", "128", "-b", "8", "--threads", "2"],
        "ppl": ["m.bin", "--ppl", "text.txt", "--ctx-size", "2048", "--ppl-windows", "3"],
        "rope-ntk": ["m.bin", "--ctx", "4096", "--rope-scaling", "ntk", "--rope-alpha", "8"],
        "rope-yarn": ["m.bin", "--rope-scaling", "yarn", "--rope-factor", "4", "--rope-base", "500000"],
        "rope-pi-linear": ["m.bin", "--rope-scaling", "linear", "--rope-scale", "2.5", "--rope-freq-base", "1e4"],
        "rope-dynamic-llama3": ["m.bin", "--rope-scaling", "dynamic", "-c", "1024", "--rope-scaling", "llama3"],
        "bad-numbers": ["m.bin", "-n", "12abc", "-t", "nan", "-p", "1.5", "--ctx", "0", "-s", "-1"],
        "missing-value": ["m.bin", "--top-p"],
        "help": ["--help"],
        "unknown": ["m.bin", "--bogus", "1", "-"],
        "sampler": ["m.bin", "--top-k", "40", "--min-p", "0.05", "--repeat-penalty", "1.1", "--repeat-last-n", "-1",
                    "-n", "-1", "-s", "7"],
        "reverse-prompts": ["m.bin", "-r", "User:", "--reverse-prompt", "\n\n", "-r", "x", "--verbose-prompt"],
        "equals": ["m.bin", "--ctx=64", "--top-k=0", "--rope-scaling=yarn", "--temp=", "--attn-logn=1", "-n=3"],
        "llama-cpp": ["-m", "m.bin", "-p", "Once upon a time", "-t", "4", "-ngl", "99", "--tmep", "1", "--version"],
        "chat-template": ["m.bin", "-m", "chat", "--chat-template", "chatml", "--keep", "63", "--ctx", "64"],
    }
    return {name: b"\0".join(a.encode() for a in args) for name, args in lines.items()}


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


# version 4 (model.h: the hparams table, post-norms, whole-projection q/k norms, the local RoPE), from
# five of data/families2 (vocab 512, dim 64: 120 .. 170 KB each in q4_0), so that every hparam is in one:
# Gemma 2 the softcaps, act, the embedding and attention scales; Gemma 3 the local base; OLMo 2 the norms
# after each sublayer; Granite the residual and logit scales; Ministral 3 the query temperature (and
# YaRN's attention factor 1 from mscale). test_families2.py checks that they cover the table.
VERSION4 = ("gemma2-softcap", "gemma3-two-bases", "olmo2-postnorm", "granite-mup", "ministral3-yarn-beta")


def version4_seeds(model_dir):
    with tempfile.TemporaryDirectory() as tmp:
        for case in VERSION4:
            out = os.path.join(tmp, case, "model.bin")  # a folder of its own: the tokenizer goes beside it
            os.makedirs(os.path.dirname(out))
            proc = subprocess.run([sys.executable, os.path.join(REPO, "export", "export.py"),
                                   os.path.join(REPO, "data", "families2", case), out, "--dtype", "q4_0"],
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"make_corpus: exporting {case} failed:\n{proc.stderr}")
            os.makedirs(model_dir, exist_ok=True)
            shutil.copy(out, os.path.join(model_dir, f"ok-v4-{case}.bin"))


# --- prompt_cache: --prompt-cache files (promptcache.h) for fuzz_prompt_cache.c's KV cache: 2 layers of 2 kv
# heads of 32; the first two bytes choose the key and value types (0 f32, 1 f16, 2 q8_0: their DType numbers,
# dtype.h, which the header holds too), the file follows.
def prompt_cache_file(types, ids, settings=b"fuzz", layers=2, version=1):
    rows = {0: 4 * 32, 1: 2 * 32, 2: 32 + 2}  # bytes per position: f32, f16, q8_0 (32 int8 and an f16 scale)
    n = len(ids)
    stride = (n + 31) // 32 * 32  # keys go in whole blocks of 32 positions
    head = b"LRPC" + struct.pack("<8i", version, n, layers, 2, 32, types[0], types[1], len(settings))
    data = bytearray()
    for _ in range(layers * 2):
        data += bytes((7 * i) % 251 for i in range(stride * rows[types[0]]))
        data += bytes((11 * i) % 251 for i in range(n * rows[types[1]]))
    return bytes(types) + head.ljust(64, b"\0") + settings + struct.pack(f"<{n}i", *ids) + bytes(data)


def prompt_cache_seeds():
    ok = prompt_cache_file((0, 0), range(20))
    return {
        "ok-f32-20.cache": ok,
        "ok-f16-q8_0-40.cache": prompt_cache_file((1, 2), range(40)),
        "ok-q8_0-f32-shares-10.cache": prompt_cache_file((2, 0), [*range(10), 99, 98, 97]),
        "ok-f32-60-longer-than-the-prompt.cache": prompt_cache_file((0, 1), range(60)),
        "other-settings.cache": prompt_cache_file((0, 0), range(20), settings=b"other"),
        "other-shape.cache": prompt_cache_file((0, 0), range(20), layers=3),
        "bad-version.cache": prompt_cache_file((0, 0), range(20), version=2),
        "bad-truncated.cache": ok[:-5],
        "bad-magic.cache": ok[:2] + b"LRPX" + ok[6:],
        "bad-header-only.cache": ok[:66],
    }


def main():
    corpus = os.path.join(HERE, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    model_dir = os.path.join(corpus, "model")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (extra, dtype) in MODELS.items():
            hf = os.path.join(tmp, name)
            make_checkpoint(hf, **{**TINY, **extra})
            out = os.path.join(model_dir, name + ".bin")
            os.makedirs(model_dir, exist_ok=True)
            proc = subprocess.run([sys.executable, os.path.join(REPO, "export", "export.py"), hf, out,
                                   "--dtype", dtype], capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"make_corpus: exporting {name} failed:\n{proc.stderr}")
    version4_seeds(model_dir)
    with open(os.path.join(model_dir, "ok-q8_0.bin"), "rb") as f:  # q8_0 in groups of 16 rows (q8_0_r16)
        write(model_dir, "ok-q8_0-rows.bin", q8_0_rows(f.read()))  # the first q8_0 layout, as older exports
    with open(os.path.join(model_dir, "ok-bf16-untied.bin"), "rb") as f:  # bf16 in groups of 16 rows (bf16_r16)
        write(model_dir, "ok-bf16-rows.bin", bf16_rows(f.read()))  # the first bf16 layout, as older exports
    write(model_dir, "ok-legacy-shared.bin", legacy(True, 1))
    write(model_dir, "ok-legacy-untied.bin", legacy(False, 2))
    with open(os.path.join(model_dir, "ok-f32-tied.bin"), "rb") as f:
        ours = f.read()
    write(model_dir, "bad-header-only.bin", ours[:HEADER_SIZE])
    write(model_dir, "bad-magic-only.bin", MAGIC)
    write(model_dir, "bad-ak42.bin", b"ak42" + ours[4:64])
    write(model_dir, "bad-legacy-header-only.bin", legacy(True, 1)[:LEGACY_HEADER.size])
    for name, data in tokenizer_seeds().items():
        write(os.path.join(corpus, "tokenizer"), name, data)
    for name, data in cli_seeds().items():
        write(os.path.join(corpus, "cli"), name, data)
    for name, data in bpe_seeds().items():
        write(os.path.join(corpus, "bpe"), name, data)
    for name, data in gguf_seeds().items():
        write(os.path.join(corpus, "gguf"), name, data)
    for name, data in prompt_cache_seeds().items():
        write(os.path.join(corpus, "prompt_cache"), name, data)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(corpus) for f in fs)
    print(f"wrote {corpus}: {sum(len(fs) for _, _, fs in os.walk(corpus))} files, {total:,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
