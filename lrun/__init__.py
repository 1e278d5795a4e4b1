"""lrun - the Python the exporter, the tests, the benchmark, the scripts and the fuzz corpus share.

    modelfile     our model file's layout (model.h): header fields, tensor order, sizes
    hf_checkpoint reading (and writing) Hugging Face checkpoints: safetensors, index files, .bin
    hf_random     random Hugging Face Llama checkpoint directories, for tests and benchmarks
    rope_ref      an independent float64 reference of every RoPE scaling mode's frequencies

What this is not: an installed package or an API. Entry points put the repository root on
sys.path (`sys.path.insert(0, str(Path(__file__).resolve().parents[1]))`) and import from here.
"""
import os
import shlex
import sys


def install_hint():
    """The hint for a numpy or torch this python3 cannot import: Debian's /usr/bin/python3 has both
    once its packages python3-numpy and python3-torch are installed (setup.sh installs them); a
    python3 earlier on PATH (pyenv's, a virtual environment) may have neither. Imports nothing
    itself, so that it can be called where numpy is missing."""
    install = "apt-get install python3-numpy python3-torch (or ./setup.sh) installs them for /usr/bin/python3"
    if os.path.realpath(sys.executable or "") == os.path.realpath("/usr/bin/python3"):
        return install
    command = f"/usr/bin/python3 {shlex.join(sys.argv)}"
    return f"run it with Debian's /usr/bin/python3, as the README does: {command}; {install}"
