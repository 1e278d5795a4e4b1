"""sampler.c against a reference written here from llama.cpp's definitions (src/llama-sampling.cpp:
llama_sampler_penalties, top_k, top_p, min_p, temp, dist, in common/sampling's default order), on
known logits. The reference sorts the whole vocabulary and renormalises after every step, the plain
way; sampler.c prunes before sorting and selects top-k in linear time, so agreement says the
shortcuts are exact. Each comparison prints its largest probability difference; a control with
the temperature applied before top-p (the order this program had before) must disagree.
"""
import subprocess
from collections import Counter

import numpy as np
import pytest

from conftest import REPO

TOOL = REPO / "tests/tools/sample_dump"


def reference(logits, history, temp, top_p, min_p, penalty, top_k, last_n, temp_first=False):
    """{id: probability} of the tokens llama.cpp's chain can draw."""
    x = np.array(logits, dtype=np.float64)
    for t in set(history[-last_n:] if last_n > 0 else []):  # each distinct recent token once
        x[t] = x[t] * penalty if x[t] <= 0 else x[t] / penalty
    if temp == 0:
        best = int(np.flatnonzero(x == x.max())[0])  # ties: the lowest id
        return {best: 1.0}
    if temp_first:
        x = x / temp
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))
    if top_k > 0:
        order = order[:top_k]

    def probs(ids):
        e = np.exp(x[ids] - x[ids].max())
        return e / e.sum()
    if top_p < 1:
        cum, keep = 0.0, len(order)
        for n, p in enumerate(probs(order)):
            cum += p
            if cum >= top_p:
                keep = n + 1
                break
        order = order[:keep]
    if min_p > 0:
        p = probs(order)
        order = [i for i, q in zip(order, p) if q >= min_p * p.max()]
    y = x[order] if temp_first else x[order] / temp
    e = np.exp(y - y.max())
    return dict(zip(order, e / e.sum()))


def tool_input(logits, history, temp, top_p, min_p, penalty, top_k, last_n):
    head = f"{temp!r} {top_p!r} {min_p!r} {penalty!r} {top_k} {last_n} {len(logits)}\n"
    return head + " ".join(repr(float(v)) for v in logits) + f"\n{len(history)} " + " ".join(map(str, history))


def ours(*args):
    out = subprocess.run([str(TOOL), "dist"], input=tool_input(*args), capture_output=True, text=True, check=True)
    return {int(i): float(p) for i, p in (line.split() for line in out.stdout.splitlines())}


def differ(a, b):
    """Largest probability difference, or inf if the kept sets differ."""
    if set(a) != set(b):
        return float("inf")
    return max(abs(a[i] - b[i]) for i in a)


# (temp, top_p, min_p, repeat_penalty, top_k, repeat_last_n): each step alone, then together.
CASES = [
    (1.0, 1.0, 0.0, 1.0, 0, 64),     # plain softmax
    (0.7, 1.0, 0.0, 1.0, 0, 64),     # temperature alone
    (1.0, 0.9, 0.0, 1.0, 0, 64),     # top-p (today's default)
    (1.0, 1.0, 0.0, 1.0, 40, 64),    # top-k
    (1.0, 1.0, 0.05, 1.0, 0, 64),    # min-p
    (1.0, 1.0, 0.0, 1.3, 0, 64),     # repeat penalty
    (0.8, 0.95, 0.05, 1.1, 40, 64),  # llama.cpp's defaults with a penalty
    (1.5, 0.5, 0.1, 0.8, 7, 16),     # penalty below 1 (favours repeats), small k
    (0.0, 0.9, 0.0, 1.5, 0, 64),     # greedy: the penalty still applies
    (2.0, 0.3, 0.0, 1.0, 3, 0),      # k smaller than the nucleus over the full vocabulary
    (1.0, 1e-9, 0.0, 1.0, 0, 64),    # the likeliest alone
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_distribution_matches_reference(c_tools, case):
    rng = np.random.default_rng(35)
    worst = 0.0
    for trial in range(6):
        vocab = [512, 32000, 3][trial % 3]
        logits = (rng.standard_normal(vocab) * [1, 4, 10][trial % 3]).astype(np.float32)
        logits[rng.integers(vocab)] = logits.max()  # a tie at the top: the lower id wins
        history = list(rng.integers(0, vocab, size=100))
        ref = reference(logits, history, *case)
        got = ours(logits, history, *case)
        d = differ(ref, got)
        assert d < 2e-6, (case, trial, sorted(ref)[:10], sorted(got)[:10])
        worst = max(worst, d)
    print(f"{case}: largest probability difference {worst:.2e}")


def test_control_temperature_order_matters(c_tools):
    """Applying the temperature before top-p keeps another set: the comparison can see the order."""
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(512) * 3).astype(np.float32)
    case = (0.5, 0.9, 0.0, 1.0, 0, 64)
    got = ours(logits, [], *case)
    assert differ(reference(logits, [], *case), got) < 2e-6
    assert set(reference(logits, [], *case, temp_first=True)) != set(got)


def test_hand_computed():
    """Four logits by hand: [2, 1, 0, -1], the last token (id 3) and id 0 recent, penalty 2:
    id 0 -> 1, id 3 -> -2; sorted 0 (1), 1 (1), 2 (0), 3 (-2), ties by id. top-k 3 drops id 3;
    softmax of [1, 1, 0] is [e, e, 1] / (2e + 1); top-p 0.6 keeps ids 0 and 1 (0.42, 0.84 >= 0.6);
    at temperature 1 they are 1/2 each."""
    got = ours([2.0, 1.0, 0.0, -1.0], [3, 0], 1.0, 0.6, 0.0, 2.0, 3, 64)
    assert set(got) == {0, 1} and abs(got[0] - 0.5) < 1e-7 and abs(got[1] - 0.5) < 1e-7
    # min-p 0.5 with no penalty: p / p_max = e^-1 = 0.37 for id 1, dropped; id 0 alone.
    assert ours([2.0, 1.0, 0.0, -1.0], [], 1.0, 1.0, 0.5, 1.0, 0, 64) == {0: 1.0}
    # Greedy with the penalty: id 0's 2 -> 0.5 < id 1's 1.
    assert ours([2.0, 1.0, 0.0, -1.0], [0], 0.0, 1.0, 0.0, 4.0, 0, 64) == {1: 1.0}


def test_draws_follow_the_distribution_and_the_seed(c_tools):
    """20000 draws land on each token in proportion to its probability (within 5 standard errors),
    and the same seed draws the same sequence, another seed another one."""
    logits = [1.0, 0.5, 0.0, -0.5, -3.0]
    case = (1.0, 1.0, 0.0, 1.0, 0, 64)
    text = tool_input(logits, [], *case)
    draw = lambda seed: subprocess.run([str(TOOL), "draw", str(seed), "20000"], input=text, capture_output=True,
                                       text=True, check=True).stdout.split()
    a, b, c = draw(1), draw(1), draw(2)
    assert a == b and a != c
    counts = Counter(map(int, a))
    for i, p in reference(logits, [], *case).items():
        se = (p * (1 - p) / 20000) ** 0.5
        assert abs(counts[i] / 20000 - p) < 5 * se + 1e-9, (i, counts[i], p)
