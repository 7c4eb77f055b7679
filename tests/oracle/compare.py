#!/usr/bin/python3
"""Compare two forward-output safetensors files name by name.

usage: /usr/bin/python3 compare.py ENGINE.safetensors REFERENCE.safetensors [--rtol R] [--atol-scale A]
                                   [--ignore NAME ...] [--aux REF_AUX.safetensors]

Both files must hold the same tensor names with the same shapes. For each
float tensor, with a = engine (float32) and b = reference (float64 math,
stored as float32):

    |a - b| <= atol + rtol * |b|,   rtol = 1e-4,
    atol = 1e-4 * max(1, max|b| over that tensor)

Integer tensors must match exactly. The worst element of every tensor is
printed (the one with the largest ratio |a-b| / (atol + rtol*|b|)).
See README.md for the rationale.

MoE routing (router_experts.{l} / router_weights.{l}) is compared by
moe_ref.compare_routing: experts equal except at near-ties of the oracle's
probabilities (within rtol), which are accepted and reported. The probabilities
come from --aux (forward_ref.py --aux-output); without them experts must be equal.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import moe_ref  # noqa: E402
import st  # noqa: E402

RTOL = 1e-4
ATOL_SCALE = 1e-4


def compare_arrays(name, a, b, rtol=RTOL, atol_scale=ATOL_SCALE):
    """Returns (ok, message)."""
    if a.shape != b.shape:
        return False, f"{name}: shape {list(a.shape)} != reference {list(b.shape)}"
    if a.size == 0:
        return True, f"{name}: empty {list(a.shape)}"
    if np.issubdtype(b.dtype, np.integer) or np.issubdtype(a.dtype, np.integer):
        bad = np.flatnonzero(a.reshape(-1).astype(np.int64) != b.reshape(-1).astype(np.int64))
        if bad.size:
            i = bad[0]
            return False, (f"{name}: {bad.size} integer mismatches, first at "
                           f"{np.unravel_index(i, a.shape)}: {a.reshape(-1)[i]} vs {b.reshape(-1)[i]}")
        return True, f"{name}: exact ({a.size} ints)"
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    if not np.all(np.isfinite(a64)):
        i = int(np.flatnonzero(~np.isfinite(a64.reshape(-1)))[0])
        return False, f"{name}: non-finite engine value at {np.unravel_index(i, a.shape)}: {a64.reshape(-1)[i]}"
    bmax = float(np.abs(b64).max())
    atol = atol_scale * max(1.0, bmax)
    diff = np.abs(a64 - b64)
    allowed = atol + rtol * np.abs(b64)
    ratio = diff / allowed
    i = int(np.argmax(ratio))
    idx = tuple(int(x) for x in np.unravel_index(i, a.shape))
    msg = (f"{name} {list(a.shape)}: worst at {idx}: engine {a64.reshape(-1)[i]:.8g} ref {b64.reshape(-1)[i]:.8g} "
           f"|d|={diff.reshape(-1)[i]:.3g} allowed={allowed.reshape(-1)[i]:.3g} "
           f"(ratio {ratio.reshape(-1)[i]:.3g}); max|d|={diff.max():.3g}, max|ref|={bmax:.3g}")
    ok = bool(ratio.reshape(-1)[i] <= 1.0)
    if not ok:
        msg += f"; {int((ratio > 1).sum())} of {a.size} elements out of tolerance"
    return ok, msg


ROUTING = ("router_experts.", "router_weights.")


def compare_files(engine_path, ref_path, rtol=RTOL, atol_scale=ATOL_SCALE, ignore=(), verbose=True, out=sys.stdout,
                  aux=None, notes=None):
    """Returns (ok, list of failure messages).

    aux: reference-only data for the MoE routing: {"router_probs.{l}": float64 [S,E],
    "norm_topk_prob": bool}. notes: a list that receives the accepted routing near-ties.
    """
    a = st.load_file(engine_path)
    b = st.load_file(ref_path)
    aux = aux or {}
    fails = []
    an, bn = set(a) - set(ignore), set(b) - set(ignore)
    if an != bn:
        if bn - an:
            fails.append(f"missing in engine output: {sorted(bn - an)}")
        if an - bn:
            fails.append(f"unexpected in engine output: {sorted(an - bn)}")
    for name in sorted(an & bn, key=_natural):
        if name.startswith(ROUTING):
            continue
        ok, msg = compare_arrays(name, a[name], b[name], rtol, atol_scale)
        if verbose:
            print(("  ok   " if ok else "  BAD  ") + msg, file=out)
        if not ok:
            fails.append(msg)
    layers = sorted({int(n.split(".")[1]) for n in an & bn if n.startswith(ROUTING)})
    for li in layers:
        ne, nw = f"router_experts.{li}", f"router_weights.{li}"
        if ne not in an & bn or nw not in an & bn:
            continue  # reported as missing above
        ok, msgs, tie_notes = moe_ref.compare_routing(
            li, a[ne], a[nw], b[ne], b[nw], aux.get(f"router_probs.{li}"), aux.get("norm_topk_prob"),
            tie_gap=rtol, rtol=rtol, atol_scale=atol_scale)
        if verbose:
            for good, m in msgs:
                print(("  ok   " if good else "  BAD  ") + m, file=out)
            for m in tie_notes:
                print("  TIE  " + m, file=out)
        if notes is not None:
            notes.extend(tie_notes)
        fails.extend(m for good, m in msgs if not good)
    if fails and verbose:
        for f in fails:
            if f.startswith(("missing", "unexpected")):
                print("  BAD  " + f, file=out)
    return not fails, fails


def _natural(name):
    parts = name.split(".")
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("reference")
    ap.add_argument("--rtol", type=float, default=RTOL)
    ap.add_argument("--atol-scale", type=float, default=ATOL_SCALE)
    ap.add_argument("--ignore", nargs="*", default=[])
    ap.add_argument("--aux", default=None, help="forward_ref.py --aux-output file (MoE router probabilities)")
    a = ap.parse_args(argv)
    aux = None
    if a.aux:
        raw = st.load_file(a.aux)
        aux = {k: v.astype(np.float64) for k, v in raw.items() if k.startswith("router_probs.")}
        if "norm_topk_prob" in raw:
            aux["norm_topk_prob"] = bool(np.asarray(raw["norm_topk_prob"]).reshape(-1)[0])
    ok, fails = compare_files(a.engine, a.reference, a.rtol, a.atol_scale, a.ignore, aux=aux)
    print("MATCH" if ok else f"MISMATCH ({len(fails)} problem(s))")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
