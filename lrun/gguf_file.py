"""gguf_file.py - a GGUF file (llama.cpp's format: its docs/gguf.md) read in Python, once, from the
format's definition: the metadata and where each tensor's bytes are. No code is shared with gguf.c, so
the tests that check ./run's reading of a GGUF file against this one check two readers.

What this is: read_gguf, and the sizes of the ggml types the program runs (GGML_SIZES), for
tests/test_gguf.py (which dequantizes tensors with them) and bench/versus.py (which counts the bytes
a decode step reads). What this is not: a checker of hostile files (gguf.c is; this one trusts its
input and asserts only the magic and the version) or a dequantizer.
"""
import mmap
import struct

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
