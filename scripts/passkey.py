"""passkey.py - passkey retrieval: can the model find one number hidden in a long text?

Usage:
  /usr/bin/python3 scripts/passkey.py MODEL.bin [-z TOKENIZER.model] [--lengths 512,1024,2048]
                                      [--modes none,pi,ntk,dynamic,yarn] [--trials 5] [--depths 0,0.5,1 | random]
                                      [--seed 1] [-n 8] [--threads N] [--out FILE.md]

The test of Mohtashami & Jaggi 2023 (landmark attention, arXiv 2305.16300), in the layout that the
YaRN authors' eval/passkey.py (jquesnelle/yarn) and llama.cpp's examples/passkey use. One prompt is
five lines:

    There is an important info hidden inside a lot of irrelevant text. Find it and memorize ...
    The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ...
    The pass key is 31337. Remember it. 31337 is the pass key.
    ... The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.
    What is the pass key? The pass key is

The model continues greedily (./run -t 0) and the first integer of its continuation is its answer.

Lengths are exact. A trial at length N builds a prompt of exactly N - n tokens (BOS included, as
./run encodes it, counted with the model's SentencePiece tokenizer), so the prompt plus the n
generated tokens fill a context of exactly N, and runs ./run with --ctx N. The filler is cut at
token granularity: each filler part is a whole number of tokens of the repeated filler sentences,
and build_prompt() re-tokenizes the finished prompt and adjusts until the count is exact.

Depth: the fraction of the filler tokens that come before the key line (0 = right after the task
description, 1 = right before the question), exact to one token. By default the trials of one
length are spread evenly over [0, 1]; --depths random draws them uniformly; --depths 0,0.5,1 runs
--trials trials at each listed depth. Keys are uniform in [1, 50000] (as llama.cpp and YaRN). The
same keys and depths are used for every scaling mode, so the columns of the table are comparable.

What this is not: a test a tiny model can pass. stories260K retrieves nothing at any length; the
script is for users with real models, and tests/test_passkey.py checks its mechanics on it.
Limit: the prompt travels to ./run on its command line, and Linux caps one argument at 128 KiB, so
prompts of more than about 30k tokens (Llama tokenizer) are refused with a message.
"""
import argparse
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import sentencepiece as spm

REPO = Path(__file__).resolve().parent.parent

# The landmark-attention prompt, sentence for sentence.
TASK = ("There is an important info hidden inside a lot of irrelevant text. "
        "Find it and memorize them. I will quiz you about the important information there.")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"
MAX_ARG = 131072 - 1  # Linux MAX_ARG_STRLEN: the longest single command-line argument, with its NUL


# ---------------------------------------------------------------------------------------------
# Building the prompt

class Prompt:
    """One passkey prompt: its text, its length in tokens (BOS included), the key, the depth asked
    for, and where the key line really landed (token offset of its first token, and the fraction of
    the filler tokens before it)."""

    def __init__(self, text, n_tokens, key, depth, key_offset, filler_before, filler_total):
        self.text = text
        self.n_tokens = n_tokens
        self.key = key
        self.depth = depth
        self.key_offset = key_offset        # tokens before the key line, BOS included
        self.filler_before = filler_before  # filler tokens before the key line
        self.filler_total = filler_total    # filler tokens in the prompt

    @property
    def filler_depth(self):
        """The depth as built: filler tokens before the key / all filler tokens."""
        return self.filler_before / self.filler_total if self.filler_total else 0.0


def count_tokens(sp, text):
    """Tokens ./run feeds the model for `text`: SentencePiece's encoding plus BOS (if the model has one)."""
    return len(sp.encode(text)) + (1 if sp.bos_id() >= 0 else 0)


def _filler_ids(sp, n):
    """The first n tokens of "FILLER FILLER FILLER ...", encoded as one text."""
    reps = 1
    while True:
        ids = sp.encode(" ".join([FILLER] * reps))
        if len(ids) > n + 8:  # a margin so that a cut never falls in the last, unrepeated sentence
            return ids[:n]
        reps *= 2


def _assemble(sp, key, n_before, n_after):
    """The prompt text with n_before / n_after filler tokens around the key line, and the byte
    ranges [begin, end) of its parts "before", "key" and "after" (the key line without its newline).
    Empty filler parts are left out, not left as blank lines."""
    parts = [("task", TASK), ("before", sp.decode(_filler_ids(sp, n_before)) if n_before else ""),
             ("key", KEY_LINE.format(key=key)), ("after", sp.decode(_filler_ids(sp, n_after)) if n_after else ""),
             ("question", QUESTION)]
    text, ranges = "", {}
    for name, line in parts:
        if not line:
            ranges[name] = (len(text.encode()), len(text.encode()))
            continue
        text += "\n" if text else ""
        b = len(text.encode())
        text += line
        ranges[name] = (b, len(text.encode()))
    return text, ranges


def token_spans(sp, text):
    """[(begin, end)] byte range in `text` of every token SentencePiece makes of it (no BOS)."""
    return [(p.begin, p.end) for p in sp.encode(text, out_type="immutable_proto").pieces]


def build_prompt(sp, n_tokens, key, depth):
    """A passkey prompt of exactly n_tokens tokens (BOS included) with the key line after
    round(depth * filler) of the filler tokens (give or take a few tokens when the exact count needs
    it; Prompt.filler_depth says where it landed). Raises ValueError when n_tokens cannot hold the
    fixed lines or no split of the filler gives the exact count."""
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    bos = 1 if sp.bos_id() >= 0 else 0
    fixed = bos + len(token_spans(sp, _assemble(sp, key, 0, 0)[0]))
    if n_tokens < fixed:
        raise ValueError(f"a prompt of {n_tokens} tokens cannot hold the task, key line and question "
                         f"({fixed} tokens without any filler)")
    # Tokens add up part by part: a newline is a token of its own that never merges with its
    # neighbours, so a filler part of k tokens adds about k tokens (plus its newline, and a token
    # more or less where the cut meets it: "The" after a newline is "T" "he", not the "_The" of the
    # middle of the filler). So: fix the smaller part at its share of the filler, solve for the
    # other by correcting the count until it is exact, and if some count cannot be hit that way (a
    # step of 2 or 3 tokens), move the fixed part by a token and try again. Fixing the smaller
    # part keeps depths 0 and 1 exact: nothing before, or nothing after, the key line.
    filler = n_tokens - fixed
    before_fixed = depth <= 0.5
    want = round(depth * filler) if before_fixed else filler - round(depth * filler)
    for shift in sorted(range(-8, 9), key=lambda k: (abs(k), k)):
        held = want + shift
        if held < 0 or held > filler:
            continue
        free, seen = filler - held, set()
        while free >= 0 and free not in seen:
            seen.add(free)
            n_before, n_after = (held, free) if before_fixed else (free, held)
            text, ranges = _assemble(sp, key, n_before, n_after)
            spans = token_spans(sp, text)
            diff = n_tokens - (bos + len(spans))
            if diff == 0:
                def inside(part):
                    b, e = ranges[part]
                    return sum(1 for tb, te in spans if tb >= b and te <= e)
                key_offset = bos + sum(1 for tb, _ in spans if tb < ranges["key"][0])
                return Prompt(text, n_tokens, key, depth, key_offset, inside("before"),
                              inside("before") + inside("after"))
            free += diff
    raise ValueError(f"no split of the filler gives exactly {n_tokens} tokens (key {key}, depth {depth}; "
                     f"counts just above the {fixed} tokens without filler can be out of reach)")


# ---------------------------------------------------------------------------------------------
# Reading the answer

def parse_answer(continuation):
    """The first integer in the model's continuation (digits only, so "12345." gives 12345 and
    " \\n 42 is" gives 42), or None when there is none. "12,345" gives 12: a comma ends a number."""
    m = re.search(r"\d+", continuation)
    return int(m.group()) if m else None


def continuation_of(stdout, prompt_text):
    """What ./run generated: its stdout is the prompt, echoed, then the continuation and a newline."""
    out = stdout[:-1] if stdout.endswith("\n") else stdout
    if out.startswith(prompt_text):
        return out[len(prompt_text):]
    at = out.rfind(QUESTION)  # the echo differs (a normalizing tokenizer): cut after the question
    if at < 0:
        raise ValueError("./run's output does not contain the question; cannot find the continuation")
    return out[at + len(QUESTION):]


# ---------------------------------------------------------------------------------------------
# Running the model

def run_env():
    """The environment for ./run: ours, with OMP_WAIT_POLICY=passive unless set. OpenMP threads
    that wait by spinning (GCC's default) collapse when another process holds a core: on a busy
    two-core machine a 2048-token window took 11.7 s with spinning threads, 0.7 s with passive ones."""
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    return env


def run_one(run, model, tokenizer, prompt, ctx, mode, n_predict, threads=None, timeout=3600):
    """Greedy continuation of prompt.text by ./run at --ctx ctx with --rope-scaling mode; returns
    (continuation, answer or None)."""
    if len(prompt.text.encode()) > MAX_ARG:
        raise ValueError(f"the prompt is {len(prompt.text.encode())} bytes, more than the {MAX_ARG} bytes "
                         f"Linux allows in one command-line argument (hint: shorter --lengths)")
    cmd = [str(run), str(model), "-t", "0", "-n", str(n_predict), "--ctx", str(ctx), "--rope-scaling", mode,
           "-i", prompt.text]
    if tokenizer:
        cmd += ["-z", str(tokenizer)]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.run(cmd, env=run_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"./run failed (exit {proc.returncode}) at --ctx {ctx} --rope-scaling {mode}:\n"
                           f"{proc.stderr.strip()}")
    cont = continuation_of(proc.stdout, prompt.text)
    return cont, parse_answer(cont)


def trial_plan(trials, depths, seed):
    """[(key, depth)] for one context length: keys uniform in [1, 50000]; depths spread evenly over
    [0, 1] (depths None), drawn uniformly (depths "random"), or each listed depth `trials` times."""
    rng = random.Random(seed)
    if depths is None:
        ds = [0.5] if trials == 1 else [k / (trials - 1) for k in range(trials)]
    elif depths == "random":
        ds = [rng.random() for _ in range(trials)]
    else:
        ds = [d for d in depths for _ in range(trials)]
    return [(rng.randint(1, 50000), d) for d in ds]


def markdown_table(lengths, modes, results):
    """results[(length, mode)] = (correct, total) -> a markdown table, one row per length."""
    lines = ["| context (tokens) | " + " | ".join(modes) + " |",
             "|---:|" + "---:|" * len(modes)]
    for n in lengths:
        cells = []
        for m in modes:
            ok, total = results[(n, m)]
            cells.append(f"{ok}/{total} ({100.0 * ok / total:.0f}%)")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_list(text, conv, what):
    try:
        items = [conv(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: {what}: cannot read '{text}' (hint: a comma-separated list)")
    if not items:
        raise SystemExit(f"error: {what}: empty list")
    return items


def main(argv=None):
    ap = argparse.ArgumentParser(description="Passkey retrieval accuracy per context length and RoPE scaling "
                                 "mode (Mohtashami & Jaggi 2023).")
    ap.add_argument("model", help="model file for ./run")
    ap.add_argument("-z", "--tokenizer", help="SentencePiece model (default: tokenizer.model beside MODEL)")
    ap.add_argument("--lengths", default="512,1024,2048", help="context lengths N in tokens (prompt = N - n)")
    ap.add_argument("--modes", default="none,pi,ntk,dynamic,yarn", help="--rope-scaling modes to compare")
    ap.add_argument("--trials", type=int, default=5, help="trials per length and mode (per depth with --depths LIST)")
    ap.add_argument("--depths", help="comma-separated depths in [0, 1], or 'random' (default: evenly spread)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the keys and random depths (default 1)")
    ap.add_argument("-n", "--n-predict", type=int, default=8, help="tokens to generate (default 8)")
    ap.add_argument("--threads", type=int, help="passed to ./run")
    ap.add_argument("--run", default=str(REPO / "run"), help="the ./run binary (default: the repository's)")
    ap.add_argument("--out", help="also write the markdown table to this file")
    a = ap.parse_args(argv)

    lengths = parse_list(a.lengths, int, "--lengths")
    modes = parse_list(a.modes, str.strip, "--modes")
    depths = None
    if a.depths == "random":
        depths = "random"
    elif a.depths:
        depths = parse_list(a.depths, float, "--depths")
        if not all(0 <= d <= 1 for d in depths):
            ap.error("--depths: every depth must be in [0, 1]")
    if a.trials < 1 or a.n_predict < 1:
        ap.error("--trials and --n-predict must be at least 1")
    tok_path = Path(a.tokenizer) if a.tokenizer else Path(a.model).resolve().parent / "tokenizer.model"
    if not tok_path.exists():
        sys.exit(f"error: {tok_path}: no such tokenizer (hint: -z TOKENIZER.model)")
    if not Path(a.run).exists():
        sys.exit(f"error: {a.run}: not found (hint: `make` first)")
    sp = spm.SentencePieceProcessor(model_file=str(tok_path))

    results = {}
    for n in lengths:
        plan = trial_plan(a.trials, depths, a.seed)
        try:
            prompts = [build_prompt(sp, n - a.n_predict, key, d) for key, d in plan]
        except ValueError as e:
            sys.exit(f"error: --lengths {n}: {e} (hint: a longer length)")
        for m in modes:
            ok = 0
            for p in prompts:
                try:
                    cont, ans = run_one(a.run, a.model, tok_path, p, n, m, a.n_predict, a.threads)
                except (ValueError, RuntimeError, subprocess.TimeoutExpired) as e:
                    sys.exit(f"error: {e}")
                ok += ans == p.key
                print(f"length {n} {m:8s} depth {p.filler_depth:.3f} key {p.key:5d} answer {ans} "
                      f"{'ok' if ans == p.key else '--'} {cont!r}", file=sys.stderr)
            results[(n, m)] = (ok, len(prompts))

    table = markdown_table(lengths, modes, results)
    print(f"passkey retrieval: {Path(a.model).name}, greedy, {len(plan)} trials per cell, seed {a.seed}\n")
    print(table)
    if a.out:
        Path(a.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
