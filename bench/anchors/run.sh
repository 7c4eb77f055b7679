#!/usr/bin/env bash
# vlstack side by side with ik_llama.cpp (and llama.cpp where its tree knows Qwen3) on the same
# random weights, in one run (issue 18's anchors):
#   speed  prompt processing and generation, BF16 / int8 / int4 against BF16 / Q8_0 / Q4_0 /
#          Q4_K_M: `vlstack bench` and `llama-bench`, alternating per repetition (generation
#          from a 1-token prompt, as llama-bench's tg from an empty context);
#   kl     KL from the f32 reference over the same text: `vlstack eval-kl --chunk 512
#          --score-from 256` and `llama-perplexity --kl-divergence -c 512` (the same positions:
#          the second half of each 512-token context);
#   depth  generation after a long prompt: `vlstack bench --prompt-tokens D` and
#          `llama-bench -gp D,N` (ik_llama.cpp) / `-d D` (llama.cpp).
#
#   [IK=DIR] [LLAMA=DIR] [PARTS="speed kl depth"] [SHAPES=qwen3-0.6b] [PRECISIONS="bf16 int8 int4"]
#   [THREADS=2] [REPS=3] [PROMPT=512] [GEN=64] [DEPTHS="4096 16384"] [KL_TOKENS=2048]
#   [PREFILL_CHUNK=0]  (vlstack's pp figure: prompt rows per engine step; 0 is one pass)
#   [MODEL_ARGS="--layers 8"]  (more make-test-model options, e.g. a cut depth for the
#                               mixture-of-experts shapes qwen3-30b-a3b: ADR 0027)
#   bash bench/anchors/run.sh VLSTACK_BUILD_DIR [WORK]
#
# IK and LLAMA are source trees (from `fetch`ed snapshots) built with
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
#   cmake --build build -j2 --target llama-bench llama-perplexity llama-quantize
# (bench/anchors/build_anchor.sh SRC does that). A tree whose source has no qwen3 architecture is
# skipped with a note. The GGUF files are written by hf_to_gguf.py with the tree's own gguf-py
# and quantized by its own llama-quantize. ik_llama.cpp runs with its best CPU options
# (-rtr 1 -fa 1 -fmoe 1: weights repacked at load, flash attention, fused MoE).
#
# Output: one JSON line per measurement on stderr and in WORK/results.jsonl, a table on stdout:
# medians per engine and type, then the paired ratios (vlstack's repetition i over the
# anchor's repetition i, which ran right after it; WORK/results.jsonl accumulates across
# runs, so start from an empty one to pair only this run's repetitions).
# Run on a quiet machine: nothing else may compete for the cores.
set -euo pipefail
# A failure inside $(...) (a GGUF that could not be written) stops the run, not only the subshell.
shopt -s inherit_errexit
build=$(cd "${1:?usage: run.sh VLSTACK_BUILD_DIR [WORK]}" && pwd)
work=${2:-/tmp/vls_anchors}
mkdir -p "$work"
work=$(cd "$work" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# The llama.cpp tools write llama.log into the current folder: keep it in WORK.
OLDPWD_ROOT=$PWD
cd "$work"
vlstack=$build/src/cli/vlstack
[ -x "$vlstack" ] || { echo "run.sh: no vlstack at $vlstack" >&2; exit 1; }
parts=${PARTS:-speed kl depth}
shapes=${SHAPES:-qwen3-0.6b}
precisions=${PRECISIONS:-bf16 int8 int4}
threads=${THREADS:-2}
reps=${REPS:-3}
prompt=${PROMPT:-512}
gen=${GEN:-64}
depths=${DEPTHS:-4096 16384}
kl_tokens=${KL_TOKENS:-2048}
prefill_chunk=${PREFILL_CHUNK:-0}
py=/usr/bin/python3
mkdir -p "$work"
out=$work/results.jsonl
: >"$out"
emit() { echo "$1" | tee -a "$out" >&2; }

# The anchors that can run Qwen3: name=dir pairs.
anchors=()
for pair in "ik=${IK:-}" "llama=${LLAMA:-}"; do
  name=${pair%%=*} dir=${pair#*=}
  [ -n "$dir" ] || continue
  dir=$(cd "$OLDPWD_ROOT" && cd "$dir" && pwd)
  if ! grep -q '"qwen3"' "$dir/src/llama-arch.cpp" 2>/dev/null && \
     ! grep -q '"qwen3"' "$dir/src/llama.cpp" 2>/dev/null; then
    echo "run.sh: $name ($dir) has no qwen3 architecture: skipped" >&2
    continue
  fi
  [ -x "$dir/build/bin/llama-bench" ] || { echo "run.sh: $name: not built ($dir/build/bin)" >&2; exit 1; }
  anchors+=("$name=$dir")
done
[ ${#anchors[@]} -gt 0 ] || echo "run.sh: no anchor (IK=, LLAMA=): vlstack figures only" >&2

# GGUF types standing beside each vlstack precision.
ggufs_for() {
  case $1 in bf16) echo bf16 ;; int8) echo q8_0 ;; int4) echo "q4_0 q4_k_m iq4_xs" ;; f32) echo f32 ;; esac
}
# (Not `| grep -q`: under pipefail, grep quitting early can fail the pipeline with SIGPIPE.)
supports() { local h; h=$("$vlstack" bench --help); [[ $h == *"$1"* ]]; }

model_args=${MODEL_ARGS:-}
make_model() {  # shape -> model dir
  local m=$work/$1$(echo "$model_args" | tr -d ' -')
  # shellcheck disable=SC2086 # MODEL_ARGS is a list of options
  [ -f "$m/config.json" ] || "$vlstack" make-test-model --shape "$1" --untied $model_args \
    --out "$m" >&2
  echo "$m"
}
gguf_of() {  # anchor_dir model_dir type -> path
  # The f32 and bf16 files are plain conversions, written once (with the first anchor tree's
  # gguf-py) and read by every tree; the quantized ones are made by each tree's own quantizer.
  local dir=$1 m=$2 t=$3 tag
  tag=$(basename "$dir")
  case $t in f32|bf16) tag=shared ;; esac
  local f=$m.$tag.$t.gguf
  if [ ! -f "$f" ]; then
    case $t in
      f32|bf16) PYTHONPATH=$dir/gguf-py $py "$here/hf_to_gguf.py" "$m" "$f" --type "$t" >&2 ;;
      *) "$dir/build/bin/llama-quantize" "$(gguf_of "$dir" "$m" f32)" "$f" "${t^^}" "$threads" \
           >"$f.log" 2>&1 || { tail -5 "$f.log" >&2; exit 1; } ;;
    esac
  fi
  echo "$f"
}

# One untimed repetition first, as llama-bench's warm-up: the first pass over freshly mapped
# weights can run much slower than the next (a VM that faults each page in again: int8 pp512
# 420 then 789, 797 tokens/s on the 2026-12-05 host).
warmup=()
supports "--warmup" && warmup=(--warmup 1)
vls_bench() {  # model precision prompt gen [options...] -> json
  local m=$1 p=$2 pr=$3 g=$4; shift 4
  "$vlstack" bench --model "$m" --precision "$p" --threads "$threads" --prompt-tokens "$pr" \
    --gen-tokens "$g" --reps 1 "${warmup[@]}" --json "$@" 2>/dev/null
}
# The speed part's prepared weights, compiled once per model and precision (int4's quantizer
# search takes most of a minute on the 0.6B shape) for a capacity of prompt + gen tokens.
vls_artifact() {  # model precision -> path
  local f=$1.$2.cap$((prompt + gen)).vls
  [ -f "$f" ] || "$vlstack" compile --model "$1" --precision "$2" --threads "$threads" \
    --capacity $((prompt + gen)) --out "$f" >&2 || exit 1
  echo "$f"
}
anchor_bench() {  # name dir gguf args... -> json array
  local name=$1 dir=$2 f=$3; shift 3
  local extra=()
  # ik_llama.cpp's best CPU options; -fmoe 1 fuses the expert ops of a MoE model (a no-op else).
  [ "$name" = ik ] && extra=(-rtr 1 -fa 1 -fmoe 1)
  "$dir/build/bin/llama-bench" -m "$f" -t "$threads" -r 1 -o json "${extra[@]}" "$@" 2>/dev/null
}
summ() {  # engine shape precision test value
  emit "{\"engine\":\"$1\",\"shape\":\"$2\",\"precision\":\"$3\",\"test\":\"$4\",\"tok_s\":$5}"
}

for shape in $shapes; do
  model=$(make_model "$shape")
  for part in $parts; do
    case $part in
    speed)
      for p in $precisions; do
        supports "$p" || { echo "run.sh: vlstack has no --precision $p: skipped" >&2; continue; }
        art=(--artifact "$(vls_artifact "$model" "$p")" --capacity $((prompt + gen)))
        for ((r = 0; r < reps; r++)); do
          # llama-bench's pp runs the prompt alone and its tg generates from an empty context,
          # so vlstack's generation figure comes from a 1-token prompt (the same average depth).
          # The prompt in one pass (--prefill-chunk 0), as llama-bench's pp runs it in one
          # ubatch of 512: the serving default of 64-row chunks re-reads every weight per chunk,
          # and a mixture-of-experts layer then gives each expert a few rows instead of ~32.
          j=$(vls_bench "$model" "$p" "$prompt" 1 "${art[@]}" --prefill-chunk "$prefill_chunk")
          summ vlstack "$shape" "$p" "pp$prompt" \
            "$(echo "$j" | $py -c 'import json,sys; print(json.load(sys.stdin)["prompt_tokens_per_s"]["median"])')"
          j=$(vls_bench "$model" "$p" 1 "$gen" "${art[@]}")
          summ vlstack "$shape" "$p" "tg$gen" \
            "$(echo "$j" | $py -c 'import json,sys; print(json.load(sys.stdin)["generation_tokens_per_s"]["median"])')"
          for a in "${anchors[@]}"; do
            name=${a%%=*} dir=${a#*=}
            for t in $(ggufs_for "$p"); do
              f=$(gguf_of "$dir" "$model" "$t")
              anchor_bench "$name" "$dir" "$f" -p "$prompt" -n "$gen" | $py -c '
import json, sys
for t in json.load(sys.stdin):
    test = "pp%d" % t["n_prompt"] if t["n_gen"] == 0 else "tg%d" % t["n_gen"]
    print(test, t["avg_ts"])' | while read -r test ts; do
                summ "$name" "$shape" "$t" "$test" "$ts"
              done
            done
          done
        done
      done
      ;;
    kl)
      text=$work/kl_text.txt
      [ -f "$text" ] || cat "$here"/../../README.md "$here"/../../docs/*.md "$here"/../../docs/adr/*.md >"$text"
      for p in $precisions; do
        [ "$p" = f32 ] && continue
        supports "$p" || continue
        j=$("$vlstack" eval-kl --model "$model" --precision "$p" --input "$text" \
              --tokens "$kl_tokens" --chunk 512 --score-from 256 --temperature 1 \
              --threads "$threads" --json 2>/dev/null)
        emit "$(echo "$j" | $py -c '
import json, sys
j = json.load(sys.stdin); r = j["results"][0]
print(json.dumps({"engine": "vlstack", "shape": sys.argv[1], "precision": sys.argv[2],
                  "test": "kl", "positions": r["positions"], "kl_mean": r["kl_mean"],
                  "kl_p99": r["kl_p99"], "top1": r["top1_agreement"]}))' "$shape" "$p")"
      done
      for a in "${anchors[@]}"; do
        name=${a%%=*} dir=${a#*=}
        base=$work/$shape.$name.kld
        ppl=$dir/build/bin/llama-perplexity
        chunks=$((kl_tokens / 512))
        "$ppl" -m "$(gguf_of "$dir" "$model" f32)" -f "$text" -c 512 --chunks "$chunks" \
          -t "$threads" --kl-divergence-base "$base" >"$base.log" 2>&1 ||
          { tail -5 "$base.log" >&2; exit 1; }
        for p in $precisions; do
          for t in $(ggufs_for "$p"); do
            f=$(gguf_of "$dir" "$model" "$t")
            "$ppl" -m "$f" -c 512 --chunks "$chunks" -t "$threads" --kl-divergence-base "$base" \
              --kl-divergence >"$f.kl.log" 2>&1 || { tail -5 "$f.kl.log" >&2; exit 1; }
            emit "$($py - "$f.kl.log" "$name" "$shape" "$t" <<'EOF'
import json, re, sys
log = open(sys.argv[1]).read()
def grab(label):
    m = re.search(label + r"\s*:\s*([-0-9.eE+]+)", log)
    return float(m.group(1)) if m else None
print(json.dumps({"engine": sys.argv[2], "shape": sys.argv[3], "precision": sys.argv[4],
                  "test": "kl", "kl_mean": grab("Mean    KLD"), "kl_p99": grab("99.0%   KLD"),
                  "top1": (grab("Same top p") or 0) / 100}))
EOF
)"
          done
        done
      done
      ;;
    depth)
      for d in $depths; do
        for ((r = 0; r < reps; r++)); do
          j=$("$vlstack" bench --model "$model" --precision bf16 --threads "$threads" \
                --prompt-tokens "$d" --gen-tokens "$gen" --reps 1 --json 2>/dev/null)
          summ vlstack "$shape" bf16 "tg$gen@d$d" \
            "$(echo "$j" | $py -c 'import json,sys; print(json.load(sys.stdin)["generation_tokens_per_s"]["median"])')"
          for a in "${anchors[@]}"; do
            name=${a%%=*} dir=${a#*=}
            f=$(gguf_of "$dir" "$model" bf16)
            if [ "$name" = ik ]; then args=(-p 0 -n 0 -gp "$d,$gen"); else args=(-p 0 -n "$gen" -d "$d"); fi
            ts=$(anchor_bench "$name" "$dir" "$f" "${args[@]}" |
                 $py -c 'import json,sys; print(json.load(sys.stdin)[-1]["avg_ts"])')
            summ "$name" "$shape" bf16 "tg$gen@d$d" "$ts"
          done
        done
      done
      ;;
    *) echo "run.sh: unknown part '$part'" >&2; exit 2 ;;
    esac
  done
done

$py - "$out" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
speed = collections.defaultdict(list)
for r in rows:
    if "tok_s" in r:
        speed[(r["shape"], r["test"], r["engine"], r["precision"])].append(r["tok_s"])
print("| shape | test | engine | weights | tok/s median (min-max) |")
print("|---|---|---|---|---|")
for (shape, test, engine, prec), v in sorted(speed.items()):
    print(f"| {shape} | {test} | {engine} | {prec} | {statistics.median(v):.1f} "
          f"({min(v):.1f}-{max(v):.1f}) |")
# Paired ratios: repetition i of vlstack over repetition i of each anchor type it is compared
# with, run one after the other, so a host whose speed drifts between repetitions moves both.
types = {"bf16": ["bf16"], "int8": ["q8_0"], "int4": ["q4_0", "q4_k_m", "iq4_xs"], "f32": ["f32"]}
pairs = []
for (shape, test, engine, prec), v in sorted(speed.items()):
    if engine != "vlstack":
        continue
    for (s2, t2, e2, p2), a in sorted(speed.items()):
        if (s2, t2) == (shape, test) and e2 != "vlstack" and p2 in types.get(prec, []):
            q = [x / y for x, y in zip(v, a) if y > 0]
            if q:
                pairs.append((shape, test, prec, e2, p2, q))
if pairs:
    print("\n| shape | test | vlstack / anchor | paired ratio median (min-max) | pairs |")
    print("|---|---|---|---|---|")
    for shape, test, prec, e2, p2, q in pairs:
        print(f"| {shape} | {test} | {prec} / {e2} {p2} | {statistics.median(q):.2f}x "
              f"({min(q):.2f}-{max(q):.2f}) | {len(q)} |")
kl = [r for r in rows if r.get("test") == "kl"]
if kl:
    print("\n| shape | engine | weights | mean KL (T=1) | p99 KL | top-1 |")
    print("|---|---|---|---|---|---|")
    for r in kl:
        print(f"| {r['shape']} | {r['engine']} | {r['precision']} | {r['kl_mean']:.3e} | "
              f"{r['kl_p99'] if r['kl_p99'] is None else format(r['kl_p99'], '.3e')} | "
              f"{r['top1']:.3f} |")
EOF
