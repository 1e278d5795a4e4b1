"""passkey.py - passkey retrieval: can the model find one number hidden in a long text?

Usage:
  /usr/bin/python3 scripts/passkey.py MODEL.bin [-z TOKENIZER] [--lengths 512,1024,2048]
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

The tokenizer: the one ./run uses, -z TOKENIZER or else tokenizer.model beside MODEL, else
tokenizer.json there (SentencePiece for Llama 2 / TinyLlama / Mistral, byte-level BPE for Llama 3,
SmolLM). The script counts tokens with ./run's own tokenizer code, through tests/tools/tok_dump
(`make tools`), never with another library, so its counts are ./run's: a BOS (and an EOS that
tokenizer_config.json asks for) is counted exactly when ./run puts one there, decided as ./run
does from tokenizer.json's template, tokenizer_config.json and, last, the BOS id in the model
file's header.

Lengths are exact. A trial at length N builds a prompt of exactly N - n tokens (BOS included when
./run adds one), so the prompt plus the n generated tokens fill a context of exactly N, and runs
./run with --ctx N. The filler is cut at token granularity: each filler part is a whole number of
tokens of the repeated filler sentences (from the first sentence on, or from another where the
exact count needs it), and the finished prompt is tokenized again and adjusted until the count is
exact. The trials of one length are built together, so that each round of adjustment is one
tok_dump process (`batch` mode) for all of them.

Depth: the fraction of the filler tokens that come before the key line (0 = right after the task
description, 1 = right before the question), exact to one token where the exact length allows it,
else a few tokens off (Prompt.filler_depth says where the key landed; with Llama 3's tokenizer,
about one length in 24 has a one-token filler line between the key line and the task (depth 0) or
the question (depth 1)). By default the trials of one length are spread evenly over [0, 1];
--depths random draws them uniformly; --depths 0,0.5,1 runs --trials trials at each listed depth.
Keys are uniform in [1, 50000] (as llama.cpp and YaRN). The same keys and depths are used for
every scaling mode, so the columns of the table are comparable.

What this is not: a test a tiny model can pass. stories260K retrieves nothing at any length; the
script is for users with real models, and tests/test_passkey.py checks its mechanics on it and on a
random Llama-3-shaped checkpoint with the real Llama 3 tokenizer.json.
Limit: the prompt travels to ./run on its command line, and Linux caps one argument at 128 KiB, so
prompts of more than about 35k tokens (Llama 2's tokenizer and Llama 3's alike) are refused with a
message.
"""
import argparse
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOK_DUMP = REPO / "tests/tools/tok_dump"

# The landmark-attention prompt, sentence for sentence.
TASK = ("There is an important info hidden inside a lot of irrelevant text. "
        "Find it and memorize them. I will quiz you about the important information there.")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
SENTENCES = [x + "." for x in FILLER[:-1].split(". ")]  # a filler part may start at any of them
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"
MAX_ARG = 131072 - 1  # Linux MAX_ARG_STRLEN: the longest single command-line argument, with its NUL


# ---------------------------------------------------------------------------------------------
# The tokenizer: ./run's, through tests/tools/tok_dump

class TokenizerError(Exception):
    """The tokenizer cannot be used: a missing file or tool, or tok_dump failed. One line."""


def checkpoint_bos(model):
    """The BOS id that ./run hands its tokenizer from the model file (model.h): the int32 at byte 40
    of an lrun file ("LRUN" magic), 1 for a llama2.c legacy file (no magic), -1 = none."""
    try:
        with open(model, "rb") as f:
            head = f.read(44)
    except OSError as e:
        raise TokenizerError(f"{model}: cannot read the model file: {e.strerror}")
    if head[:4] != b"LRUN":
        return 1  # llama2.c legacy: a SentencePiece tokenizer.model, BOS 1, EOS 2 (loader.c)
    if len(head) < 44:
        raise TokenizerError(f"{model}: the model file ends inside its header")
    return struct.unpack_from("<i", head, 40)[0]


def default_tokenizer(model):
    """The tokenizer ./run picks for MODEL: tokenizer.model beside it, else tokenizer.json, else
    tokenizer.model again (for the error message)."""
    d = Path(model).parent
    for name in ("tokenizer.model", "tokenizer.json"):
        if (d / name).exists():
            return d / name
    return d / "tokenizer.model"


class Tokenizer:
    """./run's tokenizer for one model: `path` (tokenizer.model or tokenizer.json) with the model's BOS
    id (checkpoint_bos; None: do not pass one). Texts are encoded by tok_dump, many per process:

      batch(texts)   [(ids, pieces)] without BOS/EOS; pieces are the bytes each token adds, as ./run
                     streams them, and they spell the text again (checked where it matters)
      lead, trail    how many tokens ./run puts before (BOS) and after (EOS) a prompt's ids,
                     measured once: `tok_dump TOKENIZER encode BOS_ID` against the batch ids
      count(text)    the tokens ./run feeds the model for text: lead + batch ids + trail
    """

    def __init__(self, path, bos_id=None, tool=TOK_DUMP):
        self.path, self.bos_id, self.tool = Path(path), bos_id, Path(tool)
        if not self.path.exists():
            raise TokenizerError(f"{self.path}: no such tokenizer (hint: -z TOKENIZER.model or tokenizer.json)")
        if not self.tool.exists():
            raise TokenizerError(f"{self.tool}: not found (hint: `make tools` first)")
        extra = [] if bos_id is None else [str(bos_id)]
        self._full = [int(x) for x in self._tool(["encode"] + extra, TASK.encode()).split()]  # as ./run has it
        self._lead = self._trail = None  # from the batch ids of TASK, in the first batch that needs them
        self._filler = {}                # phase -> pieces of the repeated filler, enough for the longest cut

    def _calibrate(self, plain):
        """lead and trail from TASK's batch ids `plain` and its ids with BOS/EOS, self._full."""
        full = self._full
        lead = next((k for k in range(len(full) - len(plain) + 1) if full[k:k + len(plain)] == plain), None)
        if lead is None:
            raise TokenizerError(f"{self.path}: the ids of a prompt are not the ids of its text with BOS/EOS "
                                 f"around them; cannot count tokens as ./run does")
        self._lead, self._trail = lead, len(full) - len(plain) - lead

    @property
    def lead(self):
        if self._lead is None:
            self._calibrate(self.batch([TASK])[0][0])
        return self._lead

    @property
    def trail(self):
        self.lead  # calibrates
        return self._trail

    def _tool(self, args, data):
        try:
            proc = subprocess.run([str(self.tool), str(self.path)] + args, input=data, capture_output=True)
        except OSError as e:
            raise TokenizerError(f"{self.tool}: cannot run it: {e.strerror} (hint: `make tools`)")
        if proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip().splitlines()
            raise TokenizerError(f"{self.path}: tok_dump {args[0]} failed (exit {proc.returncode})"
                                 + (": " + msg[-1].removeprefix("error: ") if msg else ""))
        return proc.stdout.decode()

    def batch(self, texts):
        """[(ids, pieces)] for each text, in one tok_dump process."""
        data = b"".join(b"%d\n%s" % (len(b), b) for b in (t.encode() for t in texts))
        lines = self._tool(["batch"], data).split("\n")
        if len(lines) < len(texts):
            raise TokenizerError(f"{self.path}: tok_dump batch answered {len(lines)} lines for {len(texts)} texts")
        out = []
        for line in lines[:len(texts)]:
            ids, _, hexes = line.partition("\t")
            out.append(([int(x) for x in ids.split()], [bytes.fromhex(h) for h in hexes.split(".")[:-1]]))
        return out

    def count(self, text):
        return self.lead + len(self.batch([text])[0][0]) + self.trail

    def spans(self, text, pieces):
        """[(begin, end)] byte range in text of each token, from its pieces; ValueError when the
        pieces do not spell the text (a normalizing tokenizer), as the ranges would then be wrong."""
        spans, at = [], 0
        for p in pieces:
            spans.append((at, at + len(p)))
            at += len(p)
        if b"".join(pieces) != text.encode():
            raise ValueError(f"{self.path}: the tokenizer's pieces do not spell the prompt again; cannot place "
                             f"its parts at token granularity")
        return spans

    def prepare_filler(self, n, also=()):
        """Tokenize the filler of every phase (see filler()) far enough for cuts of up to n tokens,
        and the texts `also`, in one tok_dump process as a rule; returns batch(also)."""
        phases, got = range(len(SENTENCES)), None
        reps = max(2, (n + 8) // len(FILLER.split()) + 2)  # at least a token a word: one round, as a rule
        while True:
            # n + 8: a margin so that a cut never falls in the last, unrepeated sentence
            need = [p for p in phases if len(self._filler.get(p, ())) <= n + 8]
            calibrate = [TASK] if self._lead is None else []
            more = list(also) if got is None else []
            if not (need or calibrate or more):
                return got or []
            answers = self.batch([" ".join(SENTENCES[p:] + [FILLER] * reps) for p in need] + calibrate + more)
            for p, (_, pieces) in zip(need, answers):
                self._filler[p] = pieces
            if calibrate:
                self._calibrate(answers[len(need)][0])
            if got is None:
                got = answers[len(need) + len(calibrate):]
            reps *= 2

    def filler(self, n, phase=0):
        """The text of the first n tokens of "FILLER FILLER FILLER ...", encoded as one text, started
        at sentence `phase` of FILLER (0: its first)."""
        if n == 0:
            return ""
        self.prepare_filler(n)
        return b"".join(self._filler[phase][:n]).decode()


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


def count_tokens(tok, text):
    """Tokens ./run feeds the model for `text`: its ids plus BOS (and EOS) where ./run adds them."""
    return tok.count(text)


def _assemble(tok, key, n_before, n_after, phase_before=0, phase_after=0):
    """The prompt text with n_before / n_after filler tokens around the key line (each part started
    at sentence phase_before / phase_after of FILLER), and the byte ranges [begin, end) of its parts
    "before", "key" and "after" (the key line without its newline). Empty filler parts are left
    out, not left as blank lines."""
    parts = [("task", TASK), ("before", tok.filler(n_before, phase_before)), ("key", KEY_LINE.format(key=key)),
             ("after", tok.filler(n_after, phase_after)), ("question", QUESTION)]
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


def _lockstep(searches):
    """Runs generators of the kind of _search() together, as one generator of the same kind: it
    yields all their requests at once, sends each its share of the answers, and returns their
    results in order."""
    results, asked = [None] * len(searches), {}

    def step(i, answer):
        try:
            asked[i] = searches[i].send(answer)
        except StopIteration as stop:
            results[i] = stop.value
            asked.pop(i, None)

    for i in range(len(searches)):
        step(i, None)
    while asked:
        order = list(asked)
        answers = yield [t for i in order for t in asked[i]]
        at = 0
        for i in order:
            k = len(asked[i])
            step(i, answers[at:at + k])
            at += k
    return results


def _walk(tok, n_tokens, key, depth, filler, held, phase, before_fixed):
    """With the fixed part at `held` filler tokens, correct the free part (started at sentence
    `phase`) until the prompt has n_tokens tokens; returns the Prompt, or None when the correction
    goes round in circles. A generator like _search()."""
    special = tok.lead + tok.trail
    free, seen, tried = filler - held, set(), {}  # tried[free] = (n_tokens - count, text, ranges, pieces)
    while free >= 0 and free not in seen:
        seen.add(free)
        if free not in tried:
            frees = [f for f in (free, free - 1, free + 1) if f >= 0 and f not in tried]
            built = [_assemble(tok, key, held, f, 0, phase) if before_fixed else
                     _assemble(tok, key, f, held, phase, 0) for f in frees]
            answers = yield [text for text, _ in built]
            for f, (text, ranges), (ids, pieces) in zip(frees, built, answers):
                tried[f] = (n_tokens - (special + len(ids)), text, ranges, pieces)
        hit = next((f for f in (free, free - 1, free + 1) if f in tried and tried[f][0] == 0), None)
        if hit is not None:
            _, text, ranges, pieces = tried[hit]
            spans = tok.spans(text, pieces)

            def inside(part):
                b, e = ranges[part]
                return sum(1 for tb, te in spans if tb >= b and te <= e)
            key_offset = tok.lead + sum(1 for tb, _ in spans if tb < ranges["key"][0])
            return Prompt(text, n_tokens, key, depth, key_offset, inside("before"),
                          inside("before") + inside("after"))
        free += tried[free][0]
    return None


def _search(tok, n_tokens, key, depth):
    """The search for one prompt, as a generator: it yields a list of texts to tokenize, is sent
    back their [(ids, pieces)], and returns the Prompt (StopIteration.value). build_prompts() runs
    many at once, one tok_dump process per round for all of them."""
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    [(ids, _)] = yield [_assemble(tok, key, 0, 0)[0]]
    fixed = tok.lead + tok.trail + len(ids)
    if n_tokens < fixed:
        raise ValueError(f"a prompt of {n_tokens} tokens cannot hold the task, key line and question "
                         f"({fixed} tokens without any filler)")
    # Tokens add up part by part, nearly: a newline is a token of its own or ends the token before
    # it (Llama 3's ".\n"), so a filler part of k tokens adds about k tokens (plus its newline, and
    # a token more or less where the cut meets it: "The" after a newline is "T" "he", not the "_The"
    # of the middle of the filler). So: fix the smaller part at its share of the filler, solve for
    # the other by correcting the count until it is exact, and if some count cannot be hit that way
    # (a step of 2 or 3 tokens: Llama 3's ".\n" is one token, so a cut after a full stop adds no
    # newline token and the count skips a value), start the free part at another sentence of the
    # filler, which moves its full stops, and only then move the fixed part by a token and try
    # again. Fixing the smaller part keeps depths 0 and 1 exact: nothing before, or nothing after,
    # the key line (with Llama 3's tokenizer, for all but about one length in 24). Each round also
    # tokenizes the two neighbours of the free part's next value, which saves most second rounds,
    # and the tries of one group below run side by side; the first that succeeds, in order, wins.
    filler = n_tokens - fixed
    before_fixed = depth <= 0.5
    want = round(depth * filler) if before_fixed else filler - round(depth * filler)
    groups = [[(0, 0)], [(0, p) for p in range(1, len(SENTENCES))]] + [[(-k, 0), (k, 0)] for k in range(1, 9)]
    for group in groups:
        walks = [_walk(tok, n_tokens, key, depth, filler, want + shift, phase, before_fixed)
                 for shift, phase in group if 0 <= want + shift <= filler]
        found = [p for p in (yield from _lockstep(walks)) if p]
        if found:
            return found[0]
    raise ValueError(f"no split of the filler gives exactly {n_tokens} tokens (key {key}, depth {depth}; "
                     f"counts just above the {fixed} tokens without filler can be out of reach)")


def build_prompts(tok, wanted):
    """[Prompt] for each (n_tokens, key, depth) in wanted: a passkey prompt of exactly n_tokens
    tokens as ./run counts them (BOS included) with the key line after round(depth * filler) of the
    filler tokens (give or take a few tokens when the exact count needs it; Prompt.filler_depth
    says where it landed). Raises ValueError when n_tokens cannot hold the fixed lines or no split
    of the filler gives the exact count, TokenizerError when tok_dump fails."""
    search = _lockstep([_search(tok, *w) for w in wanted])
    try:
        texts = next(search)  # the prompts without filler: tokenized with the filler, in one process
        texts = search.send(tok.prepare_filler(max(n for n, _, _ in wanted), also=texts))
        while True:
            texts = search.send(tok.batch(texts))
    except StopIteration as stop:
        return stop.value


def build_prompt(tok, n_tokens, key, depth):
    """One prompt; build_prompts() for several at once (one tok_dump process per round for all)."""
    return build_prompts(tok, [(n_tokens, key, depth)])[0]


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


def run_one(run, model, tokenizer, prompt, ctx, mode, n_predict, threads=None, timeout=3600, flags=(), info=None):
    """Greedy continuation of prompt.text by ./run at --ctx ctx with --rope-scaling mode (and the ./run
    options `flags`, e.g. --attn-logn); returns (continuation, answer or None). With a dict info,
    info["reused"] is how many prompt tokens came from a --prompt-cache (./run's summary line)."""
    if len(prompt.text.encode()) > MAX_ARG:
        raise ValueError(f"the prompt is {len(prompt.text.encode())} bytes, more than the {MAX_ARG} bytes "
                         f"Linux allows in one command-line argument (hint: shorter --lengths)")
    cmd = [str(run), str(model), "-t", "0", "-n", str(n_predict), "--ctx", str(ctx), "--rope-scaling", mode,
           *flags, "-i", prompt.text]
    if tokenizer:
        cmd += ["-z", str(tokenizer)]
    if threads:
        cmd += ["--threads", str(threads)]
    # errors="replace": a byte-level BPE model's continuation may stop inside a UTF-8 character.
    proc = subprocess.run(cmd, env=run_env(), capture_output=True, encoding="utf-8", errors="replace",
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"./run failed (exit {proc.returncode}) at --ctx {ctx} --rope-scaling {mode}:\n"
                           f"{proc.stderr.strip()}")
    if info is not None:
        m = re.search(r"\(and (\d+) from the prompt cache", proc.stderr)
        info["reused"] = int(m[1]) if m else 0
    cont = continuation_of(proc.stdout, prompt.text)
    return cont, parse_answer(cont)


def trial_plan(trials, depths, seed):
    """[(key, depth)] for one context length: keys uniform in [1, 50000]; depths spread evenly over
    [0, 1] (depths None), drawn uniformly (depths "random"), or each listed depth `trials` times, one
    round of the depths after another, so that the plan of t trials per depth is the first t rounds
    of the plan of more (scripts/ppl_results.py adds trials to a cell that way)."""
    rng = random.Random(seed)
    if depths is None:
        ds = [0.5] if trials == 1 else [k / (trials - 1) for k in range(trials)]
    elif depths == "random":
        ds = [rng.random() for _ in range(trials)]
    else:
        ds = [d for _ in range(trials) for d in depths]
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
    ap.add_argument("-z", "--tokenizer", help="tokenizer.model or tokenizer.json, as ./run -z (default: "
                    "tokenizer.model beside MODEL, else tokenizer.json there)")
    ap.add_argument("--lengths", default="512,1024,2048", help="context lengths N in tokens (prompt = N - n)")
    ap.add_argument("--modes", default="none,pi,ntk,dynamic,yarn", help="--rope-scaling modes to compare")
    ap.add_argument("--trials", type=int, default=5, help="trials per length and mode (per depth with --depths LIST)")
    ap.add_argument("--depths", help="comma-separated depths in [0, 1], or 'random' (default: evenly spread)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the keys and random depths (default 1)")
    ap.add_argument("-n", "--n-predict", type=int, default=8, help="tokens to generate (default 8)")
    ap.add_argument("--threads", type=int, help="passed to ./run")
    ap.add_argument("--run", default=str(REPO / "run"), help="the ./run binary (default: the repository's)")
    ap.add_argument("--tok-dump", default=str(TOK_DUMP), help="the tok_dump tool that counts tokens as ./run "
                    "does (default: the repository's tests/tools/tok_dump, `make tools`)")
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
    if not Path(a.model).is_file():
        sys.exit(f"error: {a.model}: no such model file")
    tok_path = Path(a.tokenizer) if a.tokenizer else default_tokenizer(a.model)
    if not tok_path.exists():
        sys.exit(f"error: {tok_path}: no such tokenizer (hint: -z TOKENIZER.model or tokenizer.json)")
    if not Path(a.run).exists():
        sys.exit(f"error: {a.run}: not found (hint: `make` first)")
    try:
        tok = Tokenizer(tok_path, checkpoint_bos(a.model), a.tok_dump)
    except TokenizerError as e:
        sys.exit(f"error: {e}")

    results = {}
    for n in lengths:
        plan = trial_plan(a.trials, depths, a.seed)
        try:
            prompts = build_prompts(tok, [(n - a.n_predict, key, d) for key, d in plan])
        except ValueError as e:
            sys.exit(f"error: --lengths {n}: {e} (hint: a longer length)")
        except TokenizerError as e:
            sys.exit(f"error: {e}")
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
