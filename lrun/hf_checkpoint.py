"""hf_checkpoint.py - a small, strict reader (and writer) of Hugging Face checkpoint files.

What this is: enough of the safetensors format to read Llama weights as float32 numpy arrays, one
tensor at a time, plus the checkpoint-directory logic around it (sharded *.index.json files and the
older pytorch_model*.bin pickles). The writer exists for lrun/hf_random.py.
What this is not: the `safetensors` package from PyPI (not installed here, none of its code is
used, and this module's name does not shadow it); no zero-copy torch tensors, no writing of
metadata-heavy files, no GPU anything.

The file format (from the safetensors README, "Format"):
    8 bytes    N, an unsigned little-endian 64-bit integer: the size of the header
    N bytes    a UTF-8 JSON object: {name: {"dtype": "F32", "shape": [2, 3],
                                            "data_offsets": [begin, end]}, ...,
                                     "__metadata__": {str: str}}   (optional)
    the rest   the byte buffer; [begin, end) is relative to its start, little-endian, row-major.
Every rule below is checked, and a violation raises CheckpointError naming the file and tensor.
"""
import json
import math
import os
import struct
import sys
from collections import namedtuple

import numpy as np

from lrun import install_hint

# The safetensors dtype names and their item sizes in bytes. Only the float ones can be decoded;
# the rest are known so that a quantized or integer checkpoint fails with a clear message.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
            "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
            "BOOL": 1}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
MAX_HEADER = 100 * 1000 * 1000  # the reference implementation refuses headers above 100 MB


class CheckpointError(Exception):
    """A problem with an input, reported as `<what>: <why> (hint: <fix>)`."""

    def __init__(self, what, why, hint=None):
        super().__init__(f"{what}: {why}" + (f" (hint: {hint})" if hint else ""))


TensorInfo = namedtuple("TensorInfo", "dtype shape begin end")  # begin/end: offsets in the buffer


def _decode(raw, dtype, shape):
    """Little-endian bytes of one tensor -> float32 numpy array of `shape`."""
    if dtype == "F32":
        x = np.frombuffer(raw, dtype="<f4")  # no copy: raw is a fresh bytearray
    elif dtype in ("F16", "F64"):
        x = np.frombuffer(raw, dtype="<f2" if dtype == "F16" else "<f8").astype(np.float32)
    elif dtype == "BF16":
        # bfloat16 is the top half of a float32: put its 16 bits there and reinterpret.
        x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(dtype)
    return x.reshape(shape)


class SafetensorsFile:
    """One .safetensors file: the header is parsed and checked at open; data is read on demand."""

    def __init__(self, path):
        self.path = path
        self.tensors = {}  # name -> TensorInfo
        self.metadata = {}
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise self._err(None, f"file is {size} bytes, too short for the 8-byte header size")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise self._err(None, f"header size {n} is larger than the file ({size} bytes) "
                                      f"or than {MAX_HEADER}", "the file is truncated or not safetensors")
            try:
                header = json.loads(f.read(n).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:  # Recursion: absurd nesting
                raise self._err(None, f"header is not valid JSON ({e})")
        if not isinstance(header, dict):
            raise self._err(None, "header is not a JSON object")
        self.data_start = 8 + n
        self.buffer_size = size - self.data_start
        self.metadata = header.pop("__metadata__", None) or {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry)
        # No two tensors may share bytes: sort by start and compare neighbours.
        spans = sorted((t.begin, t.end, name) for name, t in self.tensors.items() if t.end > t.begin)
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise self._err(n1, f"data_offsets [{b1}, {e1}] overlap tensor {n0} [{b0}, {e0}]")

    def _err(self, name, why, hint="the file is corrupt; download or convert it again"):
        return CheckpointError(f"{self.path}" + (f": tensor {name}" if name else ""), why, hint)

    def _check_entry(self, name, entry):
        if not isinstance(entry, dict):
            raise self._err(name, "header entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in ITEMSIZE:
            raise self._err(name, f"unknown dtype {dtype!r}", f"known dtypes: {', '.join(ITEMSIZE)}")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise self._err(name, f"shape {shape!r} is not a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int and o >= 0 for o in offsets)):
            raise self._err(name, f"data_offsets {offsets!r} is not a pair of non-negative integers")
        begin, end = offsets
        if end < begin:
            raise self._err(name, f"data_offsets [{begin}, {end}] end before they begin")
        if end > self.buffer_size:
            raise self._err(name, f"data_offsets [{begin}, {end}] lie outside the data buffer "
                                  f"({self.buffer_size} bytes)")
        nbytes = math.prod(shape) * ITEMSIZE[dtype]
        if end - begin != nbytes:
            raise self._err(name, f"data_offsets [{begin}, {end}] hold {end - begin} bytes but "
                                  f"shape {shape} of {dtype} needs {nbytes}")
        return TensorInfo(dtype, tuple(shape), begin, end)

    def get(self, name):
        """The tensor as a float32 numpy array (read from disk now; nothing is cached)."""
        t = self.tensors[name]
        if t.dtype not in FLOAT_DTYPES:
            raise self._err(name, f"dtype {t.dtype} is not a floating-point type",
                            "quantized or integer checkpoints are not supported; use a float one")
        with open(self.path, "rb") as f:
            f.seek(self.data_start + t.begin)
            raw = bytearray(t.end - t.begin)
            got = f.readinto(raw)
        if got != len(raw):
            raise self._err(name, "file ended while reading the tensor")
        return _decode(raw, t.dtype, t.shape)


# --- The writer (used by lrun/hf_random.py) ----------------------------------------------------

# A tensor given by its dtype name, shape and data: an array whose raw bytes are written as they
# are (e.g. bfloat16 bits in a uint16 array), or a function returning one, called when its turn
# comes so that a large file is written one tensor at a time.
Raw = namedtuple("Raw", "dtype shape data")

NUMPY_DTYPE = {np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
               np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
               np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL"}


def bf16_bits(x):
    """float32 array -> uint16 array of bfloat16 bits, rounded to nearest, ties to even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def save_file(path, tensors, metadata=None):
    """Write {name: numpy array | Raw} to path as safetensors, tensors in the dict's order."""
    entries, header, offset = [], {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        if not isinstance(t, Raw):
            t = Raw(NUMPY_DTYPE[t.dtype], t.shape, t)
        nbytes = math.prod(t.shape) * ITEMSIZE[t.dtype]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        entries.append((name, t, nbytes))
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad with spaces so the buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, t, nbytes in entries:
            data = t.data() if callable(t.data) else t.data
            data = np.ascontiguousarray(data, dtype=np.asarray(data).dtype.newbyteorder("<"))
            if data.nbytes != nbytes:
                raise ValueError(f"{name}: {data.nbytes} bytes given, {nbytes} expected")
            f.write(memoryview(data.reshape(-1)).cast("B"))


# --- A checkpoint directory -----------------------------------------------------------------------

TORCH_DTYPE_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
                     "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                     "bool": "BOOL"}


class Checkpoint:
    """The weights of a Hugging Face model directory, by tensor name, whatever files hold them.

    Looks for, in this order: model.safetensors.index.json, model.safetensors,
    pytorch_model.bin.index.json, pytorch_model.bin. An index file is {"weight_map": {name: file}}.
    names() and info() are cheap for safetensors (headers only); a .bin shard is a torch pickle
    that has to be loaded whole, so the last one used is kept in memory.
    """

    def __init__(self, model_dir):
        self.dir = model_dir
        self.shard_of = {}  # tensor name -> file name inside dir
        self.files = {}     # file name -> SafetensorsFile (safetensors only)
        self._bin = (None, None)  # (file name, {name: torch tensor}) of the last .bin loaded
        for index, single in (("model.safetensors.index.json", "model.safetensors"),
                              ("pytorch_model.bin.index.json", "pytorch_model.bin")):
            if os.path.exists(os.path.join(model_dir, index)):
                self.shard_of = self._read_index(index)
                break
            if os.path.exists(os.path.join(model_dir, single)):
                self.shard_of = None  # names known once the file is open
                break
        else:
            raise CheckpointError(model_dir, "no model.safetensors, pytorch_model.bin or *.index.json",
                                  "point at a Hugging Face model directory (the one with config.json)")
        self.safetensors = single.endswith(".safetensors")
        if self.shard_of is None:
            if self.safetensors:
                self.shard_of = {n: single for n in self._open(single).tensors}
            else:
                self.shard_of = {n: single for n in self._load_bin(single)}

    def _read_index(self, index):
        path = os.path.join(self.dir, index)
        try:
            with open(path) as f:
                weight_map = json.load(f)["weight_map"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise CheckpointError(path, f"not a valid index file ({e!r})", "expected {\"weight_map\": {...}}")
        if not isinstance(weight_map, dict):
            raise CheckpointError(path, "weight_map is not an object")
        for name, shard in weight_map.items():
            if not isinstance(shard, str) or os.path.basename(shard) != shard or shard in ("", ".", ".."):
                raise CheckpointError(path, f"tensor {name}: shard {shard!r} is not a file name")
            if not os.path.exists(os.path.join(self.dir, shard)):
                raise CheckpointError(path, f"tensor {name}: shard file {shard} is missing",
                                      "download every shard the index lists")
        return dict(weight_map)

    def _open(self, shard):
        if shard not in self.files:
            self.files[shard] = SafetensorsFile(os.path.join(self.dir, shard))
        return self.files[shard]

    def _load_bin(self, shard):
        if self._bin[0] != shard:
            path = os.path.join(self.dir, shard)
            try:
                import torch  # imported only here: it takes a second and safetensors never needs it
            except ImportError as e:
                raise CheckpointError(path, f"is a PyTorch pickle, and {sys.executable} cannot import torch "
                                      f"to read it ({e})", install_hint())
            self._bin = (None, None)  # drop the previous shard before loading the next
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:  # a pickle can fail in many ways; all mean "not a state dict"
                raise CheckpointError(path, f"cannot be loaded by torch.load ({e})",
                                      "the file is corrupt or not a PyTorch state dict")
            if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
                raise CheckpointError(path, "is not a dictionary of tensors")
            self._bin = (shard, state)
        return self._bin[1]

    def names(self):
        return list(self.shard_of)

    def info(self, name):
        """(dtype name as in safetensors, shape tuple) of a tensor."""
        shard = self.shard_of[name]
        if self.safetensors:
            t = self._open(shard).tensors.get(name)
        else:
            t = self._load_bin(shard).get(name)
            if t is not None:
                torch_name = str(t.dtype).replace("torch.", "")  # e.g. torch.bfloat16 -> bfloat16
                t = TensorInfo(TORCH_DTYPE_NAMES.get(torch_name, torch_name), tuple(t.shape), 0, 0)
        if t is None:
            raise CheckpointError(os.path.join(self.dir, shard), f"tensor {name} is listed in the "
                                  "index but not in the file", "the index and the shards disagree")
        return t.dtype, t.shape

    def get(self, name):
        """The tensor as a float32 numpy array."""
        dtype, _ = self.info(name)
        shard = self.shard_of[name]
        if self.safetensors:
            return self._open(shard).get(name)
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(os.path.join(self.dir, shard), f"tensor {name}: dtype {dtype} is not "
                                  "a floating-point type", "quantized checkpoints are not supported")
        import torch
        return self._load_bin(shard)[name].detach().to(torch.float32).contiguous().numpy()
