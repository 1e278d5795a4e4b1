"""test_families2.py - the families whose layers differ by more than a flag (Gemma 2 and 3, OLMo 2 and 3,
EXAONE 4, GLM-4, Granite 3, Ministral 3), exported as version 4 files and run by model.c, against logits
from an independent float32 forward pass written from transformers' modeling files, and against
transformers 5.17 itself.

data/families2/ holds nine random checkpoints in each family's config.json (the Hub's 4.x keys) and tensor
names, with the logits of that reference at chosen rows of one sequence (data/families2/README.md says how
they were made and what each exercises); data/families2-hf/hub-form/ holds the logits transformers 5.17
computed for the same nine folders, as it reads them. data/families2-hf/ holds nine more checkpoints of the
same families written and run by transformers 5.17 (other weights, config.json as its save_pretrained
writes it: rope_parameters keyed by layer type, layer_types; data/families2-hf/README.md). Each is exported
(export/export.py) and run through tools/dump_logits; max |ours - theirs| / max |theirs| must be below TOL
against every set of logits. The same cases run through the plain references (tools/dump_logits_ref:
matmul_ref and attention_ref) and one token at a time.

Each feature has a control that must fail: the exported file with that feature taken out of it (an
hparam set back to Llama's value, a layer kind bit cleared, a norm's weights set to 1, ...), which must
be farther than CONTROL from the reference and from transformers, in both config forms; so a pass shows
the feature is run, not that the weights alone match.
"""
import re
import struct
import subprocess

import numpy as np
import pytest

from conftest import DATA, REPO, run_export
from families import case_data, edited, export_all, ours, rel, set_kinds
from lrun.modelfile import HPARAM, HPARAMS, HEADER_SIZE, LAYER_NO_ROPE, LAYER_ROPE_SWA, LAYER_SLIDING, NORM_ATTN, \
    NORM_ATTN_POST, NORM_FFN, NORM_FFN_POST, layout, pack_header, pack_hparams, read_header, set_field

FAMILIES = DATA / "families2"
FAMILIES_HF = DATA / "families2-hf"
TOL = 1e-4      # of the largest logit (measured: 2e-7 .. 1e-5; the reference forms RoPE angles in float32)
CONTROL = 1e-2  # a control with the feature taken out must be at least this far off
CASES = sorted(d.name for d in FAMILIES.iterdir() if d.is_dir())
HF_CASES = sorted(d.name for d in FAMILIES_HF.iterdir() if (d / "config.json").is_file())


def fixture(case):
    return case_data(FAMILIES, case)


def expected(source, case):
    """[(whose logits, they)] a case must meet: families2's from the reference and from transformers 5.17
    reading the same config.json; families2-hf's from transformers 5.17."""
    if source == "families2-hf":
        return [("transformers", case_data(FAMILIES_HF, case)[3])]
    theirs = fixture(case)[3]
    hub = np.fromfile(FAMILIES_HF / "hub-form" / f"{case}.bin", np.float32).reshape(theirs.shape)
    return [("reference", theirs), ("transformers", hub)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, c_tools):
    """{case: path of its f32 export}, each in a folder of its own."""
    files = export_all(tmp_path_factory.mktemp("families2"), FAMILIES, CASES)
    for model in files.values():
        assert read_header(model.read_bytes())["version"] == 4
    return files


@pytest.fixture(scope="module")
def exported_hf(tmp_path_factory, c_tools):
    return export_all(tmp_path_factory.mktemp("families2-hf"), FAMILIES_HF, HF_CASES)


def test_both_folders_hold_the_same_cases():
    assert HF_CASES == CASES
    assert sorted(f.stem for f in (FAMILIES_HF / "hub-form").glob("*.bin")) == CASES


@pytest.mark.parametrize("case", CASES)
def test_logits_equal_the_reference(case, exported, tmp_path):
    d, ids, rows, _ = fixture(case)
    got = ours(exported[case], d / "ids.bin", len(ids), tmp_path)[rows]
    for who, theirs in expected("families2", case):
        diff = rel(got, theirs)
        print(f"{case}: n = {len(ids)}, {len(rows)} rows, max |ours - {who}| / max |logit| = {diff:.2e}")
        assert diff < TOL, who


@pytest.mark.parametrize("case", HF_CASES)
def test_logits_equal_transformers_own_checkpoints(case, exported_hf, tmp_path):
    """transformers 5.17's save_pretrained form (rope_parameters keyed by layer type) read by export.py,
    against transformers' own logits for it."""
    d, ids, rows, theirs = case_data(FAMILIES_HF, case)
    assert "rope_parameters" in (d / "config.json").read_text()
    diff = rel(ours(exported_hf[case], d / "ids.bin", len(ids), tmp_path)[rows], theirs)
    print(f"{case} (transformers 5.17's checkpoint): max |ours - transformers| / max |logit| = {diff:.2e}")
    assert diff < TOL


@pytest.mark.parametrize("case", CASES)
def test_plain_references_and_token_by_token(case, exported, tmp_path):
    """The same logits from the plain path (matmul_ref, attention_ref: the scale, the softcap, the window
    and the second RoPE read there too) and from generation's path, one token at a time."""
    d, ids, rows, theirs = fixture(case)
    plain = ours(exported[case], d / "ids.bin", len(ids), tmp_path, tool="dump_logits_ref")[rows]
    growing = ours(exported[case], d / "ids.bin", len(ids), tmp_path, "--growing", "--batch", "1")[rows]
    print(f"{case}: plain references {rel(plain, theirs):.2e}, token by token {rel(growing, theirs):.2e}")
    assert rel(plain, theirs) < TOL and rel(growing, theirs) < TOL




def set_hparam(buf, name, value):
    """Set the value of hparam `name` in the table at byte 256 (model.h, version 4)."""
    n, = struct.unpack_from("<i", buf, 184)
    for e in range(n):
        at = HEADER_SIZE + e * HPARAM.size
        if HPARAM.unpack_from(buf, at)[0].rstrip(b"\0").decode() == name:
            HPARAM.pack_into(buf, at, name.encode(), value)
            return
    raise KeyError(name)




def fill(buf, parts, suffixes, f):
    """Every f32 vector whose name ends in one of suffixes: value x -> f(x)."""
    for name, pieces in parts.items():
        if name.endswith(suffixes):
            for off, n in pieces:
                x = np.frombuffer(bytes(buf[off:off + n]), "<f4")
                buf[off:off + n] = f(x).astype("<f4").tobytes()


def zero(buf, parts, suffixes):
    fill(buf, parts, suffixes, np.zeros_like)


NORMS = ("rms_att", "post_att", "rms_ffn", "post_ffn", "q_norm", "k_norm", "rms_final")


def rotate_half_rows(buf, h, parts):
    """wq, wk, bq and bk (f32) with the rows of each head's turned part permuted as export.py permutes a
    rotate_half checkpoint's (interleave_rows: row 2i + c <- row c rd/2 + i): GLM-4's rows read as if they
    were Llama's layout, so the pairs turned are the wrong coordinates."""
    hd, rd = h["head_dim"], h["rot_dims"] or h["head_dim"]
    for name, pieces in parts.items():
        if not name.endswith(("wq", "wk", "bq", "bk")):
            continue
        (off, n), = pieces
        cols = 1 if name.endswith(("bq", "bk")) else h["dim"]  # f32 (rows, cols): (heads, head_dim, cols)
        w = np.frombuffer(bytes(buf[off:off + n]), "<f4").reshape(-1, hd, cols).copy()
        turned = w[:, :rd].reshape(w.shape[0], 2, rd // 2, -1)
        w[:, :rd] = turned.transpose(0, 2, 1, 3).reshape(w.shape[0], rd, -1)
        buf[off:off + n] = w.astype("<f4").tobytes()


def pre_norm_file(src, dst):
    """The exported file src rewritten at dst with the same weights, the norms after each sublayer
    (post_att, post_ffn) now the norms before it (rms_att, rms_ffn) and hparam norms = 5 (Llama's: a norm
    before attention and one before the MLP), laid out by lrun/modelfile.py: OLMo 2 read as a pre-norm model."""
    data = src.read_bytes()
    h = read_header(data)
    assert h["hparams"]["norms"] == NORM_ATTN_POST | NORM_FFN_POST
    h2 = dict(h, hparams=dict(h["hparams"], norms=NORM_ATTN | NORM_FFN))
    old = {name: pieces for name, _, _, pieces in layout(h)}
    out = bytearray(pack_header(h2))
    for name, _, kind, pieces in layout(h2):
        if kind == "hparams":
            new = [pack_hparams(h2)]
        else:
            moved = name.replace("rms_att", "post_att").replace("rms_ffn", "post_ffn")
            new = [data[off:off + n] for off, n in old[moved]]
        for (start, n), part in zip(pieces, new):
            assert len(part) == n, name
            out += bytes(start - len(out)) + part
    dst.write_bytes(bytes(out))
    return dst

# (case, what the control takes out, the edit of the exported file)
CONTROLS = [
    ("gemma2-softcap", "the attention softcap", lambda b, h, p: set_hparam(b, "f_attn_logit_softcapping", 1e6)),
    ("gemma2-softcap", "the final softcap", lambda b, h, p: set_hparam(b, "f_final_logit_softcapping", 1e6)),
    ("gemma2-softcap", "the sliding window", lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_SLIDING)),
    ("gemma2-softcap", "GeGLU (SiLU instead)", lambda b, h, p: set_hparam(b, "act", 0)),
    ("gemma2-softcap", "query_pre_attn_scalar (1/sqrt(head_dim) instead)",
     lambda b, h, p: set_hparam(b, "f_attention_scale", 32 ** -0.5)),
    ("gemma2-softcap", "the embedding scale", lambda b, h, p: set_hparam(b, "f_embedding_scale", 1)),
    ("gemma3-linear-global", "the local RoPE (the global one's base and factor everywhere)",
     lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_ROPE_SWA)),
    ("gemma3-linear-global", "the linear factor of the global layer", lambda b, h, p: set_field(b, "rope_scaling", 0)),
    ("gemma3-two-bases", "the local base (1e6 everywhere)", lambda b, h, p: set_hparam(b, "rope_freq_base_train_swa",
                                                                                      1e6)),
    ("gemma3-two-bases", "1 + w in the norms (w instead)", lambda b, h, p: fill(b, p, NORMS, lambda x: x - 1)),
    ("olmo2-postnorm", "the q/k norm weights (set to 1)", lambda b, h, p: fill(b, p, ("q_norm", "k_norm"),
                                                                               np.ones_like)),
    ("olmo2-postnorm", "the post-norm weights (set to 1)", lambda b, h, p: fill(b, p, ("post_att", "post_ffn"),
                                                                                np.ones_like)),
    ("olmo2-postnorm", "post-norms (the same weights as norms before each sublayer)", "pre-norm"),
    ("olmo3-swa-yarn", "the unscaled RoPE of the sliding layers (YaRN everywhere)",
     lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_ROPE_SWA)),
    ("olmo3-swa-yarn", "the sliding window", lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_SLIDING)),
    ("exaone4-global-nope", "NoPE in the global layer", lambda b, h, p: set_kinds(b, p, lambda k: k & ~LAYER_NO_ROPE)),
    ("glm4-partial-interleaved", "partial rotary (the whole head turns)",
     lambda b, h, p: struct.pack_into("<i", b, 168, 32)),
    ("glm4-partial-interleaved", "the q/k/v biases", lambda b, h, p: zero(b, p, ("bq", "bk", "bv"))),
    ("glm4-partial-interleaved", "interleaved pairs (rotate_half's rows instead)", rotate_half_rows),
    ("granite-mup", "embedding_multiplier", lambda b, h, p: set_hparam(b, "f_embedding_scale", 1)),
    ("granite-mup", "attention_multiplier", lambda b, h, p: set_hparam(b, "f_attention_scale", 32 ** -0.5)),
    ("granite-mup", "residual_multiplier", lambda b, h, p: set_hparam(b, "f_residual_scale", 1)),
    ("granite-mup", "logits_scaling", lambda b, h, p: set_hparam(b, "f_logit_scale", 1)),
    ("ministral3-yarn-beta", "the query temperature", lambda b, h, p: set_hparam(b, "f_attn_temp_scale", 1e-6)),
    ("ministral3-yarn-beta", "mscale's attention factor 1 (0.1 ln 4 + 1 instead)",
     lambda b, h, p: set_field(b, "rope_attn_factor", 0.0)),
]


# On data/families2-hf's weights three features barely move the logits (the largest logit is 0.74, far
# below Gemma 2's final cap of 30; its scores seldom near the cap of 50; Granite's scores are small either
# way): without them 1.8e-4, 2.6e-3 and 6.6e-3 of the largest logit. families2's weights test those three;
# the rest, the per-layer RoPE above all, are taken out of both folders' checkpoints.
WEAK_ON_HF = {("gemma2-softcap", "the attention softcap"), ("gemma2-softcap", "the final softcap"),
              ("granite-mup", "attention_multiplier")}
CONTROL_RUNS = [(source, *c) for source in ("families2", "families2-hf") for c in CONTROLS
                if source == "families2" or c[:2] not in WEAK_ON_HF]


@pytest.mark.parametrize("source,case,what,edit", CONTROL_RUNS, ids=[f"{s}/{c}: {w}" for s, c, w, _ in CONTROL_RUNS])
def test_control_without_the_feature_fails(case, what, edit, source, exported, exported_hf, tmp_path):
    d, ids, rows, _ = case_data(FAMILIES if source == "families2" else FAMILIES_HF, case)
    model = (exported if source == "families2" else exported_hf)[case]
    if edit == "pre-norm":  # a file of another layout, not an edit in place
        model = pre_norm_file(model, tmp_path / "control.bin")
    else:
        model = edited(model, tmp_path / "control.bin", edit)
    got = ours(model, d / "ids.bin", len(ids), tmp_path)[rows]
    for who, theirs in expected(source, case):
        diff = rel(got, theirs)
        print(f"{source}/{case} control (without {what}): max diff from {who} / max logit = {diff:.2e}")
        assert diff > CONTROL, who


@pytest.mark.parametrize("dtype,bound", [("f16", 2e-3), ("bf16", 2e-2), ("q8_0", 8e-2)])
@pytest.mark.parametrize("case", ["gemma3-linear-global", "glm4-partial-interleaved", "olmo2-postnorm"])
def test_weight_types(case, dtype, bound, exported, tmp_path):
    """Every weight type exports and runs with the new tensors (post-norms, whole-projection q/k norms,
    biases: f32 whatever the type); the logits stay near our f32 run of the same checkpoint (bounds: about
    twice what was measured; q8_0 on random weights whose q and k were scaled by 6 moves them by 4%)."""
    d, ids, rows, _ = fixture(case)
    (tmp_path / "m").mkdir()
    proc = run_export(d, tmp_path / "m" / "model.bin", "--dtype", dtype)
    assert proc.returncode == 0, proc.stderr
    ref = ours(exported[case], d / "ids.bin", len(ids), tmp_path)[rows]
    diff = rel(ours(tmp_path / "m" / "model.bin", d / "ids.bin", len(ids), tmp_path)[rows], ref)
    print(f"{case} {dtype}: max diff / max logit against f32 = {diff:.2e}")
    assert diff < bound


@pytest.mark.parametrize("case", ["gemma3-two-bases", "olmo3-swa-yarn", "exaone4-global-nope"])
def test_context_shift_turns_each_layer_with_its_own_rope(case, exported):
    """A context shift turns each layer's cached keys back with its own RoPE (the local one, the global
    one, none): tests/test_model.c --layers shifts 20 times and checks every moved key against the key
    before the shift turned in double (control: the other RoPE), and layer 0's keys after the 20 shifts
    against a fresh run of the tokens then held."""
    proc = subprocess.run([str(REPO / "tests" / "test_model"), "--layers", str(exported[case])], capture_output=True,
                          text=True)
    print(proc.stdout)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_banner_says_what_the_layers_do(exported):
    for case, expect in [("gemma2-softcap", ["Gemma 2", "norms before and after attention", "GeGLU",
                                             "scores capped at 50", "logits capped at 30", "embeddings x 8"]),
                         ("gemma3-linear-global", ["Gemma 3", "the local RoPE (base 10000, unscaled) in 0-4",
                                                   "rope: pi, base 1e+06, factor 8"]),
                         ("olmo2-postnorm", ["OLMo 2", "a norm after attention", "over the whole projection"]),
                         ("exaone4-global-nope", ["EXAONE 4", "none (NoPE) in 3"]),
                         ("granite-mup", ["Granite", "sublayer outputs x 0.22", "logits / 8", "scores x 0.05"]),
                         ("ministral3-yarn-beta", ["Ministral 3", "queries x 1 + 0.1 ln(1 + floor(m / 256))"]),
                         ("glm4-partial-interleaved", ["GLM-4", "q/k/v biases", "16 of 32 dimensions turn"])]:
        proc = subprocess.run([str(REPO / "run"), str(exported[case]), "-i", "a", "-n", "2", "-t", "0"],
                              capture_output=True, text=True, errors="replace")
        assert proc.returncode == 0, proc.stderr
        for e in expect:
            assert e in proc.stderr, (case, e, proc.stderr)


def test_rerope_refused_on_local_layers(exported):
    """Modes that score a key at two rotations are not run with sliding layers (run.c), Gemma 3's too."""
    proc = subprocess.run([str(REPO / "run"), str(exported["gemma3-two-bases"]), "-i", "a", "-n", "2",
                           "--rope-scaling", "rerope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "sliding-window layers (window 32)" in proc.stderr, proc.stderr


def test_scaling_at_run_time_moves_only_the_global_layers(exported, tmp_path):
    """--rope-scaling applies to the model's RoPE, not the local one: on gemma3-two-bases, whose only
    global layer is the last, pi x 2 changes the logits, and with that layer turned NoPE it changes
    nothing (the local layers never see it)."""
    d, ids, _, _ = fixture("gemma3-two-bases")
    n = 300
    (tmp_path / "ids.bin").write_bytes(ids[:n].astype("<i4").tobytes())
    base = ours(exported["gemma3-two-bases"], tmp_path / "ids.bin", n, tmp_path)
    pi = ours(exported["gemma3-two-bases"], tmp_path / "ids.bin", n, tmp_path, "--rope-scaling", "pi",
              "--rope-factor", "2")
    nope = edited(exported["gemma3-two-bases"], tmp_path / "nope.bin",
                  lambda b, h, p: set_kinds(b, p, lambda k: k if k & LAYER_ROPE_SWA else k | LAYER_NO_ROPE))
    nope_base = ours(nope, tmp_path / "ids.bin", n, tmp_path)
    nope_pi = ours(nope, tmp_path / "ids.bin", n, tmp_path, "--rope-scaling", "pi", "--rope-factor", "2")
    print(f"pi x 2 moves the logits by {rel(pi, base):.2e}; with the global layer NoPE by {rel(nope_pi, nope_base):.2e}")
    assert rel(pi, base) > CONTROL
    assert rel(nope_pi, nope_base) == 0


@pytest.mark.parametrize("entry,why", [
    (("f_embedding_scale", 2.0), None),                     # a known one: runs
    (("f_embedding_scale", 0.0), "is out of its range"),
    (("norms", 2.5), "must be a whole number"),
    (("f_not_a_thing", 1.0), "is not one this program knows"),
    (("f_residual_scale", float("nan")), "is out of its range"),
])
def test_hparams_table_is_checked(entry, why, exported, tmp_path):
    """A damaged or newer hparams table is refused naming the entry (loader.c, read_hparams)."""
    def edit(b, h, p):
        name, value = entry
        HPARAM.pack_into(b, HEADER_SIZE, name.encode(), value)  # the first entry
    model = edited(exported["granite-mup"], tmp_path / "m.bin", edit)
    proc = subprocess.run([str(REPO / "run"), str(model), "-i", "a", "-n", "1", "-z",
                           str(FAMILIES / "granite-mup" / "tokenizer.model")], capture_output=True, text=True,
                          errors="replace")
    if why is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 1 and why in proc.stderr and "hparam 0" in proc.stderr, proc.stderr


def test_hparam_given_twice_is_refused(exported, tmp_path):
    def edit(b, h, p):
        b[HEADER_SIZE + HPARAM.size:HEADER_SIZE + 2 * HPARAM.size] = b[HEADER_SIZE:HEADER_SIZE + HPARAM.size]
    model = edited(exported["granite-mup"], tmp_path / "m.bin", edit)
    proc = subprocess.run([str(REPO / "run"), str(model), "-i", "a", "-n", "1"], capture_output=True, text=True)
    assert proc.returncode == 1 and "is given twice" in proc.stderr, proc.stderr


def test_gemma3_multimodal_refused_by_name(tmp_path, c_tools):
    import json
    import shutil
    src = FAMILIES / "gemma3-two-bases"
    shutil.copytree(src, tmp_path / "mm")
    cfg = json.loads((src / "config.json").read_text())
    (tmp_path / "mm" / "config.json").write_text(json.dumps({"architectures": ["Gemma3ForConditionalGeneration"],
                                                             "model_type": "gemma3", "text_config": cfg}))
    proc = run_export(tmp_path / "mm", tmp_path / "out.bin")
    assert proc.returncode == 1 and "Gemma3ForCausalLM" in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", ["gemma2-softcap", "olmo2-postnorm", "glm4-partial-interleaved"])
def test_one_tensor_order(case, exported, tmp_path):
    """lrun/modelfile.py (which writes the file) and loader.c's LAYER_TENSORS (which reads it) list a
    layer's tensors in the same order: each tensor the writer lays out, its first value made NaN, is
    the one ./run --check-tensors names, for the four norms, the whole-projection q/k norms and the
    biases of these three."""
    model = exported[case]
    buf = model.read_bytes()
    names = [(name, pieces[0][0]) for name, _, kind, pieces in layout(read_header(buf))
             if kind not in ("hparams", "i32", "f64")]
    assert any(n.endswith("post_ffn") for n, _ in names)
    for name, at in names:
        bad = bytearray(buf)
        bad[at:at + 4] = struct.pack("<f", float("nan"))
        damaged = tmp_path / "model.bin"  # beside the tokenizer
        (tmp_path / "tokenizer.model").write_bytes((model.parent / "tokenizer.model").read_bytes())
        damaged.write_bytes(bad)
        proc = subprocess.run([str(REPO / "run"), str(damaged), "--check-tensors", "-n", "0"], capture_output=True,
                              text=True)
        assert proc.returncode == 1 and f"tensor {name} holds NaN at " in proc.stderr, (name, proc.stderr)


@pytest.mark.parametrize("case", ["gemma3-two-bases", "gemma2-softcap", "exaone4-global-nope"])
def test_ring_cache_gives_the_full_cache_bits(case, exported, tmp_path):
    """Sliding layers keep a ring of the last W + a block (+ a block of keys) positions instead of the
    whole context (kernels.h, KVCache.ring); the logits are those of the full cache (--swa-full) bit for
    bit: one pass in blocks of 7, one token at a time, and a prompt then tokens through context shifts
    with f16 keys and q8_0 values (each ring small enough here to wrap many times)."""
    d, ids, _, _ = fixture(case)
    n = len(ids)
    for extra in (["--batch", "7"], ["--growing", "--batch", "1"],
                  ["--ctx", "200", "--shift", "10", "--growing", "--prefill", "100", "--batch", "16",
                   "--cache-type-k", "f16", "--cache-type-v", "q8_0"]):
        ring = ours(exported[case], d / "ids.bin", n, tmp_path, *extra)
        full = ours(exported[case], d / "ids.bin", n, tmp_path, *extra, "--swa-full")
        assert np.array_equal(ring, full), (case, extra, float(np.abs(ring - full).max()))


def test_ring_cache_in_run(exported, tmp_path):
    """./run: the banner says how many positions the rings hold and the cache is smaller; generation past
    the window and --ppl print the same with and without --swa-full."""
    model = exported["gemma3-two-bases"]
    common = ["-z", str(FAMILIES / "gemma3-two-bases" / "tokenizer.model")]
    outs = []
    for full in ([], ["--swa-full"]):
        gen = subprocess.run([str(REPO / "run"), str(model), *common, "-i", "Once upon a time", "-n", "120", "-t", "0",
                              "--ctx", "1024", "-b", "16", *full], capture_output=True, text=True,
                             errors="replace")
        ppl = subprocess.run([str(REPO / "run"), str(model), *common, "--ppl",
                              str(DATA / "text" / "tinystories_heldout_tail.txt"), "--ctx", "256", "-b", "32",
                              "--ppl-windows", "2", *full], capture_output=True, text=True)
        assert gen.returncode == 0 and ppl.returncode == 0, gen.stderr + ppl.stderr
        outs.append((gen.stdout, ppl.stdout, gen.stderr))
    assert outs[0][:2] == outs[1][:2]
    kv = [float(re.search(r"KV cache ([\d.]+) MiB", err)[1]) for _, _, err in outs]
    assert "sliding layers a ring of 96 positions" in outs[0][2] and "a ring of" not in outs[1][2], outs[0][2]
    assert kv[0] < kv[1] / 3, kv


# --- Both config forms: transformers 4.x's and 5.x's ------------------------------------------------
# The checkpoints' config.json files are in the form the family's released checkpoints carry (4.x's
# rope_theta, rope_scaling, rope_local_base_freq, sliding_window_pattern; Ministral 3 already 5.x's). Each
# is rewritten in the other form, as transformers' own conversion does it, and must export to the same bytes.

def to_v5(cfg):
    """A 4.x config.json as transformers 5's save_pretrained writes it: rope_theta and rope_scaling (and
    partial_rotary_factor) folded into rope_parameters (modeling_rope_utils.py, standardize_rope_params);
    for Gemma 3 and OLMo 3 one entry per layer type, rope_scaling going into full_attention's only and the
    sliding layers' base from rope_local_base_freq (Gemma 3) or rope_theta (OLMo 3)
    (configuration_gemma3.py and modular_olmo3.py, convert_rope_params_to_dict); layer_types written out
    (derived from sliding_window_pattern where the 4.x config has none; Gemma 2 alternates)."""
    cfg = dict(cfg)
    mt, n = cfg["model_type"], cfg["num_hidden_layers"]
    one = {"rope_type": "default", **(cfg.pop("rope_scaling", None) or {}), "rope_theta": cfg.pop("rope_theta")}
    if "partial_rotary_factor" in cfg:
        one["partial_rotary_factor"] = cfg.pop("partial_rotary_factor")
    if mt == "gemma3_text":
        local = {"rope_type": "default", "rope_theta": cfg.pop("rope_local_base_freq")}
        pattern = cfg.pop("sliding_window_pattern", 6)
        cfg.setdefault("layer_types", ["sliding_attention" if (l + 1) % pattern else "full_attention" for l in range(n)])
        cfg["rope_parameters"] = {"sliding_attention": local, "full_attention": one}
    elif mt == "olmo3":
        cfg["rope_parameters"] = {"sliding_attention": {"rope_type": "default", "rope_theta": one["rope_theta"]},
                                  "full_attention": one}
    else:
        cfg["rope_parameters"] = one
    if mt == "gemma2":
        cfg.setdefault("layer_types", ["sliding_attention" if (l + 1) % 2 else "full_attention" for l in range(n)])
    if "torch_dtype" in cfg:
        cfg["dtype"] = cfg.pop("torch_dtype")
    cfg["transformers_version"] = "5.0.0"
    return cfg


def to_v4(cfg):
    """A 5.x config.json (one rope_parameters object) in 4.x's form: rope_theta at the top, the rest as
    rope_scaling (what standardize_rope_params reads back into rope_parameters, llama_4_scaling_beta too)."""
    cfg = dict(cfg)
    params = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = params.pop("rope_theta")
    cfg["rope_scaling"] = params if params.get("rope_type", "default") != "default" else None
    cfg["transformers_version"] = "4.57.0"
    return cfg


@pytest.mark.parametrize("case", CASES)
def test_both_config_forms_export_the_same_bytes(case, exported, tmp_path):
    import json
    import shutil
    src = FAMILIES / case
    cfg = json.loads((src / "config.json").read_text())
    v5 = "rope_parameters" in cfg
    other = to_v4(cfg) if v5 else to_v5(cfg)
    # the rewrite is in the other form: no 4.x RoPE key left in a 5.x config, none of 5.x's in a 4.x one
    old_keys = {"rope_scaling", "rope_theta", "rope_local_base_freq", "sliding_window_pattern", "partial_rotary_factor"}
    kept = {"sliding_window_pattern"} if case.startswith("exaone4") else set()  # Exaone4Config keeps it in 5.x
    assert ("rope_parameters" not in other) if v5 else not ((old_keys - kept) & set(other))
    if case.startswith(("gemma3", "olmo3")):
        assert set(other["rope_parameters"]) == {"sliding_attention", "full_attention"}
    d = tmp_path / "hf"
    shutil.copytree(src, d)
    (d / "config.json").write_text(json.dumps(other, indent=2))
    (tmp_path / "out").mkdir()
    proc = run_export(d, tmp_path / "out" / "model.bin")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "model.bin").read_bytes() == exported[case].read_bytes(), \
        f"{case}: the {'4.x' if v5 else '5.x'} form exports to other bytes"


def export_config(tmp_path, case, cfg, name):
    """data/families2/case with config.json cfg, exported (f32) into a folder of its own: the file's bytes."""
    import json
    import shutil
    d = tmp_path / f"hf-{name}"
    shutil.copytree(FAMILIES / case, d)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    (tmp_path / name).mkdir()
    proc = run_export(d, tmp_path / name / "model.bin")
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / name / "model.bin").read_bytes()


@pytest.mark.parametrize("case,edit,local", [
    ("gemma3-two-bases", {"rope_local_base_freq": 25000.0, "rope_theta": 500000.0}, 25000.0),
    ("olmo3-swa-yarn", {"rope_theta": 250000.0}, 250000.0),
])
def test_local_base_in_both_forms(case, edit, local, tmp_path):
    """The local layers' base (not the fixtures' 10000, which is also Gemma 3's class default) from 4.x's
    key and from 5.x's rope_parameters.sliding_attention gives the same file, whose
    rope_freq_base_train_swa is that base; a 5.x sliding entry of its own (OLMo 3 with a base other than
    the full layers') is read from there."""
    import json
    cfg = {**json.loads((FAMILIES / case / "config.json").read_text()), **edit}
    v4, v5 = export_config(tmp_path, case, cfg, "v4"), export_config(tmp_path, case, to_v5(cfg), "v5")
    assert v4 == v5
    assert read_header(v4)["hparams"]["rope_freq_base_train_swa"] == local
    other = to_v5(cfg)
    other["rope_parameters"]["sliding_attention"]["rope_theta"] = 12345.0
    assert read_header(export_config(tmp_path, case, other, "own"))["hparams"]["rope_freq_base_train_swa"] == 12345.0


def test_fuzz_seeds_carry_every_hparam():
    """fuzz/corpus/model's version 4 seeds (fuzz/make_corpus.py, version4_seeds; test_hostile.py runs
    them) hold every hparam the loader reads with a value of its own, the whole-projection q/k norm and
    the local RoPE's layer kind: a fuzzer mutating them reaches each one's checks."""
    seen, qk_all, local = set(), False, False
    seeds = sorted((REPO / "fuzz" / "corpus" / "model").glob("ok-v4-*.bin"))
    for seed in seeds:
        buf = seed.read_bytes()
        h = read_header(buf)
        assert h["version"] == 4, seed
        seen |= {k for k, v in h["hparams"].items() if v != HPARAMS[k]}
        qk_all |= h["qk_norm"] == 2
        (off, n), = {name: pieces for name, _, _, pieces in layout(h)}["layer_kind"]
        local |= any(k & LAYER_ROPE_SWA for k in struct.unpack_from(f"<{n // 4}i", buf, off))
    print(f"{len(seeds)} seeds: {sorted(seen)}")
    assert seen == set(HPARAMS) and qk_all and local, sorted(set(HPARAMS) - seen)
