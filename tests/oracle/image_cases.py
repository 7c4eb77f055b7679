#!/usr/bin/python3
"""Image + text prompts end to end: `vlstack forward --image … --generate N` against the
independent references chained together, all written without the engine's C++:

  PIL (transformers' load_image: exif_transpose, convert("RGB"))
  -> preprocess_ref.preprocess (smart_resize with Python's round, torchvision's bicubic resize)
  -> vision_ref.VisionTower (float64 tower, main merger, DeepStack mergers)
  -> pad expansion (t·h·w / merge² pads per image) and qwen3_ref.get_rope_index
  -> batch_ref.greedy (float64 decoder with DeepStack after layers 0..K-1).

Per case: expanded input_ids, image_grid_thw, position_ids and rope_delta must be exact; the
prefill logits within LOGIT_RTOL of the reference (max|Δ| / max|ref|: f32 engine, float64
reference; the tower and decoder each stay near 1e-6 on these sizes); the generated tokens equal
(a reference step whose top-2 logit gap is below 1e-3·max(1, |top|) ends the comparison there:
TIE). Models are untied with f32 weights so an image steers the greedy chain.

    image_cases.py --vlstack PATH --work DIR [--filter SUBSTR] [-v]
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from PIL import Image, ImageOps  # noqa: E402

import batch_ref  # noqa: E402
import preprocess_ref  # noqa: E402
import qwen3_ref  # noqa: E402
import st  # noqa: E402
import vision_ref  # noqa: E402

LOGIT_RTOL = 5e-5
TIE_REL = 1e-3
GEN = 8

BASE = ["--hidden", "64", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
        "--intermediate", "128", "--untied", "--dtype", "f32"]

# name, make-test-model options, images (kind, w, h, seed, format), prompt layout.
CASES = [
    ("one_png_deepstack3", BASE + ["--deepstack", "3", "--seed", "11"],
     [("gradient", 100, 60, 1, "png")], "text_image_text"),
    ("two_images_jpeg_and_grey", BASE + ["--deepstack", "2", "--seed", "12", "--vision-depth", "3",
                                         "--vision-deepstack-indexes", "0,2"],
     [("noise", 64, 96, 2, "jpg"), ("grey_alpha", 130, 40, 3, "png")], "two_images"),
    ("upscaled_small_image", BASE + ["--deepstack", "1", "--seed", "13", "--vision-hidden", "48",
                                     "--vision-heads", "3", "--vision-pos-grid", "6"],
     [("checker", 20, 30, 4, "png")], "image_first"),
    ("downscaled_large_image_no_deepstack", BASE + ["--deepstack", "0", "--seed", "14",
                                                    "--max-pixels", "16384"],
     [("gradient", 400, 300, 5, "png")], "text_image_text"),
    ("exif_rotated_jpeg", BASE + ["--deepstack", "2", "--seed", "15"],
     [("exif6", 96, 64, 6, "jpg")], "text_image_text"),
]


def make_image(path, kind, w, h, seed, fmt):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    if kind == "noise":
        arr = rng.integers(0, 256, size=(h, w, 3))
    elif kind == "checker":
        arr = np.stack([((xx // 3 + yy // 3) % 2) * 255, xx * 8 % 256, yy * 8 % 256], -1)
    else:
        arr = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx * yy) % 256], -1)
        arr = arr + rng.integers(0, 30, size=(h, w, 3))
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    if kind == "grey_alpha":
        img = img.convert("LA")
    if kind == "exif6":
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90° clockwise on display
        img.save(path, "JPEG", quality=90, exif=exif.tobytes())
        return
    img.save(path, "JPEG" if fmt == "jpg" else "PNG", **({"quality": 90} if fmt == "jpg" else {}))


def load_image(path):
    """transformers.image_utils.load_image for a local file."""
    img = Image.open(path)
    img = ImageOps.exif_transpose(img)
    return np.asarray(img.convert("RGB"))


def prompt_ids(layout, cfg, n_images):
    vs, pad, ve = cfg["vision_start_token_id"], cfg["image_token_id"], cfg["vision_end_token_id"]
    img = [vs, pad, ve]
    if layout == "image_first":
        return img + [5, 6, 7, 8]
    if layout == "two_images":
        return [1, 2] + img + [3] + img + [4, 5, 6]
    return [1, 2, 3] + img * n_images + [4, 5, 6, 7]


def reference(model_dir, images, ids):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    pcfg = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    pv, grids, _ = preprocess_ref.preprocess([load_image(p) for p in images], pcfg)
    vis = vision_ref.VisionTower(model_dir).run(np.asarray(pv, np.float64), grids)
    m = cfg["vision_config"]["spatial_merge_size"]
    pad = cfg["image_token_id"]
    expanded, k = [], 0
    for t in ids:
        if t == pad:
            gt, gh, gw = grids[k]
            expanded += [pad] * (gt * gh * gw // (m * m))
            k += 1
        else:
            expanded.append(t)
    expanded = np.array(expanded, np.int32)
    inp = {"input_ids": expanded, "visual_embeds": vis["visual_embeds"],
           "image_grid_thw": np.array(grids, np.int32)}
    K = vis["deepstack_features"].shape[0]
    if K:
        inp["deepstack_positions"] = np.array([i for i, t in enumerate(expanded) if t == pad], np.int32)
        inp["deepstack_features"] = vis["deepstack_features"]
        inp["deepstack_layers"] = np.arange(K, dtype=np.int32)
    model = qwen3_ref.Model.load(model_dir)
    c = model.cfg
    pos, delta = qwen3_ref.get_rope_index(
        expanded.astype(np.int64), inp["image_grid_thw"], None, image_token_id=c.image_token_id,
        video_token_id=c.video_token_id, vision_start_token_id=c.vision_start_token_id,
        spatial_merge_size=c.spatial_merge_size)
    logits, _, _, _ = batch_ref.prefill(model, inp)
    gen = batch_ref.greedy(model, inp, GEN, batch_ref.eos_ids(model_dir))
    return dict(input_ids=expanded, grids=np.array(grids, np.int32), positions=pos, delta=delta,
                logits=logits, gen=gen)


def run_case(vls, work, name, opts, images, layout, verbose):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    model = os.path.join(d, "model")
    subprocess.run([vls, "make-test-model", "--out", model] + opts, check=True, capture_output=True)
    cfg = json.load(open(os.path.join(model, "config.json")))
    paths = []
    for i, (kind, w, h, seed, fmt) in enumerate(images):
        p = os.path.join(d, f"img{i}.{fmt}")
        make_image(p, kind, w, h, seed, fmt)
        paths.append(p)
    ids = prompt_ids(layout, cfg, len(images))
    inp = os.path.join(d, "in.safetensors")
    st.save_file({"input_ids": np.array(ids, np.int32)}, inp)
    out = os.path.join(d, "engine.safetensors")
    cmd = [vls, "forward", "--model", model, "--input", inp, "--output", out, "--generate", str(GEN)]
    for p in paths:
        cmd += ["--image", p]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return f"engine exited {p.returncode}: {p.stderr.strip()[-400:]}"
    e = st.load_file(out)
    r = reference(model, paths, ids)
    if e["input_ids"].tolist() != r["input_ids"].tolist():
        return "input_ids differ"
    if e["image_grid_thw"].tolist() != r["grids"].tolist():
        return f"image_grid_thw {e['image_grid_thw'].tolist()} != {r['grids'].tolist()}"
    if e["position_ids"].tolist() != np.asarray(r["positions"]).tolist():
        return "position_ids differ"
    if int(e["rope_delta"][0]) != int(r["delta"]):
        return f"rope_delta {int(e['rope_delta'][0])} != {r['delta']}"
    el = np.asarray(e["logits"], np.float64).reshape(-1)
    rl = np.asarray(r["logits"], np.float64).reshape(-1)
    rel = float(np.abs(el - rl).max() / max(np.abs(rl).max(), 1e-30))
    if verbose:
        print(f"  {name}: grids {r['grids'].tolist()} S={len(r['input_ids'])} "
              f"delta={r['delta']} logits rel err {rel:.2e}")
    if rel > LOGIT_RTOL:
        return f"logits rel err {rel:.2e} > {LOGIT_RTOL}"
    eg = e["generated_tokens"].tolist()
    g = r["gen"]
    for j, t in enumerate(g["tokens"]):
        if g["gaps"][j] < TIE_REL * max(1.0, g["tops"][j]):
            return "TIE" if eg[:j] == g["tokens"][:j] else f"tokens differ before a tie: {eg} vs {g['tokens']}"
        if j >= len(eg) or eg[j] != t:
            return f"generated {eg} != reference {g['tokens']}"
    if len(eg) != len(g["tokens"]):
        return f"generated {eg} != reference {g['tokens']}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--filter", default="")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    passed = failed = 0
    for name, opts, images, layout in CASES:
        if a.filter not in name:
            continue
        try:
            err = run_case(a.vlstack, a.work, name, opts, images, layout, a.v)
        except Exception as ex:  # a reference refusal or a broken output file
            err = f"{type(ex).__name__}: {ex}"
        if err == "TIE":
            print(f"TIE {name}")
        elif err:
            print(f"FAIL {name}: {err}")
            failed += 1
        else:
            print(f"PASS {name}")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
