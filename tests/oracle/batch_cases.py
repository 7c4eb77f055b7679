#!/usr/bin/python3
"""End-to-end oracle check of `vlstack batch` (docs/contracts.md §4, §6) against the NumPy
reference.

usage: /usr/bin/python3 tests/oracle/batch_cases.py --vlstack PATH_TO_vlstack --work WORKDIR
                                                    [--filter SUBSTR] [--list] [-v]

Each run: `vlstack make-test-model` → a JSONL file of mixed requests (inputs under
WORK/batch/RUN/inputs/, referenced relative to the JSONL file) → `vlstack batch --model DIR
--requests REQS.jsonl --slots B [--capacity C]` (run from another directory) → every request
recomputed ALONE by batch_ref.greedy (float64) → exact comparison of tokens and finish_reason.

Prints `PASS RUN/REQUEST` or `FAIL RUN/REQUEST: reason` per request, `PASS RUN` / `FAIL RUN: …` for
the run as a whole (exit status, one JSON line per request in input order, ids echoed), `PASS
parity/…` for the same request set under different --slots (engine vs engine, exact), then
`N passed, M failed`; exit status 1 if anything failed. A request whose reference has a top-2
logit gap below 1e-3·max(1,|top|) at any emitted step is reported `TIE RUN/REQUEST` (tie-skipped:
only the tokens before the first near-tie are checked; it counts neither as pass nor fail).
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
import qwen3_ref  # noqa: E402
import st  # noqa: E402

TIMEOUT = 300
TIE_REL = 1e-3
FINISH = ("stop", "length", "cancelled", "error")
DS_SCALE = 2.0     # DeepStack feature scale: large enough that the payload changes the greedy stream
SENS_TRIES = 25


class RunFail(Exception):
    pass


# ----------------------------------------------------------------------------
# Request input builders: fn(ctx) -> dict of tensors (ctx: cfg, model, rng, eos)
# ----------------------------------------------------------------------------

def i32(*v):
    return np.array(v, dtype=np.int32)


def randn(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def specials(cfg):
    return {t for t in (cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id,
                        cfg.vision_end_token_id) if t is not None}


def text_ids(ctx, n):
    """Ordinary tokens: below every special id and never an EOS id."""
    cfg = ctx.cfg
    hi = min(specials(cfg) | set(ctx.eos) | {cfg.V})
    pool = np.array([t for t in range(hi) if t not in ctx.eos], dtype=np.int64)
    return pool[ctx.rng.integers(0, len(pool), n)].astype(np.int32)


def image_prompt(ctx, grids, pre=3, between=2, post=2):
    cfg = ctx.cfg
    ids = list(text_ids(ctx, pre))
    m = cfg.spatial_merge_size
    for gi, (t, h, w) in enumerate(grids):
        if gi:
            ids += list(text_ids(ctx, between))
        ids.append(cfg.vision_start_token_id)
        ids += [cfg.image_token_id] * (t * (h // m) * (w // m))
        ids.append(cfg.vision_end_token_id)
    ids += list(text_ids(ctx, post))
    ids = np.array(ids, dtype=np.int32)
    return ids, np.array(grids, dtype=np.int32).reshape(-1, 3), np.flatnonzero(ids == cfg.image_token_id).astype(np.int32)


def positions(ctx, S, start=0):
    """Explicit positions in the model's mode (non-negative, non-trivial)."""
    rng = ctx.rng
    t = start + np.cumsum(rng.integers(0, 3, S))
    if ctx.cfg.mode != "mrope":
        return t.astype(np.int32)
    return np.stack([t, t + rng.integers(0, 3, S), t + rng.integers(0, 4, S)]).astype(np.int32)


def b_text(S):
    return lambda ctx: {"input_ids": text_ids(ctx, S)}


def b_image(grids, visual=False, delta=None, ds=None, pre=3, post=2):
    def b(ctx):
        ids, g, pads = image_prompt(ctx, grids, pre=pre, post=post)
        d = {"input_ids": ids, "image_grid_thw": g}
        if visual:
            d["visual_embeds"] = randn(ctx.rng, len(pads), ctx.cfg.H)
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if ds:
            d["deepstack_positions"] = pads
            d["deepstack_features"] = randn(ctx.rng, ds, len(pads), ctx.cfg.H, scale=DS_SCALE)
        return d
    return b


def b_explicit(S, delta):
    return lambda ctx: {"input_ids": text_ids(ctx, S), "position_ids": positions(ctx, S), "rope_delta": i32(delta)}


def b_embeds(S, pos=False, delta=None, ds_rows=None, ds_k=0, ds_layers=None):
    def b(ctx):
        d = {"inputs_embeds": randn(ctx.rng, S, ctx.cfg.H)}
        if pos:
            d["position_ids"] = positions(ctx, S)
        if delta is not None:
            d["rope_delta"] = i32(delta)
        if ds_rows is not None:
            d["deepstack_positions"] = np.array(ds_rows, dtype=np.int32)
            d["deepstack_features"] = randn(ctx.rng, ds_k, len(ds_rows), ctx.cfg.H, scale=DS_SCALE)
            if ds_layers is not None:
                d["deepstack_layers"] = np.array(ds_layers, dtype=np.int32)
        return d
    return b


def b_embeds_image_ids(grids):
    def b(ctx):
        ids, g, _ = image_prompt(ctx, grids)
        return {"input_ids": ids, "image_grid_thw": g, "inputs_embeds": randn(ctx.rng, len(ids), ctx.cfg.H)}
    return b


def b_eos_prompt(ctx):
    """A text prompt whose greedy continuation (reference) hits an EOS id at step 2..6, with no
    near-tie on the way. Deterministic search over seeded prompts."""
    return dict(ctx.eos_prompt())


def b_random(ctx):
    """One of the valid kinds, chosen by the request's own rng (stress run)."""
    kinds = ["text", "image", "explicit", "embeds", "embeds_pos"] + (["ds_image", "ds_embeds"] if ctx.ds_k else [])
    if ctx.cfg.mode != "mrope":
        kinds = [k for k in kinds if "image" not in k]
    k = kinds[int(ctx.rng.integers(0, len(kinds)))]
    S = int(ctx.rng.integers(2, 12))
    delta = int(ctx.rng.integers(-4, 6))
    if k == "text":
        return b_text(S)(ctx)
    if k == "image":
        grids = [(1, 2 * int(ctx.rng.integers(1, 4)), 2 * int(ctx.rng.integers(1, 4)))]
        return b_image(grids, visual=bool(ctx.rng.integers(0, 2)))(ctx)
    if k == "explicit":
        return b_explicit(S, delta)(ctx)
    if k == "embeds":
        return b_embeds(S)(ctx)
    if k == "embeds_pos":
        return b_embeds(S, pos=True, delta=delta)(ctx)
    if k == "ds_image":
        return b_image([(1, 4, 2 * int(ctx.rng.integers(1, 4)))], ds=ctx.ds_k)(ctx)
    rows = sorted(int(x) for x in ctx.rng.choice(S, size=min(S, 3), replace=False))
    return b_embeds(S, pos=True, delta=delta, ds_rows=rows, ds_k=ctx.ds_k)(ctx)


# invalid ----------------------------------------------------------------------

def b_bad_ds_unsorted(ctx):
    d = b_image([(1, 4, 4)], ds=ctx.ds_k)(ctx)
    p = d["deepstack_positions"].copy()
    p[[0, 1]] = p[[1, 0]]
    d["deepstack_positions"] = p
    return d


def b_bad_ds_layers(ctx):
    d = b_image([(1, 4, 4)], ds=ctx.ds_k)(ctx)
    d["deepstack_layers"] = np.array(list(reversed(range(ctx.ds_k))), dtype=np.int32)
    return d


def b_bad_pos_rank(ctx):
    S = 6
    d = {"input_ids": text_ids(ctx, S)}
    d["position_ids"] = (np.arange(S, dtype=np.int32) if ctx.cfg.mode == "mrope"
                         else np.tile(np.arange(S, dtype=np.int32), (3, 1)))
    return d


def b_bad_token(ctx):
    ids = text_ids(ctx, 5)
    ids[3] = ctx.cfg.V + 2
    return {"input_ids": ids}


MISSING = "MISSING"  # builder result meaning: reference a file that does not exist


class Req:
    """One request line. max_new may be a callable (ctx, S) -> int (capacity edge cases)."""

    def __init__(self, rid, build, max_new, ignore_eos=True, cancel=None, invalid=False, want=None, json_id=None,
                 sens=None, mentions=()):
        self.rid = rid
        # an error line must name one of these (docs/contracts.md §2: say which tensor and which
        # rule)
        self.mentions = tuple(mentions)
        # perturbations that must change this request's reference stream (else the inputs are redrawn,
        # so that the request really tests that feature); None: "coord" for every redrawable request
        self.sens = sens
        self.build = build
        self.max_new = max_new
        self.ignore_eos = ignore_eos
        self.cancel = cancel
        self.invalid = invalid      # the driver's intent: the reference must refuse it
        self.want = want            # the driver's intent for the finish reason (sanity of the case)
        self.json_id = json_id      # id written to the JSONL (default: rid)


class Run:
    def __init__(self, name, make, slots, capacity, reqs, group=None, config_patch=None, extra=()):
        self.name = name
        self.extra = list(extra)    # further `vlstack batch` flags (--prefill-chunk N)
        self.make = list(make)
        self.slots = slots
        self.capacity = capacity    # None: no --capacity flag (engine default)
        self.reqs = reqs
        self.group = group          # runs of one group share inputs; engine outputs must be identical
        self.config_patch = config_patch


# ----------------------------------------------------------------------------
# Run table
# ----------------------------------------------------------------------------

VL = ["--arch", "qwen3-vl", "--untied", "--vocab", "64"]
POS = ("coord", "no_pos", "no_delta")
M_DSPOS = ["deepstack_positions", "visual_positions"]
M_CAP = ["capacity", "max_new_tokens"]
DS = ("coord", "no_ds", "ds_shift")
QWEN3 = ["--arch", "qwen3", "--untied", "--vocab", "64"]


def cap_exact(ctx, S):
    return ctx.capacity - S          # S + max_new == C: still valid


def cap_over(ctx, S):
    return ctx.capacity - S + 1      # one over


def vl_mixed(extra=()):
    R = [
        Req("text_a", b_text(7), 6),
        Req("img_derived", b_image([(1, 4, 6)]), 5, ignore_eos=False, sens=("coord", "no_grid")),
        Req("img2_visual", b_image([(1, 4, 4), (1, 6, 4)], visual=True), 4, sens=("coord", "no_grid", "no_visual")),
        Req("bad_ds_unsorted", b_bad_ds_unsorted, 4, invalid=True, mentions=M_DSPOS),
        Req("pos_delta_neg", b_explicit(8, -3), 5, sens=POS),
        Req("pos_delta_pos", b_explicit(8, 5), 5, sens=POS),
        Req("img_delta_override", b_image([(1, 4, 6)], delta=4), 4, sens=("coord", "no_delta")),
        Req("embeds", b_embeds(6), 4),
        Req("bad_pos_rank", b_bad_pos_rank, 4, invalid=True, mentions=["position_ids"]),
        Req("embeds_pos_delta", b_embeds(7, pos=True, delta=-1), 4, sens=POS),
        Req("embeds_image_ids", b_embeds_image_ids([(1, 4, 6)]), 3, sens=("coord", "no_grid")),
        Req("ds_image", b_image([(1, 4, 6)], ds=3), 5, sens=DS),
        Req("ds_embeds_neg_delta", b_embeds(9, pos=True, delta=-2, ds_rows=[2, 3, 4, 5], ds_k=3), 4,
            sens=DS + ("no_delta",)),
        Req("cancel_2", b_text(6), 8, cancel=2, want="cancelled"),
        Req("eos_stop", b_eos_prompt, 10, ignore_eos=False, want="stop"),
        Req("bad_capacity", b_text(10), cap_over, invalid=True, mentions=M_CAP),
        Req("at_capacity", b_text(10), cap_exact, want="length"),
        Req("missing_file", lambda ctx: MISSING, 4, invalid=True, mentions=["does_not_exist"]),
        Req("cancel_0", b_text(5), 4, cancel=0, want="cancelled"),
        Req("img_cancel_3", b_image([(1, 2, 4)], visual=True), 6, cancel=3, want="cancelled"),
        Req("one_token", b_text(4), 1, want="length"),
    ]
    return R + list(extra)


def runs():
    out = []
    mk = VL + ["--deepstack", "3", "--seed", "101"]
    # 21 requests; more requests than slots; same inputs under 3, 1 and 8 slots
    out.append(Run("vl_mixed_slots3", mk, 3, 32, vl_mixed(), group="vl_mixed"))
    out.append(Run("vl_mixed_slots1", mk, 1, 32, vl_mixed(), group="vl_mixed"))
    out.append(Run("vl_mixed_slots8", mk, 8, 32, vl_mixed([Req("int_id", b_text(5), 3, json_id=4242)]),
                   group="vl_mixed"))
    # Chunked prefill (issue 14): the same requests with prompts prefilled in chunks of 1, 2, 3 and
    # 64 rows, chunk boundaries falling inside the visual spans and the DeepStack rows; every
    # request against the reference, and the outputs identical to the unchunked runs.
    for chunk in (1, 2, 3, 64):
        out.append(Run(f"vl_mixed_chunk{chunk}", mk, 3, 32, vl_mixed(), group="vl_mixed",
                       extra=["--prefill-chunk", str(chunk)]))
    # EOS family on one prompt: stop / ignored / cancelled before / cancel after / EOS at the limit
    eos = [
        Req("eos_stop", b_eos_prompt, 10, ignore_eos=False, want="stop"),
        Req("eos_ignored", b_eos_prompt, 10, ignore_eos=True, want="length"),
        Req("eos_cancel_before", b_eos_prompt, 10, ignore_eos=False, cancel=lambda ctx: ctx.eos_n - 1,
            want="cancelled"),
        Req("eos_cancel_after", b_eos_prompt, 10, ignore_eos=False, cancel=lambda ctx: ctx.eos_n + 2, want="stop"),
        Req("eos_at_limit", b_eos_prompt, lambda ctx, S: ctx.eos_n, ignore_eos=False, want="stop"),
        Req("eos_limit_before", b_eos_prompt, lambda ctx, S: ctx.eos_n - 1, ignore_eos=False, want="length"),
        Req("text_noeos", b_text(6), 6, ignore_eos=False),
    ]
    out.append(Run("vl_eos_slots2", VL + ["--deepstack", "3", "--seed", "102"], 2, 40, eos))
    # 1-D model declaring DeepStack explicitly (layers 0,2)
    q = [
        Req("text_a", b_text(7), 6),
        Req("text_b", b_text(3), 5, ignore_eos=False),
        Req("pos_delta_neg", b_explicit(8, -4), 5, sens=POS),
        Req("pos_delta_pos", b_explicit(6, 3), 5, sens=POS),
        Req("embeds", b_embeds(6), 4),
        Req("embeds_pos_delta", b_embeds(7, pos=True, delta=-1), 4, sens=POS),
        Req("ds_embeds", b_embeds(8, pos=True, delta=-1, ds_rows=[1, 2, 5], ds_k=2, ds_layers=[0, 2]), 4, sens=DS),
        Req("cancel_3", b_text(6), 8, cancel=3, want="cancelled"),
        Req("bad_pos_rank2", b_bad_pos_rank, 4, invalid=True, mentions=["position_ids"]),
        Req("bad_token", b_bad_token, 4, invalid=True, mentions=["input_ids"]),
        Req("bad_capacity", b_text(9), cap_over, invalid=True, mentions=M_CAP),
        Req("eos_stop", b_eos_prompt, 10, ignore_eos=False, want="stop"),
        Req("eos_ignored", b_eos_prompt, 10, ignore_eos=True, want="length"),
    ]
    out.append(Run("qwen3_1d_slots3", QWEN3 + ["--deepstack-layers", "0,2", "--deepstack-nmax", "16",
                                               "--seed", "103"], 3, 32, q))
    # DeepStack K=2 on 4 layers, f32 weights
    ds = [
        Req("ds_two_images_visual", b_image([(1, 4, 4), (1, 6, 4)], visual=True, ds=2), 5,
            sens=DS + ("no_visual", "no_grid")),
        Req("ds_image_neg_delta", b_image([(1, 4, 6)], ds=2, delta=-5), 5, sens=DS + ("no_delta",)),
        Req("ds_nv0", b_embeds(5, ds_rows=[], ds_k=2), 4),
        Req("text", b_text(6), 5),
        Req("bad_ds_layers", b_bad_ds_layers, 4, invalid=True,
            mentions=["deepstack_layers", "layer_indices"]),
        Req("ds_cancel_2", b_image([(1, 4, 4)], ds=2), 6, cancel=2, want="cancelled", sens=DS),
        Req("ds_embeds_pos", b_embeds(9, pos=True, delta=3, ds_rows=[0, 4, 8], ds_k=2), 4, sens=DS + ("no_pos",)),
    ]
    out.append(Run("vl_ds_k2_l4_f32_slots2", VL + ["--deepstack", "2", "--layers", "4", "--dtype", "f32",
                                                   "--seed", "104"], 2, 40, ds))
    out.append(Run("vl_ds_k2_l4_f32_chunk2", VL + ["--deepstack", "2", "--layers", "4", "--dtype", "f32",
                                                   "--seed", "104"], 2, 40, ds, extra=["--prefill-chunk", "2"]))
    out.append(Run("qwen3_1d_chunk3", QWEN3 + ["--deepstack-layers", "0,2", "--deepstack-nmax", "16",
                                               "--seed", "103"], 3, 32, q, extra=["--prefill-chunk", "3"]))
    # stress: 30 random valid requests (random kind, length, limit, cancel, ignore_eos) on 4 slots
    rs = np.random.default_rng(7)
    stress = []
    for i in range(30):
        c = int(rs.integers(1, 6)) if rs.random() < 0.3 else None
        stress.append(Req(f"r{i:02d}", b_random, int(rs.integers(1, 9)), ignore_eos=bool(rs.random() < 0.5),
                          cancel=c))
    out.append(Run("vl_stress30_slots4", VL + ["--deepstack", "2", "--seed", "106"], 4, 24,
                   stress))
    # engine defaults (no --capacity) and a tied bf16 model
    d = [
        Req("text", b_text(5), 4, sens=()),
        Req("image", b_image([(1, 4, 4)]), 4, sens=()),
        Req("explicit_neg", b_explicit(6, -2), 4, sens=()),
    ]
    out.append(Run("vl_tied_default_capacity", ["--arch", "qwen3-vl", "--vocab", "96", "--seed", "105"],
                   2, None, d))
    return out


# ----------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------

class Ctx:
    """What a builder sees: cfg, model, rng (per request), eos set, capacity, DeepStack K, and the
    run-wide EOS prompt (searched once per run, shared by every request of the run)."""

    def __init__(self, model, eos, rng, capacity, ds_k, shared):
        self.model = model
        self.cfg = model.cfg
        self.eos = eos
        self.rng = rng
        self.capacity = capacity
        self.ds_k = ds_k
        self.shared = shared

    @property
    def eos_n(self):
        self.eos_prompt()
        return self.shared["eos_n"]

    def eos_prompt(self):
        sh = self.shared
        if "eos_prompt" not in sh:
            rng = np.random.default_rng(sh["seed"] ^ 0xE05)
            sub = Ctx(self.model, self.eos, rng, self.capacity, self.ds_k, sh)
            for _ in range(400):
                S = int(rng.integers(4, 9))
                inp = {"input_ids": text_ids(sub, S)}
                r = batch_ref.greedy(self.model, inp, 7, self.eos, False)
                ties = [j for j, (g, a) in enumerate(zip(r["gaps"], r["tops"])) if g < 4 * TIE_REL * max(1.0, a)]
                if r["finish_reason"] == "stop" and len(r["tokens"]) >= 3 and not ties:
                    sh["eos_prompt"] = inp
                    sh["eos_n"] = len(r["tokens"])
                    break
            else:
                raise RunFail("could not find a prompt whose greedy continuation reaches EOS (driver)")
        return sh["eos_prompt"]


def prompt_len(inp):
    return inp["inputs_embeds"].shape[0] if "inputs_embeds" in inp else len(inp["input_ids"])


def perturbed(m, eos, inp, max_new, ignore_eos, cancel, kind):
    """Reference tokens of the request with one feature broken (None if that input is refused)."""
    inp = dict(inp)
    saved_dec, saved_layers = batch_ref.decode_step, m.cfg.deepstack_layers
    try:
        if kind == "coord":       # decode RoPE coordinate one too far
            batch_ref.decode_step = lambda mm, c, t, coord: saved_dec(mm, c, t, coord + 1)
        elif kind == "no_ds":     # DeepStack payload ignored
            for k in ("deepstack_positions", "deepstack_features", "deepstack_layers"):
                inp.pop(k, None)
        elif kind == "ds_shift":  # DeepStack injected one layer late
            K = inp["deepstack_features"].shape[0]
            lay = inp.get("deepstack_layers", np.arange(K))
            inp["deepstack_layers"] = (np.asarray(lay) + 1).astype(np.int32)
            m.cfg.deepstack_layers = None
        elif kind == "no_grid":   # derived M-RoPE positions replaced by 0..S-1
            inp.pop("image_grid_thw")
        elif kind == "no_visual":
            inp.pop("visual_embeds")
        elif kind == "no_pos":    # explicit positions ignored
            inp.pop("position_ids")
        elif kind == "no_delta":  # explicit rope_delta ignored (derived or 0 instead)
            inp.pop("rope_delta")
        else:
            raise ValueError(kind)
        return batch_ref.greedy(m, inp, max_new, eos, ignore_eos, cancel)["tokens"]
    except qwen3_ref.RefError:
        return None
    finally:
        batch_ref.decode_step, m.cfg.deepstack_layers = saved_dec, saved_layers


def insensitive(m, eos, inp, max_new, ignore_eos, cancel, sens):
    """The perturbations in sens that leave the reference stream unchanged."""
    try:
        base = batch_ref.greedy(m, inp, max_new, eos, ignore_eos, cancel)["tokens"]
    except qwen3_ref.RefError:
        return []            # refused: reported later as a driver error
    if len(base) < 2:
        return []
    return [k for k in sens if perturbed(m, eos, inp, max_new, ignore_eos, cancel, k) == base]


def run_cmd(cmd, log_prefix, cwd=None):
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise RunFail(f"timeout after {TIMEOUT}s: {' '.join(cmd)}")
    except OSError as e:
        raise RunFail(f"cannot run {cmd[0]}: {e}")
    with open(log_prefix + ".stdout", "wb") as f:
        f.write(p.stdout)
    with open(log_prefix + ".stderr", "wb") as f:
        f.write(p.stderr)
    return p, time.time() - t


def tail(b, n=300):
    s = b.decode("utf-8", "replace").strip().replace("\n", " | ")
    return s[-n:]


def is_tie(gap, top):
    return gap < TIE_REL * max(1.0, abs(top))


class Runner:
    def __init__(self, vlstack, work, verbose):
        self.vlstack = vlstack
        self.work = work
        self.verbose = verbose
        self.models = {}
        self.refcache = {}
        self.lines = []          # (status, name, detail)
        self.group_out = {}      # group -> {rid: (run, tokens, finish, tie)}
        self.notes = []

    def exe(self):
        v = self.vlstack
        return [sys.executable, v] if v.endswith(".py") else [v]

    def report(self, status, name, detail=""):
        self.lines.append(status)
        msg = f"{status} {name}"
        if status == "FAIL":
            msg += f": {detail}"
        elif detail and (self.verbose or status == "TIE"):
            msg += f" ({detail})"
        print(msg, flush=True)

    def model(self, run):
        key = hashlib.sha1(json.dumps([run.make, run.config_patch]).encode()).hexdigest()[:12]
        if key in self.models:
            return self.models[key]
        d = os.path.join(self.work, "models", key)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        p, _ = run_cmd(self.exe() + ["make-test-model", "--out", d] + run.make, d + ".make")
        if p.returncode != 0:
            raise RunFail(f"make-test-model {' '.join(run.make)} exited {p.returncode}: {tail(p.stderr)}")
        with open(d + ".args", "w") as f:
            f.write(" ".join(run.make) + "\n")
        try:
            m = qwen3_ref.Model.load(d)
            eos = batch_ref.eos_ids(d)
        except (qwen3_ref.RefError, st.SafetensorsError, OSError, ValueError, KeyError) as e:
            raise RunFail(f"oracle cannot load the model from make-test-model {' '.join(run.make)}: {e}")
        c = m.cfg
        want_mode = "1d" if "qwen3" == run.make[run.make.index("--arch") + 1] else "mrope"
        if c.mode != want_mode:
            raise RunFail(f"make-test-model wrote position mode {c.mode}, expected {want_mode}")
        if "--untied" in run.make and c.tied:
            raise RunFail("make-test-model wrote a tied model for --untied")
        if not eos:
            raise RunFail("model declares no eos_token_id (generation_config.json / config.json)")
        self.models[key] = (d, m, eos)
        return self.models[key]

    def build_inputs(self, run, m, eos, rdir):
        """Writes the JSONL + inputs; returns list of (req, json_line_obj, input dict or None)."""
        seed = int(hashlib.sha1((run.group or run.name).encode()).hexdigest()[:8], 16)
        ds_k = len(m.cfg.deepstack_layers) if m.cfg.deepstack_layers else 0
        idir = os.path.join(rdir, "inputs")
        os.makedirs(idir)
        entries = []
        shared = {"seed": seed}
        for i, r in enumerate(run.reqs):
            rs = int(hashlib.sha1(r.rid.encode()).hexdigest()[:8], 16) ^ seed
            ctx = Ctx(m, eos, np.random.default_rng(rs), run.capacity, ds_k, shared)
            sens = r.sens
            if sens is None:
                sens = () if (r.invalid or r.build is b_eos_prompt) else ("coord",)
            for attempt in range(SENS_TRIES):
                inp = r.build(ctx)
                S = 0 if inp is MISSING else prompt_len(inp)
                max_new = r.max_new(ctx, S) if callable(r.max_new) else r.max_new
                cancel = r.cancel(ctx) if callable(r.cancel) else r.cancel
                if inp is MISSING or not sens:
                    break
                weak = insensitive(m, eos, inp, max_new, r.ignore_eos, cancel, sens)
                if not weak:
                    break
            else:
                self.notes.append(f"{run.name}/{r.rid}: after {SENS_TRIES} draws the reference stream still "
                                  f"does not depend on {weak}")
            if inp is MISSING:
                fname = f"inputs/{i:02d}_{r.rid}_does_not_exist.safetensors"
            else:
                fname = f"inputs/{i:02d}_{r.rid}.safetensors"
                st.save_file(inp, os.path.join(rdir, fname))
            if max_new is not None and max_new < 1:
                raise RunFail(f"driver: request {r.rid} max_new_tokens {max_new} < 1")
            obj = {"id": r.json_id if r.json_id is not None else r.rid, "input": fname,
                   "max_new_tokens": max_new, "ignore_eos": r.ignore_eos,
                   "cancel_after_tokens": cancel, "temperature": 0, "seed": rs % 1000}
            entries.append((r, obj, None if inp is MISSING else inp))
        with open(os.path.join(rdir, "requests.jsonl"), "w") as f:
            for _, obj, _ in entries:
                f.write(json.dumps(obj) + "\n")
        return entries

    def reference(self, m, eos, run, rdir, r, obj):
        key = (id(m), run.capacity, json.dumps(obj, sort_keys=True),
               hashlib.sha1(open(os.path.join(rdir, obj["input"]), "rb").read()).hexdigest()
               if os.path.exists(os.path.join(rdir, obj["input"])) else None)
        if key not in self.refcache:
            self.refcache[key] = batch_ref.run_request(m, obj, rdir, eos, run.capacity)
        ref = self.refcache[key]
        # the driver's own intent must hold on the reference (else the case tests something else)
        if r.invalid and ref["finish_reason"] != "error":
            raise RunFail(f"driver: request {r.rid} meant to be invalid was accepted by the reference")
        if not r.invalid and ref["finish_reason"] == "error":
            raise RunFail(f"driver: request {r.rid} refused by the reference: {ref['error']}")
        if r.want and ref["finish_reason"] != r.want:
            raise RunFail(f"driver: request {r.rid} finishes {ref['finish_reason']} on the reference, "
                          f"meant {r.want}")
        return ref

    def run(self, run):
        rdir = os.path.join(self.work, "batch", run.name)
        if os.path.exists(rdir):
            shutil.rmtree(rdir)
        os.makedirs(rdir)
        d, m, eos = self.model(run)
        entries = self.build_inputs(run, m, eos, rdir)
        refs = [self.reference(m, eos, run, rdir, r, obj) for r, obj, _ in entries]
        with open(os.path.join(rdir, "reference.jsonl"), "w") as f:
            for ref in refs:
                f.write(json.dumps({k: v for k, v in ref.items() if k in ("id", "tokens", "finish_reason", "error")
                                    }) + "\n")
        cmd = self.exe() + ["batch", "--model", d, "--requests", os.path.join(rdir, "requests.jsonl"),
                            "--slots", str(run.slots)]
        if run.capacity is not None:
            cmd += ["--capacity", str(run.capacity)]
        cmd += run.extra
        with open(os.path.join(rdir, "cmd.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n")
        # run from WORK (not the JSONL's folder): input paths must resolve relative to the JSONL file
        p, dt = run_cmd(cmd, os.path.join(rdir, "engine"), cwd=self.work)
        any_invalid = any(r.invalid for r, _, _ in entries)
        if p.returncode < 0:
            raise RunFail(f"engine killed by signal {-p.returncode}: {tail(p.stderr)}")
        if p.returncode != 0 and not any_invalid:
            raise RunFail(f"engine batch exited {p.returncode}: {tail(p.stderr)}")
        lines = [ln for ln in p.stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
        outs = []
        for ln in lines:
            try:
                o = json.loads(ln)
            except ValueError:
                raise RunFail(f"stdout line is not JSON: {ln[:120]!r} (rc {p.returncode}, stderr: {tail(p.stderr, 150)})")
            if not isinstance(o, dict):
                raise RunFail(f"stdout line is not a JSON object: {ln[:120]!r}")
            outs.append(o)
        if len(outs) != len(entries):
            raise RunFail(f"{len(outs)} output lines for {len(entries)} requests (rc {p.returncode}; "
                          f"stderr: {tail(p.stderr, 200)})")
        ids_out = [o.get("id") for o in outs]
        ids_in = [obj["id"] for _, obj, _ in entries]
        if ids_out != ids_in:
            bad = [(i, a, b) for i, (a, b) in enumerate(zip(ids_in, ids_out)) if a != b][:3]
            raise RunFail(f"output ids not the request ids in input order (index, want, got): {bad}")
        self.report("PASS", run.name, f"rc {p.returncode}, {dt:.1f}s, {len(outs)} lines")
        grp = self.group_out.setdefault(run.group, {}) if run.group else None
        for (r, obj, _), ref, o in zip(entries, refs, outs):
            name = f"{run.name}/{r.rid}"
            status, detail, tie = self.check_request(r, obj, ref, o)
            self.report(status, name, detail)
            if grp is not None:
                grp.setdefault(r.rid, []).append((run.name, o.get("tokens"), o.get("finish_reason"), tie))

    def check_request(self, r, obj, ref, o):
        fr = o.get("finish_reason")
        toks = o.get("tokens")
        err = o.get("error")
        if fr not in FINISH:
            return "FAIL", f"finish_reason {fr!r} not one of {FINISH}", False
        if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in toks):
            return "FAIL", f"tokens is not a list of integers: {toks!r}", False
        if ref["finish_reason"] == "error":
            if fr != "error":
                return "FAIL", (f"invalid request accepted (finish {fr}, {len(toks)} tokens); reference refuses: "
                                f"{ref['error']}"), False
            if not isinstance(err, str) or not err.strip():
                return "FAIL", f"error line without a non-empty \"error\" message: {err!r}", False
            if toks:
                return "FAIL", f"error line carries tokens {toks}", False
            if r.mentions and not any(w.lower() in err.lower() for w in r.mentions):
                return "FAIL", (f"error message names none of {list(r.mentions)} "
                                "(docs/contracts.md §2: say which tensor and rule): "
                                f"{err[:200]!r}"), False
            return "PASS", f"error: {err[:100]}", False
        if fr == "error":
            return "FAIL", f"valid request failed: {err!r} (reference: {ref['finish_reason']} {ref['tokens']})", False
        if err not in (None, ""):
            return "FAIL", f"non-error line has an error message {err!r}", False
        want_t, want_f = ref["tokens"], ref["finish_reason"]
        ties = [j for j, (g, a) in enumerate(zip(ref["gaps"], ref["tops"])) if is_tie(g, a)]
        if ties:
            j = ties[0]
            if toks[:j] != want_t[:j]:
                return "FAIL", (f"tokens differ before the first near-tie (step {j}): got {toks} want {want_t}"), True
            return "TIE", (f"tie-skipped: top-2 gap {ref['gaps'][j]:.2e} at step {j}; prefix of {j} tokens "
                           f"matches; got {toks} {fr}, reference {want_t} {want_f}"), True
        alt = None
        k = obj.get("cancel_after_tokens")
        if k is not None and want_f in ("stop", "length") and len(want_t) == k:
            alt = "cancelled"    # cancel on the very token that also ends it naturally: either is fine
        if toks != want_t:
            first = next((i for i, (a, b) in enumerate(zip(toks, want_t)) if a != b), min(len(toks), len(want_t)))
            return "FAIL", (f"tokens differ from step {first}: got {toks} ({fr}), want {want_t} ({want_f}); "
                            f"prompt S={ref.get('S')}, rope_delta={ref.get('rope_delta')}"), False
        if fr != want_f and fr != alt:
            return "FAIL", f"finish_reason {fr}, want {want_f} (tokens {toks} match)", False
        return "PASS", f"{fr}, {len(toks)} tokens", False

    def parity(self):
        for g, per in self.group_out.items():
            probs, ties = [], []
            names = sorted({r[0] for rows in per.values() for r in rows})
            for rid, rows in per.items():
                if len(rows) < 2:
                    continue
                base = rows[0]
                for other in rows[1:]:
                    if (other[1], other[2]) != (base[1], base[2]):
                        (ties if base[3] else probs).append(
                            f"{rid}: {base[0]} {base[1]} {base[2]} vs {other[0]} {other[1]} {other[2]}")
            name = f"parity/{g}"
            if probs:
                self.report("FAIL", name, "engine output depends on --slots: " + "; ".join(probs[:3]))
            else:
                self.report("PASS", name, "identical tokens across " + ", ".join(names or [])
                            + (f"; {len(ties)} near-tie differences ignored" if ties else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vlstack", required=True, help="path to the vlstack binary")
    ap.add_argument("--work", required=True, help="scratch directory (models, requests, outputs, logs)")
    ap.add_argument("--filter", default=None, help="run only runs whose name contains SUBSTR")
    ap.add_argument("--list", action="store_true", help="list the selected runs and their requests, then exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print details on PASS lines too")
    a = ap.parse_args(argv)
    sel = [r for r in runs() if a.filter is None or a.filter in r.name]
    if a.list:
        for r in sel:
            print(f"{r.name} (--slots {r.slots}, --capacity {r.capacity}): " + ", ".join(q.rid for q in r.reqs))
        return 0
    os.makedirs(a.work, exist_ok=True)
    R = Runner(os.path.abspath(a.vlstack) if os.path.exists(a.vlstack) else a.vlstack,
               os.path.abspath(a.work), a.verbose)
    t0 = time.time()
    for run in sel:
        try:
            R.run(run)
        except RunFail as e:
            R.report("FAIL", run.name, str(e))
        except Exception as e:  # noqa: BLE001 - a driver bug must not hide the other runs
            R.report("FAIL", run.name, f"driver error {type(e).__name__}: {e}")
    R.parity()
    for n in R.notes:
        print(f"NOTE {n}")
    passed = R.lines.count("PASS")
    failed = R.lines.count("FAIL")
    ties = R.lines.count("TIE")
    print(f"{passed} passed, {failed} failed" + (f" ({ties} tie-skipped)" if ties else "")
          + (f"  [{time.time() - t0:.0f}s]" if a.verbose else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
