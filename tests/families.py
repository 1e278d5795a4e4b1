"""families.py - what the tests of data/families and data/families2 share (test_families*.py and
test_families*_reference.py): a case's stored ids, rows and logits, every case exported once, our logits
for them (tools/dump_logits), the distance between two sets of logits, and edits of an exported model
file (a copy with its bytes changed, the layer kinds rewritten) for the controls."""
import struct
import subprocess

import numpy as np

from conftest import TOOLS, run_export
from lrun.modelfile import layout, read_header


def case_data(folder, case):
    """(folder/case, ids, rows, their logits at those rows) of one stored case."""
    d = folder / case
    ids = np.fromfile(d / "ids.bin", np.int32)
    rows = np.fromfile(d / "rows.bin", np.int32)
    theirs = np.fromfile(d / "logits.bin", np.float32).reshape(len(rows), -1)
    return d, ids, rows, theirs


def reference_case(folder, case):
    """case_data as tests/reference.py takes it: the ids as a list, their logits in float64."""
    d, ids, rows, theirs = case_data(folder, case)
    return d, ids.tolist(), rows, theirs.astype(np.float64)


def export_all(root, folder, cases):
    """{case: root/case/model.bin}, each case of folder exported (f32) into a folder of its own."""
    files = {}
    for case in cases:
        (root / case).mkdir()
        proc = run_export(folder / case, root / case / "model.bin")
        assert proc.returncode == 0, proc.stderr
        files[case] = root / case / "model.bin"
    return files


def ours(model, ids_path, n, tmp_path, *extra, tool="dump_logits"):
    """Our (n, vocab) logits of the n ids in ids_path, one sequence in a context of n unless extra says
    otherwise (a later --ctx wins); tool dump_logits_ref runs the plain references."""
    out = tmp_path / "logits.bin"
    proc = subprocess.run([str(TOOLS / tool), str(model), str(ids_path), str(out), "--ctx", str(n), *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, np.float32).reshape(n, -1)


def rel(a, b):
    """max |a - b| / max |b|: a difference as a fraction of the largest logit."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def edited(src, dst, edit):
    """A copy of the model file src at dst with edit(bytearray, header, layout) applied."""
    buf = bytearray(src.read_bytes())
    h = read_header(buf)
    edit(buf, h, {name: pieces for name, _, _, pieces in layout(h)})
    dst.write_bytes(bytes(buf))
    return dst


def set_kinds(buf, parts, f):
    """Every layer's kind k in the file's layer_kind table becomes f(k)."""
    (off, n), = parts["layer_kind"]
    kinds = list(struct.unpack_from(f"<{n // 4}i", buf, off))
    struct.pack_into(f"<{n // 4}i", buf, off, *[f(k) for k in kinds])
