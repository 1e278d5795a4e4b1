"""The C tokenizer wrapper (tokenizer.cpp through tests/tools/tok_dump) against Python's SentencePiece.

Both sides are the same library, so what this checks is our wrapper: BOS handling, passing
arbitrary bytes through, and above all the piece-by-piece streaming decoder (leading-space
marker, the dropped dummy-prefix space at the start, byte-fallback pieces like <0x0A>). At the
end, Phi-3's added tokens (tokenizer_config.json) against a reference that cuts the text at them as
Hugging Face does and encodes each part with Python's SentencePiece.
"""
import subprocess

import pytest
import sentencepiece

from conftest import LLAMA_TOK, TOK512, TOOLS

TOKENIZERS = {
    "tok512": TOK512,
    "llama2": LLAMA_TOK,
}

TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "Hello world",
    " leading space",
    "   three leading spaces",
    "repeated    spaces   inside",
    "trailing space ",
    "line one\nline two\n\nafter a blank line\n",
    "\n\nstarts with newlines",
    "tabs\tand\ttabs",
    "digits 1234567890 and 3.14159 and 2024-11-21",
    "unicode: café naïve Ωμέγα 中文字符 日本語 한국어",
    "emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧",
    "rare bytes: \u00a0 \u200b \u2581 \u0007",
    "",
    "a",
]


def tok_dump(tokenizer, mode, data):
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), mode], input=data, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_matches_python(name, c_tools):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(TOKENIZERS[name]))
    for text in TEXTS:
        ours = [int(x) for x in tok_dump(TOKENIZERS[name], "encode", text.encode()).split()]
        expected = [sp.bos_id()] + sp.encode(text)
        assert ours == expected, f"{name}: {text!r}: ours {ours} python {expected}"
    print(f"{name}: {len(TEXTS)} strings encode to the same ids as Python SentencePiece")


@pytest.mark.parametrize("name", TOKENIZERS)
def test_streamed_decode_round_trips(name, c_tools):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(TOKENIZERS[name]))
    byte_pieces = 0
    for text in TEXTS:
        ids = [sp.bos_id()] + sp.encode(text)
        byte_pieces += sum(sp.is_byte(i) for i in ids)
        streamed = tok_dump(TOKENIZERS[name], "decode", " ".join(map(str, ids)).encode())
        assert streamed.decode("utf-8") == sp.decode(ids), f"{name}: {text!r}"
    # The emoji and CJK strings must have gone through byte fallback, or this test proves less.
    assert byte_pieces > 0
    print(f"{name}: streamed decode equals SentencePiece's decode ({byte_pieces} byte pieces)")


def test_byte_piece_is_its_byte(c_tools):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(TOKENIZERS["tok512"]))
    newline = sp.piece_to_id("<0x0A>")
    assert sp.is_byte(newline)
    word = sp.encode("Lily")[0]
    out = tok_dump(TOKENIZERS["tok512"], "decode", f"{word} {newline} {word}".encode())
    assert out == b"Lily\n Lily", out  # the first word loses its marker's space, the second keeps it


def test_vocab_and_special_ids(c_tools):
    # vocab prints the size and the BOS and EOS ids an encoded text gets: SentencePiece's BOS first,
    # no EOS (as Hugging Face's LlamaTokenizer: add_bos_token true, add_eos_token false).
    for name, path in TOKENIZERS.items():
        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        vocab, bos, eos = map(int, tok_dump(path, "vocab", b"").split())
        assert (vocab, bos, eos) == (sp.get_piece_size(), sp.bos_id(), -1), name


def test_invalid_utf8_and_bad_ids_do_not_crash(c_tools):
    out = tok_dump(TOKENIZERS["tok512"], "encode", b"\xff\xfe broken \xc3 utf8 \xed\xa0\x80")
    assert out.split()[0] == b"1"
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(TOKENIZERS["tok512"]), "decode"],
                          input=b"1 99999", capture_output=True)
    assert proc.returncode == 1 and b"not a token id" in proc.stderr


# --- Phi-3 and Phi-3.5: Llama 2's tokenizer.model and the added tokens of tokenizer_config.json -----
#
# Phi-3's tokenizer.model is Llama 2's (32000 pieces); its chat markers are added tokens 32000..32010,
# listed in tokenizer_config.json's added_tokens_decoder (below, as Phi-3-mini-4k-instruct and
# Phi-3.5-mini-instruct publish it), with rstrip true: <|end|> takes the newline the template puts
# after it. Hugging Face's tokenizer cuts the text at added tokens and encodes each part alone with
# its leading-space marker; the reference here does that with Python's SentencePiece.

def _phi3_added():
    names = {32000: "<|endoftext|>", 32001: "<|assistant|>", 32006: "<|system|>", 32007: "<|end|>", 32010: "<|user|>"}
    names.update({32002 + k: f"<|placeholder{k + 1}|>" for k in range(4)})
    names.update({32008: "<|placeholder5|>", 32009: "<|placeholder6|>"})
    entry = lambda content, rstrip, special: {"content": content, "lstrip": False, "normalized": False,  # noqa: E731
                                              "rstrip": rstrip, "single_word": False, "special": special}
    added = {"0": entry("<unk>", False, True), "1": entry("<s>", False, True), "2": entry("</s>", True, False)}
    added.update({str(i): entry(c, i != 32000, True) for i, c in sorted(names.items())})
    return added


PHI3_CONFIG = {"add_bos_token": False, "add_eos_token": False, "bos_token": "<s>", "eos_token": "<|endoftext|>",
               "added_tokens_decoder": _phi3_added(), "legacy": False, "tokenizer_class": "LlamaTokenizer"}
RUST_WHITE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}


@pytest.fixture
def phi3(tmp_path):
    (tmp_path / "tokenizer.model").symlink_to(LLAMA_TOK)
    (tmp_path / "tokenizer_config.json").write_text(__import__("json").dumps(PHI3_CONFIG))
    return tmp_path / "tokenizer.model"


_SP = {}


def _llama2_sp():
    if not _SP:
        _SP["llama2"] = sentencepiece.SentencePieceProcessor(model_file=str(LLAMA_TOK))
    return _SP["llama2"]


def phi3_reference(text, added=None):
    """Hugging Face's encoding of text with Phi-3's files, by Python's SentencePiece."""
    import re
    sp = _llama2_sp()
    added = {a["content"]: (int(i), a["rstrip"]) for i, a in (added or PHI3_CONFIG["added_tokens_decoder"]).items()
             if int(i) >= 32000}
    pattern = re.compile("|".join(re.escape(c) for c in sorted(added, key=len, reverse=True)))
    ids, start = [], 0
    while (m := pattern.search(text, start)):
        ids += sp.encode(text[start:m.start()]) if m.start() > start else []
        token, rstrip = added[m.group()]
        ids.append(token)
        start = m.end()
        while rstrip and start < len(text) and text[start] in RUST_WHITE:
            start += 1
    return ids + (sp.encode(text[start:]) if start < len(text) else [])


def phi3_texts(n, seed):
    import random
    rng = random.Random(seed)
    parts = ["<|user|>", "<|assistant|>", "<|end|>", "<|system|>", "<|endoftext|>", "<|placeholder3|>", "<|end",
             "<s>", "</s>", "\n", " ", "  ", "\n\n", "\t", "\u3000", "\u00a0", "Hello", " world", "What's 12+30?",
             "café", "日本語", "🦙", "Ωμέγα"]
    return ["".join(rng.choice(parts) for _ in range(rng.randrange(1, 12))) for _ in range(n)]


def test_phi3_added_tokens_match_reference(c_tools, phi3):
    """Random strings of Phi-3's markers, white space and text: the same ids as the reference; the
    vocabulary is 32011 (the checkpoint pads its embeddings to 32064) and no BOS is added
    (add_bos_token false). A control without rstrip must differ."""
    texts = phi3_texts(500, seed=21)
    assert tok_dump(phi3, "vocab", b"").split() == [b"32011", b"-1", b"-1"]
    assert tok_dump(phi3, "encode", b"<|user|>\nHi<|end|>\n<|assistant|>\n").split() == [b"32010", b"6324", b"32007",
                                                                                         b"32001"]
    records = b"".join(b"%d\n" % len(t.encode()) + t.encode() for t in texts)
    ours = [[int(x) for x in line.split(b"\t")[0].split()] for line in tok_dump(phi3, "batch", records).split(b"\n")[:-1]]
    bad = [(t, o, phi3_reference(t)) for t, o in zip(texts, ours) if o != phi3_reference(t)]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first {bad[0]!r}"
    no_strip = {i: dict(a, rstrip=False) for i, a in PHI3_CONFIG["added_tokens_decoder"].items()}
    control = sum(o != phi3_reference(t, no_strip) for t, o in zip(texts, ours))
    assert control > 100
    print(f"phi3: {len(texts)} strings, {sum(map(len, ours))} ids as the reference; "
          f"{control} differ from it without rstrip")


def test_phi3_streamed_decode(c_tools, phi3):
    """Streamed pieces give the text back without the special tokens and the white space rstrip
    took; the part after a marker starts without the space its own leading-space marker stands for."""
    import re
    for text in phi3_texts(200, seed=22):
        ids = phi3_reference(text)
        expected = re.sub(r"(<\|(?:user|assistant|end|system|placeholder\d)\|>)[" + "".join(sorted(RUST_WHITE)) + "]*",
                          "", text).replace("<|endoftext|>", "")
        streamed = tok_dump(phi3, "decode", " ".join(map(str, ids)).encode()).decode()
        assert streamed == expected, (text, ids, streamed)


def test_added_token_single_word_refused(c_tools, phi3):
    config = dict(PHI3_CONFIG, added_tokens_decoder={"32000": {"content": "<|x|>", "single_word": True}})
    (phi3.parent / "tokenizer_config.json").write_text(__import__("json").dumps(config))
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(phi3), "vocab"], capture_output=True, text=True)
    assert proc.returncode == 1 and "tokenizer_config.json: added_tokens_decoder: \"<|x|>\" has single_word" in proc.stderr
