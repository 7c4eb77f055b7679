#!/usr/bin/python3
"""Independent reference of Qwen3-VL image preprocessing (spec §D.3, §D.4).

Written from the spec and transformers' Python (Qwen2VLImageProcessorFast, v4.57 .. v5:
smart_resize in image_processing_qwen2_vl.py, BaseImageProcessorFast.rescale_and_normalize),
never from vlstack's C++. Resizing is torchvision's own
F.resize(uint8 tensor, [h, w], InterpolationMode.BICUBIC, antialias=True), normalisation the
fast processor's fused torch ops, patching numpy's reshape/transpose with the spec's permute.

Library use: ``preprocess(images, cfg)`` -> (pixel_values, grids, resized images).
CLI: ``preprocess_ref.py --make-cases DIR`` writes the oracle cases (deterministic synthetic
images and the expected outputs) for the C++ checker preprocess_oracle_test:
  DIR/cases.json          [{"name", "config": {...preprocessor_config.json...}, "file",
                            "images": n, "error": null | "substring the error must contain"}]
  DIR/NAME.safetensors    image_K I32 [H, W, 3]; resized_K I32 [h, w, 3];
                          pixel_values F32 [rows, cols]; grid_thw I32 [n, 3]
Requirements: /usr/bin/python3 with numpy, torch and torchvision (Debian's python3-torch*).
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision.transforms.functional as TF  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

import st  # noqa: E402

QWEN3_VL = {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
            "image_processor_type": "Qwen2VLImageProcessorFast"}


class RefError(ValueError):
    pass


def read_config(cfg):
    """The effective settings of a preprocessor_config.json dict, as the fast processor's
    __init__ resolves them: min_pixels / max_pixels override size's entries."""
    size = dict(cfg.get("size") or {"shortest_edge": 65536, "longest_edge": 16777216})
    if cfg.get("min_pixels") is not None:
        size["shortest_edge"] = cfg["min_pixels"]
    if cfg.get("max_pixels") is not None:
        size["longest_edge"] = cfg["max_pixels"]
    if "shortest_edge" not in size or "longest_edge" not in size:
        raise RefError("size must contain 'shortest_edge' and 'longest_edge' keys.")
    get = lambda k, d: d if cfg.get(k) is None else cfg[k]  # noqa: E731
    return {
        "min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"],
        "patch_size": get("patch_size", 16), "temporal_patch_size": get("temporal_patch_size", 2),
        "merge_size": get("merge_size", 2), "image_mean": get("image_mean", [0.5, 0.5, 0.5]),
        "image_std": get("image_std", [0.5, 0.5, 0.5]),
        "rescale_factor": get("rescale_factor", 1 / 255), "do_resize": get("do_resize", True),
        "do_rescale": get("do_rescale", True), "do_normalize": get("do_normalize", True),
    }


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers' smart_resize (image_processing_qwen2_vl.py), Python's round included."""
    if max(height, width) / min(height, width) > 200:
        raise RefError(f"absolute aspect ratio must be smaller than 200, got "
                       f"{max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize(image_hwc, h, w):
    """torchvision bicubic antialiased resize of a uint8 [H, W, 3] array -> uint8 [h, w, 3]."""
    t = torch.from_numpy(np.ascontiguousarray(image_hwc)).permute(2, 0, 1)  # [3, H, W]
    r = TF.resize(t, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
    return r.permute(1, 2, 0).contiguous().numpy()


def rescale_and_normalize(image_chw_u8, c):
    """BaseImageProcessorFast.rescale_and_normalize on a uint8 [3, H, W] tensor."""
    x = image_chw_u8
    if c["do_rescale"] and c["do_normalize"]:
        # _fuse_mean_std_and_rescale_factor: float32 tensors times 1 / rescale_factor.
        mean = torch.tensor(c["image_mean"]) * (1.0 / c["rescale_factor"])
        std = torch.tensor(c["image_std"]) * (1.0 / c["rescale_factor"])
        return TF.normalize(x.to(dtype=torch.float32), mean.tolist(), std.tolist())
    if c["do_normalize"]:
        return TF.normalize(x.to(dtype=torch.float32), c["image_mean"], c["image_std"])
    if c["do_rescale"]:
        return (x * c["rescale_factor"]).to(torch.float32)
    return x.to(torch.float32)


def patchify(frames, c):
    """frames float32 [T, 3, H, W] -> [T'·h·w, 3·tp·P·P] with spec §D.4's view/permute."""
    tp, p, m = c["temporal_patch_size"], c["patch_size"], c["merge_size"]
    if frames.shape[0] % tp:
        frames = np.concatenate([frames] + [frames[-1:]] * (tp - frames.shape[0] % tp), axis=0)
    t_, ch, hh, ww = frames.shape
    gt, gh, gw = t_ // tp, hh // p, ww // p
    x = frames.reshape(gt, tp, ch, gh // m, m, p, gw // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gt * gh * gw, ch * tp * p * p), (gt, gh, gw)


def preprocess(images, cfg):
    """images: list of uint8 [H, W, 3]; cfg: preprocessor_config dict."""
    c = read_config(cfg)
    factor = c["patch_size"] * c["merge_size"]
    rows, grids, resized = [], [], []
    for img in images:
        h, w = img.shape[:2]
        if c["do_resize"]:
            rh, rw = smart_resize(h, w, factor, c["min_pixels"], c["max_pixels"])
            img = resize(img, rh, rw)
        elif h % factor or w % factor:
            raise RefError("sides must be multiples of the factor without do_resize")
        resized.append(img)
        x = rescale_and_normalize(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1), c)
        pv, grid = patchify(x.numpy()[None], c)  # one frame, repeated to tp
        rows.append(pv)
        grids.append(grid)
    return np.concatenate(rows, axis=0).astype(np.float32), grids, resized


def synth(kind, h, w, seed):
    """Deterministic synthetic uint8 [h, w, 3] images."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    if kind == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if kind == "gradient":
        return np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                         (x + 2 * y) % 256], -1).astype(np.uint8)
    if kind == "checker":  # hard edges: ringing, clamping at 0 and 255
        v = (((x // 3) + (y // 3)) % 2) * 255
        return np.stack([v, 255 - v, (x * 7) % 256], -1).astype(np.uint8)
    if kind == "mixed":  # smooth areas plus noise
        base = synth("gradient", h, w, seed).astype(np.int32)
        return np.clip(base + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.uint8)
    raise ValueError(kind)


def small(min_px, max_px, **extra):
    return dict(QWEN3_VL, size={"shortest_edge": min_px, "longest_edge": max_px}, **extra)


QWEN2_VL = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
            "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "image_processor_type": "Qwen2VLImageProcessor"}

# name -> (config, [(kind, H, W)], expected error substring or None)
CASES = {
    "spec_640x480": (QWEN3_VL, [("gradient", 480, 640)], None),          # unchanged, 30x40
    "half_976": (small(1024, 1 << 20), [("noise", 96, 976)], None),     # 30.5 -> 30: 960
    "half_80x1008": (small(1024, 1 << 20), [("mixed", 80, 1008)], None),  # 2.5 -> 2, 31.5 -> 32
    "half_48": (small(1024, 1 << 20), [("checker", 48, 144)], None),    # 1.5 -> 2, 4.5 -> 4
    "below_min_noise": (QWEN3_VL, [("noise", 40, 50)], None),           # upscaled to 65536+
    "below_min_gradient": (small(16384, 1 << 20), [("gradient", 50, 70)], None),
    "above_max_noise": (small(1024, 16384), [("noise", 300, 400)], None),
    "above_max_checker": (small(1024, 20000), [("checker", 333, 250)], None),
    "above_max_4x": (small(1024, 8192), [("mixed", 500, 375)], None),
    "aspect_200": (small(1024, 1 << 20), [("gradient", 2, 400)], None),
    "aspect_200_tall": (small(4096, 1 << 20), [("noise", 600, 3)], None),
    "aspect_201": (small(1024, 1 << 20), [("noise", 1, 201)], "aspect ratio"),
    "aspect_200_3": (small(1024, 1 << 20), [("noise", 3, 601)], "aspect ratio"),
    "tiny_1x1": (small(1024, 1 << 20), [("noise", 1, 1)], None),
    "tiny_1x200": (small(4096, 1 << 20), [("gradient", 1, 200)], None),
    "tiny_5x7_default": (QWEN3_VL, [("checker", 5, 7)], None),
    "multiple_of_32": (small(1024, 1 << 20), [("noise", 64, 96)], None),   # untouched
    "up_and_down": (small(1024, 1 << 20), [("mixed", 100, 37)], None),     # 96x32: h down, w up
    "down_w_up_h": (small(1024, 1 << 20), [("noise", 17, 100)], None),
    "qwen2_vl_config": (QWEN2_VL, [("mixed", 150, 200)], None),
    "qwen2_vl_tiny": (QWEN2_VL, [("noise", 20, 30)], None),
    "no_resize": (dict(QWEN3_VL, do_resize=False), [("noise", 64, 128)], None),
    "no_resize_bad": (dict(QWEN3_VL, do_resize=False), [("noise", 64, 100)], "multiples"),
    "rescale_only": (small(1024, 1 << 20, do_normalize=False), [("noise", 64, 70)], None),
    "normalize_only": (small(1024, 1 << 20, do_rescale=False), [("noise", 40, 64)], None),
    "patch8_merge1_tp1": (small(256, 4096, patch_size=8, merge_size=1, temporal_patch_size=1),
                          [("mixed", 37, 45)], None),
    "tp3": (small(1024, 1 << 20, temporal_patch_size=3), [("noise", 32, 64)], None),
    "batch_three": (small(2048, 65536), [("noise", 100, 80), ("gradient", 64, 64),
                                         ("checker", 30, 250)], None),
    "min_pixels_key_overrides_size": (dict(QWEN3_VL, min_pixels=1024, max_pixels=4096),
                                      [("mixed", 90, 90)], None),
    "photo_like_4000x3000_scaled": (small(65536, 1 << 18), [("mixed", 750, 1000)], None),
}


def make_cases(out_dir, only=None):
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    for i, (name, (cfg, specs, err)) in enumerate(sorted(CASES.items())):
        if only and only not in name:
            continue
        images = [synth(kind, h, w, seed=1000 * i + k) for k, (kind, h, w) in enumerate(specs)]
        tensors = {f"image_{k}": im.astype(np.int32) for k, im in enumerate(images)}
        entry = {"name": name, "config": cfg, "file": name + ".safetensors",
                 "images": len(images), "error": err}
        try:
            pv, grids, resized = preprocess(images, cfg)
            if err is not None:
                raise SystemExit(f"{name}: the reference accepted a case that must fail ({err})")
            tensors["pixel_values"] = pv
            tensors["grid_thw"] = np.array(grids, dtype=np.int32)
            for k, r in enumerate(resized):
                tensors[f"resized_{k}"] = r.astype(np.int32)
        except RefError as e:
            if err is None:
                raise SystemExit(f"{name}: the reference refused a valid case: {e}")
        st.save_file(tensors, os.path.join(out_dir, entry["file"]))
        manifest.append(entry)
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def selftest():
    # spec §D.3: 640x480 -> unchanged, grid (1, 30, 40), 300 tokens; 976 -> 960.
    assert smart_resize(480, 640, 32, 65536, 16777216) == (480, 640)
    assert smart_resize(480, 976, 32, 65536, 16777216) == (480, 960)
    img = synth("gradient", 64, 32, 0)
    pv, grids, _ = preprocess([img], small(1024, 1 << 20))
    assert grids == [(1, 4, 2)] and pv.shape == (8, 1536)
    # Row 1 = patch (0, 1) of the first window: its first value is pixel (0, 16) of channel 0.
    x = (img.astype(np.float32) - 127.5) / 127.5
    assert pv[1, 0] == x[0, 16, 0] and pv[2, 0] == x[16, 0, 0] and pv[4, 0] == x[32, 0, 0]
    assert pv[3, 512 + 16 * 5 + 7] == x[16 + 5, 16 + 7, 1]          # c 1, t 0, py 5, px 7
    assert np.array_equal(pv[:, 256:512], pv[:, 0:256])             # t 1 repeats t 0
    print("preprocess_ref selftest ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-cases", metavar="DIR")
    ap.add_argument("--filter", default=None)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest or not a.make_cases:
        selftest()
    if a.make_cases:
        m = make_cases(a.make_cases, a.filter)
        print(f"wrote {len(m)} cases to {a.make_cases}")


if __name__ == "__main__":
    main()
