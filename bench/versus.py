"""versus.py - ./run against any number of peer builds (llama.cpp, ik_llama.cpp, ...) on the same
weights, in one interleaved run, with the roof.

    make bench BENCH_ARGS="--peer llama.cpp=LLAMA_CPP/build/bin \
        --peer 'ik_llama.cpp=IK_LLAMA_CPP/build/bin:-rtr 1 -fa 1:-rtr -fa 1' --gguf GGUF_DIR"
    /usr/bin/python3 bench/bench.py --peer NAME=BIN_DIR[:LLAMA_BENCH_FLAGS[:BATCHED_BENCH_FLAGS]] ... --gguf GGUF_DIR
        [--shape 110m] [--dtype q8_0] [--threads 1,2 | 4,8,16] [--runs 3]

A peer is a build directory holding llama-bench and llama-batched-bench, under a name of your choice,
with extra flags for each of the two programs after colons (their flags differ: ik_llama.cpp's
llama-bench takes `-rtr 1`, its batched-bench a bare `-rtr`). --llama-cpp BIN_DIR is short for
--peer llama.cpp=BIN_DIR.

What it measures, per model shape x weight type x thread count, each the median of --runs rounds;
within a round every program and the bandwidth probe run one after the other, so that the machine's
drift (20-30% between minutes here) hits all of them alike, and the order of the programs rotates
round by round (ours, A, B; A, B, ours; B, ours, A; ...):
  tg      decode from an empty context, 64 steps: ./run with an empty prompt and -n 65 against
          llama-bench -p 0 -n 64
  pp      a 512-token prompt: ./run's prompt speed against llama-bench -p 512 -n 0 (the same
          llama-bench process as tg: -p 512 -n 64 runs the two tests one after the other)
  pp4k    a 4000-token prompt, and
  tg@4k   decode at depth 4000, 32 steps: one ./run with a 4000-token prompt, --ctx 4096, -n 33,
          against one llama-batched-bench -c 4096 -npp 4000 -ntg 32 -npl 1 (its S_PP and S_TG)
  cache   every program keeps keys and values as f16 (llama.cpp's default; ./run -ctk f16 -ctv f16)
  probe   bench/bwprobe at the same thread count (best of 3 passes over 1 GiB, OMP_NUM_THREADS set to
          the thread count so that it measures that count, whatever the cores), before and after the
          round's programs; the round's probe is the larger of the two, since a probe that caught a
          slow moment is no roof (one such round once put both decoders above the probe's median)
Rows: a shape x weight type x thread count; the row f16-as-bf16 runs ./run --f16-as-bf16 on the f16
file (a bf16_r16 copy made at load, docs/speed.md), the peers on their f16 GGUF as in the f16 row. The
rows q4_k_m and q5_k_m run ./run on the peers' own GGUF file (SHAPE-q4_k_m.gguf), a K-quant mixture
whose decode bytes are summed tensor by tensor from the file.
Decode GB/s = tg tok/s x the bytes of every weight matrix a step reads (all layers and the classifier,
not the embedding lookup), counted the same for every program with ggml's sizes: f32, f16, q8_0 (34
bytes per 32 weights) and q4_0 (18 bytes per 32). ./run's q8_0 keeps a float32 scale (36 bytes per
32), so its q8_0 decode reads 6% more than counted. "of probe" is that over the probe of the same
round, the median over the rounds.

What it needs (nothing of a peer is built or converted here): each peer's build directory, and
GGUF_DIR holding SHAPE-DTYPE.gguf (110m-f16.gguf, ...) converted from the same Hugging Face
checkpoints that bench.py exports for ./run (docs/speed.md says how). Cells whose files are missing
are skipped and listed.
"""
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import tempfile
from collections import namedtuple
from pathlib import Path

import common  # shared with bench.py (which starts this for --peer): checkpoints, prompts, timing line
from lrun import gguf_file  # noqa: E402  (common puts the repository on the path)

TG, PP, DEEP, DEEP_CTX, DEEP_GEN = 64, 512, 4000, 4096, 32
CELLS = ("tg", "pp", "pp4k", "tg@4k")
JOBS = {"short": ("tg", "pp"), "deep": ("pp4k", "tg@4k")}  # one process of a peer measures each job's cells
DTYPES = ("f16", "f16-as-bf16", "bf16", "q8_0", "q4_0")  # the full run's rows (f32 runs too, given its GGUF files)
# A row that is not a file's type: the f16 files (the peers' as for f16), ./run with these flags.
VARIANTS = {"f16-as-bf16": ("f16", ("--f16-as-bf16",))}
# Rows where ./run reads the very GGUF file the peers read (SHAPE-q4_k_m.gguf: llama-quantize's
# Q4_K_M of SHAPE-f16.gguf; docs/speed.md says how), no export of ours.
GGUF_ROWS = ("q4_k_m", "q5_k_m")
DTYPE_BYTES = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32)}  # bytes per weights

Peer = namedtuple("Peer", "name bindir bench_flags batched_flags")


def parse_peer(text):
    """'NAME=BIN_DIR[:LLAMA_BENCH_FLAGS[:BATCHED_BENCH_FLAGS]]' -> Peer; flags split as a shell would.
    A BIN_DIR with a colon in it cannot be given this way."""
    name, eq, rest = text.partition("=")
    bindir, _, flags = rest.partition(":")
    bench_flags, _, batched_flags = flags.partition(":")
    if not eq or not name.strip() or not bindir:
        raise ValueError(f"--peer {text!r}: expected NAME=BIN_DIR[:LLAMA_BENCH_FLAGS[:BATCHED_BENCH_FLAGS]]")
    return Peer(name.strip(), Path(bindir).expanduser().resolve(), tuple(shlex.split(bench_flags)),
                tuple(shlex.split(batched_flags)))


def thread_counts(values):
    """--threads as given ('1,2', or '4' '8' '16', or both ways at once) -> [1, 2]."""
    counts = [t.strip() for value in values for t in str(value).split(",") if t.strip()]
    if not counts or not all(t.isdigit() and int(t) > 0 for t in counts):
        raise ValueError(f"--threads {' '.join(map(str, values))}: expected positive counts, e.g. 1,2 or 4,8,16")
    return [int(t) for t in counts]


def weight_bytes(h, dtype):
    """Bytes of the matrices one decode step reads: every layer's, plus the classifier."""
    D, H = h["dim"], h["hidden_dim"]
    qd, kvd = h["n_heads"] * h["head_dim"], h["n_kv_heads"] * h["head_dim"]
    per, n = DTYPE_BYTES[dtype]
    weights = h["n_layers"] * (2 * qd * D + 2 * kvd * D + 3 * H * D) + h["vocab_size"] * D
    return weights * per // n


def gguf_weight_bytes(path):
    """Bytes of the matrices one decode step reads from a GGUF file (a mixture such as Q4_K_M: each
    tensor at its own type): every 2-D tensor but the embedding, which counts only as the classifier
    when there is no output.weight."""
    _, tensors = gguf_file.read_gguf(path)
    sizes = {name: gguf_file.tensor_bytes(kind, ne) for name, (kind, ne, _) in tensors.items() if len(ne) == 2}
    if "output.weight" in sizes:
        sizes.pop("token_embd.weight", None)
    return sum(sizes.values())


def run(cmd, env=None):
    """Runs cmd in the system's temporary folder (a peer's batched-bench writes llama.log where it runs:
    not into the repository); every path it is given is absolute."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        shown = " ".join(shlex.quote(a if len(a) < 80 else a[:40] + "...") for a in map(str, cmd))  # not a whole prompt
        raise SystemExit(f"versus: {shown} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    return proc


# --- The programs ----------------------------------------------------------------------------------

def ours(model, tok, job, threads, prompts, flags=()):
    """./run's tok/s for a job's cells: {"tg", "pp"} from two runs, or {"pp4k", "tg@4k"} from one;
    flags: the row's (VARIANTS)."""
    base = [str(common.REPO / "run"), str(model), "-z", str(tok), "-t", "0", "--threads", str(threads),
            "-ctk", "f16", "-ctv", "f16", *flags, *common.RUN_FLAGS]  # llama.cpp's default KV cache; --ours-flags

    def timing(*args):
        return common.TIMING.search(run(base + list(args), env=common.RUN_ENV).stderr)

    if job == "short":
        tg = timing("-i", "", "-n", str(TG + 1), "--ctx", "1024")  # TG decode steps after the first token
        pp = timing("-i", prompts[PP], "-n", "1", "--ctx", "1024")
        return {"tg": float(tg.group(7)), "pp": float(pp.group(3))}
    deep = timing("-i", prompts[DEEP], "-n", str(DEEP_GEN + 1), "--ctx", str(DEEP_CTX))
    return {"pp4k": float(deep.group(3)), "tg@4k": float(deep.group(7))}


# What each peer's llama-bench says it was built from (its json rows' build_number and build_commit),
# by peer name: the table's header names the peer by these, not by where it sits on this machine.
BUILDS = {}


def llama_bench_speeds(out, name=None):
    """llama-bench -o json's output -> {(n_prompt, n_gen): tok/s} (ik_llama.cpp's has no jsonl); the
    build it reports is kept in BUILDS[name]."""
    rows, _ = json.JSONDecoder().raw_decode(out, re.search(r"^\[", out, re.M).start())
    if name and rows:
        BUILDS[name] = f"build {rows[0].get('build_number', '?')}, commit {rows[0].get('build_commit', '?')}"
    return {(r["n_prompt"], r["n_gen"]): float(r["avg_ts"]) for r in rows}


def batched_bench_speeds(out, pp, tg):
    """llama-batched-bench's markdown row for a prompt of pp tokens, tg steps and one sequence ->
    (prompt tok/s, decode tok/s). Both peers print this row; only llama.cpp's has --output-format jsonl.
        | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |"""
    number = r"\s*[\d.]+ \|"
    m = re.search(rf"^\|\s*{pp} \|\s*{tg} \|\s*1 \|{number}{number}\s*([\d.]+) \|{number}\s*([\d.]+) \|", out, re.M)
    return (float(m.group(1)), float(m.group(2))) if m else None


def theirs(peer, gguf, job, threads):
    """A peer's tok/s for a job's cells: llama-bench's pp and tg tests (one process), or
    llama-batched-bench's prompt and decode speeds at depth (one process)."""
    if job == "short":
        speed = llama_bench_speeds(run([str(peer.bindir / "llama-bench"), "-m", str(gguf), "-t", str(threads),
                                        "-p", str(PP), "-n", str(TG), "-r", "1", "-o", "json",
                                        *peer.bench_flags]).stdout, peer.name)
        return {"tg": speed[0, TG], "pp": speed[PP, 0]}
    proc = run([str(peer.bindir / "llama-batched-bench"), "-m", str(gguf), "-t", str(threads), "-c", str(DEEP_CTX),
                "-npp", str(DEEP), "-ntg", str(DEEP_GEN), "-npl", "1", *peer.batched_flags])
    speeds = batched_bench_speeds(proc.stdout + proc.stderr, DEEP, DEEP_GEN)
    if not speeds:
        raise SystemExit(f"versus: no result row in {peer.name}'s llama-batched-bench output:\n{proc.stdout[-2000:]}")
    return {"pp4k": speeds[0], "tg@4k": speeds[1]}


def probe(threads, compute):
    """bench/bwprobe's read bandwidth at this thread count, GB/s; its compute line goes into compute.
    The probe prints 1, 2 and OMP_NUM_THREADS threads, so setting that measures any count."""
    out = run([str(common.REPO / "bench" / "bwprobe"), "1024", "3"],
              env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
    compute.append(float(re.search(rf"compute, threads {threads}: ([\d.]+) GFLOP/s", out).group(1)))
    return float(re.search(rf"^threads {threads}: ([\d.]+) GB/s", out, re.M).group(1))


def rotation(names, r):
    """Round r's order of the programs: the list turned by r places, so that what the step before
    leaves behind (the probe's minute of full load, a file just reread) moves from program to program."""
    k = r % len(names)
    return names[k:] + names[:k]


# --- One row: a shape x weight type x thread count -------------------------------------------------

def measure_row(model, tok, gguf, peers, threads, runs, prompts, wbytes, long=True, flags=()):
    """runs interleaved rounds of every program (./run with flags); {cell: {program: [tok/s per
    round]}}, the round's probes (GB/s), the compute lines, and {program: [tg's fraction of the
    round's probe]}."""
    names = ["ours"] + [p.name for p in peers]
    by_name = {p.name: p for p in peers}
    jobs = [j for j in JOBS if long or j == "short"]
    got = {c: {n: [] for n in names} for j in jobs for c in JOBS[j]}
    probes, compute, of_probe = [], [], {n: [] for n in names}
    common.fresh_pages(model, gguf)
    ours(model, tok, "short", threads, prompts, flags)  # warm up: the files in the page cache
    for p in peers:
        theirs(p, gguf, "short", threads)
    for r in range(runs):
        common.log(f"versus:   round {r + 1}/{runs}: " + ", ".join(rotation(names, r)))
        common.fresh_pages(model, gguf)
        before = probe(threads, compute)
        for job in jobs:
            for name in rotation(names, r):
                speeds = (ours(model, tok, job, threads, prompts, flags) if name == "ours"
                          else theirs(by_name[name], gguf, job, threads))
                for cell, v in speeds.items():
                    got[cell][name].append(v)
        probes.append(max(before, probe(threads, compute)))
        for name in names:
            of_probe[name].append(got["tg"][name][-1] * wbytes / 1e9 / probes[-1])
    return got, probes, compute, of_probe


def summarize(got, of_probe, names, wbytes):
    """Medians per cell and program, ours over the best peer (the peer with the highest median), and
    ours over that peer round by round; tg's GB/s and fraction of the probe per program."""
    row = {}
    for cell, by in got.items():
        med = {n: statistics.median(v) for n, v in by.items()}
        peers = names[1:]
        best = max(peers, key=lambda n: med[n])
        rounds = [o / b for o, b in zip(by["ours"], by[best])]
        row[cell] = dict(med=med, best=best, ratio=med["ours"] / med[best], rounds=rounds)
    row["gbps"] = {n: row["tg"]["med"][n] * wbytes / 1e9 for n in names}
    row["of_probe"] = {n: statistics.median(v) for n, v in of_probe.items()}
    return row


# --- The table ---------------------------------------------------------------------------------------

def format_cell(c, names):
    """'482.0 / 260.2 / 300.1 (1.61x, rounds 1.50-1.70)': each program's median tok/s in order, ours
    over the best peer (and the lowest and highest of that ratio within one round)."""
    spread = f", rounds {min(c['rounds']):.2f}-{max(c['rounds']):.2f}" if len(c["rounds"]) > 1 else ""
    return " / ".join(f"{c['med'][n]:.1f}" for n in names) + f" ({c['ratio']:.2f}x{spread})"


def table(rows, peers, header):
    """The markdown table: header lines, then a row per shape x weight type x thread count."""
    names = ["ours"] + [p.name for p in peers]
    order = " / ".join(names)
    lines = header + [
        f"Each cell: {order} tok/s, medians of the rounds, then ours over the best peer's median (and that ratio's "
        "lowest and highest within one round: programs run minutes apart at most, so a round's ratio survives the "
        "drift between rounds). tg GB/s: decode (tg) x bytes of the weight "
        f"matrices per step, {order}, each with its fraction of the probe of the same round (bench/bwprobe before "
        "and after the round, the larger; same threads), the median over the rounds. The probe column also gives the "
        "range of bwprobe's compute line over the rounds: a low one marks rounds in which the vCPU itself was slow "
        "(docs/speed.md, \"Noise\").", "",
        "| model | weights | threads | tg | pp | pp4k | tg@4k | tg GB/s (of probe) | probe GB/s |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [format_cell(r[c], names) if c in r else "-" for c in CELLS]
        gbps = " / ".join(f"{r['gbps'][n]:.1f} ({r['of_probe'][n]:.0%})" for n in names)
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['threads']} | " + " | ".join(cells) + f" | {gbps} "
                     f"| {r['probe']:.1f} ({min(r['probes']):.1f}-{max(r['probes']):.1f}; "
                     f"compute {min(r['compute']):.0f}-{max(r['compute']):.0f} GFLOP/s) |")
    return lines


def peer_line(p):
    """How a peer ran, for the table's header: its name and the build its llama-bench reported (no path
    of this machine's)."""
    flags = lambda f: f"`{shlex.join(f)}`" if f else "no extra flags"  # noqa: E731
    return f"{p.name} ({BUILDS.get(p.name, 'build not reported')}): llama-bench {flags(p.bench_flags)}, llama-batched-bench {flags(p.batched_flags)}"


# --- Main ------------------------------------------------------------------------------------------

def main(args):
    peers, ggufs = args.peer, Path(args.gguf).expanduser().resolve()
    if len({p.name for p in peers}) != len(peers) or "ours" in {p.name for p in peers}:
        raise SystemExit("versus: each --peer needs a name of its own (and not 'ours')")
    for p in peers:
        for tool in ("llama-bench", "llama-batched-bench"):
            if not (p.bindir / tool).exists():
                raise SystemExit(f"versus: no {tool} in {p.bindir} (hint: a peer's BIN_DIR is its build/bin folder)")
    names = ["ours"] + [p.name for p in peers]
    rows, skipped = [], []
    started, load_before = datetime.datetime.now(), common.loadavg()
    prompts = {}
    for shape in args.shape:
        if shape == "stories260k":
            continue  # no GGUF of it: llama.cpp's converter wants a larger vocabulary layout
        tok = common.SHAPES[shape]["tokenizer"]
        if not prompts:
            prompts = {n: common.prompt_text(tok, n) for n in (PP, DEEP)}
        for dtype in args.dtype:
            files, flags = VARIANTS.get(dtype, (dtype, ()))
            gguf = ggufs / f"{shape}-{files}.gguf"
            if not gguf.exists():
                skipped.append(f"{shape} {dtype} (no {gguf.name})")
                continue
            if dtype in GGUF_ROWS:
                model, wbytes = gguf, gguf_weight_bytes(gguf)
            else:
                model = common.checkpoint(args.cache, shape, files)
                wbytes = weight_bytes(common.read_header(model), files)
            for threads in args.threads:
                common.log(f"versus: {shape} {dtype} threads {threads}")
                got, probes, compute, of_probe = measure_row(model, tok, gguf, peers, threads, args.runs, prompts,
                                                             wbytes, long=not args.no_long, flags=flags)
                row = summarize(got, of_probe, names, wbytes)
                row.update(shape=shape, dtype=dtype, threads=threads, probe=statistics.median(probes), probes=probes,
                           compute=compute)
                rows.append(row)
                common.log("versus:   tg " + " / ".join(f"{n} {row['tg']['med'][n]:.2f}" for n in names)
                           + " tok/s, of the probe " + " / ".join(f"{row['of_probe'][n]:.0%}" for n in names)
                           + f" ({row['probe']:.1f} GB/s)")
    header = [f"# ./run against {', '.join(p.name for p in peers)}, {started:%Y-%m-%d %H:%M}", "",
              f"Machine: {common.machine()}; Linux {os.uname().release}; commit {common.commit()}.",
              "Peers: " + "; ".join(peer_line(p) for p in peers) + "."
              + (f" Ours with `{shlex.join(common.RUN_FLAGS)}`." if common.RUN_FLAGS else ""),
              f"Load average (1, 5, 15 min): {load_before} before, {common.loadavg()} after "
              f"({(datetime.datetime.now() - started).total_seconds() / 60:.0f} min).",
              f"Medians of {args.runs} interleaved round{'s' if args.runs > 1 else ''}, the programs' order rotating "
              f"round by round. tg = {TG} decode steps from an empty context; pp = a {PP}-token prompt; pp4k = a "
              f"{DEEP}-token prompt and tg@4k = {DEEP_GEN} decode steps after it (--ctx {DEEP_CTX}). KV cache f16 "
              "everywhere.", ""]
    lines = table(rows, peers, header)
    if skipped:
        lines += ["", "Skipped (a file missing): " + ", ".join(skipped) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    common.log(f"versus: wrote {args.out}")
