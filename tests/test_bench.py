"""bench/bench.py and bench/versus.py read ./run's own timing lines: do their patterns still match?

A wording change in the banner ("1 token", "1 window") once left the benchmark unable to read a
decode speed, and nothing in `make test` noticed. This runs ./run on the real stories260K the way
the benchmarks do (a decode from an empty prompt, a prompt, one --ppl window) and checks that the
patterns find the numbers, and that the numbers are the ones printed. Timing is not checked: this
is a test of the parsing, not of the speed.
"""
import subprocess
import sys

import pytest

from conftest import REPO, STORIES_BIN, TEXT, TOK512

sys.path.insert(0, str(REPO / "bench"))
import bench  # noqa: E402  (bench/ is not a package)


def stderr_of(*args):
    proc = subprocess.run([str(REPO / "run"), str(STORIES_BIN), "-z", str(TOK512), "--threads", "2", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("prompt, tokens", [("", 1), ("Once upon a time", 5)])
@pytest.mark.parametrize("generate", [1, 2, 9])
def test_timing_line(c_tools, prompt, tokens, generate):
    err = stderr_of("-i", prompt, "-n", generate, "-t", 0)
    m = bench.TIMING.search(err)
    assert m, f"bench.TIMING does not match:\n{err}"
    assert int(m.group(1)) == tokens and int(m.group(4)) == generate and int(m.group(5)) == generate - 1
    assert int(m.group(8)) == 2
    assert bench.BANNER.search(err), f"bench.BANNER does not match:\n{err}"


def test_ppl_timing_line(c_tools, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT.read_text()[:3000])
    err = stderr_of("--ppl", text, "--ctx", 256, "--ppl-windows", 1)
    m = bench.PPL_TIMING.search(err)
    assert m, f"bench.PPL_TIMING does not match:\n{err}"
    assert int(m.group(1)) == 1


def test_patterns_reject_other_text():
    """The negative control: the patterns do not match a line that only looks similar."""
    assert not bench.TIMING.search("prompt: 5 tokens in 0.1 s | generation: 3 tokens | threads 2")
    assert not bench.PPL_TIMING.search("perplexity: 5.18 over 1 window")


# --- bench/versus.py's plain functions: the --peer and --threads syntax, and the table from given numbers ---

versus = bench.versus


def test_parse_peer():
    p = versus.parse_peer("ik_llama.cpp=/opt/ik/build/bin:-rtr 1 -fa 1:-rtr -fa 1")
    assert p.name == "ik_llama.cpp" and str(p.bindir) == "/opt/ik/build/bin"
    assert p.bench_flags == ("-rtr", "1", "-fa", "1") and p.batched_flags == ("-rtr", "-fa", "1")
    p = versus.parse_peer("llama.cpp=/opt/llama.cpp/build/bin")
    assert p.name == "llama.cpp" and p.bench_flags == () and p.batched_flags == ()
    assert versus.parse_peer("x=/b:-fa 1").batched_flags == ()  # llama-bench flags only
    assert versus.parse_peer("x=/b::-fa").bench_flags == ()  # llama-batched-bench flags only
    assert versus.parse_peer("x=/b:--opt 'a b'").bench_flags == ("--opt", "a b")  # split as a shell would
    for bad in ("/opt/llama.cpp/build/bin", "=/b", "name=", "name=:-fa 1"):
        with pytest.raises(ValueError):
            versus.parse_peer(bad)


def test_thread_counts():
    assert versus.thread_counts(["1,2"]) == [1, 2]
    assert versus.thread_counts(["4,8,16"]) == [4, 8, 16]
    assert versus.thread_counts(["4", "8", "16"]) == [4, 8, 16]
    assert versus.thread_counts(["1,2", "4"]) == [1, 2, 4]
    for bad in ([""], ["0"], ["2,x"]):
        with pytest.raises(ValueError):
            versus.thread_counts(bad)


def test_ours_flags_need_peers(tmp_path):
    # --ours-flags (flags for every ./run of a comparison, e.g. --f16-as-bf16) only goes with --peer:
    # without one it is refused before anything runs (bench.py's own timings take no flags).
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench.py"), "--ours-flags=--f16-as-bf16",
                           "--cache", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--ours-flags goes with --peer" in proc.stderr, proc.stderr


def test_variant_rows_need_peers(tmp_path):
    # The row f16-as-bf16 (the f16 files, ./run --f16-as-bf16) is one of the comparison's rows only.
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench.py"), "--dtype", "f16-as-bf16",
                           "--cache", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--dtype f16-as-bf16 goes with --peer" in proc.stderr, proc.stderr
    assert versus.VARIANTS["f16-as-bf16"] == ("f16", ("--f16-as-bf16",))


def test_rotation():
    names = ["ours", "a", "b"]
    assert [versus.rotation(names, r) for r in range(4)] == [
        ["ours", "a", "b"], ["a", "b", "ours"], ["b", "ours", "a"], ["ours", "a", "b"]]


def test_versus_table_from_given_numbers():
    """summarize and table on made-up numbers: medians, ours over the best peer's median, that ratio
    round by round, the fractions of the probe; no program runs."""
    peers = [versus.parse_peer("llama.cpp=/l"), versus.parse_peer("ik_llama.cpp=/ik:-rtr 1:-rtr")]
    names = ["ours", "llama.cpp", "ik_llama.cpp"]
    got = {"tg": {"ours": [100.0, 110.0, 90.0], "llama.cpp": [50.0, 60.0, 55.0], "ik_llama.cpp": [80.0, 100.0, 90.0]},
           "pp": {"ours": [300.0, 300.0, 300.0], "llama.cpp": [600.0, 500.0, 400.0], "ik_llama.cpp": [100.0] * 3}}
    of_probe = {"ours": [0.5, 0.6, 0.7], "llama.cpp": [0.3, 0.3, 0.3], "ik_llama.cpp": [0.4, 0.5, 0.45]}
    row = versus.summarize(got, of_probe, names, wbytes=10 ** 8)
    assert row["tg"]["med"] == {"ours": 100.0, "llama.cpp": 55.0, "ik_llama.cpp": 90.0}
    assert row["tg"]["best"] == "ik_llama.cpp" and row["tg"]["ratio"] == pytest.approx(100 / 90)
    assert row["tg"]["rounds"] == pytest.approx([100 / 80, 110 / 100, 90 / 90])
    assert row["pp"]["best"] == "llama.cpp" and row["pp"]["ratio"] == pytest.approx(0.6)
    assert row["gbps"]["ours"] == pytest.approx(10.0) and row["of_probe"]["ik_llama.cpp"] == pytest.approx(0.45)
    row.update(shape="110m", dtype="q8_0", threads=2, probe=20.0, probes=[19.0, 20.0, 21.0], compute=[40.0, 44.0])
    lines = versus.table([row], peers, ["# header", ""])
    assert lines[0] == "# header"
    assert "ours / llama.cpp / ik_llama.cpp tok/s" in lines[2]
    assert lines[-1] == ("| 110m | q8_0 | 2 | 100.0 / 55.0 / 90.0 (1.11x, rounds 1.00-1.25) "
                         "| 300.0 / 500.0 / 100.0 (0.60x, rounds 0.50-0.75) | - | - "
                         "| 10.0 (60%) / 5.5 (30%) / 9.0 (45%) | 20.0 (19.0-21.0; compute 40-44 GFLOP/s) |")
    assert versus.peer_line(peers[1]) == ("ik_llama.cpp (build not reported): llama-bench `-rtr 1`, "
                                          "llama-batched-bench `-rtr`")
    versus.llama_bench_speeds('[{"n_prompt": 0, "n_gen": 64, "avg_ts": 1.0, "build_commit": "c392e50", '
                              '"build_number": 6000}]', "ik_llama.cpp")
    assert versus.peer_line(peers[1]).startswith("ik_llama.cpp (build 6000, commit c392e50): ")
    assert "/ik" not in versus.peer_line(peers[1])  # no path of the machine it ran on
    assert versus.peer_line(peers[0]).endswith("llama-bench no extra flags, llama-batched-bench no extra flags")


def test_peer_output_parsers():
    """The two peer outputs versus.py reads, as llama.cpp c392e50 prints them (ik_llama.cpp's are the same
    rows): llama-bench -o json after a log line, and llama-batched-bench's markdown table."""
    out = ('main: some log line [with brackets]\n[\n  {"n_prompt": 512, "n_gen": 0, "avg_ts": 384.5},\n'
           '  {"n_prompt": 0, "n_gen": 64, "avg_ts": 121.47, "samples_ts": [ 121.47 ]}\n]\n')
    assert versus.llama_bench_speeds(out) == {(512, 0): 384.5, (0, 64): 121.47}
    table = ("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
             "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n"
             "|  4000 |     32 |    1 |   4032 |   20.194 |   198.63 |    0.854 |    37.41 |   21.248 |   189.69 |\n")
    assert versus.batched_bench_speeds(table, 4000, 32) == (198.63, 37.41)
    assert versus.batched_bench_speeds(table, 512, 32) is None


def test_page_counters():
    """bench/pages.py's reading of /proc: a live process's faults, Rss and AnonHugePages as the
    kernel's own files give them (Rss within 10% of /proc/PID/status's VmRSS, read at once), and None
    for a process that is gone."""
    import os
    import re
    import pages  # noqa: E402
    import time
    proc = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(0.3)  # past its exec
        minor, major, rss, huge = pages.counters(proc.pid)
        vm_rss = int(re.search(r"VmRSS:\s+(\d+) kB", open(f"/proc/{proc.pid}/status").read())[1])
        assert minor > 0 and major >= 0 and huge >= 0 and abs(rss - vm_rss) <= 0.1 * vm_rss, (rss, vm_rss)
    finally:
        proc.kill()
        proc.wait()
    assert pages.counters(proc.pid) is None and pages.counters(os.getpid())[2] > 0
