"""The README's quick start prints what the README shows.

The first ```sh block of "Quick start" ends with a ./run command; its output block (stdout) and the
banner block (stderr, without the timing line, whose speeds are the machine's) must be what ./run
prints, byte for byte. A README that drifts from the program fails here. Also: the timing line's
wording ("1 token", not "1 tokens").
"""
import re
import shlex
import subprocess

from conftest import REPO


def quick_start():
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    command = [line for line in blocks[0][1].splitlines() if line.startswith("./run ")][0]
    return command, blocks[1][1], blocks[2][1]


def test_quick_start_output(c_tools):
    command, stdout, banner = quick_start()
    proc = subprocess.run(shlex.split(command), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == stdout, f"README shows:\n{stdout}\n./run printed:\n{proc.stdout}"
    # What depends on the machine (README says so): the kernels built for it, the per-thread scratch
    # in the activations, and the memory available; and the random seed, which greedy does not use.
    def fixed(text):
        lines = [line for line in text.splitlines() if not line.startswith("prompt:")]
        lines = [re.sub(r"sampling: seed \d+ ", "sampling: seed * ", line) for line in lines]
        return [re.sub(r"activations [\d.]+ MiB, of [\d.]+ GiB available \| kernels \S+ \| threads \d+",
                       "activations *, of * available | kernels * | threads *", line) for line in lines]
    assert fixed(proc.stderr) == fixed(banner)
    assert any("activations *, of * available | kernels * | threads *" in line for line in fixed(banner))
    timing = [line for line in proc.stderr.splitlines() if line.startswith("prompt:")]
    assert len(timing) == 1 and re.search(r"generation: 57 tokens, 56 decode steps", timing[0])


def test_singular_counts(c_tools):
    """The timing line counts one token as "1 token": here the prompt is BOS alone and one token is
    generated, with no decode step after it."""
    proc = subprocess.run([str(REPO / "run"), str(REPO / "data/stories260K/stories260K.bin"), "-n", "1", "-t", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^prompt: 1 token in .* generation: 1 token, 0 decode steps in ", proc.stderr, re.M), proc.stderr


def test_long_prompt_example(c_tools):
    """"Seeing it in generated text": the commands, run by bash from the repository root, print the
    lines the README shows, one per mode; the modes must differ (the point of the example)."""
    text = (REPO / "README.md").read_text()
    section = text.split("### Seeing it in generated text\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    assert blocks[0][0] == "sh" and blocks[1][0] == ""
    proc = subprocess.run(["bash", "-c", blocks[0][1]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == blocks[1][1], f"README shows:\n{blocks[1][1]}\nthe commands printed:\n{proc.stdout}"
    lines = proc.stdout.splitlines()
    assert len(lines) == 6 and len({l.split(None, 1)[1] for l in lines}) == 6
    # "The first 3000 bytes of the TinyStories text are 1499 tokens", past L = 512.
    prompt = (REPO / "data/text/tinystories_validation_head.txt").read_bytes()[:3000].decode()
    proc = subprocess.run([str(REPO / "run"), str(REPO / "data/stories260K/stories260K.bin"), "--ctx", "2048", "-n", "0",
                           "-i", prompt.rstrip("\n")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "prompt: 1499 tokens" in proc.stderr, proc.stderr


def test_kernel_names_are_the_programs():
    """Issue 47: the README listed avx2 / avx512-vnni / plain-c while the banner printed
    avx512-vnni-bf16. Every name kernels_isa() can return is in both of the README's lists, and
    the lists name nothing else."""
    body = (REPO / "kernels.c").read_text().split("const char *kernels_isa(void) {", 1)[1].split("\n}", 1)[0]
    names = re.findall(r'return "([^"]+)";', body)
    assert len(names) == 5 and "avx2" in names and "plain-c" in names, names
    text = (REPO / "README.md").read_text()
    banner = re.search(r"the vector\s+instructions the kernels were built for \((.*?)\),", text, re.S)[1]
    version = re.search(r"^\| `--version` \| the version, the kernels this build runs \((.*?)\)", text, re.M)[1]
    for listed in (banner, version):
        assert sorted(set(re.findall(r"`(?:kernels )?([a-z0-9-]+)`", listed))) == sorted(names), listed


def test_f16_as_bf16_speed_is_one_measured_figure(c_tools):
    """--help said prompts ~2x faster, the README about 3x. Now --help gives no factor, and the
    README's is the measured one in docs/speed.md, with its machine."""
    help_text = subprocess.run([str(REPO / "run"), "--help"], capture_output=True, text=True).stdout
    flag = help_text.split("--f16-as-bf16", 1)[1].split("\n      --", 1)[0]
    assert not re.search(r"\d\s*x\b", flag) and "docs/speed.md" in flag, flag
    row = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `--f16-as-bf16` |")]
    factors = re.findall(r"(\d\.\d)x the exact f16 path's on TinyLlama-1.1B at one thread, (\d\.\d)x on the 110M",
                         row[0])
    assert len(row) == 1 and len(factors) == 1 and "Zen 5" in row[0], row
    speed = (REPO / "docs" / "speed.md").read_text()
    tiny, m110 = factors[0]
    assert f"at one thread ({tiny}x)" in speed and f"({m110}x)" in speed
