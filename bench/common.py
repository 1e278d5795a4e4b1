"""common.py - what bench.py and versus.py both use: the shapes, their checkpoints, the prompts, one
./run's timing line, and the machine's description.

bench.py (`make bench`) imports this and versus.py (the comparison with peers such as llama.cpp and
ik_llama.cpp, which bench.py starts for --peer); versus.py imports only this, so versus.py never
imports bench.py.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for lrun
from lrun import modelfile  # noqa: E402  (the header and the bytes of a matrix)

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
PYTHON = "/usr/bin/python3"  # Debian's: torch, numpy, sentencepiece
TEXT = DATA / "text" / "tinystories_validation_head.txt"
LLAMA_TOKENIZER = DATA / "llama2" / "tokenizer.model"

SHAPES = {  # name -> how to make it, its tokenizer
    "stories260k": dict(hf=DATA / "stories260K-hf", tokenizer=DATA / "stories260K" / "tokenizer.model"),
    "110m": dict(preset="110m", tokenizer=LLAMA_TOKENIZER),
    "tinyllama": dict(preset="tinyllama", tokenizer=LLAMA_TOKENIZER),
    # Run only when named (--shape gemma3-1b): Gemma 3 1B's layers (5 sliding of 512 : 1 global) and its
    # 262144-word classifier; the Llama 2 tokenizer writes its prompts (ids below 32000 of the 262144).
    "gemma3-1b": dict(preset="gemma3-1b", tokenizer=LLAMA_TOKENIZER, named_only=True),
}
DEFAULT_SHAPES = [name for name, spec in SHAPES.items() if not spec.get("named_only")]
DTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")

RUN_ENV = dict(os.environ)  # what ./run sees: this environment plus bench.py's --env
RUN_FLAGS = []  # bench.py's --ours-flags: added to every ./run of a comparison with peers (versus.py)

# ./run's timing line (stderr): prompt tokens, s, tok/s | generated tokens, decode steps, s, tok/s | threads.
TIMING = re.compile(r"prompt: (\d+) tokens? in ([\d.]+) s \(([\d.]+) tok/s\) \| generation: (\d+) tokens?, "
                    r"(\d+) decode steps? in ([\d.]+) s \(([\d.]+) tok/s\) \| threads (\d+)")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fresh_pages(*paths):
    """Drop each file's pages from the page cache and read it once, so that every program of a round
    maps pages read moments ago. On the Zen 5 VM (docs/speed.md, "Stale pages") a file whose cached
    pages sat unused read at 0.35-0.5 GB/s through mmap, pass after pass, until read afresh (6 GB/s);
    one such file made our f32 decode look 4x slower than llama.cpp's."""
    for path in paths:
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while f.read(1 << 24):
                pass


# --- Checkpoints -----------------------------------------------------------------------------------

def checkpoint(cache, shape, dtype):
    """cache/SHAPE-DTYPE.bin, made on first use (HF directory -> export.py --dtype)."""
    out = cache / f"{shape}-{dtype}.bin"
    if out.exists():
        return out
    spec = SHAPES[shape]
    hf = spec.get("hf")
    if hf is None:
        hf = cache / f"hf-{shape}"
        if not (hf / "config.json").exists():
            log(f"bench: writing random weights of the {shape} shape into {hf}")
            subprocess.run([PYTHON, "-m", "lrun.hf_random", str(hf), "--preset", spec["preset"]], cwd=REPO,
                           check=True)
    log(f"bench: exporting {out.name}")
    subprocess.run([PYTHON, str(REPO / "export" / "export.py"), str(hf), str(out), "--dtype", dtype], check=True)
    if spec.get("preset") and all((cache / f"{shape}-{d}.bin").exists() for d in DTYPES):
        shutil.rmtree(hf)  # every weight type exported: the float32 HF copy is not needed any more
    return out


def read_header(path):
    """model.h's header of a model file, as a dict (lrun/modelfile.py)."""
    with open(path, "rb") as f:
        h = modelfile.read_header(f.read(modelfile.HEADER_SIZE))
    assert h["magic"] == modelfile.MAGIC, f"{path}: not a model file"
    return h


# --- Prompts ---------------------------------------------------------------------------------------

def prompt_text(tokenizer, n_tokens):
    """TinyStories text that the tokenizer turns into exactly n_tokens - 1 tokens (run adds BOS)."""
    try:
        import sentencepiece as spm
    except ImportError:
        raise SystemExit(f"error: no sentencepiece module in {sys.executable} (hint: make bench, or {PYTHON})")
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    ids = sp.encode(TEXT.read_text())
    want = n_tokens - 1
    for cut in range(want, want - 50, -1):  # a decoded cut can re-encode differently; find one that does not
        for extra in range(0, 50):
            text = sp.decode(ids[:cut]) + " a" * extra
            got = len(sp.encode(text))
            if got == want:
                return text
            if got > want:
                break
    raise SystemExit(f"bench: cannot build a prompt of {n_tokens} tokens with {tokenizer}")


# --- The machine -----------------------------------------------------------------------------------

def machine():
    name = "unknown CPU"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            name = line.split(":", 1)[1].strip()
    return f"{name}, {os.cpu_count()} cores"


def loadavg():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def commit():
    """The repository's commit, short, for a table's header."""
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
