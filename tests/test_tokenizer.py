"""The C tokenizer wrapper (tokenizer.cpp through tests/tools/tok_dump) against Python's SentencePiece.

Both sides are the same library, so what this checks is our wrapper: BOS handling, passing
arbitrary bytes through, and above all the piece-by-piece streaming decoder (leading-space
marker, the dropped dummy-prefix space at the start, byte-fallback pieces like <0x0A>).
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
