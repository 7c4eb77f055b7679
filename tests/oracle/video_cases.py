#!/usr/bin/python3
"""Video (+ image) prompts end to end: `vlstack vision --video …` and `vlstack forward --video …
--generate N` against the independent references chained together, none of them written from the
engine's C++:

  ffmpeg tool (clips made here: testsrc2 / noise, libx264 yuv420p MP4, VP9 WebM, a display
  rotation) -> video_ref (PyAV decode + rotation, sample_frames, video smart_resize, torchvision
  bicubic, fused normalise, patchify, timestamps)   [images: image_cases.load_image + preprocess_ref]
  -> vision_ref.VisionTower (float64)
  -> video_ref.expand_prompt (per temporal group "<t seconds>" + <vs> + pads + <ve>)
  -> qwen3_ref.get_rope_index (each temporal group its own [1,h,w] item)
  -> batch_ref.greedy (float64 decoder, DeepStack on every image/video pad in sequence order).

`vision` per case: video_grid_thw and video_frame_indices exact; video_timestamps within
1e-6·max(1,|t|) of the float64 value (f32 storage); pixel_values within one 8-bit level after
normalising (1/127.5 + 1e-6: the engine's bicubic resize and float rounding against torchvision's;
YUV->RGB must be PyAV's exactly, a different matrix or chroma filter is several levels off);
visual_embeds / deepstack_features of the float64 tower run on the engine's own pixel_values within
5e-5 (max|Δ|/max|ref|, vision_cases.py's f32 tolerance).
`forward` per case: the expanded input_ids exact except each timestamp's tokens, which must decode
(tokenizer.json vocab, byte-level) to exactly "<{t:.1f} seconds>" and equal the reference BPE of
that text; video_grid_thw / image_grid_thw, position_ids and rope_delta exact; prefill logits within
LOGIT_RTOL of the reference (image_cases.py's; the reference uses its own pixel values); the
generated tokens equal, a reference step with top-2 gap below 1e-3·max(1,|top|) ending the
comparison there (TIE, image_cases.py's rule).

    video_cases.py --vlstack PATH --work DIR [--filter SUBSTR] [-v] [--list]
    video_cases.py --reference-only --work DIR [--vlstack PATH]   (no engine video commands: only
        the references on the clips; with --vlstack, make-test-model models and the full chain)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import batch_ref  # noqa: E402
import image_cases  # noqa: E402
import preprocess_ref  # noqa: E402
import qwen3_ref  # noqa: E402
import st  # noqa: E402
import video_ref  # noqa: E402
import vision_ref  # noqa: E402

LOGIT_RTOL = image_cases.LOGIT_RTOL
TIE_REL = image_cases.TIE_REL
GEN = 6
LEVEL = 1.0 / 127.5          # one 8-bit level after (x - 127.5) / 127.5
PIXEL_TOL = LEVEL + 1e-6
TS_TOL = 1e-6
TOWER_RTOL = 5e-5

BASE = ["--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
        "--intermediate", "128", "--untied", "--dtype", "f32", "--vocab", "151936"]
MODEL_A = BASE + ["--layers", "2", "--deepstack", "2", "--seed", "31"]
MODEL_B = BASE + ["--layers", "3", "--deepstack", "1", "--seed", "32", "--vision-hidden", "48",
                  "--vision-heads", "3", "--vision-pos-grid", "6", "--vision-depth", "2"]
MODEL_C = BASE + ["--layers", "2", "--deepstack", "0", "--seed", "33"]


def clip(src, w, h, rate, frames, fmt="mp4", rotate=None):
    return {"src": src, "w": w, "h": h, "rate": rate, "frames": frames, "fmt": fmt,
            "rotate": rotate}


# name, model, videos, images, prompt layout, engine flags (fps, max_frames), commands.
CASES = [
    # 20 frames at 10 fps -> 4 sampled [0,6,13,19], upscaled to the 131072-pixel clip minimum.
    ("mp4_96x64_10fps", MODEL_A, [clip("testsrc2", 96, 64, 10, 20)], [], "text_video_text",
     {}, ("vision", "forward")),
    # VP9 WebM (no frame count in the stream); 65 frames at 25 fps -> 5 sampled (odd: the last
    # frame repeated), 3 temporal groups.
    ("webm_vp9_odd_5_frames", MODEL_A, [clip("testsrc2", 128, 72, 25, 65, "webm")], [],
     "video_first", {}, ("vision", "forward")),
    # Display rotation 90 (frames 112x64 stored, 64x112 shown); --fps 3 -> 6 frames.
    ("rotated_90_fps3", MODEL_B, [clip("testsrc2", 112, 64, 8, 16, rotate=90)], [],
     "text_video_text", {"fps": 3}, ("vision", "forward")),
    # rotate=270 on VP9 noise copied from WebM into MP4: WebM's millisecond timestamps leave an
    # average_rate of 6.003, not 6, so the timestamps are not round numbers.
    ("rotated_270_noise_vp9_vision", MODEL_C, [clip("noise", 48, 80, 6, 12, "webm", rotate=270)],
     [], "text_video_text", {}, ("vision",)),
    # A side below 32: first scaled by max(32/h, 32/w) with int(), 12x100 -> 32x266 -> 64x544.
    ("tiny_side_100x12", MODEL_C, [clip("testsrc2", 100, 12, 4, 8)], [], "text_video_text", {},
     ("vision", "forward")),
    # 120 frames at 30 fps with --max-frames 6 (fps 2 would give 8).
    ("max_frames_6_of_120", MODEL_A, [clip("noise", 80, 80, 30, 120)], [], "text_video_text",
     {"max_frames": 6}, ("vision", "forward")),
    # --num-frames 5 of 35: linspace(0, 34, 5) = 0, 8.5, 17, 25.5, 34 -> 0, 8, 17, 26, 34 (half to
    # even; half up would give 9); odd, so the last frame is repeated.
    ("num_frames_5_half_to_even", MODEL_C, [clip("testsrc2", 80, 48, 10, 35)], [],
     "text_video_text", {"num_frames": 5}, ("vision", "forward")),
    # NTSC rate 30000/1001 with --fps 4: 45 frames -> int(6.006) = 6; timestamps idx/29.97.
    ("ntsc_rate_fps4", MODEL_B, [clip("testsrc2", 64, 48, "30000/1001", 45)], [],
     "text_video_text", {"fps": 4}, ("vision", "forward")),
    # 3 frames (< min_frames) at 2 fps: 3 sampled, timestamps 0.25 -> "<0.2 seconds>", 1.0.
    ("three_frames_half_timestamp", MODEL_A, [clip("testsrc2", 64, 64, 2, 3)], [],
     "text_video_text", {}, ("vision", "forward")),
    # Above the 786432-pixel clip budget: 4 x 640x480 -> 384x512 (1536 patches).
    ("downscaled_640x480_vision", MODEL_C, [clip("testsrc2", 640, 480, 10, 20)], [],
     "text_video_text", {}, ("vision",)),
    # An image and a video in one prompt (DeepStack on both kinds of pads, in sequence order).
    ("image_then_video", MODEL_A, [clip("testsrc2", 64, 64, 5, 10)],
     [("gradient", 100, 60, 1, "png")], "image_text_video", {}, ("forward",)),
    ("video_then_image_webm", MODEL_B, [clip("testsrc2", 96, 48, 12, 30, "webm")],
     [("noise", 64, 96, 2, "jpg")], "video_text_image", {}, ("forward",)),
    # Two videos of different sizes and containers.
    ("two_videos_mp4_webm", MODEL_A, [clip("testsrc2", 64, 48, 10, 20),
                                      clip("noise", 48, 64, 8, 24, "webm")], [],
     "two_videos", {}, ("vision", "forward")),
    # The folder's video_preprocessor_config.json (the engine must read it as transformers does):
    # Qwen3-VL's shipped budget (4096..25165824 clip pixels: 64x96 stays 64x96) ...
    ("config_shipped_budget", MODEL_A, [clip("testsrc2", 96, 64, 10, 20)], [], "text_video_text",
     {"config": {"size": {"shortest_edge": 4096, "longest_edge": 25165824}, "fps": 2,
                 "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2}},
     ("vision", "forward")),
    # ... and fps 1, frames 2..6, CLIP mean/std, and cap_pixels_per_frame with a budget whose
    # per-frame floor int(1.05·4096) binds: 4 x 64x96 -> 32x64 (uncapped: 32x32).
    ("config_cap_clip_norm_fps1", MODEL_B, [clip("testsrc2", 96, 64, 10, 40)], [],
     "text_video_text",
     {"config": {"size": {"shortest_edge": 4096, "longest_edge": 8192}, "fps": 1,
                 "min_frames": 2, "max_frames": 6, "cap_pixels_per_frame": True,
                 "image_mean": [0.48145466, 0.4578275, 0.40821073],
                 "image_std": [0.26862954, 0.26130258, 0.27577711]}},
     ("vision", "forward")),
    # Refusals: two video triples for one --video; a file that is no video.
    ("neg_two_triples_one_video", MODEL_C, [clip("testsrc2", 64, 64, 5, 10)], [],
     "two_triples_one_video", {}, ("forward_fail",)),
    ("neg_not_a_video", MODEL_C, ["notavideo"], [], "text_video_text", {},
     ("vision_fail", "forward_fail")),
]


def make_clip(path, c):
    """The clip with the ffmpeg tool; exactly c['frames'] frames at c['rate']."""
    w, h, r, n = c["w"], c["h"], c["rate"], c["frames"]
    if c["src"] == "testsrc2":
        src = f"testsrc2=size={w}x{h}:rate={r}"
    elif c["src"] == "noise":   # per-pixel noise that changes every frame, hard edges
        src = (f"nullsrc=size={w}x{h}:rate={r},geq=lum='random(1)*255':cb='128+60*sin(N+X/7)'"
               f":cr='128+60*cos(N/2+Y/5)'")
    else:
        raise ValueError(c["src"])
    codec = (["-c:v", "libx264", "-preset", "medium", "-crf", "18"] if c["fmt"] == "mp4"
             else ["-c:v", "libvpx-vp9", "-b:v", "0", "-crf", "30", "-deadline", "good",
                   "-cpu-used", "4"])
    tmp = path + ".tmp." + c["fmt"] if c["rotate"] else path
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", src, "-frames:v", str(n)]
                   + codec + ["-pix_fmt", "yuv420p", tmp], check=True)
    if c["rotate"]:
        # ffmpeg 5.1 has no -display_rotation; the rotate tag is honoured on a stream copy (MP4
        # writes the display matrix in tkhd; Matroska has no such field, so rotated clips are
        # always MP4 here).
        out = path if c["fmt"] == "mp4" else path[: -len(c["fmt"])] + "mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", tmp, "-c", "copy",
                        "-metadata:s:v:0", f"rotate={c['rotate']}", out], check=True)
        os.remove(tmp)
        return out
    return path


def prompt_ids(layout, cfg):
    vs, ve = cfg["vision_start_token_id"], cfg["vision_end_token_id"]
    vid = [vs, cfg["video_token_id"], ve]
    img = [vs, cfg["image_token_id"], ve]
    return {
        "text_video_text": [9707, 11, 1879] + vid + [3838, 374, 419, 30],
        "video_first": vid + [74785, 279, 2766, 13],
        "image_text_video": [1, 2] + img + [3, 4, 5] + vid + [6, 7, 8],
        "video_text_image": [100] + vid + [200, 300] + img + [400, 500],
        "two_videos": [11, 12] + vid + [13] + vid + [14, 15, 16],
        "two_triples_one_video": [5] + vid + [6] + vid + [7],
    }[layout]


class Models:
    def __init__(self, vls, work):
        self.vls, self.work, self.cache = vls, work, {}

    def get(self, opts, vconfig=None):
        key = " ".join(opts) + json.dumps(vconfig, sort_keys=True)
        if key in self.cache:
            return self.cache[key]
        d = os.path.join(self.work, "models", f"m{len(self.cache)}")
        os.makedirs(os.path.dirname(d), exist_ok=True)
        # A folder left by an earlier run may hold the config a case wrote into it.
        shutil.rmtree(d, ignore_errors=True)
        p = subprocess.run([self.vls, "make-test-model", "--out", d] + opts, capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError(f"make-test-model exited {p.returncode}: {p.stderr[-400:]}")
        with open(d + ".args", "w") as f:
            f.write(" ".join(opts) + "\n")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            raise RuntimeError("make-test-model wrote no tokenizer.json (run tests/tokenizer/setup.sh)")
        vpath = os.path.join(d, "video_preprocessor_config.json")
        if os.path.exists(vpath):
            raise RuntimeError("make-test-model wrote a video_preprocessor_config.json; this "
                               "oracle assumes the class defaults")
        if vconfig is not None:
            with open(vpath, "w") as f:
                json.dump(vconfig, f, indent=1)
        m = {"dir": d, "cfg": json.load(open(os.path.join(d, "config.json"))),
             "pcfg": json.load(open(os.path.join(d, "preprocessor_config.json"))),
             "tok": video_ref.Tokenizer(os.path.join(d, "tokenizer.json")),
             "tower": vision_ref.VisionTower(d), "model": qwen3_ref.Model.load(d),
             "eos": batch_ref.eos_ids(d)}
        if m["model"].cfg.tied:
            raise RuntimeError("make-test-model wrote a tied model for --untied")
        self.cache[key] = m
        return m


def vcfg(flags):
    return video_ref.read_config(flags.get("config"), flags.get("fps"), flags.get("max_frames"),
                                 flags.get("num_frames"))


def reference_videos(paths, flags):
    return [video_ref.process_video(p, vcfg(flags)) for p in paths]


def reference_forward(m, ids, vids, img_paths):
    """The HF chain on the reference's own pixels: expanded ids, grids, positions, logits, greedy."""
    cfg = m["cfg"]
    mm = cfg["vision_config"].get("spatial_merge_size", 2) ** 2
    c = m["model"].cfg
    img_grids, img_out = [], None
    if img_paths:
        pv, img_grids, _ = preprocess_ref.preprocess([np.array(image_cases.load_image(p))
                                                      for p in img_paths],
                                                     m["pcfg"])
        img_out = m["tower"].run(np.asarray(pv, np.float64), img_grids)
    vid_outs = [m["tower"].run(np.asarray(v["pixel_values"], np.float64), [v["grid"]])
                for v in vids]
    expanded, spans = video_ref.expand_prompt(
        ids, [(v["grid"], v["timestamps"]) for v in vids], img_grids, m["tok"],
        vision_start=c.vision_start_token_id, vision_end=c.vision_end_token_id,
        image_pad=c.image_token_id, video_pad=c.video_token_id, merge_size=int(mm ** 0.5))
    # visual rows in sequence order: image pads take the image features, video pads the videos'.
    img_rows = (img_out["visual_embeds"], img_out["deepstack_features"]) if img_out else None
    vid_rows = (np.concatenate([o["visual_embeds"] for o in vid_outs]) if vid_outs else None,
                np.concatenate([o["deepstack_features"] for o in vid_outs], axis=1)
                if vid_outs else None)
    emb, ds, pads = [], [], []
    ii = vi = 0
    for i, t in enumerate(expanded):
        if t == c.image_token_id:
            emb.append(img_rows[0][ii])
            ds.append(img_rows[1][:, ii])
            ii += 1
        elif t == c.video_token_id:
            emb.append(vid_rows[0][vi])
            ds.append(vid_rows[1][:, vi])
            vi += 1
        else:
            continue
        pads.append(i)
    assert ii == (len(img_rows[0]) if img_rows else 0) and vi == (len(vid_rows[0]) if vids else 0)
    pos, delta = qwen3_ref.get_rope_index(
        np.array(expanded, np.int64), np.array(img_grids, np.int64).reshape(-1, 3),
        np.array([v["grid"] for v in vids], np.int64).reshape(-1, 3),
        image_token_id=c.image_token_id, video_token_id=c.video_token_id,
        vision_start_token_id=c.vision_start_token_id, spatial_merge_size=c.spatial_merge_size)
    inp = {"input_ids": np.array(expanded, np.int32), "visual_embeds": np.array(emb),
           "position_ids": pos, "rope_delta": np.array([delta], np.int64)}
    K = ds[0].shape[0] if ds else 0
    if K:
        inp["deepstack_positions"] = np.array(pads, np.int32)
        inp["deepstack_features"] = np.stack(ds, axis=1)
        inp["deepstack_layers"] = np.arange(K, dtype=np.int32)
    box = {}
    orig = batch_ref.prefill

    def prefill(model, x):
        r = orig(model, x)
        box["logits"] = r[0]
        return r

    batch_ref.prefill = prefill
    try:
        gen = batch_ref.greedy(m["model"], inp, GEN, m["eos"])
    finally:
        batch_ref.prefill = orig
    return dict(input_ids=expanded, spans=spans, img_grids=np.array(img_grids, np.int32),
                vid_grids=np.array([v["grid"] for v in vids], np.int32), positions=pos,
                delta=delta, logits=box["logits"], gen=gen)


def check_ids(e_ids, r, tok, vids, c):
    """Engine ids against the reference: everything exact but each timestamp's tokens, which must
    decode to the expected text (and equal the reference BPE)."""
    ref = r["input_ids"]
    notes = []
    i = j = 0   # i in engine, j in reference
    spans = {s[2]: s for s in r["spans"]}
    while j < len(ref):
        if j in spans:
            v, g, a, b = spans[j]
            k = i
            while k < len(e_ids) and e_ids[k] != c.vision_start_token_id:
                k += 1
            want = video_ref.timestamp_text(vids[v]["timestamps"][g])
            got = tok.decode(e_ids[i:k])
            if got != want:
                return f"video {v} group {g}: timestamp tokens {e_ids[i:k]} decode to {got!r}, want {want!r}"
            if list(e_ids[i:k]) != list(ref[a:b]):
                return (f"video {v} group {g}: timestamp {want!r} tokenized {e_ids[i:k]}, the "
                        f"reference BPE gives {ref[a:b]}")
            i, j = k, b
            continue
        if i >= len(e_ids) or e_ids[i] != ref[j]:
            got = e_ids[i] if i < len(e_ids) else "end"
            return f"input_ids differ at engine index {i} (reference {j}): {got} != {ref[j]}"
        i += 1
        j += 1
    if i != len(e_ids):
        return f"input_ids: engine has {len(e_ids) - i} extra tokens"
    return None


def compare_rel(a, b):
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) if b.size else 0.0


def video_flags(flags):
    out = []
    if "fps" in flags:
        out += ["--fps", str(flags["fps"])]
    if "max_frames" in flags:
        out += ["--max-frames", str(flags["max_frames"])]
    if "num_frames" in flags:
        out += ["--num-frames", str(flags["num_frames"])]
    return out


def run_vision(vls, m, d, paths, vids, flags, log):
    out = os.path.join(d, "vision.safetensors")
    cmd = [vls, "vision", "--model", m["dir"], "--output", out] + video_flags(flags)
    for p in paths:
        cmd += ["--video", p]
    p = subprocess.run(cmd, capture_output=True, text=True)
    open(os.path.join(d, "vision.cmd.txt"), "w").write(" ".join(cmd) + "\n")
    open(os.path.join(d, "vision.stderr"), "w").write(p.stderr)
    if p.returncode != 0:
        return f"vision exited {p.returncode}: {p.stderr.strip()[-400:]}"
    e = st.load_file(out)
    for k in ("pixel_values", "video_grid_thw", "video_frame_indices", "video_timestamps",
              "visual_embeds", "deepstack_features"):
        if k not in e:
            return f"vision output lacks {k} (has {sorted(e)})"
    grids = [list(v["grid"]) for v in vids]
    if np.asarray(e["video_grid_thw"]).reshape(-1, 3).tolist() != grids:
        return f"video_grid_thw {np.asarray(e['video_grid_thw']).tolist()} != {grids}"
    idx = [int(i) for v in vids for i in v["indices"]]
    if np.asarray(e["video_frame_indices"]).reshape(-1).tolist() != idx:
        return f"video_frame_indices {np.asarray(e['video_frame_indices']).tolist()} != {idx}"
    ts = np.array([t for v in vids for t in v["timestamps"]], np.float64)
    ets = np.asarray(e["video_timestamps"], np.float64).reshape(-1)
    if ets.shape != ts.shape or np.any(np.abs(ets - ts) > TS_TOL * np.maximum(1, np.abs(ts))):
        return f"video_timestamps {ets.tolist()} != {ts.tolist()}"
    rpv = np.concatenate([v["pixel_values"] for v in vids])
    epv = np.asarray(e["pixel_values"], np.float64)
    if epv.shape != rpv.shape:
        return f"pixel_values shape {epv.shape} != {rpv.shape}"
    dpv = np.abs(epv - rpv)
    nlev = int((dpv > 1e-6).sum())
    log(f"pixel_values max|Δ| {dpv.max() / LEVEL:.3f} level, {nlev} of {dpv.size} "
        f"({100.0 * nlev / dpv.size:.3f}%) differ")
    if dpv.max() > PIXEL_TOL:
        r, col = np.unravel_index(int(dpv.argmax()), dpv.shape)
        return (f"pixel_values max|Δ| {dpv.max():.5f} ({dpv.max() / LEVEL:.2f} levels) at row {r} "
                f"col {col}: engine {epv[r, col]:.5f}, reference {rpv[r, col]:.5f}; "
                f"{nlev} elements differ")
    # the float64 tower on the engine's own pixels
    t = m["tower"].run(epv, grids)
    for k in ("visual_embeds", "deepstack_features"):
        rel = compare_rel(e[k], t[k])
        log(f"{k} rel err {rel:.2e}")
        if rel > TOWER_RTOL:
            return f"{k} rel err {rel:.2e} > {TOWER_RTOL}"
    return None


def run_forward(vls, m, d, ids, paths, img_paths, vids, flags, log):
    c = m["model"].cfg
    inp = os.path.join(d, "in.safetensors")
    st.save_file({"input_ids": np.array(ids, np.int32)}, inp)
    out = os.path.join(d, "engine.safetensors")
    cmd = [vls, "forward", "--model", m["dir"], "--input", inp, "--output", out,
           "--generate", str(GEN)] + video_flags(flags)
    for p in paths:
        cmd += ["--video", p]
    for p in img_paths:
        cmd += ["--image", p]
    p = subprocess.run(cmd, capture_output=True, text=True)
    open(os.path.join(d, "forward.cmd.txt"), "w").write(" ".join(cmd) + "\n")
    open(os.path.join(d, "forward.stderr"), "w").write(p.stderr)
    if p.returncode != 0:
        return f"forward exited {p.returncode}: {p.stderr.strip()[-400:]}"
    e = st.load_file(out)
    r = reference_forward(m, ids, vids, img_paths)
    e_ids = [int(x) for x in np.asarray(e["input_ids"]).reshape(-1)]
    err = check_ids(e_ids, r, m["tok"], vids, c)
    if err:
        return err
    if np.asarray(e.get("video_grid_thw", np.zeros((0, 3)))).reshape(-1, 3).tolist() != \
            r["vid_grids"].reshape(-1, 3).tolist():
        return f"video_grid_thw {np.asarray(e.get('video_grid_thw')).tolist()} != {r['vid_grids'].tolist()}"
    if img_paths and np.asarray(e.get("image_grid_thw", np.zeros((0, 3)))).reshape(-1, 3).tolist() \
            != r["img_grids"].reshape(-1, 3).tolist():
        return f"image_grid_thw {np.asarray(e.get('image_grid_thw')).tolist()} != {r['img_grids'].tolist()}"
    epos = np.asarray(e["position_ids"]).reshape(3, -1)
    if epos.tolist() != np.asarray(r["positions"]).tolist():
        bad = np.argwhere(epos != r["positions"])
        return f"position_ids differ first at (axis, index) {bad[0].tolist()}: " \
               f"{epos[tuple(bad[0])]} != {r['positions'][tuple(bad[0])]}"
    if int(np.asarray(e["rope_delta"]).reshape(-1)[0]) != int(r["delta"]):
        return f"rope_delta {int(np.asarray(e['rope_delta']).reshape(-1)[0])} != {r['delta']}"
    rel = compare_rel(e["logits"], r["logits"])
    log(f"S={len(e_ids)} video grids {r['vid_grids'].tolist()} image grids "
        f"{r['img_grids'].tolist()} delta={r['delta']} logits rel err {rel:.2e}")
    if rel > LOGIT_RTOL:
        return f"logits rel err {rel:.2e} > {LOGIT_RTOL}"
    eg = [int(x) for x in np.asarray(e["generated_tokens"]).reshape(-1)]
    g = r["gen"]
    for j, t in enumerate(g["tokens"]):
        if g["gaps"][j] < TIE_REL * max(1.0, g["tops"][j]):
            return "TIE" if eg[:j] == g["tokens"][:j] else f"tokens differ before a tie: {eg} vs {g['tokens']}"
        if j >= len(eg) or eg[j] != t:
            return f"generated {eg} != reference {g['tokens']}"
    if len(eg) != len(g["tokens"]):
        return f"generated {eg} != reference {g['tokens']}"
    return None


def run_fail(vls, m, d, cmdname, ids, paths, flags):
    if cmdname == "vision":
        cmd = [vls, "vision", "--model", m["dir"], "--output", os.path.join(d, "neg.safetensors")]
    else:
        inp = os.path.join(d, "in_neg.safetensors")
        st.save_file({"input_ids": np.array(ids, np.int32)}, inp)
        cmd = [vls, "forward", "--model", m["dir"], "--input", inp, "--output",
               os.path.join(d, "neg.safetensors"), "--generate", "2"]
    cmd += video_flags(flags)
    for p in paths:
        cmd += ["--video", p]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 0:
        return f"{cmdname} accepted a request it must refuse"
    if p.returncode < 0 or p.returncode > 128:
        return f"{cmdname} crashed (status {p.returncode})"
    if not p.stderr.strip():
        return f"{cmdname} failed without a message"
    return None


def run_case(a, models, case, log):
    name, opts, clips, images, layout, flags, cmds = case
    d = os.path.join(a.work, "cases", name)
    os.makedirs(d, exist_ok=True)
    paths = []
    for k, cl in enumerate(clips):
        if cl == "notavideo":
            p = os.path.join(d, "notavideo.mp4")
            open(p, "w").write("this is not a video\n")
        else:
            p = make_clip(os.path.join(d, f"clip{k}.{cl['fmt']}"), cl)
        paths.append(p)
    img_paths = []
    for k, (kind, w, h, seed, fmt) in enumerate(images):
        p = os.path.join(d, f"img{k}.{fmt}")
        image_cases.make_image(p, kind, w, h, seed, fmt)
        img_paths.append(p)
    neg = any(c.endswith("_fail") for c in cmds)
    vids = [] if neg else reference_videos(paths, flags)
    for v in vids:
        log(f"total {v['total']} fps {v['fps']:.4f} rotation {v['rotation']:g} indices "
            f"{v['indices'].tolist()} frames {list(v['frames'].shape[1:3])} grid {list(v['grid'])} "
            f"timestamps {[video_ref.timestamp_text(t) for t in v['timestamps']]}")
    if models is None:
        return None
    m = models.get(opts, flags.get("config"))
    ids = prompt_ids(layout, m["cfg"])
    if a.reference_only:
        if not neg:
            r = reference_forward(m, ids, vids, img_paths)
            log(f"S={len(r['input_ids'])} delta={r['delta']} greedy {r['gen']['tokens']}")
        return None
    for cmd in cmds:
        if cmd == "vision":
            err = run_vision(a.vlstack, m, d, paths, vids, flags, log)
        elif cmd == "forward":
            err = run_forward(a.vlstack, m, d, ids, paths, img_paths, vids, flags, log)
        else:
            err = run_fail(a.vlstack, m, d, cmd[: -len("_fail")], ids, paths, flags)
        if err:
            return f"{cmd}: {err}" if err != "TIE" else err
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vlstack")
    ap.add_argument("--work", required=True)
    ap.add_argument("--filter", default="")
    ap.add_argument("--reference-only", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    if a.list:
        for c in CASES:
            print(c[0], " ".join(c[6]))
        return 0
    if not a.vlstack and not a.reference_only:
        ap.error("--vlstack is required unless --reference-only")
    os.makedirs(a.work, exist_ok=True)
    if not os.path.exists(video_ref.default_tokenizer_json()):
        print("SKIP: no Qwen3 tokenizer.json (run tests/tokenizer/setup.sh); the timestamps need it")
        return 77
    video_ref.selftest(video_ref.default_tokenizer_json())
    models = Models(a.vlstack, a.work) if a.vlstack else None
    passed = failed = ties = 0
    t0 = time.time()
    for case in CASES:
        name = case[0]
        if a.filter not in name:
            continue
        lines = []
        log = (lambda s, n=name: print(f"  {n}: {s}", flush=True)) if a.v else lines.append
        t1 = time.time()
        try:
            err = run_case(a, models, case, log)
        except Exception as ex:  # a reference refusal, a broken output file, a tool failure
            err = f"{type(ex).__name__}: {ex}"
        dt = time.time() - t1
        if err == "TIE":
            print(f"TIE {name} ({dt:.1f} s)")
            ties += 1
        elif err:
            print(f"FAIL {name}: {err} ({dt:.1f} s)")
            for s in lines:
                print(f"  {s}")
            failed += 1
        else:
            print(f"PASS {name} ({dt:.1f} s)")
            passed += 1
    print(f"{passed} passed, {failed} failed, {ties} tie-skipped ({time.time() - t0:.0f} s)")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
