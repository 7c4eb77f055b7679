#!/usr/bin/python3
"""Independent float64 NumPy reference of the Qwen3-VL vision tower and its DeepStack mergers.

Written from the Qwen3-VL math (docs/contracts.md §C.1, §D.1, §D.2, §D.4) and the Hugging Face
module semantics it describes (Qwen3VLVisionModel.forward, fast_pos_embed_interpolate, rot_pos_emb,
Qwen3VLVisionPatchMerger), never from the engine's C++. All math in float64; weights are
widened exactly from their stored dtype.

CLI twin of `vlstack vision --pixel-values` (docs/contracts.md §6):
    vision_ref.py --model DIR --pixel-values IN.safetensors --output OUT.safetensors [--diagnostics]
IN holds pixel_values [Np, C·Tp·P·P] (rows in merge-window order) and image_grid_thw i32 [n, 3].
OUT holds pixel_values, image_grid_thw, visual_embeds [Nv, O], deepstack_features [K, Nv, O]
and, with --diagnostics, patch_embeds, pos_embeds and vision_block.{j} [Np, Dv].
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

LN_EPS = 1e-6
PREFIX = "model.visual."


def load_vision_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3_vl" or not cfg.get("vision_config"):
        raise ValueError(f"{model_dir}: no vision tower in config.json")
    v = dict(cfg["vision_config"])
    v.setdefault("in_channels", 3)
    v.setdefault("patch_size", 16)
    v.setdefault("temporal_patch_size", 2)
    v.setdefault("spatial_merge_size", 2)
    v.setdefault("deepstack_visual_indexes", [])
    if v.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError("hidden_act must be gelu_pytorch_tanh")
    return v


def layer_norm(x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class VisionTower:
    def __init__(self, model_dir):
        self.cfg = load_vision_config(model_dir)
        raw = st.load_checkpoint(model_dir)
        self.w = {k[len(PREFIX):]: np.asarray(v, dtype=np.float64)
                  for k, v in raw.items() if k.startswith(PREFIX)}

    def linear(self, name, x):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def norm(self, name, x):
        return layer_norm(x, self.w[name + ".weight"], self.w[name + ".bias"])

    # fast_pos_embed_interpolate: per item, bilinear (align_corners) over the table's G x G grid
    # in raster order, repeated over t, then reordered into merge-window order.
    def pos_embed(self, grids):
        table = self.w["pos_embed.weight"]
        G = int(round(math.sqrt(table.shape[0])))
        assert G * G == table.shape[0]
        m = self.cfg["spatial_merge_size"]
        out = []
        for t, h, w in grids:
            hi = np.linspace(0, G - 1, h)
            wi = np.linspace(0, G - 1, w)
            hf = hi.astype(np.int64)
            wf = wi.astype(np.int64)
            hc = np.minimum(hf + 1, G - 1)
            wc = np.minimum(wf + 1, G - 1)
            dh = (hi - hf)[:, None]
            dw = (wi - wf)[None, :]
            idx = [(hf[:, None] * G + wf[None, :]), (hf[:, None] * G + wc[None, :]),
                   (hc[:, None] * G + wf[None, :]), (hc[:, None] * G + wc[None, :])]
            wts = [(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw]
            pe = sum(table[i.reshape(-1)] * wt.reshape(-1, 1) for i, wt in zip(idx, wts))
            pe = np.tile(pe, (t, 1))
            pe = pe.reshape(t, h // m, m, w // m, m, -1).transpose(0, 1, 3, 2, 4, 5)
            out.append(pe.reshape(-1, table.shape[1]))
        return np.concatenate(out, axis=0)

    # rot_pos_emb: (row, col) of every patch in merge-window order, looked up in the frequency
    # table of head_dim/2 (inv_freq over head_dim/4 frequencies), then cat(rope, rope).
    def rotary(self, grids):
        hd = self.cfg["hidden_size"] // self.cfg["num_heads"]
        dim = hd // 2
        inv_freq = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
        m = self.cfg["spatial_merge_size"]
        ids = []
        for t, h, w in grids:
            mh, mw = h // m, w // m
            rows = (np.arange(mh)[:, None, None, None] * m + np.arange(m)[None, None, :, None])
            cols = (np.arange(mw)[None, :, None, None] * m + np.arange(m)[None, None, None, :])
            rows = np.broadcast_to(rows, (mh, mw, m, m)).reshape(-1)
            cols = np.broadcast_to(cols, (mh, mw, m, m)).reshape(-1)
            coords = np.stack([rows, cols], axis=-1)
            ids.append(np.tile(coords, (t, 1)))
        ids = np.concatenate(ids, axis=0)
        max_hw = max(max(h, w) for _, h, w in grids)
        freq = np.outer(np.arange(max_hw, dtype=np.float64), inv_freq)
        rope = freq[ids].reshape(ids.shape[0], -1)  # [Np, hd/2]: rows | cols
        emb = np.concatenate([rope, rope], axis=-1)
        return np.cos(emb), np.sin(emb)

    def attention(self, j, x, cos, sin, cu):
        Dv = self.cfg["hidden_size"]
        nh = self.cfg["num_heads"]
        hd = Dv // nh
        S = x.shape[0]
        qkv = self.linear(f"blocks.{j}.attn.qkv", x).reshape(S, 3, nh, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]  # [S, nh, hd]
        c, s = cos[:, None, :], sin[:, None, :]
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        out = np.zeros((S, nh, hd))
        for a, e in zip(cu[:-1], cu[1:]):
            qs, ks, vs = q[a:e].transpose(1, 0, 2), k[a:e].transpose(1, 0, 2), v[a:e].transpose(1, 0, 2)
            scores = qs @ ks.transpose(0, 2, 1) * hd ** -0.5  # [nh, T, T]
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            out[a:e] = (p @ vs).transpose(1, 0, 2)
        return self.linear(f"blocks.{j}.attn.proj", out.reshape(S, Dv))

    def merger(self, name, x, postshuffle):
        unit = self.cfg["spatial_merge_size"] ** 2
        width = x.shape[1] * unit
        if postshuffle:
            z = self.norm(name + ".norm", x.reshape(-1, width))
        else:
            z = self.norm(name + ".norm", x).reshape(-1, width)
        h = gelu_erf(self.linear(name + ".linear_fc1", z))
        return self.linear(name + ".linear_fc2", h)

    def run(self, pixel_values, grids):
        c = self.cfg
        grids = [tuple(int(v) for v in g) for g in grids]
        m = c["spatial_merge_size"]
        for t, h, w in grids:
            if t < 1 or h < 1 or w < 1 or h % m or w % m:
                raise ValueError(f"bad grid {(t, h, w)}")
        Np = sum(t * h * w for t, h, w in grids)
        if pixel_values.shape[0] != Np:
            raise ValueError(f"pixel_values has {pixel_values.shape[0]} rows, grids need {Np}")
        Dv = c["hidden_size"]
        W = self.w["patch_embed.proj.weight"].reshape(Dv, -1)  # (c, t, py, px) order
        patch = pixel_values.astype(np.float64) @ W.T + self.w["patch_embed.proj.bias"]
        pos = self.pos_embed(grids)
        x = patch + pos
        cos, sin = self.rotary(grids)
        cu = np.concatenate([[0], np.cumsum([h * w for t, h, w in grids for _ in range(t)])])
        out = {"patch_embeds": patch, "pos_embeds": pos}
        feats = []
        ds = list(c["deepstack_visual_indexes"])
        for j in range(c["depth"]):
            x = x + self.attention(j, self.norm(f"blocks.{j}.norm1", x), cos, sin, cu)
            hmid = gelu_tanh(self.linear(f"blocks.{j}.mlp.linear_fc1", self.norm(f"blocks.{j}.norm2", x)))
            x = x + self.linear(f"blocks.{j}.mlp.linear_fc2", hmid)
            out[f"vision_block.{j}"] = x
            if j in ds:
                feats.append(self.merger(f"deepstack_merger_list.{ds.index(j)}", x, True))
        out["visual_embeds"] = self.merger("merger", x, False)
        Nv = Np // (m * m)
        O = out["visual_embeds"].shape[1]
        out["deepstack_features"] = np.stack(feats) if feats else np.zeros((0, Nv, O))
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--pixel-values", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--diagnostics", action="store_true")
    a = ap.parse_args(argv)
    inp = st.load_file(a.pixel_values)
    pv = np.asarray(inp["pixel_values"], dtype=np.float64)
    grids = np.asarray(inp["image_grid_thw"], dtype=np.int32).reshape(-1, 3)
    res = VisionTower(a.model).run(pv, grids)
    keep = ["visual_embeds", "deepstack_features"]
    if a.diagnostics:
        keep += [k for k in res if k not in keep]
    tensors = {k: res[k].astype(np.float32) for k in keep}
    tensors["pixel_values"] = pv.astype(np.float32)
    tensors["image_grid_thw"] = grids.astype(np.int32)
    st.save_file(tensors, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
