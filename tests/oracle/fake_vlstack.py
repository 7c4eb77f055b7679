#!/usr/bin/python3
"""Stand-in for the vlstack binary (make-test-model + forward) built from the oracle.

Only for checking run_cases.py itself: `run_cases.py --vlstack tests/oracle/fake_vlstack.py`
must pass every case (it compares the oracle against itself through the whole pipeline).
With FAKE_VLSTACK_F32=1 the forward is computed in float32, which shows how much of the
tolerance an f32 engine would use.

`batch` (docs/contracts.md §6) is the reference batch_ref.py (each request alone), so
`batch_cases.py --vlstack tests/oracle/fake_vlstack.py` must pass too. FAKE_VLSTACK_BATCH_BUG
injects one engine-like bug so the driver can be shown to catch it:
  delta      decode coordinate off by one (S+j+delta+1)
  nocancel   cancel_after_tokens ignored
  eosdrop    the EOS token is not emitted on "stop"
  abort      the whole run exits 1 without output when any request is invalid
  order      output lines in reverse order
  ds_decode  the DeepStack payload's layers are shifted by one (wrong injection layer)
FAKE_VLSTACK_FORWARD=/path/to/vlstack makes `batch` greedy-decode each request alone through that
binary's `forward` (one call per generated token, growing `decode_tokens`) and `make-test-model`
delegate to it: the f32 engine's token streams before its own `batch` exists.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import json  # noqa: E402

import batch_ref  # noqa: E402
import forward_ref  # noqa: E402
import testmodel  # noqa: E402


def make(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="qwen3-vl")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--tied", dest="tied", action="store_true", default=True)
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--mrope-section", default=None)
    ap.add_argument("--mrope-layout", default="interleaved")
    ap.add_argument("--rope-theta", type=float, default=5e6)
    ap.add_argument("--deepstack", type=int, default=3)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deepstack-layers", default=None, help="1-D DeepStack declaration, e.g. 0,2")
    ap.add_argument("--deepstack-nmax", type=int, default=None)
    # mixture of experts (--arch qwen3-moe / qwen3-vl-moe)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--moe-intermediate", type=int, default=32)
    ap.add_argument("--sparse-step", type=int, default=1)
    ap.add_argument("--mlp-only-layers", default="")
    ap.add_argument("--no-norm-topk", action="store_true")
    a = ap.parse_args(argv)
    sec = [int(x) for x in a.mrope_section.split(",")] if a.mrope_section else None
    moe = testmodel.moe_keys(a.experts, a.top_k, a.moe_intermediate, a.sparse_step,
                             [int(x) for x in a.mlp_only_layers.split(",") if x], not a.no_norm_topk)
    cfg = testmodel.make_config(a.arch, a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim,
                                a.intermediate, a.vocab, a.tied, sec, a.mrope_layout,
                                a.rope_theta, a.deepstack, moe)
    if a.deepstack_layers:
        cfg["deepstack_language_layer_indices"] = [int(x) for x in a.deepstack_layers.split(",")]
        cfg["deepstack_max_visual_positions"] = a.deepstack_nmax or 16
    # EOS ids as the engine's make-test-model writes them: [V-1, V-2] in generation_config.json,
    # V-1 in config.json
    cfg["eos_token_id"] = a.vocab - 1
    testmodel.write_model(a.out, cfg, testmodel.random_weights(cfg, a.seed), a.dtype, a.shards)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": a.vocab - 2, "eos_token_id": [a.vocab - 1, a.vocab - 2]}, f)
    return 0


def inject_moe_bug(bug):
    """FAKE_VLSTACK_MOE_BUG: one engine-like MoE bug, which run_cases.py --moe must catch:
      norm      renormalisation inverted (qwen3_moe), or dropped (qwen3_vl_moe)
      kplus1    the (k+1)-th expert instead of the k-th
      gateup    the fused gate_up_proj halves read up-then-gate
      step      the sparse-layer rule off by one ((l % step == 0))"""
    import moe_ref
    if bug == "norm":
        orig = moe_ref.route
        moe_ref.route = lambda m, r, k, n: orig(m, r, k, not n)
    elif bug == "kplus1":
        orig = moe_ref.route

        def route(m, r, k, n):
            top, w, p = orig(m, r, min(k + 1, r.shape[0]), n)
            if top.shape[1] > k:
                top = np.concatenate([top[:, :k - 1], top[:, k:]], axis=1)
                w = np.take_along_axis(p, top, axis=1)
                if n:
                    w = w / w.sum(axis=1, keepdims=True)
            return top, w, p
        import numpy as np
        moe_ref.route = route
    elif bug == "gateup":
        orig = moe_ref.expert_forward

        def expert_forward(lw, e, x):
            if lw["layout"] == "fused":
                gu = lw["gate_up"][e]
                I = gu.shape[1] // 2
                lw = dict(lw, gate_up=gu[None][:, :, list(range(I, 2 * I)) + list(range(I))].repeat(
                    lw["gate_up"].shape[0], axis=0))
            return orig(lw, e, x)
        moe_ref.expert_forward = expert_forward
    elif bug == "step":
        moe_ref.MoeConfig.is_sparse = lambda self, l: (l not in self.mlp_only_layers) and (
            self.experts > 0 and l % self.sparse_step == 0)
    else:
        raise SystemExit(f"fake_vlstack: unknown FAKE_VLSTACK_MOE_BUG {bug}")


def batch_via_forward(exe, argv):
    import argparse
    import subprocess
    import tempfile

    import numpy as np
    import st
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--capacity", type=int, default=batch_ref.DEFAULT_CAPACITY)
    a = ap.parse_args(argv)
    eos = batch_ref.eos_ids(a.model)
    base = os.path.dirname(os.path.abspath(a.requests))
    tmp = tempfile.mkdtemp(prefix="fakefwd")
    with open(a.requests) as f:
        reqs = [json.loads(x) for x in f if x.strip()]
    for req in reqs:
        o = {"id": req.get("id"), "tokens": [], "finish_reason": "error"}
        try:
            inp = batch_ref.load_request_input(req, base)
            S = inp["inputs_embeds"].shape[0] if "inputs_embeds" in inp else len(inp["input_ids"])
            n, k = req["max_new_tokens"], req.get("cancel_after_tokens")
            if S + n > a.capacity:
                raise ValueError("prompt + max_new_tokens > capacity")
            toks, fr = [], None
            if k == 0:
                fr = "cancelled"
            while fr is None:
                d = dict(inp)
                if toks:
                    d["decode_tokens"] = np.array(toks, np.int32)
                ip, op = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
                st.save_file(d, ip)
                p = subprocess.run([exe, "forward", "--model", a.model, "--input", ip, "--output", op],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                if p.returncode != 0:
                    raise ValueError(p.stderr.decode("utf-8", "replace").strip() or "forward failed")
                r = st.load_file(op)
                lg = r["decode_logits"][-1] if toks else r["logits"][-1]
                t = int(np.argmax(lg))
                toks.append(t)
                if t in eos and not req.get("ignore_eos"):
                    fr = "stop"
                elif len(toks) >= n:
                    fr = "length"
                elif k is not None and len(toks) >= k:
                    fr = "cancelled"
            o["tokens"], o["finish_reason"] = toks, fr
        except (ValueError, KeyError, OSError, batch_ref.qwen3_ref.RefError, st.SafetensorsError) as e:
            o["error"] = str(e)
        print(json.dumps(o), flush=True)
    return 0


def batch(argv):
    if os.environ.get("FAKE_VLSTACK_FORWARD"):
        return batch_via_forward(os.environ["FAKE_VLSTACK_FORWARD"], argv)
    bug = os.environ.get("FAKE_VLSTACK_BATCH_BUG", "")
    if os.environ.get("FAKE_VLSTACK_F32"):
        argv = argv + ["--emulate-f32"]
    if bug == "delta":
        orig = batch_ref.decode_step
        batch_ref.decode_step = lambda m, c, t, coord: orig(m, c, t, coord + 1)
    elif bug == "nocancel":
        orig_g = batch_ref.greedy
        batch_ref.greedy = lambda m, i, n, e, ig=False, ca=None, cap=None: orig_g(m, i, n, e, ig, None, cap)
    elif bug == "ds_decode":
        orig_p = batch_ref.prefill

        def shifted(m, inp):
            if "deepstack_features" in inp:
                inp = dict(inp)
                K = inp["deepstack_features"].shape[0]
                inp["deepstack_layers"] = (batch_ref.np.arange(K) + 1).astype("int32")
                m.cfg.deepstack_layers, saved = None, m.cfg.deepstack_layers
                try:
                    return orig_p(m, inp)
                finally:
                    m.cfg.deepstack_layers = saved
            return orig_p(m, inp)
        batch_ref.prefill = shifted
    if bug in ("eosdrop", "abort", "order"):
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = batch_ref.main(argv)
        outs = [json.loads(x) for x in buf.getvalue().splitlines() if x.strip()]
        if bug == "abort" and any(o["finish_reason"] == "error" for o in outs):
            print("fake: aborting on an invalid request", file=sys.stderr)
            return 1
        if bug == "order":
            outs.reverse()
        if bug == "eosdrop":
            for o in outs:
                if o["finish_reason"] == "stop":
                    o["tokens"] = o["tokens"][:-1]
        for o in outs:
            print(json.dumps(o))
        return rc
    return batch_ref.main(argv)


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "make-test-model":
        if os.environ.get("FAKE_VLSTACK_FORWARD"):
            os.execv(os.environ["FAKE_VLSTACK_FORWARD"], [os.environ["FAKE_VLSTACK_FORWARD"], cmd] + rest)
        sys.exit(make(rest))
    if cmd == "forward":
        if os.environ.get("FAKE_VLSTACK_F32"):
            rest = rest + ["--emulate-f32"]
        if os.environ.get("FAKE_VLSTACK_MOE_BUG"):
            inject_moe_bug(os.environ["FAKE_VLSTACK_MOE_BUG"])
        sys.exit(forward_ref.main(rest))
    if cmd == "batch":
        sys.exit(batch(rest))
    print(f"fake_vlstack: unknown command {cmd}", file=sys.stderr)
    sys.exit(2)
