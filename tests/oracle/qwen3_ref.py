"""Plain NumPy float64 reference of the Qwen3 / Qwen3-VL text decoder.

Independent oracle for vlstack, written only from the Hugging Face Qwen3-VL
math (restated in docs/contracts.md, appendix sections A, B, C.2) and the
contracts (docs/contracts.md sections 2, 3, 5, 6).

Everything is computed in float64; weights are converted exactly from their
stored dtype (BF16 via uint16 << 16, F16/F32 by widening).
"""

import json
import os

import numpy as np

import moe_ref
import st


class RefError(Exception):
    pass


# ----------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------

class Config:
    def __init__(self, cfg):
        self.raw = cfg
        self.model_type = cfg.get("model_type", "")
        tc = cfg.get("text_config")
        nested = isinstance(tc, dict)
        if not nested:
            tc = cfg
        self.nested = nested

        def req(key):
            if key not in tc:
                raise RefError(f"config: missing text key {key!r}")
            return tc[key]

        self.H = int(req("hidden_size"))
        self.L = int(req("num_hidden_layers"))
        self.nh = int(req("num_attention_heads"))
        self.nkv = int(tc.get("num_key_value_heads", self.nh))
        self.D = int(tc["head_dim"]) if "head_dim" in tc else self.H // self.nh
        self.I = int(req("intermediate_size"))
        self.V = int(req("vocab_size"))
        self.eps = float(tc.get("rms_norm_eps", 1e-6))
        rope_params = tc.get("rope_scaling") or tc.get("rope_parameters") or {}
        if not rope_params and nested:
            rope_params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
        theta = tc.get("rope_theta")
        if theta is None:
            theta = rope_params.get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.theta = float(theta)
        if self.nh % self.nkv != 0:
            raise RefError("config: num_attention_heads not a multiple of num_key_value_heads")
        if self.D % 2 != 0:
            raise RefError("config: head_dim must be even")

        sec = rope_params.get("mrope_section")
        rtype = rope_params.get("rope_type", rope_params.get("type", "default"))
        if sec is not None:
            self.mode = "mrope"
            self.mrope_section = [int(s) for s in sec]
            if len(self.mrope_section) != 3:
                raise RefError("config: mrope_section must have 3 entries")
            self.interleaved = bool(rope_params.get("mrope_interleaved", True))
        elif rtype == "mrope" or self.model_type in ("qwen3_vl", "qwen3_vl_moe"):
            raise RefError("config: M-RoPE model without rope_scaling.mrope_section")
        else:
            self.mode = "1d"
            self.mrope_section = None
            self.interleaved = None

        tie = cfg.get("tie_word_embeddings")
        if tie is None:
            tie = tc.get("tie_word_embeddings", False)
        self.tied = bool(tie)

        def tok(key):
            v = cfg.get(key, tc.get(key))
            return None if v is None else int(v)

        self.image_token_id = tok("image_token_id")
        self.video_token_id = tok("video_token_id")
        self.vision_start_token_id = tok("vision_start_token_id")
        self.vision_end_token_id = tok("vision_end_token_id")
        vc = cfg.get("vision_config") or {}
        self.spatial_merge_size = int(vc.get("spatial_merge_size", 2))
        ds = cfg.get("deepstack_language_layer_indices", tc.get("deepstack_language_layer_indices"))
        if ds is None and vc.get("deepstack_visual_indexes") is not None:
            ds = list(range(len(vc["deepstack_visual_indexes"])))
        self.deepstack_layers = None if ds is None else [int(x) for x in ds]

        prefix = "model.language_model." if nested or self.model_type.startswith("qwen3_vl") else "model."
        self.prefix = prefix
        # qwen3_moe / qwen3_vl_moe: the sparse MLP (moe_ref.py); None for the dense types
        try:
            self.moe = moe_ref.parse(cfg, tc, self.L)
        except moe_ref.MoeError as e:
            raise RefError(str(e))

    @staticmethod
    def load(model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return Config(json.load(f))


# ----------------------------------------------------------------------------
# Positions (spec §B.2)
# ----------------------------------------------------------------------------

def get_rope_index(input_ids, image_grid_thw=None, video_grid_thw=None, *,
                   image_token_id, video_token_id, vision_start_token_id,
                   spatial_merge_size=2):
    """Qwen3-VL get_rope_index for a single un-padded row.

    Returns (positions int64 [3,S], rope_delta int).
    """
    ids = [int(t) for t in np.asarray(input_ids).reshape(-1)]
    S = len(ids)
    img = None if image_grid_thw is None else np.asarray(image_grid_thw, dtype=np.int64).reshape(-1, 3)
    vid = None if video_grid_thw is None else np.asarray(video_grid_thw, dtype=np.int64).reshape(-1, 3)
    if vid is not None and len(vid):
        # each temporal group becomes its own [1,h,w] item
        vid = np.repeat(vid, vid[:, 0], axis=0)
        vid[:, 0] = 1
    have_img = img is not None and len(img) > 0
    have_vid = vid is not None and len(vid) > 0
    if not (have_img or have_vid):
        pos = np.tile(np.arange(S, dtype=np.int64), (3, 1))
        return pos, 0

    n_img = n_vid = 0
    for i, t in enumerate(ids):
        if t == vision_start_token_id and i + 1 < S:
            if ids[i + 1] == image_token_id:
                n_img += 1
            elif ids[i + 1] == video_token_id:
                n_vid += 1
    chunks = []
    cur_max = -1
    st_ = 0
    img_i = vid_i = 0
    rem_img, rem_vid = n_img, n_vid

    def find(tok, start):
        try:
            return ids.index(tok, start)
        except ValueError:
            return S + 1

    sms = spatial_merge_size
    for _ in range(n_img + n_vid):
        ed_img = find(image_token_id, st_) if rem_img > 0 else S + 1
        ed_vid = find(video_token_id, st_) if rem_vid > 0 else S + 1
        if ed_img < ed_vid:
            if img is None or img_i >= len(img):
                raise RefError("get_rope_index: more images in input_ids than image_grid_thw rows")
            t, h, w = (int(x) for x in img[img_i])
            img_i += 1
            rem_img -= 1
            ed = ed_img
        else:
            if vid is None or vid_i >= len(vid):
                raise RefError("get_rope_index: more videos in input_ids than video grid rows")
            t, h, w = (int(x) for x in vid[vid_i])
            vid_i += 1
            rem_vid -= 1
            ed = ed_vid
        if ed > S:
            raise RefError("get_rope_index: visual item without pad tokens")
        gt, gh, gw = t, h // sms, w // sms
        text_len = ed - st_
        st_idx = cur_max + 1
        if text_len > 0:
            c = np.tile(np.arange(text_len, dtype=np.int64), (3, 1)) + st_idx
            chunks.append(c)
        ti = np.repeat(np.arange(gt, dtype=np.int64), gh * gw)
        hi = np.tile(np.repeat(np.arange(gh, dtype=np.int64), gw), gt)
        wi = np.tile(np.arange(gw, dtype=np.int64), gt * gh)
        c = np.stack([ti, hi, wi]) + text_len + st_idx
        chunks.append(c)
        cur_max = int(max(cur_max, c.max())) if c.size else max(cur_max, st_idx + text_len - 1)
        st_ = ed + gt * gh * gw
    if st_ < S:
        st_idx = cur_max + 1
        text_len = S - st_
        chunks.append(np.tile(np.arange(text_len, dtype=np.int64), (3, 1)) + st_idx)
    pos = np.concatenate(chunks, axis=1) if chunks else np.zeros((3, 0), np.int64)
    if pos.shape[1] != S:
        raise RefError(f"get_rope_index: computed {pos.shape[1]} positions for {S} tokens "
                       "(image pad count does not match image_grid_thw)")
    delta = int(pos.max()) + 1 - S if S else 0
    return pos, delta


# ----------------------------------------------------------------------------
# RoPE (spec §B.1)
# ----------------------------------------------------------------------------

def inv_freq(D, theta, dtype=np.float64):
    if dtype == np.float64:
        j = np.arange(D // 2, dtype=np.float64)
        return 1.0 / np.power(float(theta), 2.0 * j / D)
    # float32 emulation (HF style: arange(0,d,2)/d in fp32, theta**x in fp32)
    e = (np.arange(0, D, 2, dtype=np.float32) / np.float32(D)).astype(np.float32)
    return (np.float32(1.0) / np.power(np.float32(theta), e)).astype(np.float32)


def slot_axes(half, mrope_section, interleaved):
    """axis (0=T,1=H,2=W) used by each of the `half` frequency slots."""
    axes = np.zeros(half, dtype=np.int64)
    s_t, s_h, s_w = mrope_section
    if interleaved:
        for j in range(half):
            if j % 3 == 1 and j < 3 * s_h:
                axes[j] = 1
            elif j % 3 == 2 and j < 3 * s_w:
                axes[j] = 2
    else:
        if s_t + s_h + s_w != half:
            raise RefError(f"chunked mrope_section {mrope_section} must sum to head_dim/2={half}")
        axes[s_t:s_t + s_h] = 1
        axes[s_t + s_h:] = 2
    return axes


def rope_angles(cfg, coords, dtype=np.float64):
    """coords: [3,T] (mrope) or [T] (1d) integer RoPE coordinates -> angles [T, D/2]."""
    f = inv_freq(cfg.D, cfg.theta, dtype)
    coords = np.asarray(coords, dtype=dtype)
    if cfg.mode == "1d":
        return coords.reshape(-1, 1) * f[None, :]
    axes = slot_axes(cfg.D // 2, cfg.mrope_section, cfg.interleaved)
    per_axis = coords[:, :, None] * f[None, None, :]          # [3,T,half]
    out = np.empty(per_axis.shape[1:], dtype=dtype)
    for j, a in enumerate(axes):
        out[:, j] = per_axis[a, :, j]
    return out  # [T,half]


def apply_rope(x, ang):
    """x: [T, heads, D]; ang: [T, D/2]. NeoX rotate_half convention."""
    half = x.shape[-1] // 2
    emb = np.concatenate([ang, ang], axis=-1)[:, None, :]
    cos, sin = np.cos(emb), np.sin(emb)
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def rmsnorm(x, w, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------

class Model:
    """dtype=np.float64 is the oracle; np.float32 only emulates an f32 engine (tolerance studies)."""

    def __init__(self, cfg, weights, dtype=np.float64):
        self.cfg = cfg
        self.dt = dtype
        p = cfg.prefix
        W = {}

        def get(name, shape):
            if name not in weights:
                raise RefError(f"missing weight {name}")
            a = np.asarray(weights[name], dtype=dtype)
            if tuple(a.shape) != tuple(shape):
                raise RefError(f"weight {name}: shape {a.shape} != {shape}")
            return a

        H, D, nh, nkv, I, V = cfg.H, cfg.D, cfg.nh, cfg.nkv, cfg.I, cfg.V
        self.embed = get(p + "embed_tokens.weight", (V, H))
        self.layers = []
        for i in range(cfg.L):
            q = f"{p}layers.{i}."
            lw = dict(
                ln_in=get(q + "input_layernorm.weight", (H,)),
                ln_post=get(q + "post_attention_layernorm.weight", (H,)),
                wq=get(q + "self_attn.q_proj.weight", (nh * D, H)),
                wk=get(q + "self_attn.k_proj.weight", (nkv * D, H)),
                wv=get(q + "self_attn.v_proj.weight", (nkv * D, H)),
                wo=get(q + "self_attn.o_proj.weight", (H, nh * D)),
                qn=get(q + "self_attn.q_norm.weight", (D,)),
                kn=get(q + "self_attn.k_norm.weight", (D,)),
            )
            if cfg.moe is not None and cfg.moe.is_sparse(i):
                lw["moe"] = moe_ref.load_layer(get, q, cfg.moe, H)
            else:
                lw.update(wg=get(q + "mlp.gate_proj.weight", (I, H)),
                          wu=get(q + "mlp.up_proj.weight", (I, H)),
                          wd=get(q + "mlp.down_proj.weight", (H, I)))
            self.layers.append(lw)
        self.norm = get(p + "norm.weight", (H,))
        if "lm_head.weight" in weights and not cfg.tied:
            self.lm_head = get("lm_head.weight", (V, H))
        elif cfg.tied:
            self.lm_head = self.embed
        else:
            raise RefError("untied model without lm_head.weight")

    @staticmethod
    def load(model_dir, dtype=np.float64):
        cfg = Config.load(model_dir)
        w = st.load_checkpoint(model_dir)
        return Model(cfg, w, dtype)

    def embed_ids(self, ids):
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.V):
            raise RefError("input_ids: token id out of range [0,V)")
        return self.embed[ids].copy()

    def new_cache(self):
        c = self.cfg
        return {"k": [np.zeros((0, c.nkv, c.D), self.dt) for _ in range(c.L)],
                "v": [np.zeros((0, c.nkv, c.D), self.dt) for _ in range(c.L)]}

    def run(self, x, coords, cache, deepstack=None, collect=False, routing=None, force_routing=None):
        """Process new rows x [T,H] (float64) appended after the rows already in cache.

        coords: RoPE coordinates of the new rows ([3,T] or [T]).
        The causal mask uses the physical index (cache length + row).
        deepstack: None or (positions [Nv] (relative to these rows), features [K,Nv,H], layers [K]).
        routing: None or a dict that receives, per sparse layer l, (experts [T,k], weights [T,k],
        probs [T,E]) of these rows (moe_ref.route).
        force_routing: None or {layer: {row: experts}} (moe_ref.sparse_mlp's force).
        Returns (final_hidden [T,H], logits [T,V], per-layer hidden list or None).
        """
        c = self.cfg
        dt = self.dt
        x = np.array(x, dtype=dt)
        T = x.shape[0]
        ang = rope_angles(c, coords, dt)
        if ang.shape[0] != T:
            raise RefError("coords length != rows")
        P = cache["k"][0].shape[0] if c.L else 0
        group = c.nh // c.nkv
        scale = dt(1.0 / np.sqrt(c.D))
        # causal mask: new row r (physical P+r) sees physical 0..P+r
        allowed = np.arange(P + T)[None, :] <= (P + np.arange(T))[:, None]
        hiddens = [] if collect else None
        for li, lw in enumerate(self.layers):
            a = rmsnorm(x, lw["ln_in"], c.eps)
            q = (a @ lw["wq"].T).reshape(T, c.nh, c.D)
            k = (a @ lw["wk"].T).reshape(T, c.nkv, c.D)
            v = (a @ lw["wv"].T).reshape(T, c.nkv, c.D)
            q = rmsnorm(q, lw["qn"], c.eps)
            k = rmsnorm(k, lw["kn"], c.eps)
            q = apply_rope(q, ang)
            k = apply_rope(k, ang)
            K = np.concatenate([cache["k"][li], k], axis=0)
            Vv = np.concatenate([cache["v"][li], v], axis=0)
            cache["k"][li] = K
            cache["v"][li] = Vv
            o = np.empty((T, c.nh, c.D), dt)
            for h in range(c.nh):
                kh = h // group
                s = (q[:, h, :] @ K[:, kh, :].T) * scale
                s = np.where(allowed, s, -np.inf)
                s = s - s.max(axis=1, keepdims=True)
                e = np.exp(s)
                pr = e / e.sum(axis=1, keepdims=True)
                o[:, h, :] = pr @ Vv[:, kh, :]
            x = x + o.reshape(T, c.nh * c.D) @ lw["wo"].T
            m = rmsnorm(x, lw["ln_post"], c.eps)
            if "moe" in lw:
                y, r = moe_ref.sparse_mlp(m, lw["moe"], c.moe, (force_routing or {}).get(li))
                x = x + y
                if routing is not None:
                    routing[li] = r
            else:
                x = x + (silu(m @ lw["wg"].T) * (m @ lw["wu"].T)) @ lw["wd"].T
            if deepstack is not None:
                dpos, dfeat, dlayers = deepstack
                for kk, tl in enumerate(dlayers):
                    if int(tl) == li:
                        for vi, pp in enumerate(dpos):
                            x[int(pp)] += dfeat[kk, vi].astype(dt)
            if collect:
                hiddens.append(x.copy())
        h = rmsnorm(x, self.norm, c.eps)
        logits = h @ self.lm_head.T
        return h, logits, hiddens


# ----------------------------------------------------------------------------
# Full forward per docs/contracts.md §6
# ----------------------------------------------------------------------------

def forward(model, inp, diagnostics=False, all_logits=False, force_routing=None):
    """inp: dict of input tensors (docs/contracts.md §6). Returns dict of output arrays.
    force_routing: {layer: {row: experts}} for the prefill rows (moe_ref.sparse_mlp's force)."""
    c = model.cfg
    ids = inp.get("input_ids")
    if ids is not None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if "inputs_embeds" in inp:
        x = np.asarray(inp["inputs_embeds"], dtype=model.dt)
        if x.ndim != 2 or x.shape[1] != c.H:
            raise RefError("inputs_embeds must be [S,H]")
    else:
        if ids is None:
            raise RefError("need input_ids or inputs_embeds")
        x = model.embed_ids(ids)
        if "visual_embeds" in inp:
            ve = np.asarray(inp["visual_embeds"], dtype=model.dt)
            pads = [i for i, t in enumerate(ids) if t == c.image_token_id or t == c.video_token_id]
            if ve.ndim != 2 or ve.shape[0] != len(pads) or ve.shape[1] != c.H:
                raise RefError(f"visual_embeds shape {ve.shape} does not match {len(pads)} pad tokens")
            x[pads] = ve
    S = x.shape[0]
    if ids is not None and ids.shape[0] != S:
        raise RefError("input_ids and inputs_embeds lengths differ")

    delta = 0
    if "position_ids" in inp:
        pos = np.asarray(inp["position_ids"], dtype=np.int64)
        want = (3, S) if c.mode == "mrope" else (S,)
        if pos.shape != want:
            raise RefError(f"position_ids shape {pos.shape} != {want}")
    elif c.mode == "mrope":
        if ids is not None and "image_grid_thw" in inp:
            pos, delta = get_rope_index(
                ids, inp["image_grid_thw"], None,
                image_token_id=c.image_token_id, video_token_id=c.video_token_id,
                vision_start_token_id=c.vision_start_token_id,
                spatial_merge_size=c.spatial_merge_size)
        else:
            pos = np.tile(np.arange(S, dtype=np.int64), (3, 1))
    else:
        pos = np.arange(S, dtype=np.int64)
    if "rope_delta" in inp:
        delta = int(np.asarray(inp["rope_delta"]).reshape(-1)[0])

    ds = None
    if "deepstack_features" in inp:
        feats = np.asarray(inp["deepstack_features"], dtype=np.float64)
        dpos = np.asarray(inp["deepstack_positions"], dtype=np.int64).reshape(-1)
        Kd = feats.shape[0]
        dl = np.asarray(inp.get("deepstack_layers", np.arange(Kd)), dtype=np.int64).reshape(-1)
        if feats.shape != (Kd, dpos.shape[0], c.H) or dl.shape[0] != Kd:
            raise RefError("deepstack payload shapes inconsistent")
        # docs/contracts.md §2 request rules (the oracle refuses what the engine must refuse)
        if np.any(np.diff(dpos) <= 0):
            raise RefError("deepstack_positions not strictly increasing")
        if dpos.size and (dpos.min() < 0 or dpos.max() >= S):
            raise RefError("deepstack_positions out of [0,S)")
        if not np.all(np.isfinite(feats)):
            raise RefError("deepstack_features not finite")
        if c.deepstack_layers is not None and dl.tolist() != list(c.deepstack_layers):
            raise RefError(f"deepstack_layers {dl.tolist()} != model target layers {c.deepstack_layers}")
        if ids is not None:
            pads = [i for i, t in enumerate(ids) if t == c.image_token_id or t == c.video_token_id]
            if dpos.tolist() != pads:
                raise RefError("deepstack_positions are not the image/video pad positions of input_ids")
        ds = (dpos, feats, dl)

    cache = model.new_cache()
    routing = {}
    h, logits, hid = model.run(x, pos, cache, deepstack=ds, collect=diagnostics, routing=routing,
                               force_routing=force_routing)
    out = {"logits": (logits if all_logits else logits[-1:]).astype(np.float32)}

    if "decode_tokens" in inp:
        dt = np.asarray(inp["decode_tokens"], dtype=np.int64).reshape(-1)
        rows = []
        for j, t in enumerate(dt):
            coord = S + j + delta
            if coord < 0:
                raise RefError("negative decode coordinate")
            cc = np.full((3, 1), coord, np.int64) if c.mode == "mrope" else np.array([coord])
            _, lg, _ = model.run(model.embed_ids([t]), cc, cache)
            rows.append(lg[0])
        out["decode_logits"] = np.array(rows, dtype=np.float32).reshape(len(dt), c.V)
        out["decode_tokens"] = dt.astype(np.int32)

    if diagnostics:
        for i, hh in enumerate(hid):
            out[f"hidden_after_layer.{i}"] = hh.astype(np.float32)
        out["final_hidden"] = h.astype(np.float32)
        for i in range(c.L):
            out[f"k_cache.{i}"] = cache["k"][i].astype(np.float32)
            out[f"v_cache.{i}"] = cache["v"][i].astype(np.float32)
        # MoE (moe_ref.py): each sparse layer's routing of the prefill rows
        for li, (top, w, _) in sorted(routing.items()):
            out[f"router_experts.{li}"] = top.astype(np.int32)
            out[f"router_weights.{li}"] = w.astype(np.float32)
    # float64 router probabilities [S,E] per sparse layer (compare.py's near-tie rule)
    out["_routing"] = {li: r[2].astype(np.float64) for li, r in routing.items()}
    # keep float64 copies for tight self-checks
    out["_positions"] = pos
    out["_delta"] = delta
    return out
