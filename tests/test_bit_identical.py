"""test_bit_identical.py - a safety net for refactoring: the logits of a set of runs, pinned to the bit.

Every RoPE mode (none, pi, ntk, dynamic, yarn, llama3, longrope, rerope, leaky-rerope, selfextend,
dynamic-yarn, dca), some with --attn-logn or non-default knobs; a prompt in blocks (the batched prefill)
and token by token (decode); a context shift; sliding-window and NoPE layers; KV caches of f32, f16 and
q8_0; every weight type (f32, f16, bf16, q8_0, q4_0, and f16 read as bf16); contexts past the trained one.
Each case runs tests/tools/dump_logits (model.c on the fast kernels) and, for a subset,
tests/tools/dump_logits_ref (model.c on kernels.c's plain references, as ./run-ref), and its float32
logits must hash (SHA-256 of the raw bytes) to the value in tests/bit_identical.json, so a change that
moves any single bit of any logit fails here. Cases marked in THREADS run again on one thread and must
give the same bits as on two (the program's claim: results do not depend on the thread count).
Cases marked in LAST run again asking each forward only for its block's last logits, as ./run's
prompt does (the last layer then runs for that token alone): those rows must be the same bits.

The bits belong to an instruction set: the vector kernels sum in an order of their own (AVX2's 8 lanes
are not AVX-512's 16), so the hashes are stored per kernels_isa() name, which dump_logits prints. On an
instruction set with no hashes stored, the test cannot pin bits; it says so on stdout and instead holds
every case's logits to the float values stored for it (rows 0, n/2 and n-1, 16 logits each) within a
relative tolerance, which catches a broken mode (a window off by one moves logits by ~1e-1) but not a
changed last bit. To pin this machine's bits, after checking it is right to:

    /usr/bin/python3 tests/test_bit_identical.py --regen

which writes this ISA's hashes (and the float samples of cases that have none) into the JSON. Another
instruction set's come from a build for it, on any x86 machine that runs it: the tools made with the
Makefile's CFLAGS and another -march (haswell: avx2; icelake-server: avx512-vnni), then --regen. Checked
at f47fec6: the -march=haswell build here gave the bits stored from a Zen 3 machine's own AVX2 build
in 55 of 56 cases (the 56th, q4_0-leaky-decode, had changed with q4_0's block order and was stale).
The compiler's tuning is not part of the name, so the Makefile pins the one tuning choice that moved
bits (-mprefer-vector-width=512): an Intel AVX-512 machine (GCC's rocketlake tuning, which prefers 256)
and the AMD Zen 5 that recorded avx512-vnni-bf16 then give the same bits in all 56 cases, where without
it none matched; the avx512-vnni hashes were recorded again with the flag (icelake-server, below).

    make -B CFLAGS="-O3 -march=haswell -mprefer-vector-width=512 -std=c11 -fopenmp -fno-trapping-math \
        -D_DEFAULT_SOURCE" tests/tools/dump_logits tests/tools/dump_logits_ref
The models are exported at test time (export/export.py); their SHA-256 are stored too, so a change in
what the exporter writes is reported as that, not as a change in the C.

Controls, that the net can catch what it is for: one bit of one logit flipped changes the hash; and no
two cases share a hash (each mode, knob and path changes the bits of the runs here, so a mode that
silently ran as another would show), except the pairs that are one computation (SAME), which must.
"""
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import DATA, REPO, STORIES_BIN, TOOLS, run_export  # noqa: E402

EXPECTED = Path(__file__).resolve().parent / "bit_identical.json"
# Relative tolerance of the float samples on an ISA with no hashes: max |diff| / max |stored|.
# Measured between a plain C build (-DKERNELS_PLAIN) and the AVX2 bits: at most 8e-6 where the
# activations stay float32 (5e-5 with a q8_0 cache); 2e-3 for bf16 weights and 7e-3 for q8_0 and
# q4_0, whose products first round each activation to bf16 or 8 bits, a rounding that a change in
# the last bit can flip. A mode run wrong (a window or chunk off by one) moves them by ~1e-1.
TOL = {"float": 1e-4, "rounded": 2e-2}

# Models: (name, source, dtype); source a Hugging Face folder exported here, or a model file as it is.
MODELS = {
    "s260": (STORIES_BIN, None),  # stories260K, L = 512, head_dim 8, 8 heads / 4 kv heads
    "s260_f16": (DATA / "stories260K-hf", "f16"),
    "s260_bf16": (DATA / "stories260K-hf", "bf16"),
    "s260_q8_0": (DATA / "stories260K-hf", "q8_0"),
    "s260_q4_0": (DATA / "stories260K-hf", "q4_0"),
    "tiny": (DATA / "tiny64x512-hf", "f32"),  # L = 512, head_dim 64 (a q8_0 cache), 4 heads / 2 kv
    "phi3": (DATA / "families/phi3-longrope-long", "f32"),  # L = 256, LongRoPE, 3/4 of a head turns
    "mistral": (DATA / "families/mistral-swa", "f32"),  # L = 256, sliding window 64
    "smol": (DATA / "families/smollm3-nope", "f32"),  # L = 256, every 4th layer NoPE
}

S = ["--ctx", "640"]  # stories260K past its L = 512
F = ["--ctx", "400"]  # the families' models past their L = 256
D = ["--growing", "--prefill", "500"]  # a prompt of 500 ids, then decode token by token past L = 512
D2 = ["--growing", "--prefill", "200"]  # the same past the families' L = 256
SH = ["--ctx", "256", "--shift", "4"] + D2  # 400 ids through a context of 256
# name: (model, n ids, dump_logits arguments, also on the reference path)
CASES = {
    "none": ("s260", 640, S, True),
    "pi": ("s260", 640, S + ["--rope-scaling", "pi"], False),
    "ntk": ("s260", 640, S + ["--rope-scaling", "ntk"], False),
    "ntk-alpha3": ("s260", 640, S + ["--rope-scaling", "ntk", "--rope-alpha", "3"], False),
    "dynamic": ("s260", 640, S + ["--rope-scaling", "dynamic"], True),
    "yarn": ("s260", 640, S + ["--rope-scaling", "yarn"], True),
    "llama3": ("s260", 640, S + ["--rope-scaling", "llama3", "--rope-factor", "2"], False),
    "rerope": ("s260", 640, S + ["--rope-scaling", "rerope"], True),
    "rerope-w100": ("s260", 640, S + ["--rope-scaling", "rerope", "--rope-window", "100"], False),
    "leaky-rerope": ("s260", 640, S + ["--rope-scaling", "leaky-rerope"], True),
    "selfextend": ("s260", 640, S + ["--rope-scaling", "selfextend"], True),
    "selfextend-g3w64": ("s260", 640, S + ["--rope-scaling", "selfextend", "--grp-attn-n", "3", "--rope-window", "64"],
                         False),
    "dynamic-yarn": ("s260", 640, S + ["--rope-scaling", "dynamic-yarn"], True),
    "dca": ("s260", 640, S + ["--rope-scaling", "dca"], True),
    "dca-s200w20": ("s260", 640, S + ["--rope-scaling", "dca", "--dca-chunk", "200", "--rope-window", "20"], False),
    # --attn-logn on one mode of each kind: one turn, two turns, three turns
    "yarn-logn": ("s260", 640, S + ["--rope-scaling", "yarn", "--attn-logn"], False),
    "rerope-logn": ("s260", 640, S + ["--rope-scaling", "rerope", "--attn-logn"], True),
    "dca-logn": ("s260", 640, S + ["--rope-scaling", "dca", "--attn-logn"], False),
    # token by token (decode), the RoPE length growing with the text
    "dynamic-decode": ("s260", 640, S + ["--rope-scaling", "dynamic"] + D, False),
    "leaky-rerope-decode": ("s260", 640, S + ["--rope-scaling", "leaky-rerope"] + D, False),
    "selfextend-decode": ("s260", 640, S + ["--rope-scaling", "selfextend"] + D, False),
    "dca-decode": ("s260", 640, S + ["--rope-scaling", "dca"] + D, True),
    "dynamic-yarn-decode": ("s260", 640, S + ["--rope-scaling", "dynamic-yarn"] + D, False),
    # blocks of 7: a block's queries straddle the rerope window's edge and dca's chunk boundaries
    "rerope-batch7": ("s260", 640, S + ["--rope-scaling", "rerope", "--batch", "7"], False),
    "selfextend-batch7": ("s260", 640, S + ["--rope-scaling", "selfextend", "--batch", "7"], False),
    "dca-batch7": ("s260", 640, S + ["--rope-scaling", "dca", "--batch", "7"], False),
    # context shifts (keep 4): keys turned back, or only moved where they are cached un-rotated
    "none-shift": ("s260", 400, SH, False),
    "none-shift-batch": ("s260", 400, ["--ctx", "256", "--shift", "4", "--batch", "32"], False),
    "dynamic-shift": ("s260", 400, SH + ["--rope-scaling", "dynamic"], False),
    "rerope-shift": ("s260", 400, SH + ["--rope-scaling", "rerope", "--rope-window", "64"], False),
    "dca-shift": ("s260", 400, SH + ["--rope-scaling", "dca", "--dca-chunk", "96", "--rope-window", "8"], True),
    # weight types
    "f16": ("s260_f16", 640, S, False),
    "f16-as-bf16": ("s260_f16", 640, S + ["--f16-as-bf16"], False),
    "bf16": ("s260_bf16", 640, S, False),
    "q8_0": ("s260_q8_0", 640, S, False),
    "q4_0": ("s260_q4_0", 640, S, False),
    "q8_0-dca": ("s260_q8_0", 640, S + ["--rope-scaling", "dca"], False),
    "q4_0-leaky-decode": ("s260_q4_0", 640, S + ["--rope-scaling", "leaky-rerope"] + D, False),
    # KV cache types (head_dim 64)
    "tiny-f16": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "f16", "--cache-type-v", "f16"], False),
    "tiny-q8": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"], False),
    "tiny-q8k-f32v-dynamic": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "q8_0", "--rope-scaling", "dynamic"],
                              False),
    "tiny-f16-rerope": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "f16", "--cache-type-v", "f16",
                                      "--rope-scaling", "rerope"], False),
    "tiny-q8-leaky-rerope": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
                                           "--rope-scaling", "leaky-rerope"], False),
    "tiny-q8-selfextend": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "q8_0", "--rope-scaling", "selfextend"],
                           False),
    "tiny-f16-dca-decode": ("tiny", 600, ["--ctx", "600", "--cache-type-k", "f16", "--cache-type-v", "q8_0",
                                          "--rope-scaling", "dca"] + D, False),
    # LongRoPE (Phi-3's own mode, partial rotary): long factors past L, and switching to them token by token
    "longrope": ("phi3", 400, F, True),
    "longrope-decode": ("phi3", 400, F + D2, False),
    "longrope-logn": ("phi3", 400, F + ["--attn-logn"], False),
    "phi3-leaky-rerope": ("phi3", 400, F + ["--rope-scaling", "leaky-rerope"], False),
    # sliding-window layers
    "mistral": ("mistral", 300, ["--ctx", "300"], True),
    "mistral-dynamic-decode": ("mistral", 300, ["--ctx", "300", "--rope-scaling", "dynamic"] + D2, False),
    # NoPE layers
    "smol": ("smol", 400, F, False),
    "smol-dynamic": ("smol", 400, F + ["--rope-scaling", "dynamic"], False),
    "smol-rerope": ("smol", 400, F + ["--rope-scaling", "rerope"], True),
    "smol-selfextend-decode": ("smol", 400, F + ["--rope-scaling", "selfextend"] + D2, False),
    "smol-dca": ("smol", 400, F + ["--rope-scaling", "dca"], True),
}
# One forward pass over the whole context of 640 runs dynamic at l = ctx, which is ntk with alpha =
# ctx / L, and dynamic-yarn at s = ctx / L, which is yarn's default factor (README, "dynamic"): the
# same bits, which test_controls checks. And stories260K's f32 weights run from an f32_r16 copy whose
# products have one order in decode and prefill (kernels_internal.h), so a prompt in one block, in
# blocks of 7 and token by token are one computation for a mode that does not follow the length.
SAME = [("ntk", "dynamic"), ("yarn", "dynamic-yarn"), ("rerope", "rerope-batch7"),
        ("leaky-rerope", "leaky-rerope-decode"), ("selfextend", "selfextend-decode"), ("selfextend", "selfextend-batch7"),
        ("dca", "dca-decode"), ("dca", "dca-batch7")]
# The reference path runs each token alone (matmul_ref, attention_ref), so a prompt in blocks and token
# by token are one computation there when the mode does not follow the length.
REF_SAME = [("dca", "dca-decode")]
# Cases run again on one thread: the same bits as on two.
THREADS = ["none", "rerope", "leaky-rerope", "dca-batch7", "selfextend-decode", "q4_0", "bf16", "tiny-q8-leaky-rerope",
           "mistral", "smol-dca"]


def ids(n):
    """n token ids of the 512-token vocabulary, BOS first; the bits, not the text, are what is pinned."""
    return np.array([1] + [2 + (i * 7919 + 13 * (i // 7)) % 509 for i in range(1, n)], np.int32)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_case(tool, model, n, args, tmp, threads=2):
    """(logits (n, vocab) float32, raw bytes' SHA-256, the ISA name dump_logits printed)."""
    ids_path, out = tmp / f"ids{n}.bin", tmp / "logits.bin"
    if not ids_path.exists():
        ids(n).tofile(ids_path)
    # Threads that wait at a barrier sleep rather than spin: on a machine shared with other jobs, a
    # spinning thread costs them its core, and how the threads wait changes no result.
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    p = subprocess.run([str(tool), str(model), str(ids_path), str(out), *args, "--threads", str(threads)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    isa = re.search(r"kernels (\S+)", p.stderr).group(1)
    raw = out.read_bytes()
    return np.frombuffer(raw, np.float32).reshape(n, -1), hashlib.sha256(raw).hexdigest(), isa


def sample(logits):
    n = logits.shape[0]
    return [float(x) for r in (0, n // 2, n - 1) for x in logits[r, :16]]


def build_models(tmp):
    files, made = {}, {}
    for name, (src, dtype) in MODELS.items():
        if dtype is None:
            files[name] = src
            continue
        out = tmp / f"{name}.bin"
        p = run_export(src, out, "--dtype", dtype)
        assert p.returncode == 0, p.stderr
        files[name], made[name] = out, sha256(out)
    return files, made


def run_all(tmp, files):
    """{case: (fast hash, ref hash or None, sample, isa)}, and {case: one-thread hash} for THREADS."""
    got, one = {}, {}
    for name, (model, n, args, ref) in CASES.items():
        logits, h, isa = run_case(TOOLS / "dump_logits", files[model], n, args, tmp)
        h_ref = run_case(TOOLS / "dump_logits_ref", files[model], n, args, tmp)[1] if ref else None
        got[name] = (h, h_ref, sample(logits), isa)
        if name in THREADS:
            one[name] = run_case(TOOLS / "dump_logits", files[model], n, args, tmp, threads=1)[1]
    return got, one


@pytest.fixture(scope="module")
def results(tmp_path_factory, c_tools):
    tmp = tmp_path_factory.mktemp("bits")
    files, made = build_models(tmp)
    return made, files, tmp, *run_all(tmp, files)


def test_models_exported_as_recorded(results):
    made = results[0]
    want = json.loads(EXPECTED.read_text())["models"]
    changed = [m for m in made if made[m] != want.get(m)]
    assert not changed, (f"export/export.py writes other bytes for {changed} than when the hashes were recorded: "
                         "the logits below then change for that reason (regenerate if that change is meant)")


def test_logits_bit_identical(results):
    _, _, _, got, one = results
    want = json.loads(EXPECTED.read_text())
    isa = {g[3] for g in got.values()}
    assert len(isa) == 1, isa
    isa = isa.pop()
    # one thread gives the bits of two
    differ = [c for c in one if one[c] != got[c][0]]
    assert not differ, f"one thread and two give different logits: {differ}"
    if isa not in want["hashes"]:
        print(f"\ntest_bit_identical: no hashes stored for the instruction set '{isa}' (only for "
              f"{sorted(want['hashes'])}): the logits are held to the stored samples within a tolerance "
              "instead, which does not pin their bits (see the docstring to record them)")
        worst = {}
        for c, (_, _, s, _) in got.items():
            ref = np.array(want["samples"][c])
            rounded = CASES[c][0].endswith(("bf16", "q8_0", "q4_0")) or "--f16-as-bf16" in CASES[c][2]
            kind = "rounded" if rounded else "float"
            worst[c] = float(np.abs(np.array(s) - ref).max() / np.abs(ref).max())
            assert worst[c] <= TOL[kind], f"{c}: {worst[c]:.3g} of the largest logit from the stored samples"
        print("largest relative difference:", max(worst.values()))
        return
    bad = [c for c in CASES if got[c][0] != want["hashes"][isa].get(c)]
    bad_ref = [c for c in CASES if CASES[c][3] and got[c][1] != want["ref_hashes"][isa].get(c)]
    print(f"\ntest_bit_identical: {len(CASES)} cases on the fast path, {sum(c[3] for c in CASES.values())} on the "
          f"reference path, {len(one)} again on one thread, kernels {isa}: "
          f"{len(CASES) - len(bad)} and {sum(c[3] for c in CASES.values()) - len(bad_ref)} identical")
    assert not bad and not bad_ref, f"logits changed: fast path {bad}, reference path {bad_ref}"


def test_controls(results):
    _, files, tmp, got, _ = results
    # one bit of one logit flipped: another hash
    logits, h, _ = run_case(TOOLS / "dump_logits", files["s260"], 640, CASES["rerope"][2], tmp)
    flipped = bytearray(logits.tobytes())
    flipped[4 * (639 * 512 + 100)] ^= 1  # the last bit of logit 100 of the last position
    assert hashlib.sha256(bytes(flipped)).hexdigest() != h
    assert struct.unpack_from("<f", flipped, 4 * (639 * 512 + 100))[0] != logits[639, 100]
    # every case's bits are its own: no two cases share a hash, on either path, but for the pairs
    # that are one computation (SAME), whose bits must then be equal
    for a, b in SAME:
        assert got[a][0] == got[b][0], (a, b)
    for a, b in SAME + REF_SAME:
        assert not CASES[a][3] or not CASES[b][3] or got[a][1] == got[b][1], (a, b)
    fast = [g[0] for c, g in got.items() if c not in {b for _, b in SAME}]
    ref = [g[1] for c, g in got.items() if g[1] and c not in {b for _, b in SAME + REF_SAME}]
    assert len(set(fast)) == len(fast) and len(set(ref)) == len(ref)


# Cases run again with only each block's last logits asked for, as ./run's prompt asks: the last
# layer then runs for that token alone, which must give the bits of the whole block's last row.
LAST = ["none", "rerope-batch7", "dca-batch7", "rerope-logn", "dynamic-decode",
        "tiny-q8-leaky-rerope", "longrope", "mistral", "smol-dca", "q4_0"]


@pytest.mark.parametrize("case", LAST)
def test_last_logits_alone(results, case):
    """Every block's last row, from a forward asked only for it, is the whole block's last row bit for
    bit; there are several blocks (the prompt's, or the decoded tokens'). Control: the row before the
    last of a block differs from it (a last row taken from the wrong place would show)."""
    _, files, tmp, _, _ = results
    model, n, args, _ = CASES[case]
    full = run_case(TOOLS / "dump_logits", files[model], n, args, tmp)[0]
    last = run_case(TOOLS / "dump_logits", files[model], n, args + ["--last-logits"], tmp)[0]
    rows = np.flatnonzero(~np.isnan(last).any(axis=1))
    assert len(rows) >= 2 and rows[-1] == n - 1, rows
    assert np.isnan(last).all(axis=1).sum() == n - len(rows)  # the other rows are all NaN
    assert last[rows].tobytes() == full[rows].tobytes(), f"{case}: last rows differ from the block's"
    assert not np.array_equal(full[rows[0] - 1], full[rows[0]])


def regen():
    import tempfile
    subprocess.run(["make", "-C", str(REPO), "tests/tools/dump_logits", "tests/tools/dump_logits_ref"], check=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        files, made = build_models(tmp)
        got, one = run_all(tmp, files)
    assert all(one[c] == got[c][0] for c in one), "one thread and two differ: nothing recorded"
    isa = next(iter(got.values()))[3]
    want = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {"hashes": {}, "ref_hashes": {}, "samples": {}}
    want["models"] = made
    want["hashes"][isa] = {c: g[0] for c, g in got.items()}
    want["ref_hashes"][isa] = {c: g[1] for c, g in got.items() if g[1]}
    for c, g in got.items():
        want["samples"].setdefault(c, g[2])
    EXPECTED.write_text(json.dumps(want, indent=1) + "\n")
    print(f"recorded {len(got)} cases for kernels {isa} in {EXPECTED}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--regen"]:
        regen()
    else:
        print(__doc__)
