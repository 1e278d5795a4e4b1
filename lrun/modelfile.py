"""modelfile.py - the layout of our model file (model.h, "The model file format, version 1, 2 or 3"), once.

What this is: the 256-byte header field by field (name, offset, struct code), the order and shapes
of the tensors, the bytes of a matrix in each weight type and where every tensor starts, and the
same for llama2.c's legacy file, which model.c also reads. export/export.py writes files with it;
the tests read them back and damage them with it; bench/bench.py and fuzz/make_corpus.py size and
build files with it.
What this is not: the specification (model.h is; tests/test_export.py checks this header against
its table, and the C loader reads every file the exporter writes), a loader of weights, or a
checker of values (model.c checks them).
"""
import math
import struct

MAGIC, VERSION, HEADER_SIZE, ALIGN, Q8_BLOCK = b"LRUN", 1, 256, 64, 32
# Version 2: a checkpoint with several end tokens; the extra ids go where version 1 has zeros.
VERSION_END_IDS, MAX_END_IDS, END_IDS = 2, 8, struct.Struct("<9i")  # n_end_ids, end_ids[8] at 128
# Version 3: the families past Llama; five int32 at 164, then a table of layer kinds after the
# header (and LongRoPE's factors), and per layer the optional biases and q/k norms.
VERSION_FAMILIES = 3
FAMILY_FIELDS = ("family", "rot_dims", "qkv_bias", "qk_norm", "sliding_window")
FAMILY = struct.Struct("<5i")
FAMILIES = {"llama": 0, "mistral": 1, "qwen2": 2, "qwen3": 3, "smollm3": 4, "phi3": 5,  # Family in model.h
            "gemma2": 6, "gemma3_text": 7, "olmo2": 8, "olmo3": 9, "exaone4": 10, "glm4": 11, "granite": 12,
            "ministral3": 13}
LAYER_NO_ROPE, LAYER_SLIDING, LAYER_ROPE_SWA = 1, 2, 4  # bits of layer_kind (kernels.h)
# Version 4: the layers as data. n_hparams (int32 at 184), the hparams table at 256 (each entry a
# 32-byte NUL-padded name and a float64), then version 3's tables. HPARAMS: each name and its
# default (Llama's; a name left out of the file has it). NORM_*: the bits of "norms" (model.h).
VERSION_HPARAMS, HPARAM = 4, struct.Struct("<32sd")
HPARAMS = {"norms": 5, "act": 0, "f_embedding_scale": 1.0, "f_attention_scale": 0.0,
           "f_attn_logit_softcapping": 0.0, "f_residual_scale": 1.0, "f_logit_scale": 1.0,
           "f_final_logit_softcapping": 0.0, "rope_freq_base_train_swa": 0.0, "f_attn_temp_scale": 0.0,
           "n_attn_temp_floor_scale": 0}
NORM_ATTN, NORM_ATTN_POST, NORM_FFN, NORM_FFN_POST = 1, 2, 4, 8
ACT_SILU, ACT_GELU_TANH = 0, 1
QK_NORM_HEAD, QK_NORM_ALL = 1, 2
LONGROPE = 8  # RopeScaling in rope.h
DTYPES = {"f32": 0, "f16": 1, "q8_0": 2, "q4_0": 3, "bf16": 4, "q8_0_r16": 5, "bf16_r16": 6}  # DType in kernels.h
# What export.py's --dtype NAME writes: q8_0 and bf16 in groups of 16 rows (5, q8_0_r16; 6,
# bf16_r16); the first layouts (2: all rows, then all scales; 4: all rows) are still read by ./run,
# and written only by q8_0_rows and bf16_rows below.
EXPORT_DTYPES = {"f32": 0, "f16": 1, "q8_0": 5, "q4_0": 3, "bf16": 6}
R16, R16_BLOCK_BYTES = 16, 16 * 4 + 16 * 32  # q8_0_r16: rows per group; bytes per group and block

# Field by field as in model.h's table: int32 "i" at offsets 0..63, float64 "d" at 64..127,
# then zeros up to 256. '<' = little-endian, no padding between fields.
HEADER_FIELDS = [
    ("magic", "4s"), ("version", "i"), ("dim", "i"), ("hidden_dim", "i"), ("n_layers", "i"),
    ("n_heads", "i"), ("n_kv_heads", "i"), ("head_dim", "i"), ("vocab_size", "i"),
    ("seq_len", "i"), ("bos_id", "i"), ("eos_id", "i"), ("shared_classifier", "i"),
    ("dtype", "i"), ("rope_scaling", "i"), ("rope_orig_ctx", "i"),
    ("rope_theta", "d"), ("norm_eps", "d"), ("rope_factor", "d"), ("rope_attn_factor", "d"),
    ("rope_beta_fast", "d"), ("rope_beta_slow", "d"), ("rope_low_freq_factor", "d"),
    ("rope_high_freq_factor", "d"),
]
HEADER = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
assert HEADER.size == 128  # the reserved zeros fill the rest of the 256 bytes
CODE = dict(HEADER_FIELDS)
OFFSET = {name: struct.calcsize("<" + "".join(code for _, code in HEADER_FIELDS[:k]))
          for k, (name, _) in enumerate(HEADER_FIELDS)}


def needs_v3(h):
    """Whether the header h describes something only version 3 holds (not a plain Llama)."""
    return (h.get("rope_scaling") == LONGROPE or any(h.get(f) for f in FAMILY_FIELDS)
            or any(h.get("layer_kind") or []))


def needs_v4(h):
    """Whether the header h describes something only version 4 holds: a family past Phi-3, an hparam
    other than its default, q/k norms over the whole projection, or a layer with the local RoPE."""
    return (h.get("family", 0) >= FAMILIES["gemma2"] or h.get("qk_norm", 0) == QK_NORM_ALL
            or any(v != HPARAMS[k] for k, v in (h.get("hparams") or {}).items())
            or any(k & LAYER_ROPE_SWA for k in h.get("layer_kind") or []))


def file_version(h):
    """The version a file of header h is written as: the lowest that holds it."""
    return (VERSION_HPARAMS if needs_v4(h) else VERSION_FAMILIES if needs_v3(h)
            else VERSION_END_IDS if h.get("end_ids") else VERSION)


def hparam_entries(h):
    """[(name, value)] of the hparams table of header h: those that differ from Llama's default."""
    return [(k, float(v)) for k, v in (h.get("hparams") or {}).items() if v != HPARAMS[k]]


def pack_hparams(h):
    """The bytes of the hparams table (version 4; model.h)."""
    return b"".join(HPARAM.pack(k.encode(), v) for k, v in hparam_entries(h))


def pack_header(h):
    """The 256 header bytes of a dict with every field of HEADER_FIELDS, in the lowest version that
    holds it (file_version): with a non-empty h["end_ids"] (ids that end the text besides eos_id)
    they follow at 128; version 3 adds FAMILY_FIELDS at 164."""
    end_ids = list(h.get("end_ids") or [])
    assert len(end_ids) <= MAX_END_IDS, end_ids
    version = file_version(h)
    fields = dict(h, version=version)
    head = HEADER.pack(*(fields[name] for name, _ in HEADER_FIELDS))
    if version >= VERSION_END_IDS:
        head += END_IDS.pack(len(end_ids), *(end_ids + [0] * (MAX_END_IDS - len(end_ids))))
    if version >= VERSION_FAMILIES:
        head += FAMILY.pack(*(int(h.get(f) or 0) for f in FAMILY_FIELDS))
    if version >= VERSION_HPARAMS:
        head += struct.pack("<i", len(hparam_entries(h)))
    return head + bytes(HEADER_SIZE - len(head))


def read_header(buf):
    """{field: value} of the first 256 bytes, plus "end_ids" (a list, empty in version 1), the
    FAMILY_FIELDS (0 before version 3) and "reserved": bytes 128..255 (version 1), 164..255
    (version 2) or 184..255 (version 3)."""
    h = dict(zip(CODE, HEADER.unpack_from(buf)))
    h["end_ids"] = []
    h.update((f, 0) for f in FAMILY_FIELDS)
    start = HEADER.size
    if h["version"] >= VERSION_END_IDS:
        n, *ids = END_IDS.unpack_from(buf, HEADER.size)
        h["end_ids"], start = ids[:n], HEADER.size + END_IDS.size
    if h["version"] >= VERSION_FAMILIES:
        h.update(zip(FAMILY_FIELDS, FAMILY.unpack_from(buf, start)))
        start += FAMILY.size
    if h["version"] >= VERSION_HPARAMS:
        n, = struct.unpack_from("<i", buf, start)
        start += 4
        h["hparams"] = {}
        for e in range(n if 0 <= n <= 64 and len(buf) >= HEADER_SIZE + n * HPARAM.size else 0):
            name, v = HPARAM.unpack_from(buf, HEADER_SIZE + e * HPARAM.size)
            h["hparams"][name.rstrip(b"\0").decode("ascii", "replace")] = v
    h["reserved"] = bytes(buf[start:HEADER_SIZE])
    return h


def set_field(buf, name, value):
    """Write one header field into a bytearray holding a model file."""
    struct.pack_into("<" + CODE[name], buf, OFFSET[name], value)


# --- The tensors ------------------------------------------------------------------------------------

LAYER_TENSORS = ("rms_att", "wq", "bq", "wk", "bk", "wv", "bv", "q_norm", "k_norm", "wo", "post_att", "rms_ffn", "w1",
                 "w2", "w3", "post_ffn")  # loader.c's LAYER_TENSORS, the same order
VECTORS = {"rms_att", "rms_ffn", "bq", "bk", "bv", "q_norm", "k_norm", "post_att", "post_ffn"}  # f32 whatever the dtype


def tensors(h):
    """[(name, shape, kind)] in file order; kind "norm" (an f32 vector), "matrix" (h["dtype"]),
    "i32" or "f64" (version 3's tables)."""
    D, F, V, hd = h["dim"], h["hidden_dim"], h["vocab_size"], h["head_dim"]
    q, kv = h["n_heads"] * hd, h["n_kv_heads"] * hd
    shapes = {"rms_att": (D,), "wq": (q, D), "bq": (q,), "wk": (kv, D), "bk": (kv,), "wv": (kv, D), "bv": (kv,),
              "q_norm": (hd,), "k_norm": (hd,), "wo": (D, q), "rms_ffn": (D,), "w1": (F, D), "w2": (D, F),
              "w3": (F, D), "post_att": (D,), "post_ffn": (D,)}
    if h.get("qk_norm") == QK_NORM_ALL:  # OLMo 2: over the whole projection
        shapes.update(q_norm=(q,), k_norm=(kv,))
    skip = set() if h.get("qkv_bias") else {"bq", "bk", "bv"}
    skip |= set() if h.get("qk_norm") else {"q_norm", "k_norm"}
    norms = dict(HPARAMS, **(h.get("hparams") or {}))["norms"]
    skip |= {name for name, bit in (("rms_att", NORM_ATTN), ("post_att", NORM_ATTN_POST), ("rms_ffn", NORM_FFN),
                                    ("post_ffn", NORM_FFN_POST)) if not int(norms) & bit}
    t = []
    if file_version(h) >= VERSION_HPARAMS:
        t.append(("hparams", (len(hparam_entries(h)),), "hparams"))
    if file_version(h) >= VERSION_FAMILIES:
        t.append(("layer_kind", (h["n_layers"],), "i32"))
        if h["rope_scaling"] == LONGROPE:
            pairs = (h.get("rot_dims") or hd) // 2
            t += [("rope_short_factor", (pairs,), "f64"), ("rope_long_factor", (pairs,), "f64")]
    t.append(("token_embedding", (V, D), "matrix"))
    for l in range(h["n_layers"]):
        t += [(f"layers.{l}.{name}", shapes[name], "norm" if name in VECTORS else "matrix")
              for name in LAYER_TENSORS if name not in skip]
    t.append(("rms_final", (D,), "norm"))
    if not h["shared_classifier"]:
        t.append(("wcls", (V, D), "matrix"))
    return t


def matrix_parts(rows, cols, dtype):
    """Bytes of the pieces of a (rows, cols) matrix, each starting at a multiple of ALIGN: f32, f16,
    bf16, q8_0_r16 and bf16_r16 one piece; q8_0 the int8 values (rows padded to a multiple of 32) and the float32 scales;
    q4_0 the 4-bit values (16 bytes per block of 32) and the f16 scales."""
    cp = -(-cols // Q8_BLOCK) * Q8_BLOCK
    if dtype == DTYPES["q8_0_r16"]:  # whole groups of 16 rows, each block's scales and values together
        return [-(-rows // R16) * (cp // Q8_BLOCK) * R16_BLOCK_BYTES]
    if dtype == DTYPES["bf16_r16"]:  # whole groups of 16 rows, each row cp columns of bf16
        return [-(-rows // R16) * R16 * cp * 2]
    if dtype == DTYPES["q8_0"]:
        return [rows * cp, rows * cp // Q8_BLOCK * 4]
    if dtype == DTYPES["q4_0"]:
        return [rows * cp // 2, rows * cp // Q8_BLOCK * 2]
    return [rows * cols * (4 if dtype == DTYPES["f32"] else 2)]


def r16_from_rows(q, d):
    """q8_0's int8 q (rows, cp) and float32 d (rows, cp/32) -> the bytes of q8_0_r16 (model.h): groups
    of 16 rows (the last one filled up with zero rows), per group and block of 32 columns the 16
    scales, then 512 bytes where bytes 64k .. 64k+63 are values 4k .. 4k+3 of rows 0 .. 15, each q + 128."""
    import numpy as np
    rows, cp = q.shape
    nb, groups = cp // Q8_BLOCK, -(-rows // R16)
    qq = np.full((groups * R16, cp), 128, np.uint8)  # zero rows: q + 128 = 128
    qq[:rows] = (q.astype(np.int16) + 128).astype(np.uint8)
    dd = np.zeros((groups * R16, nb), "<f4")
    dd[:rows] = d
    values = qq.reshape(groups, R16, nb, Q8_BLOCK // 4, 4).transpose(0, 2, 3, 1, 4).reshape(groups, nb, 512)
    scales = dd.reshape(groups, R16, nb).transpose(0, 2, 1).copy().view(np.uint8)  # (groups, nb, 64)
    return np.concatenate([scales, values], axis=2).tobytes()


def rows_from_r16(buf, rows, cols):
    """The inverse of r16_from_rows: (q int8 (rows, cp), d float32 (rows, cp/32)) of a q8_0_r16 matrix's bytes."""
    import numpy as np
    cp = -(-cols // Q8_BLOCK) * Q8_BLOCK
    nb, groups = cp // Q8_BLOCK, -(-rows // R16)
    g = np.frombuffer(buf, np.uint8, groups * nb * R16_BLOCK_BYTES).reshape(groups, nb, R16_BLOCK_BYTES)
    d = g[:, :, :64].copy().view("<f4").reshape(groups, nb, R16).transpose(0, 2, 1).reshape(groups * R16, nb)
    v = g[:, :, 64:].reshape(groups, nb, Q8_BLOCK // 4, R16, 4).transpose(0, 3, 1, 2, 4).reshape(groups * R16, cp)
    return (v.astype(np.int16) - 128).astype(np.int8)[:rows], d[:rows].astype(np.float32)


def q8_0_rows(data):
    """A model file in q8_0_r16 (bytes) rewritten in the first q8_0 layout (dtype 2: each matrix's rows,
    then its scales at the next multiple of ALIGN), the same numbers: a file as exporters before
    q8_0_r16 wrote it, which ./run still reads (the tests hold the two to the same results)."""
    h = read_header(data)
    assert h["dtype"] == DTYPES["q8_0_r16"], h["dtype"]

    def parts(buf, shape):
        q, d = rows_from_r16(buf, *shape)
        return [q.tobytes(), d.astype("<f4").tobytes()]
    return relayout(data, h, DTYPES["q8_0"], parts)


def relayout(data, h, dtype, parts):
    """The file of header h (bytes data) with its matrices written as dtype: parts(bytes, shape) gives
    a matrix's pieces in the new layout from its bytes in the old; every other tensor is copied as it is."""
    out = bytearray(data[:HEADER_SIZE])
    set_field(out, "dtype", dtype)
    for (name, shape, kind, pieces), (_, _, _, to) in zip(layout(h), layout(dict(h, dtype=dtype))):
        if kind == "matrix":
            (at, n), = pieces
            new = parts(data[at:at + n], shape)
        else:
            new = [bytes(data[at:at + n]) for at, n in pieces]
        for (start, n), part in zip(to, new):
            assert len(part) == n
            out += bytes(start - len(out)) + part
    return bytes(out)


def br16_from_rows(b):
    """bf16 bits b (rows, cols) uint16 -> the bytes of bf16_r16 (model.h): groups of 16 rows (the last
    filled up with zero rows), each row zero-padded to cp columns; per group, pair p of columns of rows
    0 .. 15 as 16 words, column 2p in the low half of each."""
    import numpy as np
    rows, cols = b.shape
    cp, groups = -(-cols // Q8_BLOCK) * Q8_BLOCK, -(-rows // R16)
    full = np.zeros((groups * R16, cp), "<u2")
    full[:rows, :cols] = b
    return full.reshape(groups, R16, cp // 2, 2).transpose(0, 2, 1, 3).tobytes()


def rows_from_br16(buf, rows, cols):
    """The inverse of br16_from_rows: the bf16 bits (rows, cols) uint16 of a bf16_r16 matrix's bytes."""
    import numpy as np
    cp, groups = -(-cols // Q8_BLOCK) * Q8_BLOCK, -(-rows // R16)
    g = np.frombuffer(buf, "<u2", groups * R16 * cp).reshape(groups, cp // 2, R16, 2)
    return g.transpose(0, 2, 1, 3).reshape(groups * R16, cp)[:rows, :cols].copy()


def bf16_rows(data):
    """A model file in bf16_r16 (bytes) rewritten in the first bf16 layout (dtype 4: each matrix's rows
    as they are), the same numbers: a file as exporters before bf16_r16 wrote it, which ./run still
    reads (in its own order of sums)."""
    h = read_header(data)
    assert h["dtype"] == DTYPES["bf16_r16"], h["dtype"]
    return relayout(data, h, DTYPES["bf16"], lambda buf, shape: [rows_from_br16(buf, *shape).tobytes()])


def matrix_bytes(rows, cols, dtype):
    """Bytes of a matrix without padding (kernels.c matrix_data_bytes + matrix_scale_bytes)."""
    return sum(matrix_parts(rows, cols, dtype))


def layout(h):
    """[(name, shape, kind, [(offset, bytes) of each piece])] in file order, for the header h.
    Python integers: exact for any header, however large the file it describes."""
    out, end = [], HEADER_SIZE
    for name, shape, kind in tensors(h):
        size = {"norm": 4, "i32": 4, "f64": 8, "hparams": HPARAM.size}.get(kind)
        parts = [size * math.prod(shape)] if size else matrix_parts(*shape, h["dtype"])
        pieces = []
        for n in parts:
            start = -(-end // ALIGN) * ALIGN
            pieces.append((start, n))
            end = start + n
        out.append((name, shape, kind, pieces))
    return out


def file_size(h):
    """Bytes of the file the header h describes: it ends where its last tensor ends."""
    offset, n = layout(h)[-1][3][-1]
    return offset + n


# --- llama2.c's legacy file (model.c reads it too; data/stories260K/stories260K.bin is one) ---------
# Seven int32, then float32 tensors back to back, each one stacked over the layers. A negative
# vocab_size means the classifier is not the embedding: it follows, after the RoPE tables.

LEGACY_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
LEGACY_HEADER = struct.Struct("<7i")


def legacy_tensors(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len):
    """[(name, shape)] of a legacy file's float32 tensors, in file order."""
    kv, half = dim * n_kv_heads // n_heads, dim // n_heads // 2
    t = [("token_embedding", (abs(vocab_size), dim)), ("rms_att", (n_layers, dim)),
         ("wq", (n_layers, dim, dim)), ("wk", (n_layers, kv, dim)), ("wv", (n_layers, kv, dim)),
         ("wo", (n_layers, dim, dim)), ("rms_ffn", (n_layers, dim)), ("w1", (n_layers, hidden_dim, dim)),
         ("w2", (n_layers, dim, hidden_dim)), ("w3", (n_layers, hidden_dim, dim)), ("rms_final", (dim,)),
         ("freq_cis_real", (seq_len, half)), ("freq_cis_imag", (seq_len, half))]
    if vocab_size < 0:
        t.append(("wcls", (-vocab_size, dim)))
    return t
