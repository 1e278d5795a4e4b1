"""test_hints.py - every hint the program prints is one the program takes (issue 47, item 2).

An error or a warning ends with `(hint: ...)`, the fix. Here a table (CASES) makes each of them
appear, reads the hint the program printed, and applies it: the flags it names must be flags the
parser knows (they are in --help), and the run with the hint applied must no longer print that
error or warning (and, unless the case says otherwise, must succeed). The hint is applied
mechanically where it is made of flags and values: `A, or B` are alternatives, each tried;
`--flag v1|v2|v3` is tried with each value; `leave --flag out` and `without --flag` drop a flag; a
value the hint leaves as a letter (`--grp-attn-n G`) or as prose (`a smaller --ctx`) is filled in
by the case. A hint that names no flag (a file to export again, a path to check) cannot be applied
by a program; the table says so for each, with the reason.

test_every_hint_has_a_case reads the C sources: every `hint:` in a string literal there must be
claimed by a case of the table, so a new hint without a test fails here.
"""
import functools
import os
import re
import resource
import struct
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest

from conftest import DATA, LLAMA_TOK, REPO, STORIES_BIN, STORIES_HF, TEXT, TOK512, run_export
from lrun.hf_random import make_checkpoint
from lrun.modelfile import set_field

RUN = str(REPO / "run")
SOURCES = ["run.c", "cli.c", "loader.c", "gguf.c", "model.c", "rope.c", "chat.c", "bpe.c", "tokenizer.cpp", "sampler.c",
           "promptcache.c"]
ALIASES = [("--ctx", "-c", "--ctx-size"), ("--rope-factor", "--rope-scale"), ("--rope-window", "-gaw", "--grp-attn-w"),
           ("--grp-attn-n", "-gan"), ("--cache-type-k", "-ctk"), ("--cache-type-v", "-ctv"), ("--prompt", "-i"),
           ("--file", "-f"), ("--mode", "-m"), ("--system", "-y"), ("--tokenizer", "-z"), ("--temp", "-t"),
           ("--n-predict", "-n"), ("--rope-base", "--rope-freq-base")]
SWITCHES = {"--check-tensors", "--f16-as-bf16", "--attn-logn", "--verbose-prompt"}


def names_of(flag):
    for group in ALIASES:
        if flag in group:
            return group
    return (flag,)


def drop(args, flag):
    """args without flag (any of its names) and its value."""
    out, skip = [], False
    names = names_of(flag)
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in names:
            skip = a not in SWITCHES
            continue
        out.append(a)
    return out


def put(args, flag, value=None):
    """args with flag set to value (replacing any of its names), or the switch added."""
    args = drop(args, flag)
    return args + ([flag] if value is None else [flag, str(value)])


def hint_of(err):
    """The text of the first hint in err: from `hint: ` to the parenthesis that closes the group it
    is in (`(hint: ...)`, or `(...; hint: ...)`), the parentheses inside it balanced."""
    start = err.find("hint: ")
    assert start >= 0, f"no hint printed: {err}"
    depth, i = 1, start
    while True:
        depth += {"(": 1, ")": -1}.get(err[i], 0)
        if depth == 0:
            return err[start + len("hint: "):i]
        i += 1


FLAG = re.compile(r"(?<![\w/-])(--?[a-z][a-z0-9-]*)")


def apply(args, alternative, values):
    """The runs one alternative of a hint asks for, as argument lists: `--flag VALUE ...` pairs set,
    `leave --flag out` / `without --flag` / `not --flag` / `drop --flag` dropped, `--flag a|b|c`
    one run per value; a capital letter is a value the case fills in (values)."""
    alternative = alternative.split(";")[0].split(":")[0]  # after ';' or ':' it explains
    runs = [list(args)]
    for m in re.finditer(r"(leave|without|not|drop) (--?[a-z][a-z0-9-]*)", alternative):
        runs = [drop(r, m[2]) for r in runs]
    rest = re.sub(r"(leave|without|not|drop) --?[a-z][a-z0-9-]*", "", alternative)
    for m in re.finditer(r"(?<![\w/-])(--?[a-z][a-z0-9-]*)(?: ((?:[\w.+-]+)(?: ?\| ?[\w.+-]+)*))?", rest):
        flag, value = m[1], m[2]
        if flag in SWITCHES:
            runs = [put(r, flag) for r in runs]
            continue
        if value is None or (len(value) == 1 and value.isupper()) or value in ("with", "for", "and", "or"):
            assert flag in values, f"the case must give a value for {flag} ({alternative!r})"
            value = values[flag]
        runs = [put(r, flag, v.strip()) for r in runs for v in value.split("|")]
    return runs


@dataclass
class Case:
    src: str                 # a piece of the C string with the hint, as it is in the source
    args: list               # the run that prints it (after ./run)
    needle: str              # the error or warning it belongs to
    status: int = 0          # the run's exit status
    model: object = None     # default: stories260K (fixture name when a str starting with '@')
    values: dict = field(default_factory=dict)  # values the hint leaves to the user, by flag
    fixes: Optional[Callable] = None  # (args, hint) -> [args]: the case applies the hint itself
    fixed_status: int = 0    # the exit status once the hint is applied
    check: Optional[Callable] = None  # (stderr of a fixed run) -> None, more than the needle gone
    stdin: bytes = b""
    limit_as: int = 0        # RLIMIT_AS for the runs, 0: none
    manual: str = ""         # why the hint cannot be applied by a program (then nothing runs)


def tokens_in(err):
    return int(re.search(r" is (\d+) tokens", err)[1])


CASES = {
    # --- run.c: runs that go ahead, with a warning -------------------------------------------------
    "no-scaling": Case(" (hint: --rope-scaling ", ["--ctx", "1024", "-n", "0"], "beyond the 512 tokens"),
    "no-scaling-sliding": Case(" (hint: --rope-scaling ", ["--ctx", "512", "-n", "0"], "beyond the 256 tokens",
                               model="@mistral"),
    "checkpoint-max": Case("(max_position_embeddings) (hint: --ctx", ["--ctx", "2048", "-n", "0"],
                           "beyond the 1024 positions the checkpoint says it supports", model="@phi3_long"),
    "checkpoint-max-factor": Case("(max_position_embeddings) (hint: --ctx", ["--ctx", "4096", "-n", "0"],
                                  "beyond the 2048 positions the checkpoint says it supports", model="@pi_own"),
    "covers-user": Case('hint[0] ? " (hint: "', ["--ctx", "2048", "--rope-scaling", "pi", "--rope-factor", "3", "-n", "0"],
                        "pi with --rope-factor 3 covers 1536 positions"),
    "covers-fraction": Case('hint[0] ? " (hint: "', ["--ctx", "1000", "--rope-scaling", "yarn", "--rope-factor", "1.2",
                                                     "-n", "0"], "covers 614.4 positions"),
    "covers-group": Case('hint[0] ? " (hint: "', ["--ctx", "4096", "--rope-scaling", "selfextend", "-gan", "4", "-n", "0"],
                         "selfextend with --grp-attn-n 4 covers 1664"),
    "covers-leaky": Case('hint[0] ? " (hint: "', ["--ctx", "2048", "--rope-scaling", "leaky-rerope", "--rope-window", "128",
                                                  "--rope-factor", "2", "-n", "0"], "leaky-rerope with --rope-factor 2"),
    "covers-checkpoint": Case('hint[0] ? " (hint: "', ["--ctx", "2048", "-n", "0"],
                              "yarn with the checkpoint's factor 4 covers 1024", model="@qwen3_yarn"),
    "threads": Case("one thread a core (hint: --threads", ["--threads", "64", "-n", "4"], "is more than the"),
    "t-as-threads": Case("the thread count is --threads (hint: ", ["-t", "4", "-n", "4"], "-t 4 is the temperature here",
                         fixes=lambda a, h: [drop(a, "-t") + h.split()]),
    "nonfinite": Case('"(hint: --check-tensors looks for NaN', ["-n", "4"], "are not finite", status=1,
                      model="@nan_model", fixed_status=1,
                      check=lambda err: ("--check-tensors: tensor layers.2.w2 holds NaN" in err) or pytest.fail(err)),
    # --- run.c: errors ----------------------------------------------------------------------------------
    "pc-dynamic": Case("(hint: another --rope-scaling, or no --prompt-cache)",
                       ["--prompt-cache", "@pc1", "--rope-scaling", "dynamic", "--ctx", "1024", "-n", "2"],
                       "depends on the whole prompt's length", status=1,
                       fixes=lambda a, h: [put(a, "--rope-scaling", "rerope"), drop(a, "--prompt-cache")]),
    "pc-ring": Case("(hint: add --swa-full)", ["--prompt-cache", "@pc2", "--ctx", "256", "-b", "16", "-n", "2"],
                    "sliding layers keep only their last positions", status=1, model="@mistral",
                    fixes=lambda a, h: [a + ["--swa-full"]]),
    "pc-path": Case("%s: %s (hint: check the path)", ["--prompt-cache", "@pc_notdir", "-n", "2"], "Not a directory",
                    status=1, fixes=lambda a, h: [put(a, "--prompt-cache", "@pc3")]),
    "prompt-file": Case("(hint: check the path given to -f)", ["-f", "/nonexistent/prompt.txt", "-n", "2"],
                        "cannot read the prompt file", status=1, fixes=lambda a, h: [put(a, "-f", "@short")]),
    "no-bos": Case("has no BOS token to start from (hint: give a", ["-n", "2"], "the prompt is empty", status=1,
                   model="@no_bos", values={"-i": "Once"}),
    "prompt-too-long": Case("longer than the context of %d (hint: a larger --ctx",
                            ["--ctx", "8", "-i", "Once upon a time " * 10, "-n", "1"], "longer than the context", status=1,
                            fixes=lambda a, h: [put(a, "--ctx", 64), put(a, "-i", "Once")]),
    "context-full": Case("context full (hint: a larger --ctx", ["--ctx", "1", "-n", "4", "-t", "0"], "context full",
                         fixes=lambda a, h: [put(a, "--ctx", 2)]),
    "keep-fills": Case("--keep leaves nothing to drop (hint: a smaller --keep or a larger --ctx)", [], "", manual=(
        "chat's context full: a decode step fills the context only at --ctx 1, where chat refuses the turn first "
        "(the 'a shorter line, or a larger --ctx' hint below), and closing a cut reply after a shift is left room by "
        "make_room; generate's context-full case above is the same fix, applied")),
    "chat-config": Case("cannot read it for the chat template: %s (hint: --chat-template",
                        ["-m", "chat", "-n", "4"], "cannot read it for the chat template", status=1, stdin=b"Hello\n"),
    "mistral-system": Case("has no system prompt (hint: put it in the first turn)",
                           ["-m", "chat", "--chat-template", "mistral", "-y", "Be brief.", "-n", "4"],
                           "the mistral template has no system prompt", status=2, stdin=b"Hello\n",
                           fixes=lambda a, h: [drop(a, "-y") + ["-i", "Be brief. Hello"]]),
    "chat-turn-too-long": Case("was not sent (hint: a shorter line, or a larger --ctx)",
                               ["-m", "chat", "--chat-template", "llama2", "--ctx", "16", "-n", "2"], "was not sent",
                               stdin=b"Once upon a time there was a little girl named Lily\n",
                               fixes=lambda a, h: [put(a, "--ctx", 128)]),
    "ppl-short": Case("less than one window of --ctx %d (hint: %sa longer text)", ["--ppl", "@short", "--ctx", "512"],
                      "less than one window", status=1,
                      fixes=lambda a, h: (re.fullmatch(r"--ctx \d+, or a longer text", h) or pytest.fail(h))
                      and [*apply(a, h.split(",")[0], {}), put(a, "--ppl", TEXT) + ["--ppl-windows", "1"]]),
    "ppl-one-token": Case("less than one window of --ctx %d (hint: %sa longer text)", ["--ppl", "@one_token", "--ctx", "512"],
                          "is 1 token, less than one window", status=1,
                          fixes=lambda a, h: (h == "a longer text" or pytest.fail(h))
                          and [put(a, "--ppl", TEXT) + ["--ppl-windows", "1"]]),
    "ppl-empty": Case("(hint: give --ppl a file with text in it)", ["--ppl", "@empty_file", "--ctx", "512"],
                      "there is no text to score", status=1,
                      fixes=lambda a, h: [put(a, "--ppl", TEXT) + ["--ppl-windows", "1"]]),
    "ppl-trained-1": Case("has none to score (hint: --ctx 2 or more)", ["--ppl", TEXT, "--ppl-windows", "1"],
                          "a window of --ctx 1 has none to score", status=1, model="@trained_1",
                          fixes=lambda a, h: (h == "--ctx 2 or more" or pytest.fail(h))
                          and [put(a, "--ctx", 2), put(a, "--ctx", 64)]),
    "kv-type": Case('"error: invalid KV cache type \'%s\' for %s (hint: %s)', ["-ctk", "f8", "-n", "2"],
                    "invalid KV cache type", status=2,
                    fixes=lambda a, h: [put(a, "-ctk", v) for v in re.findall(r"\b(?:f32|f16|q8_0)\b", h.split(";")[0])]),
    "kv-type-q8": Case('"error: invalid KV cache type \'%s\' for %s (hint: %s)', ["-ctk", "f8", "-n", "2"],
                       "invalid KV cache type", status=2, model="@qwen3_yarn",
                       fixes=lambda a, h: (h == "f32, f16 or q8_0" or pytest.fail(h))
                       and [put(a, "-ctk", v) for v in ("f32", "f16", "q8_0")]),
    "kv-q8-head": Case('"(hint: f16)', ["-ctk", "q8_0", "-n", "2"], "q8_0 needs a head_dim", status=2,
                       fixes=lambda a, h: [put(a, "-ctk", h)]),
    "f16-as-bf16": Case("(hint: drop it%s)", ["--f16-as-bf16", "-n", "2"], "is for f16 models", status=2,
                        fixes=lambda a, h: [drop(a, "--f16-as-bf16")]),
    "factor-without-mode": Case('"--rope-factor needs a scaling mode (hint: --rope-scaling',
                                ["--ctx", "2048", "--rope-factor", "4", "-n", "0"], "needs a scaling mode", status=2),
    "rerope-factor": Case("(hint: --rope-scaling leaky-rerope --rope-factor K",
                          ["--ctx", "2048", "--rope-scaling", "rerope", "--rope-factor", "5", "-n", "0"],
                          "rerope has no --rope-factor", status=2, values={"--rope-factor": "5"}),
    "file-divisors-factor": Case("divisor per pair (rope_freqs.weight) (hint: drop --rope-factor",
                                 ["--rope-factor", "2", "-n", "0"], "does not change this model's llama3 scaling",
                                 status=2, model="@llama3_gguf",
                                 fixes=lambda a, h: [drop(a, "--rope-factor"),
                                                     put(put(a, "--rope-scaling", "yarn"), "--rope-factor", "8")]),
    "leaky-one": Case("plain RoPE (hint: --rope-factor K with",
                      ["--ctx", "2048", "--rope-scaling", "leaky-rerope", "--rope-factor", "1", "-n", "0"],
                      "is plain RoPE", status=2, values={"--rope-factor": "5"}),
    "selfextend-factor": Case("(hint: --grp-attn-n G, not --rope-factor)",
                              ["--ctx", "4096", "--rope-scaling", "selfextend", "--rope-factor", "11", "-n", "0"],
                              "selfextend has no --rope-factor", status=2, values={"--grp-attn-n": "11"}),
    "dynamic-yarn-factor": Case("(hint: --rope-scaling yarn --rope-factor S for a fixed one)",
                                ["--ctx", "2048", "--rope-scaling", "dynamic-yarn", "--rope-factor", "4", "-n", "0"],
                                "dynamic-yarn has no --rope-factor", status=2, values={"--rope-factor": "4"}),
    "dca-factor": Case("(hint: --dca-chunk S and --rope-window w size its chunks)",
                       ["--ctx", "2048", "--rope-scaling", "dca", "--rope-factor", "4", "-n", "0"],
                       "dca has no --rope-factor", status=2,
                       fixes=lambda a, h: [drop(a, "--rope-factor") + ["--dca-chunk", "384", "--rope-window", "32"]]),
    "longrope-no-factors": Case("and this model has none (hint: --rope-scaling yarn)",
                                ["--ctx", "1024", "--rope-scaling", "longrope", "-n", "0"],
                                "needs a LongRoPE checkpoint's short and long factors", status=2),
    "rope-bad-value": Case('" (hint: see --help for the RoPE flags)"',
                           ["--ctx", "2048", "--rope-scaling", "rerope", "--rope-window", "513", "-n", "0"],
                           "the window W must be in [1, L]", status=2,
                           fixes=lambda a, h: [["--help"], drop(a, "--rope-window")]),
    "sliding": Case("(hint: --rope-scaling %s%s)", ["--ctx", "512", "--rope-scaling", "rerope", "-n", "0"],
                    "not run together", status=2, model="@mistral"),
    "sliding-flags": Case("(hint: --rope-scaling %s%s)",
                          ["--ctx", "512", "--rope-scaling", "rerope", "--rope-window", "32", "-n", "0"],
                          "not run together", status=2, model="@mistral",
                          fixes=lambda a, h: (h.endswith(", without the flags of this mode") or pytest.fail(h))
                          and apply(drop(a, "--rope-window"), h.split(",")[0], {})),
    "memory": Case("of memory available (hint: a smaller --ctx%s)",
                   ["--ctx", str(1 << 24), "--rope-scaling", "dynamic", "-n", "0"], "more than the", status=1,
                   fixes=lambda a, h: [put(a, "--ctx", 2048)]),
    "memory-f16": Case("of memory available (hint: a smaller --ctx%s)", ["--ctx", str(1 << 24), "-n", "0"],
                       "more than the", status=1, model="@wide",
                       # -ctk f16 -ctv f16 'for a cache of half the size': test_f16_cache_hint_halves_it
                       fixes=lambda a, h: ("-ctk f16 -ctv f16" in h or pytest.fail(h)) and [put(a, "--ctx", 4096)]),
    "vocab": Case("but the model's vocabulary is %d (hint: pass the model's own", ["-n", "2"], "32000 tokens", status=1,
                  model="@llama_tok", fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "prepare": Case('" (hint: a smaller --ctx)"', ["--ctx", str(1 << 19), "-n", "1"], "out of memory allocating",
                    status=1, limit_as=1 << 29, fixes=lambda a, h: [put(a, "--ctx", 512)]),
    # --- cli.c ----------------------------------------------------------------------------------------
    "keep": Case('"error: --keep %d leaves nothing for a context shift to drop', ["--keep", "47", "--ctx", "48", "-n", "2"],
                 "leaves nothing for a context shift", status=2,
                 fixes=lambda a, h: [put(a, "--keep", 46), put(a, "--ctx", 49)]),
    "pc-chat": Case("--prompt-cache, or -m generate)", ["-m", "chat", "--chat-template", "llama2", "--prompt-cache", "@pc7",
                                                        "-n", "2"],
                    "chat's turns are not one prompt", status=2, stdin=b"Hello\n",
                    fixes=lambda a, h: [drop(a, "--prompt-cache"), drop(put(a, "-m", "generate"), "--chat-template")]),
    "pc-empty": Case("(hint: --prompt-cache prompt.cache)", ["--prompt-cache", "", "-n", "2"], "needs a file name",
                     status=2, fixes=lambda a, h: [put(a, "--prompt-cache", "@pc8")]),
    "system-without-chat": Case('"%s is for chat (hint: add -m chat)"', ["-y", "Be brief.", "-n", "2"], "is for chat",
                                status=2, model="@chatml_template"),
    "file-in-chat": Case("(hint: -i for the first turn)", ["-m", "chat", "--chat-template", "llama2", "-f", TEXT, "-n", "2"],
                         "chat reads its turns from stdin", status=2,
                         fixes=lambda a, h: [put(drop(a, "-f"), "-i", "Hello")]),
    "i-and-f": Case("(hint: one of them)", ["-i", "Once", "-f", "@short", "-n", "2"], "both give the prompt", status=2,
                    fixes=lambda a, h: [drop(a, "-i"), drop(a, "-f")]),
    "ppl-ctx-1": Case('score (hint: --ctx 2 or more)";', ["--ppl", TEXT, "--ctx", "1", "--ppl-windows", "1"],
                      "a window of --ctx 1 has none to score", status=2,
                      fixes=lambda a, h: (h == "--ctx 2 or more" or pytest.fail(h))
                      and [put(a, "--ctx", 2), put(a, "--ctx", 512)]),
    "ppl-gen-flag": Case("(hint: drop %s or --ppl)", ["--ppl", TEXT, "--ctx", "512", "--ppl-windows", "1", "-n", "5"],
                         "is for generating text", status=2,
                         fixes=lambda a, h: [drop(a, "-n"), drop(drop(drop(a, "--ppl"), "--ppl-windows"), "--ctx")]),
    # --- the tokenizer and the chat template ------------------------------------------------------------
    "chat-unknown": Case("(hint: --chat-template %s names the model's template)", ["-m", "chat", "-n", "2"],
                         "the chat_template is none this program knows", status=1, model="@unknown_template",
                         stdin=b"Hello\n"),
    "chat-smollm3": Case("(hint: --chat-template chatml speaks its", ["-m", "chat", "-n", "2"], "SmolLM3's", status=1,
                         model="@smollm3_template", stdin=b"Hello\n"),
    "bpe-open": Case("cannot open (hint: pass the model's tokenizer.json or tokenizer.model with -z)", [], "", manual=(
        "tokenizer.cpp checks the path first (cases 'tokenizer-missing' and on, the same hint) and opens the file to "
        "tell JSON from SentencePiece, and a file it cannot open goes to SentencePiece's message (case "
        "'sentencepiece'); this one needs the file to go away between the two opens")),
    "hint-check": Case('strstr(why, "(hint:")', [], "", manual="not a hint: chat.c asks whether a message has one"),
    "bpe-no-model": Case('"not a tokenizer.json: no \\"model\\" object (hint: pass the model\'s "', ["-n", "2"],
                         "no \"model\" object", status=1, model="@json_no_model",
                         fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "bpe-byte-fallback": Case("a SentencePiece-style BPE; hint: ", ["-n", "2"], "is not implemented beside byte_fallback", status=1,
                              model="@json_byte_fallback", fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "sentencepiece": Case("cannot load the SentencePiece tokenizer: %s (hint: ", ["-z", "@junk", "-n", "2"],
                          "cannot load the SentencePiece tokenizer", status=1, fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "tokenizer-missing": Case("cannot open the tokenizer: %s (hint: ", ["-z", "/nonexistent/tokenizer.model", "-n", "2"],
                              "cannot open the tokenizer", status=1, fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "tokenizer-dir": Case("(hint: -z %s%s)", ["-z", DATA / "stories260K", "-n", "2"], "is a directory, not a tokenizer",
                          status=1, fixes=lambda a, h: (h == f"-z {DATA / 'stories260K' / 'tokenizer.model'}"
                                                        or pytest.fail(h)) and [put(a, "-z", h.split(" ", 1)[1])]),
    "tokenizer-empty-dir": Case('"%s: is a directory, not a tokenizer file (hint: " PASS_TOKENIZER',
                                ["-z", "@empty_dir", "-n", "2"], "is a directory, not a tokenizer", status=1,
                                fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "tokenizer-not-regular": Case("is not a regular file (hint: ", ["-z", "/dev/null", "-n", "2"], "is not a regular file",
                                  status=1, fixes=lambda a, h: [put(a, "-z", TOK512)]),
    "tokenizer-empty": Case("is empty, not a tokenizer (hint: ", ["-z", "@empty_file", "-n", "2"],
                            "is empty, not a tokenizer", status=1, fixes=lambda a, h: [put(a, "-z", TOK512)]),
    # tokenizer_config.json beside the tokenizer: each fix is a tokenizer.model beside the file the hint
    # asks for (the '@tok_*' fixtures), or stories260K's own tokenizer.model, which has none beside it
    "config-add-bos": Case('must be true or false (hint: \\"', ["-i", "Once", "-n", "2"], "add_bos_token is \"yes\"",
                           status=1, model="@config_add_bos",
                           fixes=lambda a, h: (h.startswith('"add_bos_token": true or false, or leave the key out')
                                               or pytest.fail(h))
                           and [put(a, "-z", "@tok_add_true"), put(a, "-z", "@tok_add_false"), put(a, "-z", "@tok_keyless")]),
    "config-bos-token": Case("null for none, or leave the key out for the tokenizer's own)", ["-i", "Once", "-n", "2"],
                             "bos_token is 1", status=1, model="@config_bos_token",
                             fixes=lambda a, h: (h.startswith('"bos_token": null for none, or leave the key out')
                                                 or pytest.fail(h))
                             and [put(a, "-z", "@tok_bos_null"), put(a, "-z", "@tok_keyless")]),
    "config-not-json": Case("(hint: repair it, or move it away to use the tokenizer's defaults)", ["-i", "Once", "-n", "2"],
                            "not valid JSON", status=1, model="@config_not_json",  # repaired: '{"add_bos_token": true}'
                            fixes=lambda a, h: [put(a, "-z", "@tok_add_true"), put(a, "-z", TOK512)]),
    "config-not-object": Case("(hint: repair it, or move it away to use the tokenizer's defaults)", ["-i", "Once", "-n", "2"],
                              "not a JSON object", status=1, model="@config_not_object",  # repaired: '{}'
                              fixes=lambda a, h: [put(a, "-z", "@tok_keyless"), put(a, "-z", TOK512)]),
    "config-class": Case("must be a class name or null (hint: leave the key out)", ["-i", "Once", "-n", "2"],
                         "tokenizer_class is 1", status=1, model="@config_class",
                         fixes=lambda a, h: (h == "leave the key out" or pytest.fail(h)) and [put(a, "-z", "@tok_keyless")]),
    "config-unreadable": Case("cannot read it: %s (hint: make it a readable file", ["-i", "Once", "-n", "2"],
                              "cannot read it: Is a directory", status=1, model="@config_dir",
                              fixes=lambda a, h: [put(a, "-z", "@tok_keyless"), put(a, "-z", TOK512)]),
    # stories260K has no tokenizer_config.json of its own: the smallest valid one, '{}', stands for it
    "config-empty": Case("is empty (hint: put the model's own there", ["-i", "Once", "-n", "2"],
                         "tokenizer_config.json: is empty", status=1, model="@config_empty",
                         fixes=lambda a, h: [put(a, "-z", "@tok_keyless"), put(a, "-z", TOK512)]),
    "copy-memory": Case("no memory for the %s copy of the weights (%.1f MiB) (hint: %s)", [], "",
                        manual="export/export.py's --dtype, not a flag of ./run: test_copy_memory_hint applies it"),
    # --- hints that name no flag: advice about a file, which no program can follow ----------------------
    "bpe-not-byte-level": Case("(hint: this program reads byte-level BPE tokenizer.json files)", [], "",
                               manual="says what kind of tokenizer.json this program reads: no flag, another file"),
    "added-tokens": Case("(hint: this program reads added tokens without it)", [], "",
                         manual="about a field of tokenizer_config.json to remove: an edit of the user's file"),
    "check-tensors-damaged": Case("(hint: the file is damaged, or its checkpoint has such ", [], "",
                                  manual="names no flag: export again from a good checkpoint (tests/test_nonfinite.py "
                                         "checks the message)"),
    "copy-memory-export": Case("export the model again: --dtype %s writes %s", [], "",
                               manual="the same error for a dtype-2 file (q8_0's first layout, copied into "
                                      "q8_0_r16 at load): export/export.py --dtype q8_0 writes q8_0_r16, which needs "
                                      "no copy; a flag of the exporter, not of ./run"),
    "header-short": Case("shorter than the %d-byte header (hint: the file is truncated", [], "",
                         manual="a damaged file: copy or export it again"),
    "header-version": Case("(hint: export the model again", [], "", manual="export/export.py, not a flag of ./run"),
    "header-bad": Case("(hint: the file is damaged or not written by export/export.py)", [], "",
                       manual="a damaged file (three such messages in loader.c)"),
    "open": Case("cannot open model: %s (hint: check the path)", [], "",
                 manual="a path the user mistyped: the fix is the right path"),
    "not-regular": Case("not a regular file (hint: pass the .bin file", [], "",
                        manual="the model file itself, or export/export.py for a Hugging Face directory"),
    "too-short": Case("is too short to be a model (hint: the file is truncated", [], "",
                      manual="a damaged or empty file: export it again"),
    "ak42": Case("which this program does not read (hint: ", [], "",
                 manual="llama2.c's exporter with --version 0, or export/export.py: other programs"),
    # GGUF files (gguf.c reads them, loader.c maps them; tests/test_gguf.py checks the messages)
    "gguf-damaged": Case("(hint: the file is damaged", [], "",
                         manual="a damaged GGUF file (a dozen such messages in gguf.c and loader.c): get it again"),
    "gguf-damaged-2": Case('(hint: the file "', [], "", manual="as gguf-damaged, the string cut in two"),
    "gguf-damaged-3": Case('(hint: the file is "', [], "", manual="as gguf-damaged, the string cut in two"),
    "gguf-truncated-2": Case('(hint: the file is truncated; "', [], "", manual="as gguf-truncated, the string cut in two"),
    "gguf-truncated": Case("(hint: the file is truncated; download or convert it again)", [], "",
                           manual="a truncated GGUF file: download or convert it again"),
    "gguf-newer": Case("(hint: the file is newer than this reader)", [], "",
                       manual="a GGUF file with a type this reader does not know: another program's"),
    "gguf-version": Case("(hint: convert the model \"", [], "",
                         manual="GGUF version 1: llama.cpp's converter writes a current version"),
    "gguf-not-read": Case('#define GGUF_HINT "hint: convert the Hugging Face checkpoint with export/export.py', [], "",
                          manual="what ./run does not read from GGUF: export/export.py, not a flag of ./run"),
    "gguf-vocab-only": Case("(hint: it can be the tokenizer \"", [], "",
                            manual="-z FILE with another model of the same vocabulary: tests/test_gguf.py, "
                                   "test_vocabulary_only_file_is_a_tokenizer, runs it"),
    "gguf-pre": Case('(llama-bpe, qwen2 and "', [], "",
                     manual="-z with the model's own tokenizer.json: tests/test_gguf.py, test_byte_level_bpe_from_gguf, "
                            "runs it"),
    "gguf-tokenizer-kind": Case('is not read from GGUF yet (llama and gpt2 are; "', [], "",
                                manual="-z with the model's own tokenizer file: tests/test_gguf.py, "
                                       "test_other_tokenizer_kinds_take_z, runs it"),
    "gguf-sp-refuses": Case('SentencePiece refuses its vocabulary: ") + e.what() + " (hint: " PASS_TOKENIZER', [], "",
                            manual="as gguf-tokenizer-kind: -z with the model's own tokenizer file"),
    "gguf-sp-refuses-2": Case('status.ToString() + " (hint: " PASS_TOKENIZER', [], "",
                              manual="as gguf-tokenizer-kind: -z with the model's own tokenizer file"),
    "gguf-copy-memory": Case("whose file is read as stored", [], "",
                             manual="memory for a GGUF Q8_0 file's copy: free memory, or export/export.py"),
    # --- promptcache.c ---------------------------------------------------------------------------------
    "pc-not-a-cache": Case("give --prompt-cache a new file's name", ["--prompt-cache", "@short", "-n", "2"],
                           "is not a prompt cache", status=1, fixes=lambda a, h: [put(a, "--prompt-cache", "@pc4")]),
    "pc-remake": Case("#define REMAKE", [], "", manual=(
        "a file to delete, not a flag: tests/test_prompt_cache.py damages a cache four ways and checks each error "
        "and that the file is left as it was")),
    "pc-write": Case("#define ELSEWHERE", ["--prompt-cache", "/nonexistent/folder/p.cache", "-n", "2"], "cannot write",
                     status=1, fixes=lambda a, h: [put(a, "--prompt-cache", "@pc5")]),
    "pc-other": Case("(hint: another --prompt-cache file for these settings)", ["--prompt-cache", "@pc_rerope", "-n", "2"],
                     "is not used and is left as it is", fixes=lambda a, h: [put(a, "--prompt-cache", "@pc6")]),
    "no-magic": Case("(hint: convert a Hugging Face checkpoint with export/export.py)", [], "",
                     manual="export/export.py, not a flag of ./run"),
    "legacy-too-long": Case("(hint: convert the model with export/export.py, ", [], "",
                            manual="export/export.py, or a file cut short"),
    "hparams-short": Case("shorter than its %d hparams (hint: the file is truncated", [], "",
                          manual="a damaged file: export it again"),
    "hparam-unknown": Case("is not one this program knows (hint: a newer export/export.py wrote it; ", [], "",
                           manual="another version of this program, not a flag (tests/test_families2.py checks the "
                                  "message)"),
    "tensors-too-large": Case("too large to address (hint: the file is damaged)", [], "", manual="a damaged file"),
    "size-mismatch": Case("but its header describes %zu (hint: %s)", [], "", manual="a damaged file, cut or extended"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory, c_tools):
    """The files the cases need beside stories260K, made once."""
    d = tmp_path_factory.mktemp("hints")
    out = {"llama3_gguf": [DATA / "gguf" / "stories260K-llama3-f16.gguf"]}  # rope_freqs.weight
    for name, case in (("mistral", "mistral-swa"), ("phi3_long", "phi3-longrope-long"), ("qwen3_yarn", "qwen3-yarn")):
        (d / name).mkdir()
        proc = run_export(DATA / "families" / case, d / name / "model.bin")
        assert proc.returncode == 0, proc.stderr
        out[name] = [d / name / "model.bin"]
    # A checkpoint with its own pi scaling, factor 4 of L = 512, that says it supports 2048.
    (d / "pi").mkdir()
    assert run_export(STORIES_HF, d / "pi" / "model.bin").returncode == 0
    buf = bytearray((d / "pi" / "model.bin").read_bytes())
    for name, value in (("rope_scaling", 1), ("rope_factor", 4.0), ("rope_orig_ctx", 512), ("seq_len", 2048)):
        set_field(buf, name, value)
    (d / "pi" / "model.bin").write_bytes(buf)
    out["pi_own"] = [d / "pi" / "model.bin"]
    # stories260K with a NaN in layer 2's w2 (the legacy file: float32, stacked over the layers)
    nan = bytearray(STORIES_BIN.read_bytes())
    D, H, V, n_layers, kv = 64, 172, 512, 5, 32
    w2 = 28 + 4 * (V * D + n_layers * D + n_layers * D * D + 2 * n_layers * kv * D + n_layers * D * D + n_layers * D
                   + n_layers * H * D)
    struct.pack_into("<f", nan, w2 + 4 * (2 * D * H + 5 * H + 3), float("nan"))
    (d / "nan.bin").write_bytes(nan)
    out["nan_model"] = [d / "nan.bin", "-z", TOK512]
    # The tokenizer with add_bos_token false, and tokenizer_config.json files of each kind, beside links
    for name, config in (("no_bos", '{"add_bos_token": false}'),
                         ("unknown_template", '{"chat_template": "{{ messages }}"}'),
                         ("smollm3_template", '{"chat_template": "<|im_start|> Reasoning Mode"}'),
                         ("chatml_template", '{"chat_template": "<|im_start|>"}')):
        (d / name).mkdir()
        (d / name / "model.bin").symlink_to(STORIES_BIN)
        (d / name / "tokenizer.model").symlink_to(TOK512)
        (d / name / "tokenizer_config.json").write_text(config)
        out[name] = [d / name / "model.bin"]
    for name, spec in (("json_no_model", "{}"),
                       ("json_byte_fallback", '{"model": {"type": "BPE", "byte_fallback": true, "vocab": {}, '
                                              '"merges": []}}')):
        (d / name).mkdir()
        (d / name / "model.bin").symlink_to(STORIES_BIN)
        (d / name / "tokenizer.json").write_text(spec)
        out[name] = [d / name / "model.bin"]
    # tokenizer_config.json files Hugging Face would refuse too, beside stories260K's tokenizer (a
    # directory in its place: fopen takes it, and fread fails), and the fixed ones their hints ask for
    for name, config in (("config_add_bos", '{"add_bos_token": "yes"}'), ("config_bos_token", '{"bos_token": 1}'),
                         ("config_not_json", '{"add_bos_token": tru'), ("config_not_object", "[]"),
                         ("config_class", '{"tokenizer_class": 1}'), ("config_empty", ""), ("config_dir", None),
                         ("tok_add_true", '{"add_bos_token": true}'), ("tok_add_false", '{"add_bos_token": false}'),
                         ("tok_bos_null", '{"bos_token": null}'), ("tok_keyless", "{}")):
        (d / name).mkdir()
        (d / name / "model.bin").symlink_to(STORIES_BIN)
        (d / name / "tokenizer.model").symlink_to(TOK512)
        if config is None:
            (d / name / "tokenizer_config.json").mkdir()
        else:
            (d / name / "tokenizer_config.json").write_text(config)
        out[name] = d / name / "tokenizer.model" if name.startswith("tok_") else [d / name / "model.bin"]
    (d / "empty_dir").mkdir()
    out["empty_dir"] = d / "empty_dir"
    (d / "empty_file").write_bytes(b"")
    out["empty_file"] = d / "empty_file"
    (d / "junk.model").write_bytes(b"\x00\x01junk, not a tokenizer\n")  # neither JSON nor a protocol buffer
    out["junk"] = d / "junk.model"
    # --prompt-cache: new files' names, a path under a file, and a cache made with other settings
    for i in range(1, 9):
        out[f"pc{i}"] = d / f"pc{i}.cache"
    out["pc_notdir"] = d / "short.txt" / "p.cache"
    out["pc_rerope"] = d / "rerope.cache"
    assert subprocess.run([RUN, STORIES_BIN, "-z", TOK512, "-n", "2", "--rope-scaling", "rerope", "--prompt-cache",
                           out["pc_rerope"]], capture_output=True).returncode == 0
    out["llama_tok"] = [STORIES_BIN, "-z", LLAMA_TOK]
    (d / "short.txt").write_text("Once upon a time, there was a little girl named Lily. " * 4)  # < 512 tokens
    out["short"] = d / "short.txt"
    (d / "one_token.txt").write_text(" ")  # BOS alone: no --ctx holds a token to score
    out["one_token"] = d / "one_token.txt"
    # stories260K with a trained context of 1: the --ppl window run.c takes from it has nothing to score
    (d / "trained_1").mkdir()
    assert run_export(STORIES_HF, d / "trained_1" / "model.bin").returncode == 0
    buf = bytearray((d / "trained_1" / "model.bin").read_bytes())
    set_field(buf, "seq_len", 1)
    (d / "trained_1" / "model.bin").write_bytes(buf)
    out["trained_1"] = [d / "trained_1" / "model.bin"]
    # an f16 file of 81 MiB of matrices, for the bf16_r16 copy --f16-as-bf16 makes at load
    make_checkpoint(d / "f16-hf", dim=1024, hidden_dim=2048, n_layers=4, n_heads=16, n_kv_heads=16, vocab_size=512,
                    max_pos=64)
    (d / "f16").mkdir()
    assert run_export(d / "f16-hf", d / "f16" / "model.bin", "--dtype", "f16").returncode == 0
    out["f16"] = [d / "f16" / "model.bin", "-z", TOK512]
    (d / "bf16").mkdir()  # the same weights as bf16_r16, read as stored (test_copy_memory_hint)
    assert run_export(d / "f16-hf", d / "bf16" / "model.bin", "--dtype", "bf16").returncode == 0
    out["bf16"] = [d / "bf16" / "model.bin", "-z", TOK512]
    # 2 layers of 4 kv heads of 64: --ctx 2^24 needs 64 GiB of f32 cache (32 GiB in f16)
    make_checkpoint(d / "wide-hf", dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=64,
                    vocab_size=512, max_pos=64)
    (d / "wide").mkdir()
    assert run_export(d / "wide-hf", d / "wide" / "model.bin").returncode == 0
    out["wide"] = [d / "wide" / "model.bin", "-z", TOK512]
    return out


def run(prefix, args, case):
    limit = case.limit_as
    if limit and "ASAN_OPTIONS" in os.environ:  # `make sanitize` sets it: AddressSanitizer reserves terabytes
        pytest.skip("an address-space limit leaves AddressSanitizer no room for its shadow memory; the plain "
                    "build (make test) runs this")

    def pre():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    p = subprocess.run([RUN, *map(str, prefix), *map(str, args)], capture_output=True, input=case.stdin, timeout=120,
                       preexec_fn=pre)
    return p.returncode, p.stderr.decode(errors="replace")


PROSE = {"or", "and", "for", "with", "to", "out", "not", "a", "the", "lets", "names", "looks", "size", "speaks", "gives",
         "is", "in", "of"}


def hinted_values(err):
    """Every `flag value` pair in every hint of err, the alternatives of `a|b` each, leaving out a
    capital letter the user fills in and the prose after a switch or a flag without its value."""
    pairs = []
    for at in [m.start() for m in re.finditer("hint: ", err)]:
        hint = hint_of(err[at:])
        for m in re.finditer(r"(?<![\w/-])(--?[a-z][a-z0-9-]*) ([\w.+-]+(?: ?\| ?[\w.+-]+)*)", hint):
            flag, value = m[1], m[2]
            if flag in SWITCHES or value in PROSE or (len(value) == 1 and value.isalpha()):
                continue
            pairs += [(flag, v.strip()) for v in value.split("|")]
    return pairs


@functools.lru_cache(maxsize=None)
def parses(flag, value):
    """The parser takes `flag value`: the run gets past the flags and stops at the missing model."""
    needs = {"--chat-template": ["-m", "chat"], "-y": ["-m", "chat"], "--ppl-windows": ["--ppl", "text.txt"]}
    p = subprocess.run([RUN, "/nonexistent/model.bin", flag, value, *needs.get(flag, [])], capture_output=True,
                       text=True, timeout=30)
    return p.returncode == 1 and "cannot open model" in p.stderr


def flags_in_help():
    out = subprocess.run([RUN, "--help"], capture_output=True, text=True).stdout
    return set(FLAG.findall(out))


@pytest.mark.parametrize("name", [k for k, c in CASES.items() if not c.manual])
def test_hint_is_taken(models, name):
    case = CASES[name]
    prefix = models[case.model[1:]] if case.model else [STORIES_BIN, "-z", TOK512]
    args = [models[a[1:]] if isinstance(a, str) and a.startswith("@") else a for a in case.args]
    code, err = run(prefix, args, case)
    assert code == case.status and case.needle in err, f"exit {code}: {err}"
    hint = hint_of(err[err.index(case.needle):])
    known = flags_in_help()
    for flag in FLAG.findall(hint):
        assert flag in known, f"the hint names {flag}, which --help does not show: {hint}"
    for flag, value in hinted_values(err):  # every hint the run printed, not only this one's
        assert parses(flag, value), f"a hint gives '{flag} {value}', which the parser refuses: {err}"
    if case.fixes:
        runs = [[models[a[1:]] if isinstance(a, str) and a.startswith("@") else a for a in r]
                for r in case.fixes(args, hint)]
    else:
        runs = [r for alternative in re.split(r", or | or ", hint) for r in apply(args, alternative, case.values)]
    assert runs, hint
    for args in runs:
        code, fixed = run(prefix, args, case)
        assert case.needle not in fixed, f"{hint!r} applied ({args}) still prints it: {fixed}"
        if case.fixed_status is not None:
            assert code == case.fixed_status, f"{hint!r} applied ({args}): exit {code}: {fixed}"
        if case.check:
            case.check(fixed)
    print(f"{name}: '{hint}' -> {len(runs)} run(s), each without '{case.needle}'")


def test_every_hint_has_a_case():
    """Every `hint:` in a C string literal is claimed by a case of CASES (a test, or a reason)."""
    claimed = [c.src for c in CASES.values()]
    missing = []
    for source in SOURCES:
        lines = (REPO / source).read_text().splitlines()
        for i, line in enumerate(lines):
            comment = line.find("//")
            code = line[:comment] if comment >= 0 and line.count('"', 0, comment) % 2 == 0 else line
            if "hint:" not in code:
                continue
            context = "\n".join(lines[max(0, i - 2):i + 2])
            if not any(src in context for src in claimed):
                missing.append(f"{source}:{i + 1}: {line.strip()}")
    assert not missing, "hints with no case in tests/test_hints.py:\n" + "\n".join(missing)


def test_f16_cache_hint_halves_it(models):
    """The memory error's other fix, `-ctk f16 -ctv f16 for a cache of half the size`: the banner's
    KV cache at the same --ctx is half the f32 one."""
    def kv_mib(*extra):
        p = subprocess.run([RUN, *map(str, models["wide"]), "--ctx", "4096", "-n", "0", *extra], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return float(re.search(r"KV cache ([\d.]+) MiB", p.stderr)[1])
    assert kv_mib("-ctk", "f16", "-ctv", "f16") == kv_mib() / 2


def test_copy_memory_hint(models):
    """f32 and f16 matrices run from a copy in groups of 16 rows (f32_r16, f16_r16; bf16_r16 with
    --f16-as-bf16), made at load (81 MiB here). Where the address space has no room for it (at one
    thread the f16 run needs about 94 MiB and, with the copy, 176: measured; --threads 1 keeps the
    thread stacks, and so the limit, the same on any number of cores) the run stops with exit 1 and
    the hint: another export, read as stored. Applied: the same checkpoint exported as bf16 runs under
    the same limit (the control: the f16 file does not)."""
    case = Case("", [], "", limit_as=136 << 20)
    args = ["--threads", "1", "-n", "2"]
    for extra, to in (([], "f16_r16"), (["--f16-as-bf16"], "bf16_r16")):
        code, err = run(models["f16"], args + extra, case)
        assert code == 1 and f"no memory for the {to} copy of the weights" in err, err
        assert hint_of(err[err.index("no memory"):]) == ("free some memory, or export the model with "
                                                         "export/export.py --dtype bf16, q8_0 or q4_0, whose files "
                                                         "are read as stored"), err
    code, err = run(models["bf16"], args, case)
    assert code == 0, err

