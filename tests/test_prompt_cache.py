"""The prompt cache (./run --prompt-cache FILE, promptcache.h): what a later prompt takes from it is
what it would have computed, bit for bit, and a file that cannot serve a run is left as it is.

The exactness test: a prompt P runs and writes FILE; P followed by more text then runs with FILE,
takes P's keys and values from it, runs only the rest (in blocks of another size) and, since its
prompt begins with all of FILE's tokens, writes FILE again with the whole prompt. A run of the long
prompt without any cache writes a second file. The two files must be the same bytes: every key and
value of every layer and position, in the cache's own type, equal to the last bit, and so are the
generated texts. Each extension mode with the far path or chunks (where a block's queries split
keys between two rotations), log-n on top of YaRN, and an f16 cache. The negative control: one
bit of one cached value flipped in P's file makes the extended file differ from the fresh one, so
the comparison sees a wrong reused number.
"""
import re
import shutil
import subprocess

import pytest

from conftest import REPO, STORIES_BIN, TEXT, TOK512

RUN = str(REPO / "run")
HEADER = 64


def texts():
    """A prompt of about 600 tokens of stories260K's tokenizer and the same with about 100 more,
    both ending at a sentence's end, so that the short one's tokens begin the long one's."""
    words = TEXT.read_text().split()
    short = " ".join(words[:240])
    long = " ".join(words[:290])
    return short[:short.rindex(".") + 1], long[:long.rindex(".") + 1]


def run(*args, check=True):
    p = subprocess.run([RUN, str(STORIES_BIN), "-z", str(TOK512), *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def from_cache(stderr):
    """(tokens run, tokens from the cache, written) from the summary line."""
    m = re.search(r"prompt: (\d+) tokens? in .*?\(and (\d+) from the prompt cache(, then written)?", stderr)
    assert m, stderr
    return int(m[1]), int(m[2]), bool(m[3])


def data_start(blob):
    """Where a cache file's keys and values start: after the header, the settings text and the ids."""
    tokens, text = int.from_bytes(blob[8:12], "little"), int.from_bytes(blob[32:36], "little")
    return HEADER + text + 4 * tokens


MODES = {
    "rerope": ["--rope-scaling", "rerope"],
    "leaky-rerope": ["--rope-scaling", "leaky-rerope"],
    "selfextend": ["--rope-scaling", "selfextend"],
    "dca": ["--rope-scaling", "dca"],
    "yarn-logn": ["--rope-scaling", "yarn", "--attn-logn"],
    "none-f16-cache": ["-ctk", "f16", "-ctv", "f16"],
}


@pytest.mark.parametrize("mode", MODES)
def test_continued_prompt_is_the_fresh_one_bit_for_bit(tmp_path, c_tools, mode):
    short, long = texts()
    flags = ["--ctx", 1024, "-n", 8, "-t", 0, *MODES[mode]]
    a, b = tmp_path / "a.cache", tmp_path / "b.cache"
    n_short, reused, written = from_cache(run("-i", short, "--prompt-cache", a, *flags).stderr)
    assert reused == 0 and written and n_short > 512  # past the trained 512: the modes' far paths run
    extended = run("-i", long, "--prompt-cache", a, *flags, "-b", 37)
    n_rest, reused, written = from_cache(extended.stderr)
    assert reused == n_short and written and n_rest > 50, extended.stderr
    fresh = run("-i", long, "--prompt-cache", b, *flags)
    assert from_cache(fresh.stderr)[1:] == (0, True)
    assert extended.stdout == fresh.stdout
    ab, bb = a.read_bytes(), b.read_bytes()
    assert len(ab) == len(bb) and ab == bb, f"{sum(x != y for x, y in zip(ab, bb))} bytes differ"
    print(f"{mode}: {n_short} tokens from the cache + {n_rest} run = the fresh run's {len(bb)} bytes")


def test_a_wrong_reused_number_shows(tmp_path, c_tools):
    """The control: one bit of one cached value of P's file flipped, the extended file differs."""
    short, long = texts()
    flags = ["--ctx", 1024, "-n", 8, "-t", 0, "--rope-scaling", "rerope"]
    a, b = tmp_path / "a.cache", tmp_path / "b.cache"
    run("-i", short, "--prompt-cache", a, *flags)
    blob = bytearray(a.read_bytes())
    blob[len(blob) - 4 * 8 * 3 + 1] ^= 1  # the last layer's last kv head: a value three positions from the end
    a.write_bytes(blob)
    assert from_cache(run("-i", long, "--prompt-cache", a, *flags).stderr)[2]
    run("-i", long, "--prompt-cache", b, *flags)
    ab, bb = a.read_bytes(), b.read_bytes()
    assert ab[:data_start(ab)] == bb[:data_start(bb)] and ab != bb


def test_a_prompt_that_shares_less_reads_and_leaves_it(tmp_path, c_tools):
    short, long = texts()
    a = tmp_path / "a.cache"
    run("-i", long, "--prompt-cache", a, "--ctx", 1024, "-n", 2)
    before = a.read_bytes()
    n, reused, written = from_cache(run("-i", short + " Then the end.", "--prompt-cache", a, "--ctx", 1024,
                                        "-n", 2).stderr)
    assert 0 < reused < n + reused and not written and a.read_bytes() == before
    # the same prompt again: all but its last token from the cache (its logits are needed)
    n, reused, written = from_cache(run("-i", long, "--prompt-cache", a, "--ctx", 1024, "-n", 2).stderr)
    assert n == 1 and not written and a.read_bytes() == before


def test_other_settings_are_not_used(tmp_path, c_tools):
    short, _ = texts()
    model = tmp_path / "model.bin"
    shutil.copy(STORIES_BIN, model)
    a = tmp_path / "a.cache"
    run("-i", short, "--prompt-cache", a, "--ctx", 1024, "--rope-scaling", "rerope")
    before = a.read_bytes()
    for other, why in ((["--rope-scaling", "dca"], "rope dca"), (["--rope-scaling", "rerope", "--attn-logn"],
                                                                  "attn-logn 1"),
                       (["--rope-scaling", "rerope", "--rope-window", "100"], "window 100"),
                       (["--rope-scaling", "rerope", "-ctv", "f16"], "another model or cache type")):
        p = run("-i", short, "--prompt-cache", a, "--ctx", 1024, *other)
        assert "is not used and is left as it is" in p.stderr and why in p.stderr, p.stderr
        assert from_cache(p.stderr)[1:] == (0, False) and a.read_bytes() == before
    # the context alone is not a setting: a larger one with the same RoPE numbers takes it
    assert from_cache(run("-i", short, "--prompt-cache", a, "--ctx", 2048, "--rope-scaling", "rerope").stderr)[1] > 0
    # another model file (the same bytes, a copy: another file on disk) is refused
    p = subprocess.run([RUN, str(model), "-z", str(TOK512), "-i", short, "--prompt-cache", str(a), "--ctx", "1024",
                        "--rope-scaling", "rerope"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "(model file: device" in p.stderr and a.read_bytes() == before, p.stderr


@pytest.mark.parametrize("damage", ["text", "truncated", "version", "tokens"])
def test_a_bad_file_is_refused_untouched(tmp_path, c_tools, damage):
    a = tmp_path / "a.cache"
    if damage == "text":
        a.write_text("my notes, not a cache\n")
    else:
        run("-i", "Once upon a time", "--prompt-cache", a, "-n", 2)
        blob = bytearray(a.read_bytes())
        if damage == "truncated":
            del blob[-100:]
        elif damage == "version":
            blob[4] = 9
        else:
            blob[8:12] = (1 << 30).to_bytes(4, "little")
        a.write_bytes(blob)
    before = a.read_bytes()
    p = run("-i", "Once upon a time", "--prompt-cache", a, "-n", 2, check=False)
    want = {"text": "is not a prompt cache", "truncated": "a damaged prompt cache", "version": "of version 9",
            "tokens": "a damaged prompt cache"}[damage]
    assert p.returncode == 1 and want in p.stderr and p.stdout == "", p.stderr
    assert a.read_bytes() == before and sorted(x.name for x in tmp_path.iterdir()) == ["a.cache"]


def test_refused_where_a_beginning_cannot_be_kept(tmp_path, c_tools):
    a = tmp_path / "a.cache"
    for flags, want in ((["--rope-scaling", "dynamic", "--ctx", 1024], "depends on the whole prompt's length"),
                        (["--rope-scaling", "dynamic-yarn", "--ctx", 1024], "depends on the whole prompt's length"),
                        (["-m", "chat"], "chat's turns are not one prompt"),
                        (["--ppl", TEXT], "is for generating text")):
        p = run("-i", "Once", "--prompt-cache", a, "-n", 2, *flags, check=False)
        assert p.returncode in (1, 2) and want in p.stderr and not a.exists(), p.stderr
