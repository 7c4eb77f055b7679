#!/usr/bin/python3
"""Vision tower: engine (vision_encode_tool) against the float64 NumPy oracle (vision_ref.py).

For each case: writes a random Qwen3-VL checkpoint with NumPy (config.json + model.safetensors
holding the model.visual.* tensors; weights scaled so activations stay O(1) through every block),
random pixel_values for the case's grids, runs the tool with --diagnostics and compares every
output tensor with the oracle. Error measure per tensor: max|engine - oracle| / max|oracle|; a
case passes when every tensor is within the precision's tolerance (f32: 5e-5).

    vision_cases.py --tool build/.../vision_encode_tool --work DIR [--precision f32|bf16|int8]
                    [--reference] [--filter SUBSTR] [-v]
Prints PASS/FAIL per case, the worst relative error per case and overall; exit status 1 on failure.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import vision_ref  # noqa: E402

# bf16 and int8: sanity bounds for random 1-4 block towers (measured worst: 0.033 and 0.146).
TOL = {"f32": 5e-5, "bf16": 5e-2, "int8": 0.25}

# name, vision sizes, grids, stored dtype. Grids cover: several images per call, non-square
# grids, a t=2 and a t=3 video-like item, image grids smaller and larger than the position grid,
# head_dim 8/16/24, BF16-stored weights, a single merge window.
CASES = [
    ("two_images_pos_smaller", dict(depth=2, hidden=32, heads=2, inter=64, side=4, out=24, ds=[0, 1]),
     [(1, 4, 4), (1, 6, 8)], "F32"),
    ("nonsquare_video_pos_larger", dict(depth=3, hidden=48, heads=3, inter=80, side=8, out=40, ds=[1]),
     [(1, 4, 10), (2, 6, 4)], "F32"),
    ("hd8_many_items", dict(depth=2, hidden=32, heads=4, inter=48, side=5, out=16, ds=[0]),
     [(1, 2, 2), (1, 2, 8), (3, 4, 2), (1, 10, 6)], "F32"),
    ("bf16_weights_hd24", dict(depth=4, hidden=48, heads=2, inter=96, side=6, out=32, ds=[1, 3]),
     [(1, 8, 12), (1, 6, 6)], "BF16"),
    ("single_window", dict(depth=1, hidden=16, heads=1, inter=32, side=3, out=8, ds=[0]),
     [(1, 2, 2)], "F32"),
]


def write_model(path, vs, dtype, seed):
    rng = np.random.default_rng(seed)
    Dv, Iv, out, m = vs["hidden"], vs["inter"], vs["out"], 2
    patch, tp, C = 4, 2, 3
    ds = vs["ds"]
    vision = {
        "model_type": "qwen3_vl", "depth": vs["depth"], "hidden_size": Dv, "intermediate_size": Iv,
        "num_heads": vs["heads"], "in_channels": C, "patch_size": patch, "temporal_patch_size": tp,
        "spatial_merge_size": m, "num_position_embeddings": vs["side"] ** 2, "out_hidden_size": out,
        "hidden_act": "gelu_pytorch_tanh", "deepstack_visual_indexes": ds,
    }
    text = {
        "model_type": "qwen3_vl_text", "hidden_size": out, "intermediate_size": 2 * out,
        "num_hidden_layers": max(1, len(ds)), "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 64, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 5000000.0,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
    }
    cfg = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
           "text_config": text, "vision_config": vision}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)

    t = {}

    def lin(name, o, i, scale=1.0):
        t[name + ".weight"] = rng.normal(0, scale / np.sqrt(i), (o, i))
        t[name + ".bias"] = rng.normal(0, 0.1, (o,))

    def norm(name, n):
        t[name + ".weight"] = 1 + rng.normal(0, 0.1, (n,))
        t[name + ".bias"] = rng.normal(0, 0.1, (n,))

    pd = C * tp * patch * patch
    t["patch_embed.proj.weight"] = rng.normal(0, 1 / np.sqrt(pd), (Dv, C, tp, patch, patch))
    t["patch_embed.proj.bias"] = rng.normal(0, 0.1, (Dv,))
    t["pos_embed.weight"] = rng.normal(0, 0.5, (vs["side"] ** 2, Dv))
    for j in range(vs["depth"]):
        b = f"blocks.{j}."
        norm(b + "norm1", Dv)
        norm(b + "norm2", Dv)
        lin(b + "attn.qkv", 3 * Dv, Dv, 2.0)
        lin(b + "attn.proj", Dv, Dv)
        lin(b + "mlp.linear_fc1", Iv, Dv)
        lin(b + "mlp.linear_fc2", Dv, Iv)
    Md = Dv * m * m

    def merger(p, n):
        norm(p + "norm", n)
        lin(p + "linear_fc1", Md, Md)
        lin(p + "linear_fc2", out, Md)

    merger("merger.", Dv)
    for k in range(len(ds)):
        merger(f"deepstack_merger_list.{k}.", Md)
    tensors = {"model.visual." + k: v.astype(np.float32) for k, v in t.items()}
    st.save_checkpoint(tensors, path, dtypes={k: dtype for k in tensors})
    return pd


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    den = np.abs(b).max()
    num = np.abs(a - b).max()
    return float(num / den) if den > 0 else float(num)


def run_case(args, name, vs, grids, dtype, seed):
    d = os.path.join(args.work, name + ("" if args.precision == "f32" else "_" + args.precision) +
                     ("_reference" if args.reference else ""))
    model = os.path.join(d, "model")
    pd = write_model(model, vs, dtype, seed)
    rng = np.random.default_rng(seed + 1000)
    Np = sum(t * h * w for t, h, w in grids)
    pv = rng.uniform(-1, 1, (Np, pd)).astype(np.float32)
    gt = np.asarray(grids, dtype=np.int32)
    inp = os.path.join(d, "in.safetensors")
    st.save_file({"pixel_values": pv, "image_grid_thw": gt}, inp)
    out = os.path.join(d, "engine.safetensors")
    cmd = [args.tool, "--model", model, "--pixel-values", inp, "--output", out, "--diagnostics",
           "--precision", args.precision, "--threads", "2"] + (["--reference"] if args.reference else [])
    with open(os.path.join(d, "cmd.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return False, 0.0, f"tool exit {r.returncode}: {r.stderr.strip()}"
    eng = st.load_file(out)
    ref = vision_ref.VisionTower(model).run(pv.astype(np.float64), gt)
    ref["pixel_values"] = pv
    ref["image_grid_thw"] = gt
    tol = TOL[args.precision]
    worst, lines, ok = 0.0, [], True
    for k in sorted(set(ref) | set(eng)):
        if k not in eng or k not in ref:
            ok = False
            lines.append(f"{k}: missing in {'engine' if k not in eng else 'oracle'}")
            continue
        e = rel_err(eng[k], ref[k])
        worst = max(worst, e)
        bad = e > tol
        ok &= not bad
        lines.append(f"{k} {list(np.shape(ref[k]))}: rel err {e:.3g}{'  > tol' if bad else ''}")
    with open(os.path.join(d, "compare.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.verbose:
        print("\n".join("    " + x for x in lines))
    return ok, worst, "" if ok else "; ".join(x for x in lines if "tol" in x or "missing" in x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--precision", default="f32", choices=sorted(TOL))
    ap.add_argument("--reference", action="store_true", help="run the engine's scalar reference path")
    ap.add_argument("--filter", default="")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    passed = failed = 0
    overall = 0.0
    for i, (name, vs, grids, dtype) in enumerate(CASES):
        if args.filter not in name:
            continue
        ok, worst, why = run_case(args, name, vs, grids, dtype, 100 + i)
        overall = max(overall, worst)
        print(f"{'PASS' if ok else 'FAIL'} {name}: worst relative error {worst:.3g}"
              f" (tolerance {TOL[args.precision]:g}){'' if ok else ': ' + why}")
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed; worst relative error {overall:.3g} ({args.precision})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
