"""The repository carries its own data and reads nothing beside it.

- Every file in data/ is listed in data/SHA256SUMS with the hash that data/README.md documents, and
  every listed file is there with that hash (a damaged or replaced model fails here, not later in a
  parity test with a confusing difference).
- No file of the repository names the folder beside the clone that the project's data once came
  from: tests, scripts, bench, fuzz, Makefile and README must work from a clone alone.
"""
import hashlib
import re

from conftest import DATA, REPO

# Built from pieces so that this file does not name what it looks for.
SIBLING = re.compile(re.escape("..") + "/" + "shared" + r"\b|" + re.escape("parent / ") + "\"" + "shared" + "\"")
SKIP_DIRS = {".git", "build", "__pycache__", ".pytest_cache", "data", "node_modules"}  # node_modules: npm packages (tests/oracle), not ours


def listed_sums():
    sums = {}
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    return sums


def test_every_data_file_has_its_documented_hash():
    sums = listed_sums()
    present = sorted(str(p.relative_to(DATA)) for p in DATA.rglob("*")
                     if p.is_file() and p.name not in ("README.md", "SHA256SUMS"))
    assert present == sorted(sums), "data/ and data/SHA256SUMS list different files"
    readme = (DATA / "README.md").read_text()
    for name, digest in sums.items():
        got = hashlib.sha256((DATA / name).read_bytes()).hexdigest()
        assert got == digest, f"data/{name}: sha256 {got}, SHA256SUMS says {digest}"
    print(f"{len(sums)} data files, every sha256 as listed")
    assert "sha256sum -c SHA256SUMS" in readme


def test_nothing_reads_outside_the_repository():
    offenders = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if not path.is_file() or SKIP_DIRS & set(rel.parts[:-1]) or path.suffix in (".png", ".bin", ".o"):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binaries (built tools, fuzz corpus)
        offenders += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if SIBLING.search(line)]
    assert not offenders, "files that reach outside the repository:\n" + "\n".join(offenders)


def test_the_check_can_fail():
    """Negative control: the pattern finds what it must find."""
    assert SIBLING.search("see " + ".." + "/" + "shared/data/models")
    assert SIBLING.search('DATA = REPO.parent / "' + "shared" + '"')
    assert not SIBLING.search("shared_classifier = 1")
