# transformers reading data/families2's config.json files as the Hub writes them (4.x keys): its logits at
# the stored rows, one float32 file per case (data/families2-hf/hub-form/CASE.bin), and their distance from
# the stored reference logits. Needs transformers 5.x, torch, numpy (not installed here; run it where they are).
# usage: python3 scripts/hub_form_logits.py data/families2 OUTDIR
import json, os, sys, numpy as np, torch, transformers
from transformers import AutoModelForCausalLM
root, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
print("transformers", transformers.__version__, flush=True)
for case in sorted(os.listdir(root)):
    d = os.path.join(root, case)
    if not os.path.isdir(d): continue
    try:
        m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
        ids = np.fromfile(f"{d}/ids.bin", np.int32); rows = np.fromfile(f"{d}/rows.bin", np.int32)
        ref = np.fromfile(f"{d}/logits.bin", np.float32).reshape(len(rows), -1)
        with torch.no_grad():
            lg = m(torch.tensor(ids[None].astype(np.int64))).logits[0].float().numpy()[rows]
        lg.astype(np.float32).tofile(f"{out}/{case}.bin")
        rp = getattr(m.config, "rope_parameters", None)
        print(f"{case}: max|tf - stored| / max|stored| = {np.abs(lg - ref).max() / np.abs(ref).max():.2e}; "
              f"rope_parameters {json.dumps(rp, default=str)[:400]}", flush=True)
    except Exception as ex:
        print(f"{case}: ERROR {type(ex).__name__}: {str(ex)[:400]}", flush=True)
