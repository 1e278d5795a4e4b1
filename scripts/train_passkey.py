"""train_passkey.py - train passkey64x512: tiny64x512 fine-tuned until it can do passkey retrieval at 512 tokens
(and the second shape's pair, tiny128x512 and passkey128x512, with --recipe).

Result (2026-11-26): data/passkey64x512-hf is this script's output with its defaults (900 steps, seed 7;
1702 s on the 2-vCPU AMD EPYC Zen 5 VM with the other core shared). Its checks at the end: passkey
100% teacher-forced on all three eval sets (512 and 256 tokens of passkey.py's filler, held-out story
filler), held-out loss 2.232 nats/token (tiny64x512: 2.074). With ./run, greedy (the commands in 7.
below): 150/150 at 256, 384 and 512 tokens (depths 0, 1/4, 1/2, 3/4, 1, ten keys each) and 50/50 at
512 with random depths (seed 2); tiny64x512 itself 0/50. A rerun of the script on the same machine
printed the same losses, digit for digit, for the 70 steps it was let run (then stopped, to free the
machine; that rerun used --threads 2). An earlier version of the recipe, whose differences were not
recorded, stayed at 9-16% after 900 steps. With this one the answer loss falls early, but retrieval
comes in one jump between steps 200 and 300 (0% -> 81% at 512 tokens, 100% from step 500), which looks
like an induction circuit forming: copying the digits that followed the same words the first time.

The second shape (issue 52; --recipe, RECIPES below; 2026-12-02, the same VM, --threads 2):
  - tiny128x512, from scratch (1000 steps, 6 of 8 rows with passkey examples, 1538 s): held-out loss
    2.026 (tiny64x512: 2.074), and 0% on every passkey check at every 100 steps: mixed in from the
    first step, the examples taught it the text but not to retrieve.
  - passkey128x512, from tiny128x512 with passkey64x512's recipe in four passes, each a run of this
    script from the last one's weights (--recipe passkey128x512 runs them in one process, each
    seeded afresh as a run is): 450, 450 and 200 steps (seed 7; 1162 + 1292 + 507 s): 0% through the
    first pass (answer loss 1.55 to 0.84), the jump in the second (0-3% at steps 100-200, 16-31% at
    300, 59-66% at 400), 69% / 81% / 72% at the end of the third (filler 512 / filler 256 / story);
    with ./run, greedy, 38/50 at 256 and 36/50 at 512 tokens with random depths (seed 2). That weak
    retriever left the lab little to measure, so (2026-12-02 again, on a 2-vCPU AMD EPYC Zen 5 VM,
    --threads 1, 1102 s) a fourth pass of 600 steps with fresh examples (seed 8: the first three
    all drew seed 7's) and a fifth of the peak learning rate (3e-4; at 1.5e-3 a trial of this pass fell to
    28% on filler 512 by step 100, and was stopped): 78% / 84% / 84% at its start (its own eval sets),
    62-75% on filler 512 up to step 200 while the examples grew back to 512 tokens, then 88%, 91%,
    94%, 91% at steps 300-600 (filler 256 100%, story 97% at the end); held-out loss 2.158 -> 2.237.
    With ./run, greedy, the same prompts: 49/50 at 256 and 50/50 at 512. Two query heads on one kv
    head, against passkey64x512's four on two, took about four times the steps.

Usage (from the repository root, `make run tools` first: the text is tokenized by tests/tools/tok_dump):
  /usr/bin/python3 scripts/train_passkey.py [--recipe passkey64x512 | tiny128x512 | passkey128x512]
                                            [--base DIR] [--out DIR] [--steps N] [--seed 7] [--lr X]
                                            [--threads 1] [--time-steps K]
  (--steps, --seed and --lr make one pass of their own: passkey128x512's fourth pass was --recipe
   passkey128x512 --base DIR --steps 600 --seed 8 --lr 3e-4, DIR the first three passes' output)

What it makes: data/passkey64x512-hf/, a Hugging Face Llama directory (config.json as transformers
writes it for LlamaForCausalLM, model.safetensors in F32 written by lrun/hf_checkpoint.py's save_file,
tokenizer.model = tok512.model), the shape of data/tiny64x512-hf (hidden 256, 4 layers, 4 heads / 2 kv
heads, head_dim 64, intermediate 688, vocab 512, tied embeddings, rope_theta 10000, trained context 512),
whose weights it starts from. The issue it answers (39, item 4): the bundled models score 0 on
scripts/passkey.py even at 1x, so no context-extension mode can show what it does to retrieval.

The recipe, top to bottom (the functions below follow this order):
  1. Text. The first 90% of the tokens of data/text/tinystories_validation_head.txt, as tiny64x512 was
     trained: [BOS] + encode(text) with tok512.model = 393,013 tokens, training uses [0, 353,711); the
     rest, [353,711, 393,013), is held out (data/text/tinystories_heldout_tail.txt is its text). Tokens
     come from ./run's own tokenizer (tok_dump), so training sees exactly the ids ./run feeds the model.
  2. Passkey examples, in the layout of scripts/passkey.py (its TASK, FILLER, KEY_LINE and QUESTION,
     imported from it, not copied):
         TASK \\n filler before \\n The pass key is K. Remember it. K is the pass key. \\n filler after \\n
         What is the pass key? The pass key is K.
     K uniform in [1, 50000], the depth (share of the filler before the key line) uniform in [0, 1],
     the length uniform in [no filler, 512] tokens with BOS and the answer (165 tokens have no
     filler: tok512 spends about one token per 2 to 3 characters). Half of them have the
     repeated filler sentences of passkey.py (cut at token granularity, started at a random sentence,
     as passkey.py cuts them), half have story text from the training tokens as filler (a random
     span, cut at the depth), so that the model learns to find the key in text, not only in a
     pattern it could learn by heart. Each example is tokenized as one text, as ./run tokenizes the
     prompt: " K." at the end is the tokens "_", the digits of K (tok512 splits digits) and ".".
  3. Rows of 513 tokens (512 inputs, 512 targets). A passkey row is BOS + example, then BOS + a random
     span of story tokens to fill it; a story row is a random 513-token window of the training tokens,
     as tiny64x512 was trained. A batch is PASSKEY_ROWS passkey rows and STORY_ROWS story rows, drawn
     afresh for every step.
  4. The loss: cross-entropy on every target, weighted: ANSWER_WEIGHT on the answer's "_", its digits
     and the "." after them (so the loss counts the answer and the model learns where the number
     ends), 1 elsewhere; sum(w * ce) / sum(w) over the batch.
  5. Optimizer: AdamW, betas (0.9, 0.95), weight decay 0.05 on the matrices (not the norm weights),
     peak LR with WARMUP linear warm-up steps and cosine decay to 10% of it, gradient clipping 1.0.
     One thread (torch.set_num_threads(1)) unless --threads says otherwise: the machine is shared.
  6. Checks while training, every EVAL_EVERY steps: the loss on the held-out tokens (16 windows of 513
     tokens), and passkey accuracy teacher-forced (every answer token, "_", digits and the token after
     them, is the model's argmax: the same as ./run's greedy answer) on prompts that
     scripts/passkey.py's own build_prompts builds, exactly as long as its trials are (512 and 256
     tokens with 8 to generate), plus held-out story-filler examples made from the held-out tokens.
  7. The result is written with its config; then check it with ./run:
         /usr/bin/python3 export/export.py data/passkey64x512-hf build/passkey64.bin
         /usr/bin/python3 scripts/passkey.py build/passkey64.bin --lengths 256,512 --modes none \\
             --trials 50 --depths random

The model (HF semantics, the forward of transformers' LlamaForCausalLM, written here from the
definitions): embedding; 4 x [RMSNorm (eps 1e-5), q/k/v projections, rotate_half RoPE (theta 10000)
on q and k, causal softmax attention with q . k / sqrt(64), kv head h // 2 for query head h, o
projection, residual; RMSNorm, down(silu(gate(x)) * up(x)), residual]; RMSNorm; logits with the
embedding matrix (tied). Tensors are kept under their Hugging Face names, so saving is a dict.

Time: on this project's machine (two shared cores, one thread for training) about 30 minutes for
the default run (1.9 s per step; 3 to 6 s per step when other jobs share the cores);
--time-steps K runs K steps, prints the time per step and writes nothing, to size a run.
The seed (--seed, default 7) fixes the examples, the batches and everything torch draws; torch's
CPU kernels can still differ in the last bits between machines and thread counts.
"""
import argparse
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))                 # lrun/
sys.path.insert(0, str(REPO / "scripts"))     # passkey.py
from lrun.hf_checkpoint import SafetensorsFile, save_file  # noqa: E402
import passkey  # noqa: E402  (the prompt layout, ./run's tokenizer through tok_dump, build_prompts)

DATA = REPO / "data"
TEXT = DATA / "text/tinystories_validation_head.txt"
TOK = DATA / "stories260K/tokenizer.model"
TRAIN_TOKENS = 353_711                        # [BOS] + encode(TEXT)[: this] is the training text
BOS, SPACE, DOT = 1, 410, 426                 # tok512: BOS, "_" (a lone space), "."
DIGITS = (477, 475, 479, 472, 484, 480, 490, 491, 487, 483)  # tok512: "0" .. "9" (split_digits)

# The shape (data/tiny64x512-hf's) and the recipe: passkey64x512's. --recipe passkey128x512
# replaces them with RECIPES' other row (module constants, so every function below reads the
# recipe it was started with).
BASE = DATA / "tiny64x512-hf"                 # the starting weights (None: from scratch)
DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, HIDDEN, VOCAB = 256, 4, 4, 2, 64, 688, 512
CTX, THETA, EPS = 512, 10000.0, 1e-5
STEPS = 900
PASSES = None                      # passes one after another, each as a run from the last's weights: a
                                   # number of steps, or (steps, seed, peak LR) for a pass with its own
PASSKEY_ROWS, STORY_ROWS = 14, 2   # rows of 513 tokens per batch
STORY_SHARE = 0.5                  # share of passkey examples whose filler is story text
ANSWER_WEIGHT = 10.0
QUESTIONS = 3                      # an example asks its question 1 to QUESTIONS times
CURRICULUM = 0.3                   # share of the steps over which the longest example grows to CTX
LR, WARMUP, WEIGHT_DECAY, CLIP = 1.5e-3, 50, 0.05, 1.0
EVAL_EVERY = 100
SEED = 7

# The second shape, for the extension lab (issue 52), in two steps as the first was made:
# tiny128x512, trained from scratch on the same text, head_dim 128, two query heads reading one kv
# head, rope_theta 500000 as Llama 3 has it, with passkey examples in 6 of every 8 rows from the
# first step (it learned the text, not to retrieve: see the log above); then passkey128x512, which
# fine-tunes it with passkey64x512's recipe for half the steps.
SHAPE128 = dict(HEADS=2, KV_HEADS=1, HEAD_DIM=128, HIDDEN=512, THETA=500000.0)
RECIPES = {
    "passkey64x512": {},
    "tiny128x512": dict(SHAPE128, BASE=None, STEPS=1000, PASSKEY_ROWS=6, STORY_ROWS=2, LR=3e-3, WARMUP=100),
    "passkey128x512": dict(SHAPE128, BASE=DATA / "tiny128x512-hf", PASSES=[450, 450, 200, (600, 8, 3e-4)]),
}


# ---------------------------------------------------------------------------------------------
# 1. Text

def tokenize_text(tok):
    """[BOS] + encode(TEXT) as ./run has it, and the byte string each token adds (pieces[i] for
    token i; BOS adds nothing), so that a span of tokens can be turned back into text."""
    [(ids, pieces)] = tok.batch([TEXT.read_text()])
    return [BOS] + ids, [b""] + pieces


# ---------------------------------------------------------------------------------------------
# 2. Passkey examples

def example_text(tok, rng, pieces, span, length, story, fixed, asked, questions=None):
    """The text of one passkey example of about `length` tokens (BOS and answers included; `fixed`
    of them are not filler, and `asked` more for each question before the last), with its key:
    filler of the repeated sentences, or (story) of the tokens in [span[0], span[1]) of the text.
    The question is asked at the end and, with `questions` (default QUESTIONS) > 1, up to
    questions - 1 more times at random places in the filler after the key line, each time
    answered: "...The pass key is K."."""
    key, depth, q = rng.randint(1, 50000), rng.random(), rng.randint(1, questions or QUESTIONS)
    n = max(0, length - fixed - (q - 1) * asked)
    before = round(depth * n)
    cuts = [before] + sorted(rng.randint(before, n) for _ in range(q - 1)) + [n]  # filler parts' ends
    if story:
        at = rng.randrange(span[0], span[1] - n)
        part = lambda a, b: b"".join(pieces[at + a:at + b]).decode("utf-8", "ignore").strip()  # noqa: E731
    else:
        part = lambda a, b: tok.filler(b - a, rng.randrange(len(passkey.SENTENCES)))  # noqa: E731
    lines = [passkey.TASK, part(0, before), passkey.KEY_LINE.format(key=key)]
    for a, b in zip(cuts, cuts[1:]):
        lines += [part(a, b), passkey.QUESTION + f" {key}."]
    return "\n".join(x for x in lines if x), key


def digit_runs(ids, key):
    """[(first, end)] of the runs of tokens in ids that spell the digits of key, in order."""
    want = [DIGITS[int(c)] for c in str(key)]
    return [(i, i + len(want)) for i in range(len(ids) - len(want) + 1)
            if ids[i:i + len(want)] == want
            and (i == 0 or ids[i - 1] not in DIGITS) and (i + len(want) == len(ids) or ids[i + len(want)] not in DIGITS)]


def answer_span(ids, key):
    """(first, end) of the answer tokens "_", digits, "." at the end of an example's ids."""
    k = len(str(key))
    first = len(ids) - k - 2
    assert ids[first] == SPACE and ids[-1] == DOT and all(t in DIGITS for t in ids[first + 1:-1]), ids[-12:]
    return first, len(ids)


def fixed_tokens(tok):
    """(tokens of an example without filler: BOS, task, key line, question, a 5-digit answer;
    tokens that one more question and its answer add)."""
    one = "\n".join([passkey.TASK, passkey.KEY_LINE.format(key=12345), passkey.QUESTION + " 12345."])
    two = one + "\n" + passkey.QUESTION + " 12345."
    a, b = (len(ids) for ids, _ in tok.batch([one, two]))
    return 1 + a, b - a


def make_examples(tok, rng, pieces, span, count, longest, fixed):
    """count passkey examples of at most `longest` tokens as (ids with BOS, weights, answer spans),
    tokenized in one tok_dump process: weight ANSWER_WEIGHT on every answer ("_", the digits, "."),
    1 elsewhere. An example longer than CTX tokens (a filler that tokenized longer in place) or
    with the key's digits elsewhere in its story filler is dropped."""
    fixed, asked = fixed
    wanted = [example_text(tok, rng, pieces, span, rng.randint(fixed, longest), rng.random() < STORY_SHARE,
                           fixed, asked) for _ in range(count)]
    out = []
    for (text, key), (ids, _) in zip(wanted, tok.batch([t for t, _ in wanted])):
        ids = [BOS] + ids
        runs = digit_runs(ids, key)
        if len(ids) > CTX or len(runs) != 2 + text.count(passkey.QUESTION):
            continue
        assert runs[-1] == (answer_span(ids, key)[0] + 1, len(ids) - 1)
        spans = [(a - 1, b + 1) for a, b in runs[2:]]   # "_" before the digits, "." after them
        w = [1.0] * len(ids)
        for a, b in spans:
            assert ids[a] == SPACE and ids[b - 1] == DOT
            w[a:b] = [ANSWER_WEIGHT] * (b - a)
        out.append((ids, w, spans))
    return out


def longest_at(step, steps, fixed):
    """The length curriculum: examples of at most this many tokens at this step, from fixed + 64 (a
    key at most ~100 tokens before its question) up to CTX over the first CURRICULUM of the steps."""
    t = min(1.0, (step + 1) / max(1, CURRICULUM * steps))
    return int(fixed[0] + 64 + t * (CTX - fixed[0] - 64))


# ---------------------------------------------------------------------------------------------
# 3. Rows and batches

def batch(rng, tokens, examples, n_train):
    """One batch: (inputs, targets, weights, answer mask), each (rows, 512). Passkey rows are packed:
    whole examples one after another (each starts with its BOS) while the next fits, then BOS and
    story tokens to the end of the row."""
    rows, weights, answers = [], [], []
    examples = iter(examples)
    for _ in range(PASSKEY_ROWS):
        row, w, ans = [], [], []
        ex = next(examples, None)
        while ex and len(row) + len(ex[0]) <= CTX + 1:
            ids, wt, spans = ex
            ans += [len(row) + i for a, b in spans for i in range(a, b)]
            row, w = row + ids, w + wt
            ex = next(examples, None)
        rest = CTX + 1 - len(row)   # BOS and rest - 1 story tokens
        at = rng.randrange(0, n_train - rest)
        rows.append(row + ([BOS] + tokens[at:at + rest - 1] if rest else []))
        weights.append(w + [1.0] * rest)
        answers.append([i in ans for i in range(CTX + 1)])
    for _ in range(STORY_ROWS):
        at = rng.randrange(0, n_train - CTX - 1)
        rows.append(tokens[at:at + CTX + 1])
        weights.append([1.0] * (CTX + 1))
        answers.append([False] * (CTX + 1))
    x, w, m = torch.tensor(rows), torch.tensor(weights), torch.tensor(answers)
    return x[:, :-1], x[:, 1:], w[:, 1:], m[:, 1:]   # target i is token i + 1


# ---------------------------------------------------------------------------------------------
# The model: LlamaForCausalLM's forward, on a dict of tensors with Hugging Face's names

def names():
    """The tensor names and shapes of the checkpoint (tied: no lm_head.weight)."""
    out = {"model.embed_tokens.weight": (VOCAB, DIM), "model.norm.weight": (DIM,)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (DIM,), p + "post_attention_layernorm.weight": (DIM,),
                    p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, DIM),
                    p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, DIM),
                    p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, DIM),
                    p + "self_attn.o_proj.weight": (DIM, HEADS * HEAD_DIM),
                    p + "mlp.gate_proj.weight": (HIDDEN, DIM), p + "mlp.up_proj.weight": (HIDDEN, DIM),
                    p + "mlp.down_proj.weight": (DIM, HIDDEN)})
    return dict(sorted(out.items()))


def init_weights(gen):
    """From scratch: the matrices normal with std 0.02 (the embedding too), the two that write into
    the residual stream (o_proj, down_proj) 0.02 / sqrt(2 LAYERS) as GPT-2 scales them, norms 1."""
    params = {}
    for name, shape in names().items():
        if len(shape) == 1:
            t = torch.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            t = torch.randn(shape, generator=gen) * std
        params[name] = t.requires_grad_(True)
    return params


def load_base(seed):
    """The base model's weights, every tensor checked against the shape above (BASE None: new ones)."""
    if BASE is None:
        return init_weights(torch.Generator().manual_seed(seed))
    f = SafetensorsFile(str(BASE / "model.safetensors"))
    shapes = names()
    assert sorted(f.tensors) == sorted(shapes), f"{BASE} has other tensors than expected"
    params = {}
    for name, shape in shapes.items():
        t = torch.from_numpy(np.array(f.get(name)))
        assert tuple(t.shape) == shape, (name, t.shape)
        params[name] = t.requires_grad_(True)
    return params


def rope_tables(n):
    """cos, sin of shape (n, HEAD_DIM) for positions 0..n-1: rotate_half's layout, the angle of
    pair j repeated in columns j and j + HEAD_DIM / 2."""
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate(x, cos, sin):
    half = HEAD_DIM // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # rotate_half
    return x * cos + rot * sin


def forward(p, ids):
    """Logits (B, T, VOCAB) for token ids (B, T), positions 0..T-1."""
    B, T = ids.shape
    cos, sin = rope_tables(T)
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = F.embedding(ids, p["model.embed_tokens.weight"])
    for i in range(LAYERS):
        q_ = f"model.layers.{i}."
        h = rmsnorm(x, p[q_ + "input_layernorm.weight"])
        q = F.linear(h, p[q_ + "self_attn.q_proj.weight"]).view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        k = F.linear(h, p[q_ + "self_attn.k_proj.weight"]).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = F.linear(h, p[q_ + "self_attn.v_proj.weight"]).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)   # query head h reads kv head h // 2
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM) + mask, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM)
        x = x + F.linear(o, p[q_ + "self_attn.o_proj.weight"])
        h = rmsnorm(x, p[q_ + "post_attention_layernorm.weight"])
        x = x + F.linear(F.silu(F.linear(h, p[q_ + "mlp.gate_proj.weight"])) * F.linear(h, p[q_ + "mlp.up_proj.weight"]),
                         p[q_ + "mlp.down_proj.weight"])
    x = rmsnorm(x, p["model.norm.weight"])
    return F.linear(x, p["model.embed_tokens.weight"])


# ---------------------------------------------------------------------------------------------
# 6. Checks

def heldout_loss(p, tokens):
    """Mean cross-entropy (nats/token) on 16 consecutive 513-token windows of the held-out tokens."""
    with torch.no_grad():
        rows = torch.tensor([tokens[TRAIN_TOKENS + i * (CTX + 1):TRAIN_TOKENS + (i + 1) * (CTX + 1)]
                             for i in range(16)])
        out = []
        for r in rows.split(8):
            out.append(F.cross_entropy(forward(p, r[:, :-1]).reshape(-1, VOCAB), r[:, 1:].reshape(-1),
                                       reduction="none"))
        return torch.cat(out).mean().item()


def passkey_set(tok, rng, pieces, n_tokens, trials=32):
    """Eval prompts as token ids with BOS plus their answer's span: scripts/passkey.py's prompts of
    length 512 and 256 (8 tokens to generate, as its default), keys and depths drawn as its
    --depths random, and story-filler examples from the held-out tokens."""
    sets = {}
    for n in (CTX, CTX // 2):
        plan = [(n - 8, rng.randint(1, 50000), rng.random()) for _ in range(trials)]
        prompts = passkey.build_prompts(tok, plan)
        texts = [pr.text + f" {pr.key}." for pr in prompts]
        sets[f"filler {n}"] = [([BOS] + ids, answer_span([BOS] + ids, pr.key))
                               for (ids, _), pr in zip(tok.batch(texts), prompts)]
    fixed, asked = fixed_tokens(tok)
    story = [example_text(tok, rng, pieces, (TRAIN_TOKENS, n_tokens), rng.randint(CTX // 2, CTX - 8), True,
                          fixed, asked, 1) for _ in range(trials)]
    sets["story 256-504"] = [([BOS] + ids, answer_span([BOS] + ids, key))
                             for (ids, _), (_, key) in zip(tok.batch([t for t, _ in story]), story)]
    return sets


def passkey_accuracy(p, examples):
    """Share of examples whose answer tokens are all argmax given the ones before (greedy retrieval:
    "_", the digits, then the "." that ends the number)."""
    ok = 0
    with torch.no_grad():
        for ids, (a, b) in examples:
            x = torch.tensor([ids[:-1]])
            pred = forward(p, x)[0].argmax(-1)
            ok += bool((pred[a - 1:b - 1] == torch.tensor(ids[a:b])).all())
    return ok / len(examples)


# ---------------------------------------------------------------------------------------------
# 5. Training, and 7. writing the directory

def lr_at(step, steps, peak):
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def write_model(p, out):
    out.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
              "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": CTX,
              "rms_norm_eps": EPS, "rope_theta": THETA, "rope_scaling": None, "hidden_act": "silu",
              "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file(str(out / "model.safetensors"),
              {name: p[name].detach().numpy().astype(np.float32) for name in names()})
    shutil.copyfile(TOK, out / "tokenizer.model")


def train(a, p, tok, tokens, pieces, fixed, steps, t0, seed, peak):
    """One pass of `steps` steps on the weights p, in place: the seeds set afresh from `seed` (so a pass
    is what a run of the script from the previous pass's written weights does), its own eval sets,
    optimizer and schedule (peak LR `peak`). Returns when its training began."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    evals = passkey_set(tok, rng, pieces, len(tokens))
    print(f"data: {len(tokens)} tokens (an example without filler: {fixed[0]} tokens, {fixed[1]} more per extra question), "
          f"eval sets {', '.join(f'{k} ({len(v)})' for k, v in evals.items())}; {time.time() - t0:.0f} s",
          flush=True)
    decay = [t for n, t in p.items() if t.dim() == 2]
    rest = [t for n, t in p.items() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}],
                            lr=peak, betas=(0.9, 0.95))

    def report(step):
        acc = {k: passkey_accuracy(p, v) for k, v in evals.items()}
        print(f"step {step}: held-out loss {heldout_loss(p, tokens):.4f}, passkey "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in acc.items()) + f"; {time.time() - t0:.0f} s", flush=True)

    if not a.time_steps:
        report(0)
    t_train, lm_avg, ans_avg = time.time(), None, None
    for step in range(steps):
        longest = longest_at(step, steps, fixed)
        examples = make_examples(tok, rng, pieces, (1, TRAIN_TOKENS), PASSKEY_ROWS * (1 + 2 * CTX // longest), longest, fixed)
        x, y, w, m = batch(rng, tokens, examples, TRAIN_TOKENS)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak)
        ce = F.cross_entropy(forward(p, x).reshape(-1, VOCAB), y.reshape(-1), reduction="none").view_as(y)
        loss = (ce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), CLIP)
        opt.step()
        with torch.no_grad():
            lm = ce[PASSKEY_ROWS:].mean().item()          # story rows: the plain language-model loss
            ans = ce[m].mean().item()                     # answer tokens
        lm_avg = lm if lm_avg is None else 0.9 * lm_avg + 0.1 * lm
        ans_avg = ans if ans_avg is None else 0.9 * ans_avg + 0.1 * ans
        if (step + 1) % 10 == 0 or a.time_steps:
            print(f"step {step + 1}/{steps}: loss {loss.item():.4f}, story rows {lm_avg:.4f}, answer tokens "
                  f"{ans_avg:.4f} ({m.sum().item()} in the batch), longest example {longest}, lr {lr_at(step, steps, peak):.2e}, {(time.time() - t_train) / (step + 1):.2f} s/step",
                  flush=True)
        if not a.time_steps and ((step + 1) % EVAL_EVERY == 0 or step + 1 == steps):
            report(step + 1)
    return t_train


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fine-tune tiny64x512 on TinyStories with passkey examples mixed in.")
    ap.add_argument("--recipe", choices=list(RECIPES), default="passkey64x512",
                    help="the shape and recipe (default passkey64x512)")
    ap.add_argument("--base", help="the directory whose weights it starts from (default: the recipe's)")
    ap.add_argument("--out", help="the directory to write (default data/RECIPE-hf)")
    ap.add_argument("--steps", type=int, help="one pass of this many steps (default: the recipe's passes)")
    ap.add_argument("--lr", type=float, help="the peak learning rate (default: the recipe's)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    ap.add_argument("--time-steps", type=int, help="run this many steps, print the time per step, write nothing")
    a = ap.parse_args(argv)
    globals().update(RECIPES[a.recipe], **({"BASE": Path(a.base)} if a.base else {}), **({"LR": a.lr} if a.lr else {}))
    passes = [a.time_steps] if a.time_steps else [a.steps] if a.steps else PASSES or [STEPS]
    a.out = a.out or str(DATA / f"{a.recipe}-hf")
    torch.set_num_threads(a.threads)
    t0 = time.time()
    tok = passkey.Tokenizer(TOK, BOS, passkey.TOK_DUMP)
    tokens, pieces = tokenize_text(tok)
    assert len(tokens) == 393_013, f"{TEXT}: {len(tokens)} tokens, expected 393,013 (data/README.md)"
    fixed = fixed_tokens(tok)
    p = load_base(a.seed)
    for k, one in enumerate(passes):
        steps, seed, peak = one if isinstance(one, tuple) else (one, a.seed, LR)
        if len(passes) > 1:
            print(f"pass {k + 1} of {len(passes)}: {steps} steps, seed {seed}, peak lr {peak:g}", flush=True)
        t_train = train(a, p, tok, tokens, pieces, fixed, steps, t0, seed, peak)
    if a.time_steps:
        print(f"{(time.time() - t_train) / a.time_steps:.2f} s per step with {a.threads} thread(s)")
        return 0
    write_model(p, Path(a.out))
    print(f"wrote {a.out}; {time.time() - t0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
