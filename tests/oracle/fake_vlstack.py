#!/usr/bin/python3
"""Stand-in for the vlstack binary (make-test-model + forward) built from the oracle.

Only for checking run_cases.py itself: `run_cases.py --vlstack tests/oracle/fake_vlstack.py`
must pass every case (it compares the oracle against itself through the whole pipeline).
With FAKE_VLSTACK_F32=1 the forward is computed in float32, which shows how much of the
tolerance an f32 engine would use.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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
    a = ap.parse_args(argv)
    sec = [int(x) for x in a.mrope_section.split(",")] if a.mrope_section else None
    cfg = testmodel.make_config(a.arch, a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim,
                                a.intermediate, a.vocab, a.tied, sec, a.mrope_layout,
                                a.rope_theta, a.deepstack)
    testmodel.write_model(a.out, cfg, testmodel.random_weights(cfg, a.seed), a.dtype, a.shards)
    return 0


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "make-test-model":
        sys.exit(make(rest))
    if cmd == "forward":
        if os.environ.get("FAKE_VLSTACK_F32"):
            rest = rest + ["--emulate-f32"]
        sys.exit(forward_ref.main(rest))
    print(f"fake_vlstack: unknown command {cmd}", file=sys.stderr)
    sys.exit(2)
