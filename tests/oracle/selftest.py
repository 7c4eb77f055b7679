#!/usr/bin/python3
"""Self-test of the NumPy oracle: run with /usr/bin/python3 tests/oracle/selftest.py"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import compare  # noqa: E402
import moe_ref  # noqa: E402
import qwen3_ref as R  # noqa: E402
import st  # noqa: E402
import testmodel  # noqa: E402

FAILS = []


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
    if not cond:
        FAILS.append(name)


def test_rope_index_examples():
    # §B.4 image example
    VS, VE, IMG, VID, TXT, TS = 100, 101, 102, 103, 5, 7
    ids = [TXT, TXT, TXT, VS] + [IMG] * 6 + [VE, TXT, TXT]
    pos, d = R.get_rope_index(ids, [[1, 4, 6]], None, image_token_id=IMG, video_token_id=VID,
                              vision_start_token_id=VS)
    exp = np.array([[0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8, 9],
                    [0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 7, 8, 9],
                    [0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9]])
    check("B.4 image positions", np.array_equal(pos, exp), pos.tolist())
    check("B.4 image rope_delta == -3", d == -3, d)
    check("B.4 first decode coordinate == 10", len(ids) + d == 10)
    # §B.4 video example
    ids = [TXT, TS, TS, VS] + [VID] * 4 + [VE, TS, TS, VS] + [VID] * 4 + [VE, TXT]
    pos, d = R.get_rope_index(ids, None, [[2, 4, 4]], image_token_id=IMG, video_token_id=VID,
                              vision_start_token_id=VS)
    exp = np.array([[0, 1, 2, 3, 4, 4, 4, 4, 6, 7, 8, 9, 10, 10, 10, 10, 12, 13],
                    [0, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8, 9, 10, 10, 11, 11, 12, 13],
                    [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11, 10, 11, 12, 13]])
    check("B.4 video positions", np.array_equal(pos, exp), pos.tolist())
    check("B.4 video rope_delta == -4", d == -4, d)
    # text only / no grids
    pos, d = R.get_rope_index([1, 2, 3], None, None, image_token_id=IMG, video_token_id=VID,
                              vision_start_token_id=VS)
    check("text-only positions", np.array_equal(pos, np.tile(np.arange(3), (3, 1))) and d == 0)
    # two images, second one tall: advance by max(gh, gw)
    ids = [VS] + [IMG] * 4 + [VE, VS] + [IMG] * 6 + [VE, TXT]
    pos, d = R.get_rope_index(ids, [[1, 4, 4], [1, 6, 4]], None, image_token_id=IMG,
                              vision_start_token_id=VS, video_token_id=VID)
    exp_T = [0, 1, 1, 1, 1, 3, 4, 5, 5, 5, 5, 5, 5, 8, 9]
    exp_H = [0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7, 7, 8, 9]
    exp_W = [0, 1, 2, 1, 2, 3, 4, 5, 6, 5, 6, 5, 6, 8, 9]
    check("two images positions", np.array_equal(pos, np.array([exp_T, exp_H, exp_W])), pos.tolist())
    check("two images delta", d == 10 - 15, d)


def test_rope_and_norm():
    # RMSNorm: x=[3,4], w=[1,2], eps=0 -> [3,8]/sqrt(12.5)
    y = R.rmsnorm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.0)
    check("rmsnorm hand case", np.allclose(y, np.array([3.0, 8.0]) / np.sqrt(12.5), rtol=0, atol=1e-15))
    # inv_freq
    f = R.inv_freq(4, 10000.0)
    check("inv_freq d=4", np.allclose(f, [1.0, 0.01], rtol=1e-15))
    f = R.inv_freq(128, 5e6)
    check("inv_freq[1] ~ 0.78583 (d=128, 5e6)", abs(f[1] - 0.78583) < 1e-5, f[1])
    check("inv_freq[63] ~ 2.545e-7", abs(f[63] - 2.545e-7) < 1e-9, f[63])
    # rotate_half RoPE: D=4, pos p: pairs (0,2) angle p, (1,3) angle p*0.01
    p = 3.0
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]])
    ang = np.array([[p * 1.0, p * 0.01]])
    out = R.apply_rope(x, ang)[0, 0]
    a0, a1 = p, p * 0.01
    exp = [1 * np.cos(a0) - 3 * np.sin(a0), 2 * np.cos(a1) - 4 * np.sin(a1),
           3 * np.cos(a0) + 1 * np.sin(a0), 4 * np.cos(a1) + 2 * np.sin(a1)]
    check("rope rotate_half hand case", np.allclose(out, exp, rtol=0, atol=1e-14), (out, exp))
    # interleaved slot map for [24,20,20]
    ax = R.slot_axes(64, [24, 20, 20], True)
    exp = [0, 1, 2] * 20 + [0, 0, 0, 0]
    check("interleaved slot map THW*20 TTTT", ax.tolist() == exp)
    check("interleaved counts 24/20/20", [int((ax == k).sum()) for k in range(3)] == [24, 20, 20])
    ax = R.slot_axes(64, [16, 24, 24], False)
    check("chunked slot map", ax.tolist() == [0] * 16 + [1] * 24 + [2] * 24)
    # M-RoPE angles pick the right axis
    cfg = R.Config(testmodel.make_config("qwen3-vl", head_dim=12, hidden=24, heads=2, kv_heads=1,
                                         mrope_section=[2, 2, 2], rope_theta=100.0))
    coords = np.array([[5], [7], [11]])
    ang = R.rope_angles(cfg, coords)[0]
    f = R.inv_freq(12, 100.0)
    exp = np.array([5 * f[0], 7 * f[1], 11 * f[2], 5 * f[3], 7 * f[4], 11 * f[5]])
    check("mrope interleaved angles", np.allclose(ang, exp, rtol=1e-15), (ang, exp))
    cfg.interleaved = False
    ang = R.rope_angles(cfg, coords)[0]
    exp = np.array([5 * f[0], 5 * f[1], 7 * f[2], 7 * f[3], 11 * f[4], 11 * f[5]])
    check("mrope chunked angles", np.allclose(ang, exp, rtol=1e-15), (ang, exp))


def test_st_roundtrip(tmp):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = st.round_to_bf16(a)
    p = os.path.join(tmp, "t.safetensors")
    st.save_file({"a": a, "b": b, "h": a.astype(np.float16), "i": np.arange(6, dtype=np.int32)}, p,
                 dtypes={"b": "BF16"})
    r = st.load_file(p)
    dts = st.load_dtypes(p)
    check("st f32 roundtrip", np.array_equal(r["a"], a))
    check("st bf16 exact roundtrip", np.array_equal(r["b"], b) and dts["b"] == "BF16")
    check("st f16 roundtrip", np.array_equal(r["h"], a.astype(np.float16)) and dts["h"] == "F16")
    check("st i32 roundtrip", np.array_equal(r["i"], np.arange(6)) and dts["i"] == "I32")
    # bf16 bit conversion facts
    check("bf16 1.0 bits", st.f32_to_bf16_bits(np.array([1.0], np.float32))[0] == 0x3F80)
    check("bf16 rne tie-to-even", st.round_to_bf16(np.array([1 + 2**-8], np.float32))[0] == 1.0
          and st.round_to_bf16(np.array([1 + 3 * 2**-8], np.float32))[0] == 1 + 2**-6)
    # sharded
    w = {f"w{i}": rng.standard_normal(3).astype(np.float32) for i in range(5)}
    d = os.path.join(tmp, "sh")
    st.save_checkpoint(w, d, shards=2)
    r = st.load_checkpoint(d)
    check("st sharded checkpoint", set(r) == set(w) and all(np.array_equal(r[k], w[k]) for k in w)
          and os.path.exists(os.path.join(d, "model.safetensors.index.json")))


def test_fixture(tmp):
    """docs/contracts.md §5 fixed oracle: identity-like layers, embeddings 1, features 10 for
    layers 0,1,2."""
    cfg = testmodel.make_config("qwen3-vl", hidden=8, layers=3, heads=2, kv_heads=1, head_dim=4,
                                intermediate=16, vocab=32, deepstack=3)
    w = testmodel.random_weights(cfg, zero=True)
    d = os.path.join(tmp, "fixture")
    testmodel.write_model(d, cfg, w, "bf16")
    m = R.Model.load(d)
    S, H = 6, 8
    img = m.cfg.image_token_id
    inp = {"input_ids": np.array([0, img, img, img, 0, 0], np.int32),
           "deepstack_positions": np.array([1, 2, 3], np.int32),
           "deepstack_features": np.full((3, 3, H), 10.0, np.float32),
           "deepstack_layers": np.array([0, 1, 2], np.int32),
           "decode_tokens": np.array([0, 0], np.int32)}
    out = R.forward(m, inp, diagnostics=True)
    ok = True
    for li, val in enumerate([11.0, 21.0, 31.0]):
        h = out[f"hidden_after_layer.{li}"]
        ok &= bool(np.all(h[1:4] == val) and np.all(h[0] == 1) and np.all(h[4:] == 1))
    check("fixture visual rows 11,21,31; others 1", ok)
    kv = all(np.all(out[f"{t}_cache.{i}"] == 0) and out[f"{t}_cache.{i}"].shape == (S + 2, 1, 4)
             for t in "kv" for i in range(3))
    check("fixture K/V all zero, T=S+N", kv)
    inp2 = {k: v for k, v in inp.items() if k != "input_ids"}
    inp2["inputs_embeds"] = np.ones((S, H), np.float32)
    out2 = R.forward(m, inp2, diagnostics=True)
    check("fixture via inputs_embeds identical",
          all(np.array_equal(out[k], out2[k]) for k in out if not k.startswith("_")))
    # via the CLI (file round trip, sharded)
    import forward_ref
    d2 = os.path.join(tmp, "fixture_sh")
    testmodel.write_model(d2, cfg, w, "f16", shards=2)
    ip, op = os.path.join(tmp, "fx_in.safetensors"), os.path.join(tmp, "fx_out.safetensors")
    st.save_file(inp, ip)
    rc = forward_ref.main(["--model", d2, "--input", ip, "--output", op, "--diagnostics"])
    r = st.load_file(op) if rc == 0 else {}
    check("fixture via forward_ref CLI", rc == 0 and np.all(r["hidden_after_layer.2"][1:4] == 31)
          and r["logits"].shape == (1, 32) and r["decode_logits"].shape == (2, 32)
          and r["decode_tokens"].dtype == np.int32, rc)
    # no deepstack: everything stays 1
    out = R.forward(m, {"input_ids": np.zeros(S, np.int32)}, diagnostics=True)
    check("fixture without deepstack stays 1", all(np.all(out[f"hidden_after_layer.{i}"] == 1) for i in range(3)))


def test_decode_equals_prefill(tmp):
    for arch in ("qwen3", "qwen3-vl"):
        cfg = testmodel.make_config(arch, hidden=48, heads=4, kv_heads=2, head_dim=16, layers=2,
                                    intermediate=64, vocab=64, tied=False)
        w = testmodel.random_weights(cfg, seed=3)
        d = os.path.join(tmp, "dec_" + arch)
        testmodel.write_model(d, cfg, w, "f32", shards=2)
        m = R.Model.load(d)
        rng = np.random.default_rng(4)
        ids = rng.integers(0, 50, 9).astype(np.int32)
        a = R.forward(m, {"input_ids": ids[:5], "decode_tokens": ids[5:]}, diagnostics=True)
        b = R.forward(m, {"input_ids": ids}, all_logits=True, diagnostics=True)
        err = np.abs(a["decode_logits"] - b["logits"][5:]).max()
        check(f"{arch}: decode == longer prefill", err < 1e-5, err)
        err = max(np.abs(a[f"k_cache.{i}"] - b[f"k_cache.{i}"]).max() for i in range(2))
        check(f"{arch}: decode K cache == longer prefill K cache", err < 1e-5, err)
        # negative delta via explicit positions: decode == prefill with shifted positions
        if arch == "qwen3-vl":
            pos = np.tile(np.arange(5) - 2, (3, 1)).astype(np.int32)
            pos[1, 2] += 1  # make it non-trivial M-RoPE
            a = R.forward(m, {"input_ids": ids[:5], "position_ids": pos,
                              "rope_delta": np.array([-2], np.int32), "decode_tokens": ids[5:]})
            pos_full = np.concatenate([pos, np.tile(np.arange(5, 9) - 2, (3, 1))], 1).astype(np.int32)
            b = R.forward(m, {"input_ids": ids, "position_ids": pos_full}, all_logits=True)
            err = np.abs(a["decode_logits"] - b["logits"][5:]).max()
            check("qwen3-vl: decode with delta -2 == prefill with shifted positions", err < 1e-5, err)
    # M-RoPE text-only == 1-D model with the same weights (positions equal on all axes)
    c1 = testmodel.make_config("qwen3", hidden=32, heads=4, kv_heads=4, head_dim=8, layers=2,
                               intermediate=32, vocab=40, tied=True)
    c3 = testmodel.make_config("qwen3-vl", hidden=32, heads=4, kv_heads=4, head_dim=8, layers=2,
                               intermediate=32, vocab=40, tied=True, mrope_layout="chunked")
    w1 = testmodel.random_weights(c1, seed=9)
    w3 = {k.replace("model.", "model.language_model.", 1): v for k, v in w1.items()}
    m1 = R.Model(R.Config(c1), w1)
    m3 = R.Model(R.Config(c3), w3)
    ids = np.arange(7, dtype=np.int32) * 3 % 33
    o1 = R.forward(m1, {"input_ids": ids, "decode_tokens": ids[:2]}, all_logits=True)
    o3 = R.forward(m3, {"input_ids": ids, "decode_tokens": ids[:2]}, all_logits=True)
    check("text-only M-RoPE == 1-D RoPE", np.abs(o1["logits"] - o3["logits"]).max() < 1e-6
          and np.abs(o1["decode_logits"] - o3["decode_logits"]).max() < 1e-6)


def test_gqa_naive():
    """Attention of one layer against a direct repeat_kv formulation."""
    cfg = testmodel.make_config("qwen3", hidden=16, heads=6, kv_heads=2, head_dim=4, layers=1,
                                intermediate=8, vocab=10)
    w = testmodel.random_weights(cfg, seed=5)
    m = R.Model(R.Config(cfg), w)
    c = m.cfg
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 16))
    cache = m.new_cache()
    _, _, hid = m.run(x, np.arange(5), cache, collect=True)
    lw = m.layers[0]
    a = R.rmsnorm(x, lw["ln_in"], c.eps)
    q = R.rmsnorm((a @ lw["wq"].T).reshape(5, 6, 4), lw["qn"], c.eps)
    k = R.rmsnorm((a @ lw["wk"].T).reshape(5, 2, 4), lw["kn"], c.eps)
    v = (a @ lw["wv"].T).reshape(5, 2, 4)
    ang = np.arange(5)[:, None] * R.inv_freq(4, c.theta)[None]
    q, k = R.apply_rope(q, ang), R.apply_rope(k, ang)
    k = np.repeat(k, 3, axis=1)
    v = np.repeat(v, 3, axis=1)
    o = np.zeros((5, 6, 4))
    for t in range(5):
        for h in range(6):
            s = np.array([q[t, h] @ k[u, h] / 2.0 for u in range(t + 1)])
            p = np.exp(s - s.max())
            p /= p.sum()
            o[t, h] = p @ v[:t + 1, h]
    y = x + o.reshape(5, 24) @ lw["wo"].T
    mm = R.rmsnorm(y, lw["ln_post"], c.eps)
    y = y + (R.silu(mm @ lw["wg"].T) * (mm @ lw["wu"].T)) @ lw["wd"].T
    check("GQA layer vs naive repeat_kv", np.abs(y - hid[0]).max() < 1e-12)


def _moe_cfg(arch, layers=3, experts=6, top_k=2, step=1, mlp_only=(), norm=True, tied=False):
    return testmodel.make_config(arch, hidden=24, heads=2, kv_heads=1, head_dim=8, layers=layers,
                                 intermediate=40, vocab=48, tied=tied, deepstack=0,
                                 moe=testmodel.moe_keys(experts, top_k, 10, step, mlp_only, norm))


def test_moe_config():
    c = R.Config(_moe_cfg("qwen3-moe", layers=6, step=2, mlp_only=[3]))
    check("moe: sparse layers step 2, mlp_only [3] -> [1, 5]", c.moe.sparse_layers == [1, 5], c.moe.sparse_layers)
    c = R.Config(_moe_cfg("qwen3-moe", layers=4, mlp_only=[0, 2]))
    check("moe: step 1, mlp_only [0, 2] -> [1, 3]", c.moe.sparse_layers == [1, 3], c.moe.sparse_layers)
    c = R.Config(_moe_cfg("qwen3-moe", layers=4, step=3))
    check("moe: step 3 -> [2]", c.moe.sparse_layers == [2], c.moe.sparse_layers)
    c = R.Config(_moe_cfg("qwen3-moe", layers=4, experts=0, top_k=0))
    check("moe: num_experts 0 -> every layer dense", c.moe.sparse_layers == [])
    raw = _moe_cfg("qwen3-moe")
    del raw["norm_topk_prob"]
    check("moe: qwen3_moe without norm_topk_prob does not renormalise (transformers default False)",
          R.Config(raw).moe.normalize is False)
    raw = _moe_cfg("qwen3-vl-moe", norm=False)
    c = R.Config(raw)
    check("moe: qwen3_vl_moe renormalises even with norm_topk_prob false",
          c.moe.normalize is True and c.moe.layout == "fused" and c.mode == "mrope"
          and c.prefix == "model.language_model.")
    check("moe: dense types have no moe", R.Config(testmodel.make_config("qwen3")).moe is None
          and R.Config(testmodel.make_config("qwen3-vl")).moe is None)
    for bad, what in ((dict(num_experts_per_tok=7), "top_k > experts"), (dict(num_experts_per_tok=0), "top_k 0"),
                      (dict(decoder_sparse_step=0), "sparse step 0"), (dict(moe_intermediate_size=0), "I_e 0"),
                      (dict(norm_topk_prob="yes"), "norm not bool"), (dict(num_experts=-1), "negative E")):
        raw = _moe_cfg("qwen3-moe")
        raw.update(bad)
        try:
            R.Config(raw)
            check(f"moe: refuses {what}", False, "accepted")
        except R.RefError as e:
            check(f"moe: refuses {what}", any(k in str(e) for k in bad), str(e))
    for l in range(6):
        tc = _moe_cfg("qwen3-moe", layers=6, step=2, mlp_only=[3])
        if moe_ref.MoeConfig(tc, "qwen3_moe", 6).is_sparse(l) != testmodel.is_sparse(tc, l):
            check(f"moe: writer and oracle agree on layer {l}", False)


def test_moe_routing():
    m = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    router = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0], [1.0, 0.0]])   # logits rows: [2,1,0,1] [0,1,3,0] [2,2,3,1]
    top, w, p = moe_ref.route(m, router, 2, normalize=False)
    check("route: top-2 descending, tie to the lower id", top.tolist() == [[0, 1], [2, 1], [2, 0]], top.tolist())
    e = np.exp([2.0, 1.0, 0.0, 1.0])
    check("route: softmax weights", np.allclose(w[0], e[[0, 1]] / e.sum(), rtol=1e-15), w[0])
    top, wn, _ = moe_ref.route(m, router, 2, normalize=True)
    check("route: renormalised", np.allclose(wn[0], e[[0, 1]] / e[[0, 1]].sum(), rtol=1e-15)
          and np.allclose(wn.sum(1), 1.0))
    top, _, _ = moe_ref.route(np.zeros((2, 2)), router, 3, normalize=True)
    check("route: all equal -> ids 0..k-1", top.tolist() == [[0, 1, 2]] * 2, top.tolist())


def _moe_block(rng, E=5, H=12, I=7, fused=False):
    gate = [rng.standard_normal((I, H)) for _ in range(E)]
    up = [rng.standard_normal((I, H)) for _ in range(E)]
    down = [rng.standard_normal((H, I)) for _ in range(E)]
    lw = {"router": rng.standard_normal((E, H)), "layout": "per_expert",
          "gate": np.stack(gate), "up": np.stack(up), "down": np.stack(down)}
    gu, dn = testmodel.fused_experts([g.astype(np.float32) for g in gate], [u.astype(np.float32) for u in up],
                                     [d.astype(np.float32) for d in down])
    lf = {"router": lw["router"], "layout": "fused", "gate_up": gu.astype(np.float64), "down": dn.astype(np.float64)}
    for k in ("gate", "up", "down"):
        lw[k] = lw[k].astype(np.float32).astype(np.float64)   # same values as the fused copy
    return lw, lf


def test_moe_block():
    rng = np.random.default_rng(11)
    lw, lf = _moe_block(rng)
    m = rng.standard_normal((9, 12))
    for k, norm in ((2, True), (2, False), (1, True), (5, True), (3, False)):
        moe = type("M", (), dict(top_k=k, normalize=norm))()
        for name, l in (("per-expert", lw), ("fused", lf)):
            a, (top, w, p) = moe_ref.sparse_mlp(m, l, moe)
            b = moe_ref.dense_all_experts(m, l, moe)
            check(f"moe block {name} k={k} norm={norm}: sparse == dense loop with top-k mask",
                  np.abs(a - b).max() < 1e-12, np.abs(a - b).max())
        a, _ = moe_ref.sparse_mlp(m, lw, moe)
        b, _ = moe_ref.sparse_mlp(m, lf, moe)
        check(f"moe block k={k} norm={norm}: fused layout == per-expert layout", np.abs(a - b).max() < 1e-12,
              np.abs(a - b).max())
    # literal per-row formula for one row
    moe = type("M", (), dict(top_k=2, normalize=True))()
    a, (top, w, p) = moe_ref.sparse_mlp(m, lw, moe)
    r = 4
    want = np.zeros(12)
    for j in range(2):
        e = top[r, j]
        want += w[r, j] * (lw["down"][e] @ (R.silu(lw["gate"][e] @ m[r]) * (lw["up"][e] @ m[r])))
    check("moe block: row 4 by hand", np.abs(a[r] - want).max() < 1e-12)
    # forcing a row's experts (the runner's re-run after a boundary near-tie flip)
    moe = type("M", (), dict(top_k=2, normalize=True))()
    a, (top, w, p) = moe_ref.sparse_mlp(m, lw, moe)
    other = [e for e in range(5) if e not in top[4]][:1] + [int(top[4, 0])]
    b, (tb, wb, _) = moe_ref.sparse_mlp(m, lw, moe, force={4: other})
    want = sum(p[4, e] / p[4, other].sum() * moe_ref.expert_forward(lw, e, m[4:5])[0] for e in other)
    check("moe block: forced experts on one row, the others unchanged",
          np.abs(b[4] - want).max() < 1e-12 and np.array_equal(np.delete(a, 4, 0), np.delete(b, 4, 0))
          and sorted(tb[4].tolist()) == sorted(other) and p[4, tb[4, 0]] >= p[4, tb[4, 1]])
    check("moe: boundary_flips finds set changes only",
          moe_ref.boundary_flips(np.array([[1, 0], [2, 3]]), np.array([[0, 1], [2, 4]])) == {1: [2, 3]})
    # k = E with renormalisation: the full softmax mixture
    moe = type("M", (), dict(top_k=5, normalize=True))()
    a, (top, w, p) = moe_ref.sparse_mlp(m, lw, moe)
    full = sum(p[:, e:e + 1] * moe_ref.expert_forward(lw, e, m) for e in range(5))
    check("moe block: k = E is the full softmax mixture", np.abs(a - full).max() < 1e-12)


def test_moe_models(tmp):
    # one model, both layouts: qwen3_moe (per-expert, 1-D) vs qwen3_vl_moe (fused, chunked M-RoPE
    # text-only, which equals 1-D RoPE), the same logical weights
    c1 = _moe_cfg("qwen3-moe", layers=4, step=2, mlp_only=[], norm=True)
    c3 = _moe_cfg("qwen3-vl-moe", layers=4, step=2, mlp_only=[], norm=True)
    c3["text_config"]["rope_scaling"]["mrope_interleaved"] = False
    w1 = testmodel.random_weights(c1, seed=21)
    w3 = {}
    for k, v in w1.items():
        if ".mlp.experts." in k:
            continue
        w3[k.replace("model.", "model.language_model.", 1)] = v
    for l in (1, 3):
        q = f"model.layers.{l}.mlp.experts."
        gu, dn = testmodel.fused_experts([w1[f"{q}{e}.gate_proj.weight"] for e in range(6)],
                                         [w1[f"{q}{e}.up_proj.weight"] for e in range(6)],
                                         [w1[f"{q}{e}.down_proj.weight"] for e in range(6)])
        w3[f"model.language_model.layers.{l}.mlp.experts.gate_up_proj"] = gu
        w3[f"model.language_model.layers.{l}.mlp.experts.down_proj"] = dn
    d1, d3 = os.path.join(tmp, "moe1"), os.path.join(tmp, "moe3")
    testmodel.write_model(d1, c1, w1, "f32")
    testmodel.write_model(d3, c3, w3, "f32", shards=2)
    m1, m3 = R.Model.load(d1), R.Model.load(d3)
    ids = (np.arange(11, dtype=np.int32) * 7) % 40
    o1 = R.forward(m1, {"input_ids": ids, "decode_tokens": ids[:3]}, all_logits=True, diagnostics=True)
    o3 = R.forward(m3, {"input_ids": ids, "decode_tokens": ids[:3]}, all_logits=True, diagnostics=True)
    check("moe model: per-expert (qwen3_moe) == fused (qwen3_vl_moe) for the same weights",
          np.abs(o1["logits"] - o3["logits"]).max() < 1e-6
          and np.abs(o1["decode_logits"] - o3["decode_logits"]).max() < 1e-6
          and all(np.array_equal(o1[f"router_experts.{l}"], o3[f"router_experts.{l}"]) for l in (1, 3)))
    names = sorted(k for k in o1 if k.startswith("router_"))
    check("moe diagnostics: router_* for sparse layers 1, 3 only",
          names == ["router_experts.1", "router_experts.3", "router_weights.1", "router_weights.3"], names)
    check("moe diagnostics: int32 experts [S,k], f32 weights [S,k]",
          o1["router_experts.1"].dtype == np.int32 and o1["router_experts.1"].shape == (11, 2)
          and o1["router_weights.3"].dtype == np.float32 and o1["router_weights.3"].shape == (11, 2)
          and np.allclose(o1["router_weights.1"].sum(1), 1.0, atol=1e-6))
    check("moe routing not degenerate on the writer's init", moe_ref.routing_stats(o1["router_experts.1"])[0] > 3,
          moe_ref.routing_stats(o1["router_experts.1"]))
    # the MoE layers change the result (a model whose experts were ignored would not)
    w0 = dict(w1)
    w0["model.layers.1.mlp.experts.2.down_proj.weight"] = w0["model.layers.1.mlp.experts.2.down_proj.weight"] * 0
    o0 = R.forward(R.Model(R.Config(c1), w0), {"input_ids": ids}, all_logits=True)
    hit = (o1["router_experts.1"] == 2).any(axis=1)
    diff = np.abs(o0["logits"] - o1["logits"]).max(axis=1)
    check("moe model: an expert's weights reach exactly the rows routed to it (and later rows)",
          hit.any() and diff[np.argmax(hit)] > 1e-6 and np.all(diff[:np.argmax(hit)] == 0), (hit, diff))
    # decode == longer prefill (drafted/decoded rows route independently)
    a = R.forward(m1, {"input_ids": ids[:6], "decode_tokens": ids[6:]}, diagnostics=True)
    b = R.forward(m1, {"input_ids": ids}, all_logits=True, diagnostics=True)
    err = np.abs(a["decode_logits"] - b["logits"][6:]).max()
    check("moe model: decode == longer prefill", err < 1e-5, err)
    check("moe model: prefill routing is a prefix of the longer prefill's",
          np.array_equal(a["router_experts.1"], b["router_experts.1"][:6]))
    # float32 emulation stays within the tolerance and (almost always) routes identically
    m32 = R.Model.load(d3, np.float32)
    o32 = R.forward(m32, {"input_ids": ids}, all_logits=True, diagnostics=True)
    ok, msg = compare.compare_arrays("logits", o32["logits"], o3["logits"])
    check("moe model: f32 emulation within tolerance", ok, msg)


def test_moe_compare():
    probs = np.array([[0.5, 0.2, 0.19995, 0.10005], [0.4, 0.3, 0.2, 0.1]])
    ref_e = np.array([[0, 1], [0, 1]], np.int32)
    ref_w = np.array([[0.5, 0.2], [0.4, 0.3]], np.float32)
    ok, msgs, notes = moe_ref.compare_routing(1, ref_e, ref_w, ref_e, ref_w, probs, False)
    check("compare_routing: equal passes without notes", ok and not notes, msgs)
    eng = np.array([[0, 2], [0, 1]], np.int32)
    ok, msgs, notes = moe_ref.compare_routing(1, eng, np.array([[0.5, 0.19995], [0.4, 0.3]], np.float32),
                                              ref_e, ref_w, probs, False)
    check("compare_routing: k-th vs (k+1)-th near-tie accepted and reported", ok and len(notes) == 1, (msgs, notes))
    ok, msgs, notes = moe_ref.compare_routing(1, eng, np.array([[0.5, 0.2], [0.4, 0.3]], np.float32),
                                              ref_e, ref_w, probs, True)
    check("compare_routing: weights checked against the engine's set (renormalised)", not ok, msgs)
    eng = np.array([[0, 1], [0, 2]], np.int32)
    ok, msgs, notes = moe_ref.compare_routing(1, eng, ref_w, ref_e, ref_w, probs, False)
    check("compare_routing: a real expert mismatch fails", not ok and "row 1 slot 1" in msgs[0][1], msgs)
    ok, msgs, notes = moe_ref.compare_routing(1, np.array([[0, 0], [0, 1]], np.int32), ref_w, ref_e, ref_w, probs, False)
    check("compare_routing: repeated expert fails", not ok, msgs)
    ok, msgs, notes = moe_ref.compare_routing(1, ref_e, ref_w * 1.01, ref_e, ref_w, probs, False)
    check("compare_routing: weights off by 1% fail", not ok, msgs)
    eng = np.array([[0, 2], [0, 1]], np.int32)
    ok, msgs, notes = moe_ref.compare_routing(1, eng, ref_w, ref_e, ref_w, None, False)
    check("compare_routing: without probabilities experts must be equal", not ok, msgs)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_rope_index_examples()
        test_rope_and_norm()
        test_st_roundtrip(tmp)
        test_fixture(tmp)
        test_decode_equals_prefill(tmp)
        test_gqa_naive()
        test_moe_config()
        test_moe_routing()
        test_moe_block()
        test_moe_models(tmp)
        test_moe_compare()
    print(f"selftest: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
