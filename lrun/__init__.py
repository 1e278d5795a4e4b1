"""lrun - the Python the exporter, the tests, the benchmark, the scripts and the fuzz corpus share.

    modelfile     our model file's layout (model.h): header fields, tensor order, sizes
    hf_checkpoint reading (and writing) Hugging Face checkpoints: safetensors, index files, .bin
    hf_random     random Hugging Face Llama checkpoint directories, for tests and benchmarks
    rope_ref      an independent float64 reference of every RoPE scaling mode's frequencies

What this is not: an installed package or an API. Entry points put the repository root on
sys.path (`sys.path.insert(0, str(Path(__file__).resolve().parents[1]))`) and import from here.
"""
