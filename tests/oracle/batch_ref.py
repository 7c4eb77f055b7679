#!/usr/bin/python3
"""Reference of `vlstack batch` (docs/contracts.md §4, §6), float64 NumPy, one request at a time.

Each request is computed ALONE (the contract's parity rule makes that the expected result of
any batch): prefill exactly as `forward` does (qwen3_ref.forward: derived or explicit positions,
rope_delta, visual_embeds, inputs_embeds, DeepStack, and its request validation), then greedy
decoding:

    token_0 = argmax(prefill logits)
    token_j = argmax(logits after feeding token_{j-1} at cache index S+j-1,
                     RoPE coordinate S+j-1+rope_delta on every axis)

Stop rules: a token in the EOS set (generation_config.json `eos_token_id`, else config.json) with
ignore_eos false finishes "stop" (the EOS token is emitted); otherwise after max_new_tokens tokens
"length"; EOS wins over length on the same token. cancel_after_tokens k: once k tokens have been
emitted the request is "cancelled" (exactly the first k greedy tokens), unless it finished
earlier by stop/length. An invalid request (anything the oracle refuses, a missing or unreadable
input file, prompt + max_new_tokens > capacity, a bad field) gives "error" with no tokens.

usage (CLI twin of `vlstack batch`, used by fake_vlstack.py):
    /usr/bin/python3 batch_ref.py --model DIR --requests REQS.jsonl [--slots B] [--capacity C]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import qwen3_ref  # noqa: E402
import st  # noqa: E402

DEFAULT_CAPACITY = 4096   # only the reference CLI's default; the driver always passes --capacity


def eos_ids(model_dir):
    """EOS set: generation_config.json eos_token_id, else config.json (top level, then text_config)."""
    def as_set(v):
        if v is None:
            return None
        if isinstance(v, list):
            return {int(x) for x in v}
        return {int(v)}

    gp = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(gp):
        with open(gp) as f:
            s = as_set(json.load(f).get("eos_token_id"))
        if s is not None:
            return s
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    s = as_set(cfg.get("eos_token_id"))
    if s is None and isinstance(cfg.get("text_config"), dict):
        s = as_set(cfg["text_config"].get("eos_token_id"))
    return s or set()


def prefill(model, inp):
    """Runs qwen3_ref.forward (all its input rules and refusals) and keeps its K/V cache and the
    float64 last-row logits. Returns (last_logits f64 [V], cache, S, rope_delta)."""
    box = {}
    orig_new_cache = model.new_cache
    orig_run = model.run

    def new_cache():
        box["cache"] = orig_new_cache()
        return box["cache"]

    def run(*a, **k):
        r = orig_run(*a, **k)
        box["logits"] = r[1]
        return r

    model.new_cache = new_cache
    model.run = run
    try:
        out = qwen3_ref.forward(model, {k: v for k, v in inp.items() if k != "decode_tokens"})
    finally:
        del model.new_cache
        del model.run
    cache = box["cache"]
    S = cache["k"][0].shape[0] if model.cfg.L else len(out["_positions"][-1])
    return np.asarray(box["logits"][-1], dtype=np.float64), cache, S, int(out["_delta"])


def decode_step(model, cache, token, coord):
    if coord < 0:
        raise qwen3_ref.RefError(f"negative decode coordinate {coord}")
    cc = np.full((3, 1), coord, np.int64) if model.cfg.mode == "mrope" else np.array([coord], np.int64)
    _, lg, _ = model.run(model.embed_ids([token]), cc, cache)
    return np.asarray(lg[0], dtype=np.float64)


def top2_gap(logits):
    """(argmax, gap between the two largest logits, |top|)."""
    i = int(np.argmax(logits))
    top = float(logits[i])
    rest = np.delete(logits, i)
    second = float(rest.max()) if rest.size else -np.inf
    return i, top - second, abs(top)


def greedy(model, inp, max_new_tokens, eos, ignore_eos=False, cancel_after=None, capacity=None):
    """Greedy generation of one request alone.

    Returns dict(tokens, finish_reason, gaps, tops, S, rope_delta); raises RefError/ValueError for an
    invalid request. gaps[j]/tops[j] belong to the logits that produced tokens[j] (tie detection).
    """
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise qwen3_ref.RefError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if cancel_after is not None and (not isinstance(cancel_after, int) or isinstance(cancel_after, bool)
                                     or cancel_after < 0):
        raise qwen3_ref.RefError(f"cancel_after_tokens must be a non-negative integer, got {cancel_after!r}")
    logits, cache, S, delta = prefill(model, inp)
    if capacity is not None and S + max_new_tokens > capacity:
        raise qwen3_ref.RefError(f"prompt {S} + max_new_tokens {max_new_tokens} > capacity {capacity}")
    toks, gaps, tops = [], [], []
    if cancel_after == 0:
        return dict(tokens=[], finish_reason="cancelled", gaps=[], tops=[], S=S, rope_delta=delta)
    while True:
        t, g, a = top2_gap(logits)
        toks.append(t)
        gaps.append(g)
        tops.append(a)
        n = len(toks)
        if t in eos and not ignore_eos:
            return dict(tokens=toks, finish_reason="stop", gaps=gaps, tops=tops, S=S, rope_delta=delta)
        if n >= max_new_tokens:
            return dict(tokens=toks, finish_reason="length", gaps=gaps, tops=tops, S=S, rope_delta=delta)
        if cancel_after is not None and n >= cancel_after:
            return dict(tokens=toks, finish_reason="cancelled", gaps=gaps, tops=tops, S=S, rope_delta=delta)
        # feed token_{n-1} at cache index S+n-1, coordinate S+n-1+delta
        logits = decode_step(model, cache, t, S + n - 1 + delta)


def natural_length(model, inp, max_new_tokens, eos, ignore_eos=False):
    """Tokens and finish reason without cancellation (used to resolve cancel == natural end)."""
    return greedy(model, inp, max_new_tokens, eos, ignore_eos, None)


def load_request_input(req, base_dir):
    name = req.get("input")
    if not isinstance(name, str) or not name:
        raise qwen3_ref.RefError("request has no \"input\" file name")
    path = name if os.path.isabs(name) else os.path.join(base_dir, name)
    if not os.path.isfile(path):
        raise qwen3_ref.RefError(f"input file {name!r} not found")
    return st.load_file(path)


def run_request(model, req, base_dir, eos, capacity):
    """Reference result of one JSONL request object: dict(id, tokens, finish_reason[, error], gaps, tops)."""
    rid = req.get("id")
    try:
        if req.get("temperature", 0) not in (0, 0.0, None):
            raise qwen3_ref.RefError("only temperature 0 (greedy) is modelled by the reference")
        inp = load_request_input(req, base_dir)
        r = greedy(model, inp, req.get("max_new_tokens"), eos, bool(req.get("ignore_eos", False)),
                   req.get("cancel_after_tokens"), capacity)
    except (qwen3_ref.RefError, st.SafetensorsError, OSError, ValueError, KeyError, TypeError) as e:
        return {"id": rid, "tokens": [], "finish_reason": "error", "error": str(e) or type(e).__name__,
                "gaps": [], "tops": []}
    r["id"] = rid
    return r


def main(argv=None, dtype=np.float64):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True)
    ap.add_argument("--slots", type=int, default=4, help="accepted for CLI parity; the reference runs requests alone")
    ap.add_argument("--capacity", type=int, default=DEFAULT_CAPACITY)
    ap.add_argument("--prefill-chunk", type=int, default=None,
                    help="accepted for CLI parity; chunking must not change a request's result")
    ap.add_argument("--emulate-f32", action="store_true", help="compute in float32 (not the oracle)")
    a = ap.parse_args(argv)
    if a.emulate_f32:
        dtype = np.float32
    try:
        model = qwen3_ref.Model.load(a.model, dtype)
        eos = eos_ids(a.model)
        with open(a.requests) as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
    except (qwen3_ref.RefError, st.SafetensorsError, OSError, ValueError, KeyError) as e:
        print(f"batch_ref: error: {e}", file=sys.stderr)
        return 2
    base = os.path.dirname(os.path.abspath(a.requests))
    for ln in lines:
        try:
            req = json.loads(ln)
            if not isinstance(req, dict):
                raise ValueError("request line is not a JSON object")
        except ValueError as e:
            print(json.dumps({"id": None, "tokens": [], "finish_reason": "error", "error": f"bad JSON: {e}"}))
            continue
        r = run_request(model, req, base, eos, a.capacity)
        o = {"id": r["id"], "tokens": r["tokens"], "finish_reason": r["finish_reason"]}
        if r["finish_reason"] == "error":
            o["error"] = r["error"]
        print(json.dumps(o), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
