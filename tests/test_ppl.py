"""./run --ppl against the PyTorch reference on the same windows, and its bookkeeping.

The text is real (TinyStories validation), the model the real stories260K (trained at L = 512),
the windows 1024 tokens (2L), so the second bucket [512, 1024) is already past the trained context.
What this is not: the refusals of a missing or too short text (tests/test_errors.py has them).
"""
import json
import math
import re
import subprocess
import sys

import pytest

import reference
from conftest import (HELDOUT, PASSKEY_HF, PYTHON, REPO, STORIES_BIN, STORIES_HF, TEXT, TINY64_HF, TINY128_HF, TOK512,
                      run_export)

HF_DIR = STORIES_HF
WINDOW, WINDOWS = 1024, 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppl")
    model = tmp / "stories260K.bin"
    assert run_export(HF_DIR, model).returncode == 0
    text = tmp / "text.txt"
    text.write_text(TEXT.read_text()[:12000])  # about 3k tokens: enough for two windows of 1024
    return model, text, reference.load(HF_DIR)


_RUNS = {}  # (model, text, flags): what run_ppl returned, for the tests that run the same again


def run_ppl(model, text, *flags):
    """(perplexity, buckets) of `./run model --ppl text flags`; a run made before is not made again."""
    key = (str(model), str(text), tuple(map(str, flags)))
    if key not in _RUNS:
        _RUNS[key] = _run_ppl(model, text, *flags)
    return _RUNS[key]


def _run_ppl(model, text, *flags):
    proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(TOK512), "--ppl", str(text), *map(str, flags)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    total = float(re.search(r"^perplexity: (\S+)$", proc.stdout, re.M).group(1))
    buckets = [(int(lo), int(hi), int(n), float(nll), float(ppl)) for lo, hi, n, nll, ppl in
               re.findall(r"^\[(\d+), (\d+)\)\s+(\d+)\s+(\S+)\s+(\S+)$", proc.stdout, re.M)]
    return total, buckets


@pytest.mark.parametrize("mode", ["none", "pi", "ntk", "yarn", "llama3", "dynamic", "rerope", "leaky-rerope", "selfextend", "dca",
                                  "dynamic-yarn"])
def test_matches_reference(c_tools, setup, mode):
    model, text, ref = setup
    total, buckets = run_ppl(model, text, "--ctx", WINDOW, "--ppl-windows", WINDOWS, "--rope-scaling", mode)
    expected = ref.perplexity(ref.encode(text.read_text()), WINDOW, rope={"mode": mode}, ctx=WINDOW,
                              max_windows=WINDOWS)
    rel = abs(total - expected["ppl"]) / expected["ppl"]
    print(f"{mode}: perplexity {total:.6f}, reference {expected['ppl']:.6f}, relative difference {rel:.1e}")
    assert rel < 1e-4
    assert [(b[0], b[2]) for b in buckets] == [(b["lo"], b["count"]) for b in expected["buckets"]]
    for ours, theirs in zip(buckets, expected["buckets"]):
        assert abs(ours[3] - theirs["nll_mean"]) < 1e-4 * max(1.0, theirs["nll_mean"]), (mode, ours, theirs)


def test_bucket_counts_add_up(c_tools, setup):
    model, text, _ = setup
    total, buckets = run_ppl(model, text, "--ctx", 2048, "--ppl-windows", 1, "--rope-scaling", "ntk")
    assert [(lo, hi) for lo, hi, *_ in buckets] == [(0, 512), (512, 1024), (1024, 2048)]
    assert sum(n for _, _, n, _, _ in buckets) == 2047  # a window of N tokens makes N-1 predictions
    assert [n for _, _, n, _, _ in buckets] == [512, 512, 1023]
    # The total is the token-weighted mean of the buckets.
    mean = sum(n * nll for _, _, n, nll, _ in buckets) / 2047
    assert abs(total - 2.718281828459045 ** mean) < 1e-4 * total


def test_window_lines_add_up(c_tools, setup):
    """Each window's own mean NLL (the `window K` lines that scripts/ppl_results.py pairs across modes):
    one line per window, N - 1 predictions each, and their mean is the whole run's (the windows are
    the same size), to the 6 digits printed. Control: leaving a window out moves the mean past that."""
    model, text, _ = setup
    proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(TOK512), "--ppl", str(text), "--ctx", "512",
                           "--ppl-windows", "4", "--rope-scaling", "ntk"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    total = float(re.search(r"^perplexity: (\S+)$", proc.stdout, re.M)[1])
    rows = re.findall(r"^window (\d+)\s+(\d+)\s+(\S+)\s+(\S+)$", proc.stdout, re.M)
    assert [(int(w), int(n)) for w, n, _, _ in rows] == [(w, 511) for w in (1, 2, 3, 4)], proc.stdout
    nll = [float(x) for _, _, x, _ in rows]
    for (_, _, x, ppl) in rows:
        assert abs(math.exp(float(x)) - float(ppl)) < 1e-5 * float(ppl)
    print(f"windows {nll}, run {math.log(total):.6f}")
    assert abs(sum(nll) / 4 - math.log(total)) < 2e-6
    assert abs(sum(nll[:3]) / 3 - math.log(total)) > 1e-4  # the control


def wilson_of_script():
    sys.path.insert(0, str(REPO / "scripts"))
    import ppl_results
    return ppl_results.wilson


def test_wilson_intervals():
    """scripts/ppl_results.py's Wilson 95% intervals against values computed by hand from Wilson (1927)'s
    formula (8/10: 0.4902-0.9433; 10/10: 0.7225-1; 50/50: 0.9287-1; 0/10: 0-0.2775), and the interval
    of 9/10 overlapping 10/10's (ten trials do not tell them apart) where 40/50 and 50/50's do not."""
    wilson = wilson_of_script()
    for (k, n), (lo, hi) in {(8, 10): (0.4902, 0.9433), (10, 10): (0.7225, 1.0), (50, 50): (0.9287, 1.0),
                             (0, 10): (0.0, 0.2775)}.items():
        got = wilson(k, n)
        assert abs(got[0] - lo) < 1e-4 and abs(got[1] - hi) < 1e-4, (k, n, got)
    assert wilson(9, 10)[1] > wilson(10, 10)[0]
    assert wilson(40, 50)[1] < wilson(50, 50)[0]


def test_contest_asks_more_keys_where_ten_cannot_tell():
    """The contest's second round (scripts/ppl_results.py, contenders): the rows whose interval overlaps
    the best one's go on, 9/10 beside 10/10 among them (the case fifty keys are for); 0/10 (0-28%) does
    not (the control), though beside a best of 5/10 (24-76%) it does; and when no row found a key, no
    row goes on."""
    sys.path.insert(0, str(REPO / "scripts"))
    import ppl_results
    cell = lambda k, n: [{"key": 1, "answer": 1}] * k + [{"key": 1, "answer": None}] * (n - k)  # noqa: E731
    assert ppl_results.contenders({"a": cell(10, 10), "b": cell(9, 10), "c": cell(0, 10)}) == ["a", "b"]
    assert ppl_results.contenders({"a": cell(5, 10), "c": cell(0, 10)}) == ["a", "c"]
    assert ppl_results.contenders({"a": cell(0, 10), "c": cell(0, 10)}) == []


def test_one_and_two_threads_agree(c_tools, setup):
    model, text, _ = setup
    one = run_ppl(model, text, "--ctx", WINDOW, "--ppl-windows", WINDOWS, "--rope-scaling", "yarn", "--threads", 1)
    two = run_ppl(model, text, "--ctx", WINDOW, "--ppl-windows", WINDOWS, "--rope-scaling", "yarn", "--threads", 2)
    print(f"1 thread {one[0]!r}, 2 threads {two[0]!r}")
    assert abs(one[0] - two[0]) <= 1e-5 * one[0]
    assert one[1] == two[1]


def test_progress_and_wording(c_tools, setup):
    """Off a terminal, a line per window; one window is "1 window", not "1 windows"."""
    model, text, _ = setup
    for windows in (1, 2):
        proc = subprocess.run([str(REPO / "run"), str(model), "-z", str(TOK512), "--ppl", str(text), "--ctx", "512",
                               "--ppl-windows", str(windows)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.splitlines()
        assert [l for l in lines if l.startswith("window ")] == [f"window {w}/{windows}" for w in range(1, windows + 1)]
        noun = "window" if windows == 1 else "windows"
        assert re.search(rf"^perplexity: \d+ tokens, {windows} {noun} of 512$", proc.stderr, re.M), proc.stderr
        assert re.search(rf"^{windows} {noun} in ", proc.stderr, re.M), proc.stderr


def test_results_doc_shows_the_current_banner(c_tools, tiny64):
    """docs/results/tiny64/ppl_results.md (make results) ends with the RoPE line of ./run's banner for every row at its
    largest context; ./run must still print exactly that, or the document is out of date."""
    doc = (REPO / "docs" / "results" / "tiny64" / "ppl_results.md").read_text()
    ctx, lines = doc.split("## RoPE as `./run` reported it at --ctx ")[1].split("\n", 1)
    rows = re.findall(r"^- `([\w+-]+)`: (.*)$", lines, re.M)
    modes = ["none", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope", "leaky-rerope", "selfextend", "dca",
             "dynamic-yarn"]
    assert [m for m, _ in rows] == modes + [m + "+logn" for m in modes]
    for row, banner in rows:
        mode = row.removesuffix("+logn")
        extra = ["--attn-logn"] if row.endswith("+logn") else []
        # dynamic was run with --rope-factor ctx / L (scripts/ppl_results.py), the others with the default
        extra += ["--rope-factor", str(int(ctx) // 512)] if mode == "dynamic" else []
        proc = subprocess.run([str(REPO / "run"), str(tiny64), "--ctx", ctx, "--rope-scaling", mode, *extra, "-n", "0"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"rope: {banner}" in proc.stderr.splitlines(), (row, banner, proc.stderr)


@pytest.fixture(scope="module")
def passkey64(tmp_path_factory):
    model = tmp_path_factory.mktemp("passkey64") / "passkey64x512.bin"
    assert run_export(PASSKEY_HF, model).returncode == 0
    return model


def test_quick_results_leave_docs_alone(c_tools, tiny64, passkey64):
    """scripts/ppl_results.py on a subset writes to build/ppl-quick/LAB/ and says so; docs/ keeps the full
    run. Both parts: perplexity, and passkey retrieval. The last context, and the lengths from the
    context before it on (2x and 4x), run only the rows within --extend-within of the 1x perplexity at
    that context: rerope+logn (0.79x at 2x on this one window), not none (1.03x), which shows — there
    (the control). The contest's second round, at the first of those lengths: the row that found the
    key there (passkey64x512 does, at 2x) asks a second key there and at L, and so does none at L; the
    first keys are not asked again, and 4x keeps its one key."""
    docs = lambda: {f: f.read_bytes() for f in (REPO / "docs").rglob("*") if f.is_file()}  # noqa: E731
    before = docs()
    proc = subprocess.run([PYTHON, str(REPO / "scripts" / "ppl_results.py"), "--model", str(tiny64), "--ctx",
                           "512,1024,2048", "--modes", "none,rerope+logn", "--ppl-windows", "1", "--passkey-model",
                           str(passkey64), "--passkey-tokenizer", str(PASSKEY_HF / "tokenizer.model"), "--lengths",
                           "512,1024,2048", "--depths", "0.5", "--trials", "1", "--contest-trials", "2",
                           "--extend-within", "1.01"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    quick = REPO / "build" / "ppl-quick" / "tiny64"
    assert f"the results go to {quick}, not docs/" in proc.stderr, proc.stderr
    doc = (quick / "ppl_results.md").read_text()
    assert "at most 1 window(s) per run" in doc
    assert re.search(r"^- `rerope\+logn`: rerope, .*log-n", doc, re.M), doc  # the row ran with --attn-logn
    assert re.search(r"^\| none \| [\d.]+ \| [\d.]+ \| — \|$", doc, re.M), doc
    assert re.search(r"^\| rerope\+logn \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", doc, re.M), doc
    pk = (quick / "passkey_results.md").read_text()
    assert re.search(r"^\| rerope\+logn \| [012]/2 \(\d+-\d+%\) \| [12]/2 \(\d+-\d+%\) \| [01]/1 \(\d+-\d+%\) \|$",
                     pk, re.M), pk
    assert re.search(r"^\| none \| [012]/2 \(\d+-\d+%\) \| — \| — \|$", pk, re.M), pk
    assert "the contest's second round, 2 keys per depth: rerope+logn" in proc.stderr, proc.stderr
    assert len(re.findall(r"^length   512 ", proc.stderr, re.M)) == 4  # two keys per row, each logged once
    assert len(re.findall(r"^length  1024 rerope\+logn ", proc.stderr, re.M)) == 2  # the contest's two
    assert len(re.findall(r"^length  2048 ", proc.stderr, re.M)) == 1
    for png in ("ppl_buckets.png", "ppl_ratio.png", "passkey_grid.png"):
        assert (quick / png).stat().st_size > 0
    assert docs() == before  # no file in docs/ written, added or removed


def test_passkey_trials_from_a_prompt_cache_answer_the_same(c_tools, passkey64, tmp_path):
    """scripts/ppl_results.py's shared prompt cache (--prompt-cache-from): the trials of a row and length
    that read the cache the deepest key wrote answer as the same trials run whole, key for key and
    token for token of the answer; they did take their beginning from it (more tokens the deeper the
    key), dynamic (whose keys follow the whole length) runs without, and the cache folder is gone
    after the run."""
    def trials(cache_from):
        out = tmp_path / f"from{cache_from}.json"
        proc = subprocess.run([PYTHON, str(REPO / "scripts" / "ppl_results.py"), "--only", "passkey",
                               "--passkey-model", str(passkey64), "--passkey-tokenizer",
                               str(PASSKEY_HF / "tokenizer.model"), "--lengths", "512,1024", "--modes",
                               "rerope+logn,dynamic", "--depths", "0,0.5,1", "--trials", "2", "--extend-within", "0",
                               "--prompt-cache-from", str(cache_from), "--out-dir", str(tmp_path / "out"),
                               "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(out.read_text())["passkey"]["results"]
    before = set((REPO / "build").glob("passkey-cache-*"))
    whole, cached = trials(0), trials(1024)
    strip = lambda t: [(x["key"], x["answer"], x["at"]) for x in t]  # noqa: E731
    assert all(strip(whole[n][m]) == strip(cached[n][m]) for n in whole for m in whole[n])
    used = {(n, m): [x["cached"] for x in cached[n][m]] for n in cached for m in cached[n]}
    assert all(c == 0 for t in whole.values() for r in t.values() for c in [x["cached"] for x in r])
    assert used[("512", "rerope+logn")] == [0] * 6 and used[("1024", "dynamic")] == [0] * 6
    most = {d: max(x["cached"] for x in cached["1024"]["rerope+logn"] if x["depth"] == d) for d in (0, 0.5, 1)}
    assert 0 < most[0] < most[0.5] < most[1], most  # deeper keys take more: the task line at least
    assert used[("1024", "rerope+logn")].count(0) == 1  # the deepest key, which wrote it
    assert set((REPO / "build").glob("passkey-cache-*")) == before


def test_block_size_does_not_change_the_result(c_tools, setup):
    model, text, _ = setup
    blocked = run_ppl(model, text, "--ctx", 512, "--ppl-windows", 2, "-b", 64)
    single = run_ppl(model, text, "--ctx", 512, "--ppl-windows", 2, "-b", 1)
    print(f"blocks of 64: {blocked[0]!r}, one token at a time: {single[0]!r}")
    assert abs(blocked[0] - single[0]) <= 1e-5 * single[0]


def test_dynamic_with_factor_1_is_ntk_at_the_window_length(c_tools, setup):
    # In a window of N tokens dynamic's alpha is s*N/L - (s-1); with s = 1 that is N/L, which is
    # ntk's default alpha (= the factor ctx/L) when ctx = N: the same base, the same numbers.
    model, text, _ = setup
    dynamic = run_ppl(model, text, "--ctx", WINDOW, "--ppl-windows", 1, "--rope-scaling", "dynamic", "--rope-factor", 1)
    ntk = run_ppl(model, text, "--ctx", WINDOW, "--ppl-windows", 1, "--rope-scaling", "ntk")
    assert dynamic == ntk


# The two trained models of the extension lab on the held-out text, against the reference perplexities
# data/README.md gives (an independent PyTorch forward, tests/reference.py --ppl, 16384 / N windows of
# N tokens): tiny64x512 (head_dim 64, theta 10000) and tiny128x512 (head_dim 128, one kv head, theta
# 500000), both trained at 512 tokens.
REFERENCE = [("tiny64", 512, "none", 7.905452), ("tiny64", 512, "yarn", 7.905452),
             ("tiny64", 2048, "none", 18.842570), ("tiny64", 2048, "yarn", 8.586047),
             ("tiny128", 512, "none", 7.527848), ("tiny128", 2048, "none", 19.240565),
             ("tiny128", 2048, "yarn", 7.757943)]


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    model = tmp_path_factory.mktemp("tiny64") / "tiny64x512.bin"
    assert run_export(TINY64_HF, model).returncode == 0
    return model


@pytest.fixture(scope="module")
def tiny128(tmp_path_factory):
    model = tmp_path_factory.mktemp("tiny128") / "tiny128x512.bin"
    assert run_export(TINY128_HF, model).returncode == 0
    return model


@pytest.mark.parametrize("name,ctx,mode,expected", REFERENCE, ids=[f"{a}-{m}-{n}" for a, n, m, _ in REFERENCE])
def test_trained_models_match_documented_reference(c_tools, request, name, ctx, mode, expected):
    total, _ = run_ppl(request.getfixturevalue(name), HELDOUT, "--ctx", ctx, "--ppl-windows", 16384 // ctx,
                       "--rope-scaling", mode)
    rel = abs(total - expected) / expected
    print(f"{name} {mode} ctx {ctx}: perplexity {total:.6f}, documented {expected:.6f}, relative {rel:.1e}")
    assert rel < 1e-4


@pytest.mark.parametrize("cache,tolerance", [("f16", 1e-3), ("q8_0", 1e-2)])
@pytest.mark.parametrize("mode", ["none", "pi", "ntk", "dynamic", "yarn", "llama3", "rerope", "leaky-rerope"])
def test_cache_types_at_4x_context(c_tools, tiny64, mode, cache, tolerance):
    """-ctk T -ctv T round every cached key and value to a half (f16) or to 8 bits per value with a scale
    per 32 (q8_0). At 4x the trained context (one window of 2048 tokens of the held-out text),
    perplexity stays within 0.1% (f16) or 1% (q8_0) of the f32 cache's in every mode; and it is not
    the same number (negative control: the flags took effect)."""
    flags = ["--ctx", 2048, "--ppl-windows", 1, "--rope-scaling", mode]
    f32, _ = run_ppl(tiny64, HELDOUT, *flags)
    other, _ = run_ppl(tiny64, HELDOUT, *flags, "-ctk", cache, "-ctv", cache)
    rel = abs(other - f32) / f32
    print(f"{mode}: perplexity f32 cache {f32:.6f}, {cache} cache {other:.6f}, relative difference {rel:.1e}")
    assert rel < tolerance
    assert other != f32


def test_context_shift_of_q8_0_keys(c_tools, tiny64):
    """tests/test_model's context shift check with q8_0 keys, which need a head_dim that is a multiple
    of 32 (stories260K's is 8): the keys turned to their new positions, quantized anew, against a
    fresh run at those positions, in every mode (the output lists each, with its negative control)."""
    proc = subprocess.run([str(REPO / "tests" / "test_model"), str(STORIES_BIN), str(tiny64)],
                          capture_output=True, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("keys q8_0") == 11  # every mode but longrope (a LongRoPE checkpoint's; test_families)


def _table(text, heading, first_cell):
    """The markdown table after `heading` whose header row starts with `first_cell`: {row name: [cells]}."""
    rest = text[text.index(heading):]
    lines = rest[rest.index(f"| {first_cell} |"):].splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("**", "") for c in line.strip("|").split("|")]
        rows[cells[0].replace("`", "").split(",")[0]] = cells[1:]
    return rows


def test_readme_results_are_the_docs_numbers():
    """README's results tables are the full `make results` run's, docs/results/LAB/, number for number:
    per lab, the perplexity over the 1x perplexity (to 3 digits, without / with log-n) at 2x to 64x,
    and the right answers at 1x to 64x (k of ten keys; k/n with its Wilson interval where more were
    asked), or — for a cell not run.
    At L each mode has one cell (log-n changes nothing there, checked on the saved answers), the
    count of the row with more keys. The README says what the committed runs measured. Control: a row
    read from the other lab's table would not match."""
    saved = lambda lab: json.loads((REPO / "docs" / "results" / lab / "results.json").read_text())  # noqa: E731
    for lab in ("tiny64", "tiny128"):
        at_l = saved(lab)["passkey"]["results"]["512"]
        for mode in [m for m in at_l if not m.endswith("+logn")]:
            pairs = list(zip(at_l[mode], at_l[mode + "+logn"]))
            assert pairs and all(a["key"] == b["key"] and a["answer"] == b["answer"] for a, b in pairs), (lab, mode)
    readme = (REPO / "README.md").read_text()
    for lab in ("tiny64", "tiny128"):
        docs = REPO / "docs" / "results" / lab
        ppl = _table((docs / "ppl_results.md").read_text(), "## Ratio to the 1x perplexity", "mode")
        ours = _table(readme, f"<!-- ppl table: {lab} -->", "`--rope-scaling`")
        assert len(ours) == 11 and set(ours) <= set(ppl), (lab, sorted(ours))
        for mode, cells in ours.items():
            assert len(cells) == len(ppl[mode]) - 1, (lab, mode)
            for i, cell in enumerate(cells, start=1):
                assert cell.split(" / ") == [ppl[mode][i], ppl[mode + "+logn"][i]], (lab, mode, i, cell)
        pk = _table((docs / "passkey_results.md").read_text(), "## Right answers", "mode")
        answers = _table(readme, f"<!-- passkey table: {lab} -->", "`--rope-scaling`")
        assert len(answers) == 11, lab
        count = lambda c: c.split(" ")[0]  # noqa: E731  ("k/n (lo-hi%)")
        for mode, cells in answers.items():
            # at L, one cell: log-n scales no query below L, so the two rows are one computation (their
            # common keys' answers are the same, docs/results/LAB/results.json); the one with more keys
            at_l = max(count(pk[mode][0]), count(pk[mode + "+logn"][0]), key=lambda c: int(c.split("/")[1]))
            assert cells[0] == at_l, (lab, mode)
            for i, cell in enumerate(cells[1:], start=1):
                plain, logn = cell.split(" / ")
                short = lambda c: (count(c).removesuffix("/10") if c.startswith(tuple(  # noqa: E731
                    f"{k}/10 " for k in range(11))) else c)  # ten keys: k; more: k/n (lo-hi%); —
                assert (plain, logn) == (short(pk[mode][i]), short(pk[mode + "+logn"][i])), (lab, mode, i, cell)
    one = _table(readme, "<!-- ppl table: tiny64 -->", "`--rope-scaling`")
    other = _table((REPO / "docs" / "results" / "tiny128" / "ppl_results.md").read_text(),
                   "## Ratio to the 1x perplexity", "mode")
    assert one["yarn"][0].split(" / ")[0] != other["yarn"][1]  # the control