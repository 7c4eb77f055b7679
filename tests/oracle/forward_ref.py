#!/usr/bin/python3
"""Reference counterpart of `vlstack forward` (docs/contracts.md §6), float64 NumPy.

usage: /usr/bin/python3 forward_ref.py --model DIR --input IN.safetensors
           --output OUT.safetensors [--diagnostics] [--all-logits] [--print-positions]
           [--generate N] [--aux-output AUX.safetensors]

--generate N: greedy tokens after the prefill, stopping after an EOS id (batch_ref.greedy), written
as generated_tokens int32 [n] (the input must not hold decode_tokens).
--aux-output: reference-only data for compare.py --aux: the float64 router probabilities
router_probs.{l} [S,E] of every sparse (MoE) layer and norm_topk_prob.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import qwen3_ref  # noqa: E402
import st  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--diagnostics", action="store_true")
    ap.add_argument("--all-logits", action="store_true")
    ap.add_argument("--print-positions", action="store_true",
                    help="print the RoPE positions and rope_delta used for the prefill")
    ap.add_argument("--generate", type=int, default=0, help="greedy-decode up to N tokens after the prefill")
    ap.add_argument("--aux-output", default=None, help="write the MoE router probabilities here (compare.py --aux)")
    ap.add_argument("--emulate-f32", action="store_true",
                    help="compute in float32 instead of float64 (tolerance studies only; not the oracle)")
    a = ap.parse_args(argv)
    try:
        model = qwen3_ref.Model.load(a.model, np.float32 if a.emulate_f32 else np.float64)
        inp = st.load_file(a.input)
        if a.generate > 0 and "decode_tokens" in inp:
            raise ValueError("--generate and the input's decode_tokens exclude each other")
        out = qwen3_ref.forward(model, inp, diagnostics=a.diagnostics, all_logits=a.all_logits)
        if a.generate > 0:
            import batch_ref
            g = batch_ref.greedy(model, inp, a.generate, batch_ref.eos_ids(a.model))
            out["generated_tokens"] = np.array(g["tokens"], dtype=np.int32)
    except (qwen3_ref.RefError, st.SafetensorsError, OSError, ValueError, KeyError) as e:
        print(f"forward_ref: error: {e}", file=sys.stderr)
        return 2
    if a.print_positions:
        print("positions:", np.asarray(out["_positions"]).tolist())
        print("rope_delta:", out["_delta"])
    st.save_file({k: v for k, v in out.items() if not k.startswith("_")}, a.output)
    if a.aux_output:
        aux = {f"router_probs.{li}": p for li, p in out["_routing"].items()}
        if model.cfg.moe is not None:
            aux["norm_topk_prob"] = np.array([int(model.cfg.moe.normalize)], dtype=np.int32)
        st.save_file(aux, a.aux_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
