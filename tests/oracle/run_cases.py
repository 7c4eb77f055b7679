#!/usr/bin/python3
"""End-to-end oracle check of `vlstack forward` against the NumPy float64 reference.

usage: /usr/bin/python3 tests/oracle/run_cases.py --vlstack PATH_TO_vlstack --work WORKDIR
                                                  [--filter SUBSTR] [--deepstack] [--moe] [--list] [-v]

For every case: (a) `vlstack make-test-model --out DIR ...`, (b) random inputs with fixed
seeds, (c) `vlstack forward --model DIR --input IN --output OUT [--diagnostics] [--all-logits]`,
(d) the reference (qwen3_ref.forward), (e) compare.py tolerances. Prints "PASS name" or
"FAIL name: reason" per case, then "<n> passed, <m> failed"; exit status 1 if any failed.
DeepStack cases run only with --deepstack, mixture-of-experts cases (moe_*) only with --moe.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import batch_ref  # noqa: E402
import compare  # noqa: E402
import moe_ref  # noqa: E402

# The BF16 path (`--precision bf16`) rounds every matmul input activation to BF16 and stores
# every weight matrix and the KV cache in BF16 (unit roundoff u = 2^-9 ~ 2e-3 each),
# accumulating in f32. One
# rounding gives each product a relative error <= 2u; over a K-term dot product of random
# signs that is ~2u·sqrt(K)·rms(x·w) against an output of ~sqrt(K)·rms(x·w), i.e. ~4e-3 of
# the output scale per matmul, and a layer chains up to four matmuls (qkv -> o, gate_up ->
# down) plus softmax, so per-layer errors reach ~1e-2 of the tensor's scale and grow slowly
# over layers through the residual stream. Hence the tolerances below, relative to the
# tensor's max|ref|. Measured: the worst element over all 50 cases uses 0.46 of it (0.39
# before the cache was BF16), and at the f32 tolerance (1e-4) 43 of the 43 numeric cases fail,
# so the BF16 path is really exercised.
BF16_RTOL = 2e-2
BF16_ATOL_SCALE = 2e-2
# The int8 path (`--precision int8`) quantizes weights and activations to int8 per 32-column
# block (kernels/quant.h): each element is off by up to half a step, amax/254, i.e. ~0.4% of
# the block's largest value, and a dot product of random-sign errors by ~1% of its scale per
# quantized operand (the KV cache is BF16, as above). Chained as above, 10% of the tensor's
# scale; measured worst 0.33 of it.
INT8_RTOL = 1e-1
INT8_ATOL_SCALE = 1e-1
import qwen3_ref  # noqa: E402
import st  # noqa: E402
import testmodel  # noqa: E402

TIMEOUT = 600
TIE_REL = 1e-3   # greedy near-tie: top-2 gap below TIE_REL·max(1,|top|) (image_cases.py, batch_cases.py)


class CaseFail(Exception):
    pass


# ----------------------------------------------------------------------------
# Input builders (ctx gives cfg, rng)
# ----------------------------------------------------------------------------

def specials(cfg):
    return {t for t in (cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id,
                        cfg.vision_end_token_id) if t is not None}


def text_ids(cfg, rng, n):
    sp = specials(cfg)
    hi = min(sp) if sp else cfg.V
    hi = max(hi, 1)
    pool = np.array([t for t in range(hi) if t not in sp], dtype=np.int64)
    return pool[rng.integers(0, len(pool), n)].astype(np.int32)


def image_prompt(cfg, rng, grids, pre=3, between=2, post=2):
    """text(pre) [vs pad*k ve text(between)]... text(post). Returns ids, grid array, pad positions."""
    if cfg.image_token_id is None or cfg.vision_start_token_id is None or cfg.vision_end_token_id is None:
        raise CaseFail("config lacks image/vision token ids")
    ids = list(text_ids(cfg, rng, pre))
    m = cfg.spatial_merge_size
    for gi, (t, h, w) in enumerate(grids):
        if gi:
            ids += list(text_ids(cfg, rng, between))
        ids.append(cfg.vision_start_token_id)
        ids += [cfg.image_token_id] * (t * (h // m) * (w // m))
        ids.append(cfg.vision_end_token_id)
    ids += list(text_ids(cfg, rng, post))
    ids = np.array(ids, dtype=np.int32)
    pads = np.flatnonzero(ids == cfg.image_token_id).astype(np.int32)
    return ids, np.array(grids, dtype=np.int32).reshape(-1, 3), pads


def mrope_positions(rng, S, start=0):
    """Plausible explicit M-RoPE positions [3,S] with distinct axes (non-negative)."""
    t = start + np.cumsum(rng.integers(0, 3, S))
    h = t + rng.integers(0, 3, S)
    w = t + rng.integers(0, 4, S)
    return np.stack([t, h, w]).astype(np.int32)


def randn(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def i32(*vals):
    return np.array(vals, dtype=np.int32)


# ----------------------------------------------------------------------------
# Case table
# ----------------------------------------------------------------------------

class Case:
    def __init__(self, name, make, build, flags=(), deepstack=False, expect_error=False,
                 consistency=None, expect_model=None, config_patch=None, own=None, mentions=(),
                 moe=False, generate=0, refusal_ok=()):
        self.name = name
        self.make = list(make)
        self.build = build            # fn(cfg, rng) -> dict of input tensors
        self.flags = list(flags)
        self.deepstack = deepstack
        self.expect_error = expect_error
        self.consistency = consistency  # fn(cfg, rng) -> (decode-input, prefill-input, split S)
        self.expect_model = expect_model or {}
        self.config_patch = config_patch  # keys merged into config.json after make-test-model (dicts
        # such as text_config are merged key by key)
        self.mentions = tuple(mentions)  # stderr of a rejected request must name one of these
        self.own = own  # dict(cfg=..., zero=, dtype=, shards=, seed=): checkpoint written by the oracle itself
        self.moe = moe  # a mixture-of-experts case (only with --moe)
        self.generate = generate  # > 0: `forward --generate N`, tokens against the greedy reference
        # a documented engine refusal that is also acceptable: a clean non-zero exit whose stderr
        # names one of these (reported as a NOTE); an exit 0 must then match the oracle as usual
        self.refusal_ok = tuple(refusal_ok)


def _text(S, N=0, **extra):
    def b(cfg, rng):
        d = {"input_ids": text_ids(cfg, rng, S)}
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        d.update(extra)
        return d
    return b


def _image(grids, N=0, visual=False, delta=None, pre=3, post=2):
    def b(cfg, rng):
        ids, g, pads = image_prompt(cfg, rng, grids, pre=pre, post=post)
        d = {"input_ids": ids, "image_grid_thw": g}
        if visual:
            d["visual_embeds"] = randn(rng, len(pads), cfg.H)
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _explicit_pos(S, delta, N=3):
    def b(cfg, rng):
        d = {"input_ids": text_ids(cfg, rng, S)}
        if cfg.mode == "mrope":
            d["position_ids"] = mrope_positions(rng, S)
        else:
            d["position_ids"] = (np.cumsum(rng.integers(0, 3, S))).astype(np.int32)
        d["rope_delta"] = i32(delta)
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _large_pos(S, start, delta, N=3):
    def b(cfg, rng):
        return {"input_ids": text_ids(cfg, rng, S), "position_ids": mrope_positions(rng, S, start),
                "rope_delta": i32(start + delta), "decode_tokens": text_ids(cfg, rng, N)}
    return b


def _embeds(S, N=2, with_ids=False, positions=False, delta=None):
    def b(cfg, rng):
        d = {"inputs_embeds": randn(rng, S, cfg.H)}
        if with_ids:
            d["input_ids"] = text_ids(cfg, rng, S)
        if positions:
            d["position_ids"] = mrope_positions(rng, S) if cfg.mode == "mrope" else \
                np.arange(S, dtype=np.int32) * 2
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _image_embeds(grids, N=2):
    """inputs_embeds + input_ids with image pads and grid: positions derived from the ids."""
    def b(cfg, rng):
        ids, g, pads = image_prompt(cfg, rng, grids)
        d = {"input_ids": ids, "image_grid_thw": g, "inputs_embeds": randn(rng, len(ids), cfg.H)}
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _consistency(S, N):
    """decode of N tokens after an S prefill vs an (S+N) all-logits prefill of the same tokens."""
    def c(cfg, rng):
        ids = text_ids(cfg, rng, S + N)
        return {"input_ids": ids[:S], "decode_tokens": ids[S:]}, {"input_ids": ids}, S
    return c


# DeepStack builders ----------------------------------------------------------

def _ds_image(grids, K, N=0, visual=False, layers=None, delta=None):
    def b(cfg, rng):
        ids, g, pads = image_prompt(cfg, rng, grids)
        d = {"input_ids": ids, "image_grid_thw": g,
             "deepstack_positions": pads,
             "deepstack_features": randn(rng, K, len(pads), cfg.H, scale=0.5)}
        if layers is not None:
            d["deepstack_layers"] = np.array(layers, dtype=np.int32)
        if visual:
            d["visual_embeds"] = randn(rng, len(pads), cfg.H)
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _ds_embeds(S, positions, K, N=0, delta=None, explicit_pos=False, layers=None):
    """inputs_embeds (no ids) + DeepStack payload at the given rows."""
    def b(cfg, rng):
        d = {"inputs_embeds": randn(rng, S, cfg.H),
             "deepstack_positions": np.array(positions, dtype=np.int32),
             "deepstack_features": randn(rng, K, len(positions), cfg.H, scale=0.5)}
        if layers is not None:
            d["deepstack_layers"] = np.array(layers, dtype=np.int32)
        if explicit_pos:
            d["position_ids"] = mrope_positions(rng, S) if cfg.mode == "mrope" else \
                np.arange(S, dtype=np.int32)
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if N:
            d["decode_tokens"] = text_ids(cfg, rng, N)
        return d
    return b


def _fixture(cfg, rng):
    img = cfg.image_token_id
    return {"input_ids": np.array([0, img, img, img, 0, 0], np.int32),
            "deepstack_positions": i32(1, 2, 3),
            "deepstack_features": np.full((3, 3, cfg.H), 10.0, np.float32),
            "decode_tokens": i32(0, 0)}


# Negative builders -----------------------------------------------------------

def _bad_pos_rank(cfg, rng):
    S = 5
    d = {"input_ids": text_ids(cfg, rng, S)}
    d["position_ids"] = (np.arange(S, dtype=np.int32) if cfg.mode == "mrope"
                         else np.tile(np.arange(S, dtype=np.int32), (3, 1)))
    return d


def _bad_visual_count(cfg, rng):
    ids, g, pads = image_prompt(cfg, rng, [(1, 4, 4)])
    return {"input_ids": ids, "image_grid_thw": g, "visual_embeds": randn(rng, len(pads) + 1, cfg.H)}


def _bad_token(cfg, rng):
    ids = text_ids(cfg, rng, 4)
    ids[2] = cfg.V + 3
    return {"input_ids": ids}


def _bad_ds_order(cfg, rng):
    ids, g, pads = image_prompt(cfg, rng, [(1, 4, 4)])
    p = pads.copy()
    p[[0, 1]] = p[[1, 0]]
    return {"input_ids": ids, "image_grid_thw": g, "deepstack_positions": p,
            "deepstack_features": randn(rng, 3, len(p), cfg.H)}


def _bad_ds_layers(cfg, rng):
    ids, g, pads = image_prompt(cfg, rng, [(1, 4, 4)])
    return {"input_ids": ids, "image_grid_thw": g, "deepstack_positions": pads,
            "deepstack_features": randn(rng, 3, len(pads), cfg.H),
            "deepstack_layers": i32(0, 2, 1)}


QWEN3 = ["--arch", "qwen3"]
VL = ["--arch", "qwen3-vl"]
DIAG = ["--diagnostics"]
ALL = ["--all-logits"]


def cases():
    C = []
    # ---- 1-D Qwen3 -------------------------------------------------------------------
    C.append(Case("qwen3_bf16_tied_gqa2_diag", QWEN3 + ["--dtype", "bf16", "--tied"], _text(7, 3), DIAG + ALL,
                  expect_model={"dtype": "BF16", "tied": True}))
    C.append(Case("qwen3_f32_untied_gqa1", QWEN3 + ["--dtype", "f32", "--untied", "--heads", "4", "--kv-heads", "4"],
                  _text(9, 4), ALL, expect_model={"dtype": "F32", "tied": False}))
    C.append(Case("qwen3_f16_headdim16_h48_gqa4_diag",
                  QWEN3 + ["--dtype", "f16", "--hidden", "48", "--heads", "4", "--kv-heads", "1", "--head-dim", "16"],
                  _text(6, 2), DIAG, expect_model={"dtype": "F16"}))
    C.append(Case("qwen3_sharded_untied", QWEN3 + ["--shards", "2", "--untied", "--seed", "7"], _text(5, 2), DIAG,
                  expect_model={"shards": 2, "tied": False}))
    C.append(Case("qwen3_explicit_positions_delta_neg", QWEN3 + ["--seed", "3"], _explicit_pos(8, -3), DIAG))
    C.append(Case("qwen3_explicit_positions_delta_pos", QWEN3 + ["--seed", "3"], _explicit_pos(8, 5), ALL))
    C.append(Case("qwen3_inputs_embeds", QWEN3 + ["--seed", "4"], _embeds(6, 2), DIAG))
    C.append(Case("qwen3_inputs_embeds_with_ids", QWEN3 + ["--seed", "4"], _embeds(6, 2, with_ids=True), ALL))
    C.append(Case("qwen3_rope_theta_1e4", QWEN3 + ["--rope-theta", "10000", "--seed", "5"], _text(12, 2), ALL))
    C.append(Case("qwen3_decode_equals_prefill", QWEN3 + ["--seed", "6"], None, consistency=_consistency(6, 5)))
    C.append(Case("qwen3_bigger", QWEN3 + ["--hidden", "256", "--intermediate", "768", "--heads", "8",
                                           "--kv-heads", "2", "--head-dim", "64", "--layers", "4",
                                           "--vocab", "2048", "--seed", "8"], _text(48, 4), DIAG + ALL))
    # ---- M-RoPE Qwen3-VL ----------------------------------------------------------------
    C.append(Case("vl_default_text_diag", VL, _text(7, 3), DIAG + ALL,
                  expect_model={"dtype": "BF16", "tied": True}))
    C.append(Case("vl_f32_untied_sharded", VL + ["--dtype", "f32", "--untied", "--shards", "2", "--seed", "2"],
                  _text(8, 2), DIAG, expect_model={"dtype": "F32", "tied": False, "shards": 2}))
    C.append(Case("vl_f16_gqa4_h48_headdim16", VL + ["--dtype", "f16", "--hidden", "48", "--heads", "8",
                                                     "--kv-heads", "2", "--head-dim", "16"],
                  _image([(1, 4, 6)], N=2), DIAG, expect_model={"dtype": "F16"}))
    C.append(Case("vl_gqa1", VL + ["--heads", "4", "--kv-heads", "4", "--seed", "9"], _text(6, 2), ALL))
    C.append(Case("vl_image_derived_positions", VL + ["--seed", "10"], _image([(1, 4, 6)], N=3), DIAG + ALL))
    C.append(Case("vl_two_images_derived", VL + ["--seed", "11"], _image([(1, 4, 4), (1, 6, 4)], N=2), DIAG))
    C.append(Case("vl_image_visual_embeds", VL + ["--seed", "12"], _image([(1, 4, 6)], N=2, visual=True), DIAG + ALL))
    C.append(Case("vl_two_images_visual_embeds_untied", VL + ["--untied", "--seed", "13"],
                  _image([(1, 2, 4), (1, 6, 6)], N=2, visual=True), ALL))
    C.append(Case("vl_image_delta_override", VL + ["--seed", "14"], _image([(1, 4, 6)], N=2, delta=4), DIAG))
    C.append(Case("vl_image_leading_pad", VL + ["--seed", "15"], _image([(1, 4, 4)], N=1, pre=0, post=0), DIAG))
    C.append(Case("vl_chunked_layout_image", VL + ["--mrope-layout", "chunked", "--mrope-section", "2,3,3",
                                                   "--seed", "16"],
                  _image([(1, 4, 6), (1, 6, 2)], N=2), DIAG + ALL, expect_model={"interleaved": False}))
    C.append(Case("vl_chunked_layout_explicit", VL + ["--mrope-layout", "chunked", "--mrope-section", "4,2,2",
                                                      "--rope-theta", "10000", "--seed", "17"],
                  _explicit_pos(9, -2), DIAG, expect_model={"interleaved": False}))
    C.append(Case("vl_interleaved_section_3_3_2", VL + ["--mrope-section", "3,3,2", "--rope-theta", "10000",
                                                        "--seed", "18"],
                  _explicit_pos(9, 2), DIAG, expect_model={"interleaved": True}))
    C.append(Case("vl_explicit_positions_delta_neg", VL + ["--seed", "19"], _explicit_pos(10, -4), DIAG + ALL))
    C.append(Case("vl_explicit_positions_delta_pos", VL + ["--dtype", "f32", "--seed", "19"],
                  _explicit_pos(10, 6), ALL))
    C.append(Case("vl_inputs_embeds_only", VL + ["--seed", "20"], _embeds(6, 2), DIAG))
    C.append(Case("vl_inputs_embeds_positions_delta", VL + ["--seed", "21"],
                  _embeds(7, 2, positions=True, delta=-1), DIAG))
    C.append(Case("vl_inputs_embeds_image_ids", VL + ["--seed", "22"], _image_embeds([(1, 4, 6)]), DIAG + ALL))
    C.append(Case("vl_decode_equals_prefill", VL + ["--seed", "23"], None, consistency=_consistency(7, 4)))
    C.append(Case("vl_bigger_image", VL + ["--hidden", "256", "--intermediate", "768", "--heads", "8",
                                           "--kv-heads", "4", "--head-dim", "32", "--layers", "4",
                                           "--vocab", "2048", "--seed", "24"],
                  _image([(1, 8, 12), (1, 4, 4)], N=3, visual=True), DIAG + ALL))
    # released RoPE shape (head_dim 128, sections 24,20,20, theta 5e6) at moderate coordinates (~300):
    # plain f32 angles (pos * inv_freq in f32) use ~20% of the tolerance here.
    HD128 = VL + ["--hidden", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "128",
                  "--intermediate", "256", "--mrope-section", "24,20,20", "--seed", "42"]
    C.append(Case("vl_headdim128_positions300", HD128, _large_pos(96, 300, -40), DIAG + ALL))
    # coordinates ~3000: an engine forming the angle as pos * inv_freq in float32 (as HF does) is off by
    # ~pos * 2^-24 rad and exceeds the tolerance (ratio ~1.1 in the f32 emulation); this case therefore
    # also requires RoPE angles computed more precisely than that (see README).
    C.append(Case("vl_rope_precision_pos3000", HD128, _large_pos(96, 2900, -40), DIAG + ALL))
    # checkpoints written by the oracle's own st.py (independent of make-test-model)
    C.append(Case("own_vl_bf16_sharded_image", [], _image([(1, 4, 6)], N=2, visual=True), DIAG + ALL,
                  own=dict(cfg=testmodel.make_config("qwen3-vl", hidden=48, heads=4, kv_heads=2, head_dim=16,
                                                     layers=2, intermediate=96, vocab=300, deepstack=0,
                                                     mrope_section=[2, 3, 3]),
                           dtype="bf16", shards=2, seed=40)))
    C.append(Case("own_qwen3_f16_untied", [], _text(9, 3), DIAG + ALL,
                  own=dict(cfg=testmodel.make_config("qwen3", hidden=40, heads=5, kv_heads=1, head_dim=8,
                                                     layers=2, intermediate=72, vocab=200, tied=False),
                           dtype="f16", seed=41)))
    # ---- negative --------------------------------------------------------------------
    C.append(Case("neg_vl_position_ids_rank1", VL, _bad_pos_rank, expect_error=True,
                  mentions=["position_ids"]))
    C.append(Case("neg_qwen3_position_ids_rank2", QWEN3, _bad_pos_rank, expect_error=True,
                  mentions=["position_ids"]))
    C.append(Case("neg_vl_visual_embeds_count", VL, _bad_visual_count, expect_error=True,
                  mentions=["visual_embeds"]))
    C.append(Case("neg_token_out_of_range", QWEN3, _bad_token, expect_error=True, mentions=["input_ids"]))
    # ---- DeepStack (only with --deepstack) -------------------------------------------
    C.append(Case("ds_vl_k3_image_diag", VL + ["--deepstack", "3", "--seed", "30"],
                  _ds_image([(1, 4, 6)], 3), DIAG + ALL, deepstack=True))
    C.append(Case("ds_vl_k1_explicit_layers", VL + ["--deepstack", "1", "--seed", "31"],
                  _ds_image([(1, 4, 4)], 1, layers=[0]), DIAG, deepstack=True))
    C.append(Case("ds_vl_k2_two_images_visual_decode", VL + ["--deepstack", "2", "--layers", "4", "--seed", "32"],
                  _ds_image([(1, 4, 4), (1, 6, 4)], 2, N=3, visual=True), DIAG + ALL, deepstack=True))
    C.append(Case("ds_vl_k3_decode_neg_delta", VL + ["--deepstack", "3", "--seed", "33"],
                  _ds_image([(1, 4, 6)], 3, N=3, delta=-5), DIAG, deepstack=True))
    C.append(Case("ds_vl_k3_embeds_explicit_pos_neg_delta", VL + ["--deepstack", "3", "--seed", "34"],
                  _ds_embeds(9, [2, 3, 4, 5], 3, N=2, delta=-2, explicit_pos=True), DIAG, deepstack=True))
    C.append(Case("ds_vl_nv0", VL + ["--deepstack", "3", "--seed", "35"],
                  _ds_embeds(5, [], 3, N=1), DIAG, deepstack=True))
    C.append(Case("ds_vl_k4_layers6_f32_untied", VL + ["--deepstack", "4", "--layers", "6", "--dtype", "f32",
                                                       "--untied", "--seed", "36"],
                  _ds_image([(1, 8, 4), (1, 2, 2)], 4, N=2), DIAG + ALL, deepstack=True))
    # 1-D model declaring DeepStack explicitly (docs/contracts.md §2: both keys or neither);
    # make-test-model refuses --deepstack for --arch qwen3, so the keys are added to its
    # config.json.
    C.append(Case("ds_qwen3_1d_k2_embeds", QWEN3 + ["--seed", "37"],
                  _ds_embeds(8, [1, 2, 5], 2, N=2, delta=-1, explicit_pos=True, layers=[0, 2]), DIAG, deepstack=True,
                  config_patch={"deepstack_language_layer_indices": [0, 2],
                                "deepstack_max_visual_positions": 16}))
    # docs/contracts.md §5 fixed fixture: zero projections, unit norms, embeddings 1, features 10 at
    # rows 1..3
    C.append(Case("ds_fixture_contracts5", [], _fixture, DIAG, deepstack=True,
                  own=dict(cfg=testmodel.make_config("qwen3-vl", hidden=8, layers=3, heads=2, kv_heads=1,
                                                     head_dim=4, intermediate=16, vocab=32, deepstack=3),
                           zero=True, dtype="bf16")))
    C.append(Case("ds_neg_positions_not_increasing", VL + ["--deepstack", "3"], _bad_ds_order,
                  deepstack=True, expect_error=True, mentions=["deepstack_positions", "visual_positions"]))
    C.append(Case("ds_neg_layers_mismatch", VL + ["--deepstack", "3"], _bad_ds_layers,
                  deepstack=True, expect_error=True, mentions=["deepstack_layers", "layer_indices"]))
    C += moe_cases()
    return C


QWEN3_MOE = ["--arch", "qwen3-moe"]
VL_MOE = ["--arch", "qwen3-vl-moe"]


def _moe(experts, top_k, inter, *extra):
    return ["--experts", str(experts), "--top-k", str(top_k), "--moe-intermediate", str(inter)] + list(extra)


def moe_cases():
    """Mixture of experts (issue 32; moe_ref.py), only with --moe. Every case compares f32 logits,
    every post-layer state (hidden_after_layer.{l}), K/V and the routing (router_experts.{l},
    router_weights.{l}) of every sparse layer at the f32 tolerances of the dense cases: the sparse
    MLP adds one more softmax (over E, here <= 32 experts) and a sum of k weighted expert outputs,
    the same dot-product lengths (H, I_e) as the dense MLP, so the dense argument holds unchanged;
    the FAKE_VLSTACK_F32 emulation uses ~1% of it here as well. Expert sizes are chosen with
    2·I_e != H and I_e != H so that a transposed fused tensor cannot load by accident."""
    C = []
    # ---- Qwen3-MoE: per-expert layout ------------------------------------------------------
    C.append(Case("moe_qwen3_norm_f32_untied_diag",
                  QWEN3_MOE + _moe(8, 2, 24, "--dtype", "f32", "--untied", "--seed", "50"),
                  _text(12, 3), DIAG + ALL, moe=True,
                  expect_model={"dtype": "F32", "tied": False, "normalize": True, "sparse_layers": [0, 1, 2]}))
    C.append(Case("moe_qwen3_no_norm_bf16", QWEN3_MOE + _moe(8, 3, 40, "--no-norm-topk", "--seed", "51"),
                  _text(10, 2), DIAG + ALL, moe=True,
                  expect_model={"dtype": "BF16", "normalize": False}))
    C.append(Case("moe_qwen3_mixed_step2_mlp_only",
                  QWEN3_MOE + _moe(6, 2, 24, "--layers", "6", "--sparse-step", "2", "--mlp-only-layers", "3",
                                   "--seed", "52"),
                  _text(9, 2), DIAG, moe=True, expect_model={"sparse_layers": [1, 5]}))
    C.append(Case("moe_qwen3_mlp_only_first_last_no_norm",
                  QWEN3_MOE + _moe(16, 4, 20, "--layers", "4", "--mlp-only-layers", "0,3", "--no-norm-topk",
                                   "--dtype", "f16", "--seed", "53"),
                  _text(11, 2), DIAG + ALL, moe=True,
                  expect_model={"dtype": "F16", "sparse_layers": [1, 2], "normalize": False}))
    C.append(Case("moe_qwen3_top1_no_norm", QWEN3_MOE + _moe(16, 1, 24, "--no-norm-topk", "--seed", "54"),
                  _text(10, 2), DIAG, moe=True, expect_model={"normalize": False}))
    C.append(Case("moe_qwen3_topk_equals_experts", QWEN3_MOE + _moe(4, 4, 24, "--seed", "55"),
                  _text(8, 2), DIAG, moe=True))
    C.append(Case("moe_qwen3_explicit_positions_embeds", QWEN3_MOE + _moe(8, 2, 24, "--seed", "56"),
                  _embeds(7, 2, positions=True, delta=3), DIAG, moe=True))
    C.append(Case("moe_qwen3_bigger",
                  QWEN3_MOE + _moe(32, 4, 48, "--hidden", "128", "--intermediate", "256", "--heads", "4",
                                   "--kv-heads", "2", "--head-dim", "32", "--layers", "4", "--vocab", "1024",
                                   "--sparse-step", "2", "--seed", "57"),
                  _text(40, 3), DIAG + ALL, moe=True, expect_model={"sparse_layers": [1, 3]}))
    C.append(Case("moe_qwen3_decode_equals_prefill", QWEN3_MOE + _moe(8, 2, 24, "--seed", "58"), None,
                  consistency=_consistency(6, 5), moe=True))
    C.append(Case("moe_qwen3_greedy_chain_untied",
                  QWEN3_MOE + _moe(8, 2, 24, "--untied", "--dtype", "f32", "--vocab", "96", "--seed", "59"),
                  _text(6), ALL, moe=True, generate=10))
    # ---- Qwen3-VL-MoE: fused layout ----------------------------------------------------------
    C.append(Case("moe_vl_fused_text_diag", VL_MOE + _moe(8, 2, 24, "--seed", "60"), _text(8, 3), DIAG + ALL,
                  moe=True, expect_model={"normalize": True, "sparse_layers": [0, 1, 2]}))
    C.append(Case("moe_vl_fused_two_images_step2_f32",
                  VL_MOE + _moe(8, 2, 20, "--layers", "4", "--sparse-step", "2", "--dtype", "f32", "--untied",
                                "--seed", "61"),
                  _image([(1, 4, 6), (1, 6, 4)], N=2, visual=True), DIAG + ALL, moe=True,
                  expect_model={"dtype": "F32", "sparse_layers": [1, 3]}))
    # Qwen3VLMoeTextSparseMoeBlock renormalises whatever text_config.norm_topk_prob says, so the
    # oracle does too. ADR 0027 has the engine refuse `false` by name instead (a file asking for
    # unrenormalised weights asks for what no engine does): both are accepted here, an exit 0
    # must match the renormalised oracle, a refusal must name the key (printed as a NOTE).
    C.append(Case("moe_vl_norm_key_false_still_renormalises", VL_MOE + _moe(8, 3, 24, "--seed", "62"),
                  _image([(1, 4, 4)], N=2), DIAG, moe=True, refusal_ok=["norm_topk_prob"],
                  config_patch={"text_config": {"norm_topk_prob": False}}, expect_model={"normalize": True}))
    C.append(Case("moe_vl_decode_equals_prefill", VL_MOE + _moe(8, 2, 24, "--seed", "63"), None,
                  consistency=_consistency(7, 4), moe=True))
    # DeepStack on the MoE decoder (dense layer 0 via mlp_only_layers, sparse 1..3)
    C.append(Case("moe_vl_ds_k3_image_decode_mixed",
                  VL_MOE + _moe(8, 2, 24, "--deepstack", "3", "--layers", "4", "--mlp-only-layers", "0",
                                "--seed", "64"),
                  _ds_image([(1, 4, 6)], 3, N=2), DIAG + ALL, deepstack=True, moe=True,
                  expect_model={"sparse_layers": [1, 2, 3]}))
    C.append(Case("moe_vl_ds_k2_embeds_explicit_pos",
                  VL_MOE + _moe(6, 2, 20, "--deepstack", "2", "--layers", "3", "--seed", "65"),
                  _ds_embeds(9, [2, 3, 4, 5], 2, N=2, delta=-2, explicit_pos=True), DIAG, deepstack=True, moe=True))
    C.append(Case("moe_vl_ds_greedy_chain_untied",
                  VL_MOE + _moe(8, 2, 24, "--deepstack", "3", "--layers", "4", "--untied", "--dtype", "f32",
                                "--vocab", "128", "--seed", "66"),
                  _ds_image([(1, 4, 4)], 3), ALL, deepstack=True, moe=True, generate=10))
    # checkpoints written by the oracle's own testmodel.py (the engine's loader against an
    # independent writer of both layouts)
    C.append(Case("moe_own_qwen3_per_expert_bf16_sharded", [], _text(9, 2), DIAG + ALL, moe=True,
                  own=dict(cfg=testmodel.make_config("qwen3-moe", hidden=40, heads=5, kv_heads=1, head_dim=8,
                                                     layers=3, intermediate=56, vocab=200, tied=False,
                                                     moe=testmodel.moe_keys(6, 2, 12, 1, [1], True)),
                           dtype="bf16", shards=2, seed=67)))
    C.append(Case("moe_own_vl_fused_f32_image", [], _image([(1, 4, 6)], N=2), DIAG + ALL, moe=True,
                  own=dict(cfg=testmodel.make_config("qwen3-vl-moe", hidden=40, heads=4, kv_heads=2, head_dim=10,
                                                     layers=3, intermediate=56, vocab=300, deepstack=0,
                                                     mrope_section=[1, 2, 2],
                                                     moe=testmodel.moe_keys(6, 2, 12, 2, [], True)),
                           dtype="f32", seed=68)))
    return C


# ----------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------

def run_cmd(cmd, log_prefix):
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CaseFail(f"timeout after {TIMEOUT}s: {' '.join(cmd)}")
    except OSError as e:
        raise CaseFail(f"cannot run {cmd[0]}: {e}")
    with open(log_prefix + ".stdout", "wb") as f:
        f.write(p.stdout)
    with open(log_prefix + ".stderr", "wb") as f:
        f.write(p.stderr)
    return p, time.time() - t


def tail(b, n=300):
    s = b.decode("utf-8", "replace").strip().replace("\n", " | ")
    return s[-n:]


class Runner:
    def __init__(self, vlstack, work, verbose, precision="f32"):
        self.vlstack = vlstack
        self.work = work
        self.verbose = verbose
        self.precision = precision
        # f32: summation order only (compare.py). bf16: see BF16_RTOL below.
        self.tol = {"bf16": (BF16_RTOL, BF16_ATOL_SCALE), "int8": (INT8_RTOL, INT8_ATOL_SCALE)}.get(
            precision, (compare.RTOL, compare.ATOL_SCALE))
        self.models = {}
        self.aux = {}     # reference path -> MoE router probabilities (ref_forward)
        self.notes = []   # near-ties accepted in the current case (printed with its PASS line)

    def exe(self):
        v = self.vlstack
        if v.endswith(".py"):
            return [sys.executable, v]
        return [v]

    def model(self, make, patch=None, own=None):
        key = hashlib.sha1(json.dumps([make, patch, own], sort_keys=True).encode()).hexdigest()[:12]
        if key in self.models:
            return self.models[key]
        d = os.path.join(self.work, "models", key)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if own is not None:
            testmodel.write_model(d, own["cfg"], testmodel.random_weights(own["cfg"], own.get("seed", 0),
                                                                          zero=own.get("zero", False)),
                                  own.get("dtype", "bf16"), own.get("shards", 1))
            with open(d + ".args", "w") as f:
                f.write("written by the oracle (testmodel.py): " + json.dumps(own) + "\n")
            m = qwen3_ref.Model.load(d)
            self.models[key] = (d, m)
            return d, m
        cmd = self.exe() + ["make-test-model", "--out", d] + make
        p, _ = run_cmd(cmd, d + ".make")
        if p.returncode != 0:
            raise CaseFail(f"make-test-model {' '.join(make)} exited {p.returncode}: {tail(p.stderr)}")
        with open(d + ".args", "w") as f:
            f.write(" ".join(make) + "\n")
            if patch:
                f.write("config.json patched with " + json.dumps(patch) + "\n")
        if patch:
            cp = os.path.join(d, "config.json")
            with open(cp) as f:
                conf = json.load(f)
            for k, v in patch.items():
                if isinstance(v, dict) and isinstance(conf.get(k), dict):
                    conf[k].update(v)
                else:
                    conf[k] = v
            with open(cp, "w") as f:
                json.dump(conf, f, indent=2)
        try:
            m = qwen3_ref.Model.load(d)
        except (qwen3_ref.RefError, st.SafetensorsError, OSError, ValueError, KeyError) as e:
            raise CaseFail(f"oracle cannot load the model from make-test-model {' '.join(make)}: {e}")
        self.models[key] = (d, m)
        return d, m

    def check_model(self, case, d, m):
        e = case.expect_model
        c = m.cfg
        if "dtype" in e:
            dts = set()
            files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
            for fn in files:
                dts |= set(st.load_dtypes(os.path.join(d, fn)).values())
            if dts != {e["dtype"]}:
                raise CaseFail(f"make-test-model wrote weight dtypes {sorted(dts)}, expected {e['dtype']}")
        if "shards" in e:
            files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
            if len(files) != e["shards"] or not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                raise CaseFail(f"make-test-model wrote {len(files)} safetensors files, expected {e['shards']} + index")
        if "tied" in e and c.tied != e["tied"]:
            raise CaseFail(f"config tie_word_embeddings={c.tied}, expected {e['tied']}")
        if "interleaved" in e and c.interleaved != e["interleaved"]:
            raise CaseFail(f"config mrope_interleaved={c.interleaved}, expected {e['interleaved']}")
        # generic sanity: the flags we asked for are what the config says
        args = case.make
        for flag, val in (("--hidden", c.H), ("--layers", c.L), ("--heads", c.nh), ("--kv-heads", c.nkv),
                          ("--head-dim", c.D), ("--intermediate", c.I), ("--vocab", c.V)):
            if flag in args and int(args[args.index(flag) + 1]) != val:
                raise CaseFail(f"config has {flag[2:]}={val}, asked for {args[args.index(flag) + 1]}")
        arch = args[args.index("--arch") + 1] if "--arch" in args else "qwen3-vl"
        want_mode = "1d" if arch in ("qwen3", "qwen3-moe") else "mrope"
        if c.mode != want_mode:
            raise CaseFail(f"config position mode {c.mode}, expected {want_mode}")
        if arch in ("qwen3-moe", "qwen3-vl-moe"):
            self.check_moe_model(case, d, c, arch)
        elif c.moe is not None:
            raise CaseFail(f"make-test-model --arch {arch} wrote a {c.model_type} config")

    def check_moe_model(self, case, d, c, arch):
        """The MoE options given are what config.json and the checkpoint's layout say."""
        args = case.make
        want_type = {"qwen3-moe": "qwen3_moe", "qwen3-vl-moe": "qwen3_vl_moe"}[arch]
        if c.model_type != want_type or c.moe is None:
            raise CaseFail(f"make-test-model --arch {arch} wrote model_type {c.model_type!r}, expected {want_type}")
        mc = c.moe
        for flag, val in (("--experts", mc.experts), ("--top-k", mc.top_k), ("--moe-intermediate", mc.I),
                          ("--sparse-step", mc.sparse_step)):
            if flag in args and int(args[args.index(flag) + 1]) != val:
                raise CaseFail(f"config has {flag[2:]}={val}, asked for {args[args.index(flag) + 1]}")
        if "--mlp-only-layers" in args:
            want = [int(x) for x in args[args.index("--mlp-only-layers") + 1].split(",") if x]
            if sorted(mc.mlp_only_layers) != want:
                raise CaseFail(f"config has mlp_only_layers={mc.mlp_only_layers}, asked for {want}")
        if "--no-norm-topk" in args and mc.norm_topk_prob_declared:
            raise CaseFail("config has norm_topk_prob true, asked for --no-norm-topk")
        if "sparse_layers" in case.expect_model and mc.sparse_layers != case.expect_model["sparse_layers"]:
            raise CaseFail(f"sparse layers {mc.sparse_layers}, the case expects {case.expect_model['sparse_layers']}")
        if "normalize" in case.expect_model and mc.normalize != case.expect_model["normalize"]:
            raise CaseFail(f"routing renormalises={mc.normalize}, the case expects {case.expect_model['normalize']}")
        names = set()
        for fn in os.listdir(d):
            if fn.endswith(".safetensors"):
                names |= set(st.load_dtypes(os.path.join(d, fn)))
        fused = any(n.endswith("mlp.experts.gate_up_proj") for n in names)
        per = any(".mlp.experts.0.gate_proj.weight" in n for n in names)
        want_layout = "fused" if arch == "qwen3-vl-moe" else "per_expert"
        if mc.sparse_layers and (fused, per) != (want_layout == "fused", want_layout == "per_expert"):
            raise CaseFail(f"checkpoint expert layout is not {want_layout} (fused tensors: {fused}, per-expert: {per})")

    def engine_forward(self, d, inp, flags, cdir, tag):
        ip = os.path.join(cdir, f"{tag}in.safetensors")
        op = os.path.join(cdir, f"{tag}engine.safetensors")
        st.save_file(inp, ip)
        if os.path.exists(op):
            os.remove(op)
        cmd = self.exe() + ["forward", "--model", d, "--input", ip, "--output", op] + flags
        if self.precision != "f32":
            cmd += ["--precision", self.precision]
        with open(os.path.join(cdir, f"{tag}cmd.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n")
        p, dt = run_cmd(cmd, os.path.join(cdir, f"{tag}engine"))
        return p, ip, op

    def ref_forward(self, m, inp, flags, cdir, tag, force=None):
        out = qwen3_ref.forward(m, {k: v for k, v in inp.items()},
                                diagnostics="--diagnostics" in flags, all_logits="--all-logits" in flags,
                                force_routing=force)
        rp = os.path.join(cdir, f"{tag}ref.safetensors")
        st.save_file({k: v for k, v in out.items() if not k.startswith("_")}, rp)
        # MoE: the float64 router probabilities for compare.py's near-tie rule
        self.aux[rp] = {f"router_probs.{li}": p for li, p in out["_routing"].items()}
        if m.cfg.moe is not None:
            self.aux[rp]["norm_topk_prob"] = m.cfg.moe.normalize
            if self.aux[rp].keys() - {"norm_topk_prob"}:
                st.save_file({k: v for k, v in self.aux[rp].items() if k != "norm_topk_prob"},
                             os.path.join(cdir, f"{tag}ref_aux.safetensors"))
        return rp, out

    def compare(self, op, rp, cdir, tag, ignore=()):
        logp = os.path.join(cdir, f"{tag}compare.txt")
        notes = []
        with open(logp, "w") as f:
            ok, fails = compare.compare_files(op, rp, *self.tol, ignore=ignore, out=f, aux=self.aux.get(rp),
                                              notes=notes)
        if self.verbose:
            with open(logp) as f:
                sys.stdout.write(f.read())
        self.notes += [f"{tag}{n}" for n in notes]
        return ok, fails

    def recompare_forced(self, m, inp, flags, op, rp, cdir, ok, fails):
        """After an accepted near-tie where the engine chose a different expert SET (the k-th
        against the (k+1)-th), that row's layer output legitimately differs by about
        w_k·|expert_a(m) − expert_b(m)| (top-k routing is discontinuous there), and so does
        everything downstream. The reference is then re-run with the engine's choice forced at
        exactly those (layer, row) places (moe_ref.sparse_mlp force; weights still the oracle's
        p) and everything is compared against that run, iterating while new flips appear."""
        a = st.load_file(op)
        force = {}
        for _ in range(4):
            b = st.load_file(rp)
            new = False
            for li in sorted(m.cfg.moe.sparse_layers):
                ne = f"router_experts.{li}"
                if ne in a and ne in b and a[ne].shape == b[ne].shape:
                    for r, ex in moe_ref.boundary_flips(a[ne], b[ne]).items():
                        if force.get(li, {}).get(r) != ex:
                            force.setdefault(li, {})[r] = ex
                            new = True
            if not new:
                break
            self.notes.append(f"boundary near-tie flip(s) {force}: compared against the oracle re-run with the "
                              "engine's experts forced there")
            rp, _ = self.ref_forward(m, inp, flags, cdir, "forced_", force=force)
            ok, fails = self.compare(op, rp, cdir, "forced_")
        return ok, fails

    def check_routing(self, out):
        """A MoE case must route informatively: the oracle's chosen expert sets differ across rows in
        every sparse layer (a degenerate router init would hide routing bugs)."""
        for li in sorted(out["_routing"]):
            e = out[f"router_experts.{li}"] if f"router_experts.{li}" in out else None
            if e is None or e.shape[0] < 4:
                continue
            sets, firsts = moe_ref.routing_stats(e)
            full = e.shape[1] == out["_routing"][li].shape[1]   # k == E: every row has every expert
            if firsts < 2 or (not full and sets < 2):
                raise CaseFail(f"degenerate routing in the model (make-test-model's router init): layer {li} gives "
                               f"{sets} distinct expert set(s) and {firsts} distinct first choice(s) over "
                               f"{e.shape[0]} rows")

    def run(self, case, seed):
        cdir = os.path.join(self.work, "cases", case.name)
        if os.path.exists(cdir):
            shutil.rmtree(cdir)
        os.makedirs(cdir)
        d, m = self.model(case.make, case.config_patch, case.own)
        if case.own is None:
            self.check_model(case, d, m)
        rng = np.random.default_rng(seed)
        self.notes = []
        if case.consistency is not None:
            return self.run_consistency(case, d, m, rng, cdir)
        if case.generate:
            return self.run_generate(case, d, m, rng, cdir)
        inp = case.build(m.cfg, rng)
        if case.expect_error:
            p, _, op = self.engine_forward(d, inp, case.flags, cdir, "")
            if p.returncode == 0:
                raise CaseFail("engine accepted an invalid request (exit 0)")
            if p.returncode < 0:
                raise CaseFail(f"engine crashed with signal {-p.returncode} instead of a clean error")
            if not p.stderr.strip():
                raise CaseFail(f"engine exited {p.returncode} with an empty stderr")
            err = p.stderr.decode("utf-8", "replace")
            if case.mentions and not any(w in err for w in case.mentions):
                raise CaseFail(f"error message names none of {list(case.mentions)} "
                               "(docs/contracts.md §2: say which tensor and rule): "
                               f"{tail(p.stderr, 200)}")
            return f"rejected (exit {p.returncode}): {tail(p.stderr, 120)}"
        try:
            rp, rout = self.ref_forward(m, inp, case.flags, cdir, "")
        except qwen3_ref.RefError as e:
            raise CaseFail(f"oracle rejected the case input: {e}")
        if m.cfg.moe is not None:
            self.check_routing(rout)
        p, _, op = self.engine_forward(d, inp, case.flags, cdir, "")
        if p.returncode > 0 and case.refusal_ok:
            err = p.stderr.decode("utf-8", "replace")
            if any(w in err for w in case.refusal_ok):
                self.notes.append(f"engine refused the model by name instead of running it: {tail(p.stderr, 240)}")
                return "refused by name"
        if p.returncode != 0:
            raise CaseFail(f"engine forward exited {p.returncode}: {tail(p.stderr)}")
        if not os.path.exists(op):
            raise CaseFail("engine forward wrote no output file")
        ok, fails = self.compare(op, rp, cdir, "")
        if self.notes and m.cfg.moe is not None:
            ok, fails = self.recompare_forced(m, inp, case.flags, op, rp, cdir, ok, fails)
        if not ok:
            raise CaseFail("; ".join(fails[:3]) + (f" (+{len(fails) - 3} more)" if len(fails) > 3 else ""))
        if case.own and case.own.get("zero"):
            # the fixture is exact: visual rows 11, 21, 31; other rows 1; K/V zero
            a = st.load_file(op)
            for li, val in enumerate((11.0, 21.0, 31.0)):
                h = a[f"hidden_after_layer.{li}"]
                vis = np.zeros(h.shape[0], bool)
                vis[inp["deepstack_positions"]] = True
                if not (np.all(h[vis] == val) and np.all(h[~vis] == 1.0)):
                    raise CaseFail(f"fixture: hidden_after_layer.{li} is not exactly {val} on visual rows / 1 elsewhere")
            for n in a:
                if n.startswith(("k_cache.", "v_cache.")) and np.any(a[n] != 0):
                    raise CaseFail(f"fixture: {n} not all zero")
        return ""

    def run_generate(self, case, d, m, rng, cdir):
        """`forward --generate N`: the prompt's logits within tolerance, the greedy tokens equal to the
        reference's (batch_ref.greedy, stopping after an EOS id), up to a near-tie (image_cases.py's
        rule: a reference step whose top-2 gap is below TIE_REL·max(1,|top|) ends the comparison)."""
        inp = case.build(m.cfg, rng)
        try:
            rp, _ = self.ref_forward(m, inp, case.flags, cdir, "")
            g = batch_ref.greedy(m, inp, case.generate, batch_ref.eos_ids(d))
        except qwen3_ref.RefError as e:
            raise CaseFail(f"oracle rejected the case input: {e}")
        toks = g["tokens"]
        if len(set(toks)) < 3:
            raise CaseFail(f"uninformative reference chain {toks} (fewer than 3 distinct tokens): pick another seed")
        p, _, op = self.engine_forward(d, inp, case.flags + ["--generate", str(case.generate)], cdir, "")
        if p.returncode != 0:
            raise CaseFail(f"engine forward --generate exited {p.returncode}: {tail(p.stderr)}")
        a = st.load_file(op)
        if "generated_tokens" not in a:
            raise CaseFail("engine output has no generated_tokens")
        eg = [int(x) for x in np.asarray(a["generated_tokens"]).reshape(-1)]
        ok, fails = self.compare(op, rp, cdir, "", ignore=("generated_tokens",))
        if not ok:
            raise CaseFail("; ".join(fails[:3]))
        for j in range(max(len(toks), len(eg))):
            if j < len(toks) and g["gaps"][j] < TIE_REL * max(1.0, g["tops"][j]):
                if eg[:j] != toks[:j]:
                    raise CaseFail(f"generated {eg} != reference {toks} before a near-tie at step {j}")
                self.notes.append(f"reference step {j} is a near-tie (gap {g['gaps'][j]:.3g}): tokens compared "
                                  f"up to it")
                return f"tokens {toks[:j]} equal up to a tie"
            if j >= len(toks) or j >= len(eg) or eg[j] != toks[j]:
                raise CaseFail(f"generated {eg} != reference {toks}")
        return f"tokens {toks} equal"

    def run_consistency(self, case, d, m, rng, cdir):
        dec_in, pre_in, S = case.consistency(m.cfg, rng)
        probs = []
        # engine vs oracle, both runs
        rp1, r1 = self.ref_forward(m, dec_in, DIAG, cdir, "dec_")
        rp2, r2 = self.ref_forward(m, pre_in, ALL + DIAG, cdir, "pre_")
        # the oracle must agree with itself (decode == longer prefill)
        e = float(np.abs(r1["decode_logits"].astype(np.float64) - r2["logits"][S:]).max())
        if e > 1e-4:
            probs.append(f"oracle decode vs prefill differ by {e:.3g}")
        p1, _, op1 = self.engine_forward(d, dec_in, DIAG, cdir, "dec_")
        p2, _, op2 = self.engine_forward(d, pre_in, ALL + DIAG, cdir, "pre_")
        if p1.returncode != 0:
            raise CaseFail(f"engine decode run exited {p1.returncode}: {tail(p1.stderr)}")
        if p2.returncode != 0:
            raise CaseFail(f"engine prefill run exited {p2.returncode}: {tail(p2.stderr)}")
        for op, rp, tag in ((op1, rp1, "dec_"), (op2, rp2, "pre_")):
            ok, fails = self.compare(op, rp, cdir, tag)
            if not ok:
                probs.append(f"{tag[:-1]} vs oracle: " + "; ".join(fails[:2]))
        a = st.load_file(op1)
        b = st.load_file(op2)
        if "decode_logits" in a and "logits" in b:
            ok, msg = compare.compare_arrays("engine decode_logits vs engine prefill logits[S:]",
                                             a["decode_logits"], b["logits"][S:], *self.tol)
            if not ok:
                probs.append(msg)
            for i in range(m.cfg.L):
                for t in ("k", "v"):
                    n = f"{t}_cache.{i}"
                    if n in a and n in b:
                        ok, msg = compare.compare_arrays(f"engine {n} decode vs prefill", a[n], b[n],
                                                                 *self.tol)
                        if not ok:
                            probs.append(msg)
        if probs:
            raise CaseFail("; ".join(probs[:3]))
        return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vlstack", required=True, help="path to the vlstack binary")
    ap.add_argument("--work", required=True, help="scratch directory (models, inputs, outputs, logs)")
    ap.add_argument("--filter", default=None, help="run only cases whose name contains SUBSTR")
    ap.add_argument("--deepstack", action="store_true", help="also run the DeepStack cases")
    ap.add_argument("--moe", action="store_true", help="also run the mixture-of-experts cases (moe_*)")
    ap.add_argument("--list", action="store_true", help="list the selected cases and exit")
    ap.add_argument("--precision", choices=("f32", "bf16", "int8"), default="f32",
                    help="engine matmul precision (bf16: compared at the bf16 tolerance)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print per-tensor comparisons")
    a = ap.parse_args(argv)
    sel = [c for c in cases() if (a.deepstack or not c.deepstack) and (a.moe or not c.moe)
           and (a.filter is None or a.filter in c.name)]
    if a.list:
        for c in sel:
            print(c.name)
        return 0
    os.makedirs(a.work, exist_ok=True)
    r = Runner(os.path.abspath(a.vlstack) if os.path.exists(a.vlstack) else a.vlstack,
               os.path.abspath(a.work), a.verbose, a.precision)
    passed = failed = 0
    for i, c in enumerate(sel):
        seed = int(hashlib.sha1(c.name.encode()).hexdigest()[:8], 16)
        try:
            note = r.run(c, seed)
            print(f"PASS {c.name}" + (f" ({note})" if note and a.verbose else ""), flush=True)
            for n in r.notes:
                print(f"  NOTE {c.name}: {n}", flush=True)
            passed += 1
        except CaseFail as e:
            print(f"FAIL {c.name}: {e}", flush=True)
            failed += 1
        except Exception as e:  # noqa: BLE001 - a driver bug must not hide the other cases
            print(f"FAIL {c.name}: driver error {type(e).__name__}: {e}", flush=True)
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
