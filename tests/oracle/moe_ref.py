"""Mixture-of-experts MLP of Qwen3-MoE / Qwen3-VL-MoE, float64 NumPy (independent oracle).

Written from transformers' Python, never from the engine's C++:

- `models/qwen3_moe/modeling_qwen3_moe.py`: `Qwen3MoeDecoderLayer.__init__` (which layers are
  sparse), `Qwen3MoeSparseMoeBlock.forward` (router, softmax in f32, `torch.topk`, optional
  renormalisation under `norm_topk_prob`, the expert loop with `index_add_`), `Qwen3MoeMLP`
  (each expert: `down_proj(silu(gate_proj(x)) * up_proj(x))`, Linear weights [out, in]).
- `models/qwen3_vl_moe/modeling_qwen3_vl_moe.py` as released (transformers 4.57):
  `Qwen3VLMoeTextSparseMoeBlock.forward` (the same routing, renormalised ALWAYS: "since all the
  models use norm_topk_prob, we don't need to have a extra check for it"), and
  `Qwen3VLMoeTextExperts` with `gate_up_proj` [E, H, 2·I_e] and `down_proj` [E, I_e, H] used as
  `gate_up = x @ gate_up_proj[e]; gate, up = gate_up.chunk(2, dim=-1)` (gate = the first I_e
  columns) and `(up * silu(gate)) @ down_proj[e]`. (Later transformers versions keep the
  parameter transposed in memory, [E, 2·I_e, H] with `F.linear`, and convert the checkpoint's
  [E, H, 2·I_e] on load; the checkpoint layout is the released one above.)
- configuration_qwen3_moe.py / configuration_qwen3_vl_moe.py: the keys and their defaults.

Layer l is sparse iff l not in mlp_only_layers and num_experts > 0 and
(l + 1) % decoder_sparse_step == 0; every other layer keeps the dense SwiGLU MLP of
intermediate_size. For the post-attention-normed row m of a sparse layer:

    logits = m @ gate.weight.T                  [E]   (router `mlp.gate.weight` [E, H])
    p      = softmax(logits)                    (f32 in transformers; float64 here)
    top    = the k largest p, descending        (torch.topk; equal values: the lower expert id
                                                 first, the rule the engine states too)
    w      = p[top] / sum(p[top]) if renormalised else p[top]
    out    = sum_j w_j * expert_{top_j}(m)

Diagnostics (`forward --diagnostics`): `router_experts.{l}` int32 [S, k] and
`router_weights.{l}` float32 [S, k] for every sparse layer l, prefill rows only, in the order
above. `compare_routing` accepts an expert that differs from the oracle's only where the oracle's
probabilities of the two experts are within a near-tie gap (f32 against f64 may legitimately
flip those), and says so.
"""

import numpy as np


class MoeError(Exception):
    pass


# Defaults of the transformers config classes, used where a key is absent (as transformers does).
QWEN3_MOE_DEFAULTS = dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                          decoder_sparse_step=1, norm_topk_prob=False)
QWEN3_VL_MOE_DEFAULTS = dict(num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                             decoder_sparse_step=1, norm_topk_prob=True)

MOE_MODEL_TYPES = ("qwen3_moe", "qwen3_vl_moe")


class MoeConfig:
    """The sparse-MLP part of a qwen3_moe (flat) or qwen3_vl_moe (text_config) config."""

    def __init__(self, tc, model_type, layers):
        if model_type not in MOE_MODEL_TYPES:
            raise MoeError(f"model_type {model_type!r} is not a mixture-of-experts type")
        d = QWEN3_VL_MOE_DEFAULTS if model_type == "qwen3_vl_moe" else QWEN3_MOE_DEFAULTS
        where = "text_config." if model_type == "qwen3_vl_moe" else ""

        def integer(key):
            v = tc.get(key, d[key])
            if isinstance(v, bool) or not isinstance(v, int):
                raise MoeError(f"config: {where}{key} must be an integer, got {v!r}")
            return v

        self.model_type = model_type
        self.experts = integer("num_experts")
        self.top_k = integer("num_experts_per_tok")
        self.I = integer("moe_intermediate_size")
        self.sparse_step = integer("decoder_sparse_step")
        mol = tc.get("mlp_only_layers")
        self.mlp_only_layers = [] if mol is None else list(mol)
        if any(isinstance(x, bool) or not isinstance(x, int) for x in self.mlp_only_layers):
            raise MoeError(f"config: {where}mlp_only_layers must be a list of integers")
        norm = tc.get("norm_topk_prob", d["norm_topk_prob"])
        if not isinstance(norm, bool):
            raise MoeError(f"config: {where}norm_topk_prob must be a boolean")
        self.norm_topk_prob_declared = norm
        # Qwen3VLMoeTextSparseMoeBlock ignores the key and always renormalises.
        self.normalize = True if model_type == "qwen3_vl_moe" else norm
        self.layout = "fused" if model_type == "qwen3_vl_moe" else "per_expert"
        if self.experts < 0:
            raise MoeError(f"config: {where}num_experts must be >= 0, got {self.experts}")
        if self.experts > 0:
            if self.sparse_step < 1:
                raise MoeError(f"config: {where}decoder_sparse_step must be >= 1, got {self.sparse_step}")
            if not 1 <= self.top_k <= self.experts:
                raise MoeError(f"config: {where}num_experts_per_tok {self.top_k} not in [1, num_experts "
                               f"{self.experts}]")
            if self.I < 1:
                raise MoeError(f"config: {where}moe_intermediate_size must be >= 1, got {self.I}")
        self.sparse_layers = [l for l in range(layers) if self.is_sparse(l)]

    def is_sparse(self, l):
        """Qwen3MoeDecoderLayer / Qwen3VLMoeTextDecoderLayer: the sparse block or the dense MLP."""
        return (l not in self.mlp_only_layers) and (
            self.experts > 0 and (l + 1) % self.sparse_step == 0)


def parse(cfg, tc, layers):
    """MoeConfig for a MoE model_type, else None."""
    mt = cfg.get("model_type", "")
    if mt not in MOE_MODEL_TYPES:
        return None
    return MoeConfig(tc, mt, layers)


# ----------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------

def load_layer(get, q, moe, H):
    """Sparse-layer weights of layer prefix q (e.g. "model.layers.3.") through get(name, shape).

    Per-expert layout (Qwen3-MoE): gate/up [E, I_e, H], down [E, H, I_e] (Linear [out, in]).
    Fused layout (Qwen3-VL-MoE): gate_up [E, H, 2·I_e], down [E, I_e, H] exactly as stored.
    """
    E, I = moe.experts, moe.I
    w = {"router": get(q + "mlp.gate.weight", (E, H)), "layout": moe.layout}
    if moe.layout == "per_expert":
        w["gate"] = np.stack([get(f"{q}mlp.experts.{e}.gate_proj.weight", (I, H)) for e in range(E)])
        w["up"] = np.stack([get(f"{q}mlp.experts.{e}.up_proj.weight", (I, H)) for e in range(E)])
        w["down"] = np.stack([get(f"{q}mlp.experts.{e}.down_proj.weight", (H, I)) for e in range(E)])
    else:
        w["gate_up"] = get(q + "mlp.experts.gate_up_proj", (E, H, 2 * I))
        w["down"] = get(q + "mlp.experts.down_proj", (E, I, H))
    return w


# ----------------------------------------------------------------------------
# Math
# ----------------------------------------------------------------------------

def _silu(x):
    return x / (1.0 + np.exp(-x))


def route(m, router, k, normalize):
    """m [T, H], router [E, H] -> (experts int64 [T, k], weights [T, k], probs [T, E])."""
    logits = m @ router.T
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p = p / p.sum(axis=1, keepdims=True)
    # descending; a stable sort of -p keeps equal values in ascending expert id
    top = np.argsort(-p, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(p, top, axis=1)
    if normalize:
        w = w / w.sum(axis=1, keepdims=True)
    return top, w, p


def expert_forward(lw, e, x):
    """Expert e of a sparse layer on rows x [n, H] -> [n, H], in the layout's own form."""
    if lw["layout"] == "per_expert":
        return (_silu(x @ lw["gate"][e].T) * (x @ lw["up"][e].T)) @ lw["down"][e].T
    gu = x @ lw["gate_up"][e]
    I = gu.shape[1] // 2
    gate, up = gu[:, :I], gu[:, I:]
    return (up * _silu(gate)) @ lw["down"][e]


def sparse_mlp(m, lw, moe, force=None):
    """Qwen3MoeSparseMoeBlock.forward on m [T, H]. Returns (out [T, H], (experts, weights, probs)).

    force: None or {row: k expert ids}: those rows use the given experts instead of their top k
    (ordered and weighted by p as usual). Only for re-running the reference with an engine's
    choice at an accepted near-tie of the k-th and (k+1)-th expert (see compare_routing)."""
    top, w, p = route(m, lw["router"], moe.top_k, moe.normalize)
    for r, ex in (force or {}).items():
        ex = sorted((int(e) for e in ex), key=lambda e: (-p[r, e], e))
        top[r] = ex
        w[r] = p[r, ex] / (p[r, ex].sum() if moe.normalize else 1.0)
    out = np.zeros_like(m)
    for e in np.unique(top):
        rows, slot = np.nonzero(top == e)   # a row picks an expert at most once
        out[rows] += expert_forward(lw, int(e), m[rows]) * w[rows, slot][:, None]
    return out, (top, w, p)


def dense_all_experts(m, lw, moe):
    """Selftest twin of sparse_mlp: every expert on every row, weighted by a top-k mask."""
    top, w, _ = route(m, lw["router"], moe.top_k, moe.normalize)
    E = lw["router"].shape[0]
    mask = np.zeros((m.shape[0], E))
    np.put_along_axis(mask, top, w, axis=1)
    return sum(mask[:, e:e + 1] * expert_forward(lw, e, m) for e in range(E))


# ----------------------------------------------------------------------------
# Comparison of the routing diagnostics
# ----------------------------------------------------------------------------

def boundary_flips(eng_e, ref_e):
    """{row: engine experts} where the engine's expert SET differs from the oracle's (a k-th vs
    (k+1)-th flip; a swap inside the top k keeps the set and changes nothing downstream)."""
    return {r: [int(x) for x in eng_e[r]] for r in range(ref_e.shape[0])
            if set(int(x) for x in eng_e[r]) != set(int(x) for x in ref_e[r])}


def routing_stats(experts):
    """(distinct expert sets over rows, distinct first choices) of an [S, k] array."""
    e = np.asarray(experts)
    sets = {tuple(sorted(int(x) for x in row)) for row in e}
    return len(sets), len({int(x) for x in e[:, 0]}) if e.size else 0


def compare_routing(layer, eng_e, eng_w, ref_e, ref_w, probs=None, normalize=None, tie_gap=1e-4,
                    rtol=1e-4, atol_scale=1e-4):
    """Compares one sparse layer's routing. Returns (ok, [(good, message)], notes).

    Experts must be equal slot by slot, except where the oracle's probabilities of the engine's
    and the oracle's expert at that slot differ by at most tie_gap (a near-tie that f32 rounding
    may resolve either way: a swap inside the top k, or the k-th against the (k+1)-th); each
    such acceptance is listed in notes. Weights: within the float tolerance of the oracle's
    weights for the experts the engine chose (p[chosen], renormalised over them when the model
    renormalises); without probs, of the oracle's weights slot by slot.
    """
    import compare  # noqa: E402 (local: compare.py imports this module)
    ne, nw = f"router_experts.{layer}", f"router_weights.{layer}"
    notes = []
    eng_e = np.asarray(eng_e)
    ref_e = np.asarray(ref_e)
    if eng_e.shape != ref_e.shape:
        return False, [(False, f"{ne}: shape {list(eng_e.shape)} != reference {list(ref_e.shape)}")], notes
    if np.asarray(eng_w).shape != ref_e.shape:
        return False, [(False, f"{nw}: shape {list(np.asarray(eng_w).shape)} != reference "
                               f"{list(ref_e.shape)}")], notes
    if not np.issubdtype(eng_e.dtype, np.integer):
        return False, [(False, f"{ne}: dtype {eng_e.dtype} is not an integer type")], notes
    S, k = ref_e.shape
    E = probs.shape[1] if probs is not None else None
    bad = []
    for r in range(S):
        row = [int(x) for x in eng_e[r]]
        if len(set(row)) != k or (E is not None and any(x < 0 or x >= E for x in row)):
            bad.append(f"{ne}: row {r} engine experts {row} are not {k} distinct ids in [0, {E})")
            continue
        for j in range(k):
            a, b = row[j], int(ref_e[r, j])
            if a == b:
                continue
            if probs is not None and abs(probs[r, a] - probs[r, b]) <= tie_gap:
                notes.append(f"{ne}[{r},{j}]: engine {a} (p={probs[r, a]:.9g}) vs oracle {b} "
                             f"(p={probs[r, b]:.9g}): near-tie (gap {abs(probs[r, a] - probs[r, b]):.3g} "
                             f"<= {tie_gap:g}), accepted")
                continue
            gap = "" if probs is None else f" (oracle p {probs[r, a]:.6g} vs {probs[r, b]:.6g})"
            bad.append(f"{ne}: row {r} slot {j}: engine expert {a} != oracle {b}{gap}; "
                       f"engine row {row}, oracle row {[int(x) for x in ref_e[r]]}")
            break
    if bad:
        more = f" (+{len(bad) - 2} more rows)" if len(bad) > 2 else ""
        return False, [(False, m) for m in bad[:2]] + ([(False, f"{ne}: {len(bad)} of {S} rows differ{more}")]
                                                        if len(bad) > 2 else []), notes
    res = [(True, f"{ne} {[S, k]}: equal" + (f" but for {len(notes)} accepted near-tie(s)" if notes else ""))]
    if probs is not None:
        want = np.take_along_axis(probs, eng_e.astype(np.int64), axis=1)
        if normalize:
            want = want / want.sum(axis=1, keepdims=True)
    else:
        want = np.asarray(ref_w, dtype=np.float64)
    wok, wmsg = compare.compare_arrays(nw, np.asarray(eng_w), want, rtol, atol_scale)
    res.append((wok, wmsg))
    return wok, res, notes
