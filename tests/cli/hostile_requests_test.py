#!/usr/bin/env python3
"""Hostile requests through the commands that read them (issue 15): `batch` lines, `forward`
input files, and the JSON lines of `chat-template`, `tokenize` and `detokenize`.

In one `batch` file, every hostile line gets its own error line naming what is wrong and every
good line its tokens; a line asking for 2e9 tokens does not size the KV cache (the capacity
stays what the good lines need); ids nested 64 deep come back as given; output lines are
always JSON; more lines than `ulimit -n`, each naming its own input file, all complete. A
`forward` input with a [n,1] grid or a prompt over max_position_embeddings is refused by name.
A bad text-tool line gets an {"error"} line in its place and the other lines their output.
Complements attack_test.py (address-space caps, time limits) with the exact behaviour.

Usage: hostile_requests_test.py --vlstack PATH [--sanitized]

--sanitized (the ASan/UBSan build): AddressSanitizer reserves terabytes of address space, so the
case that caps it (a KV cache that cannot fit) is skipped.
"""
import argparse
import json
import os
import re
import resource
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER = os.path.join(REPO, "tests/corpus/tokenizer/minimal.json")
VLSTACK = None
SANITIZED = False


def run(cmd, stdin=None, nofile=None, address_space=None):
    def limits():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    p = subprocess.run(cmd, input=stdin, capture_output=True, preexec_fn=limits, timeout=300)
    assert p.returncode >= 0, f"{cmd[:2]} killed by signal {-p.returncode}: {p.stderr[-600:]}"
    assert p.returncode not in (134, 139), f"{cmd[:2]} aborted: {p.stderr[-600:]}"
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def safetensors(path, tensors):
    """tensors: name -> (dtype 'I32'|'F32', shape, flat values)."""
    header, data = {}, b""
    for name, (dtype, shape, values) in tensors.items():
        blob = struct.pack("<%d%s" % (len(values), "i" if dtype == "I32" else "f"), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def json_lines(out, n):
    text = out.decode("utf-8")  # invalid UTF-8 on stdout fails here
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == n, f"{len(lines)} output lines for {n} inputs: {text[:400]}"
    return lines


def batch(model, work, name, lines, extra=(), nofile=None, address_space=None):
    reqs = os.path.join(work, name + ".jsonl")
    with open(reqs, "wb") as f:
        for line in lines:
            text = line if isinstance(line, (str, bytes)) else json.dumps(line)
            f.write((text.encode() if isinstance(text, str) else text) + b"\n")
    rc, out, err = run([VLSTACK, "batch", "--model", model, "--requests", reqs, "--slots", "2",
                        *extra], nofile=nofile, address_space=address_space)
    assert rc == 0, f"{name}: batch exited {rc}: {err[-600:]}"
    return json_lines(out, len(lines)), err


def with_positions(model, work, name, cfg, positions):
    """A copy of the model folder (weights linked) whose max_position_embeddings is changed."""
    dst = os.path.join(work, name)
    os.makedirs(dst)
    for entry in os.listdir(model):
        if entry != "config.json":
            os.symlink(os.path.join(model, entry), os.path.join(dst, entry))
    cfg = json.loads(json.dumps(cfg))
    cfg.get("text_config", cfg)["max_position_embeddings"] = positions
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
    return dst


def capacity_of(err):
    m = re.search(r"capacity (\d+)", err)
    assert m, err
    return int(m.group(1))


def batch_cases(model, work, cfg):
    pad, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
    good = os.path.join(work, "good.safetensors")
    safetensors(good, {"input_ids": ("I32", [4], [1, 2, 3, 4])})
    ids = [1, vs, pad, pad, pad, pad, ve, 2]
    grid_n1 = os.path.join(work, "grid_n1.safetensors")
    safetensors(grid_n1, {"input_ids": ("I32", [len(ids)], ids),
                          "image_grid_thw": ("I32", [3, 1], [1, 4, 4])})
    huge_t = os.path.join(work, "huge_t.safetensors")
    safetensors(huge_t, {"input_ids": ("I32", [len(ids)], ids),
                         "video_grid_thw": ("I32", [1, 3], [32768, 2, 2])})
    ok = {"input": "good.safetensors", "max_new_tokens": 3, "ignore_eos": True}
    deep_id = "[" * 63 + "7" + "]" * 63
    cases = [  # (line, what its error must name; None: a good line)
        (dict(ok, id="first"), None),
        (dict(ok, id="grid", input="grid_n1.safetensors"), "image_grid_thw"),
        (dict(ok, id="huge_t", input="huge_t.safetensors"), "video_grid_thw"),
        (dict(ok, id="2e9", max_new_tokens=2000000000), "max_position_embeddings"),
        (dict(ok, id="wraps", max_new_tokens=4294967297), "max_new_tokens"),
        (dict(ok, id="float", max_new_tokens=2.7), "max_new_tokens"),
        (dict(ok, id="bool", max_new_tokens=True), "max_new_tokens"),
        (dict(ok, id="eos", ignore_eos=1), "ignore_eos"),
        (dict(ok, id="seed", seed=-1), "seed"),
        (dict(ok, id="typo", max_new_token=3), "max_new_token"),
        (dict(ok, id="images", images="a.png"), "images"),
        (dict(ok, id="stop", stop=[1]), "stop"),
        ('{"id": "dup", "input": "good.safetensors", "max_new_tokens": 2, "max_new_tokens": 900}',
         "twice"),
        ('{"id": %s, "input": "good.safetensors"}' % ("[" * 100000 + "]" * 100000), "nests"),
        (b'{"id": "nul", "input": "good.safetensors"}\x00{}', "NUL"),
        (b'{"id": "\xff\xfe", "input": "good.safetensors"}', "JSON"),
        ('{"id": "long", "input": "good.safetensors", "pad": "%s"}' % ("x" * (17 << 20)),
         "bytes"),
        (dict(ok, id="missing", input="\u20ac" * 300 + ".safetensors"), "safetensors"),
        ('{"id": %s, "input": "good.safetensors", "max_new_tokens": 3, "ignore_eos": true}'
         % deep_id, None),
        (dict(ok, id="last"), None),
    ]
    out, err = batch(model, work, "mixed", [c[0] for c in cases])
    want_tokens = None
    for (line, needle), o in zip(cases, out):
        label = line[:60] if isinstance(line, (str, bytes)) else line.get("id")
        if needle is None:
            assert not o.get("error") and o["finish_reason"] == "length", (label, o)
            assert len(o["tokens"]) == 3, (label, o)
            want_tokens = want_tokens or o["tokens"]
            assert o["tokens"] == want_tokens, (label, o, want_tokens)
        else:
            assert o["finish_reason"] == "error" and o["tokens"] == [], (label, o)
            assert needle.lower() in o["error"].lower(), (label, needle, o["error"][:300])
    assert out[0]["id"] == "first" and out[-1]["id"] == "last", out
    assert out[-2]["id"] == json.loads(deep_id), out[-2]["id"]
    # The 2e9 line did not size the KV cache: the others' prompt + max_new_tokens did (the grid
    # lines' 8 + 3 among them: their grids are checked when the request is built).
    assert capacity_of(err) == 8 + 3, err

    # With --capacity, a line over it fails alone naming the capacity.
    out, err = batch(model, work, "capacity", [dict(ok, id=1), dict(ok, id=2, max_new_tokens=20)],
                     ("--capacity", "16"))
    assert out[0]["tokens"] and not out[0].get("error"), out
    assert "capacity" in out[1]["error"] and "max_new_tokens" in out[1]["error"], out[1]

    # A line within max_position_embeddings whose KV caches cannot fit this process fails
    # alone (the capacity falls back to what the others need).
    if not SANITIZED:
        big = with_positions(model, work, "big_positions", cfg, 1 << 22)
        reqs = [dict(ok, id=1, input=good), dict(ok, id=2, input=good, max_new_tokens=4000000),
                dict(ok, id=3, input=good)]
        out, err = batch(big, work, "memory", reqs, address_space=3 << 30)
        assert out[1]["finish_reason"] == "error" and "max_new_tokens" in out[1]["error"], out[1]
        assert all(o["tokens"] and not o.get("error") for o in (out[0], out[2])), out
        assert capacity_of(err) == 4 + 3, err

    # More lines than the open-file limit, each naming its own input file.
    lines = []
    for i in range(300):
        path = os.path.join(work, f"in{i}.safetensors")
        safetensors(path, {"input_ids": ("I32", [3], [1 + i % 50, 2, 3])})
        lines.append({"id": i, "input": f"in{i}.safetensors", "max_new_tokens": 1})
    out, _ = batch(model, work, "fds", lines, ("--slots", "4"), nofile=64)
    failed = [o for o in out if o.get("error") or len(o["tokens"]) != 1]
    assert not failed, (len(failed), failed[:2])
    print("batch: ok")


def forward_cases(model, work, cfg):
    pad, vs, ve = cfg["image_token_id"], cfg["vision_start_token_id"], cfg["vision_end_token_id"]
    out = os.path.join(work, "out.safetensors")
    ids = [1, vs, pad, pad, pad, pad, ve, 2]
    for name, shape, values, needle in (("n1", [2, 1], [1, 4], "shape [n,3]"),
                                        ("n0", [5, 0], [], "shape [n,3]"),
                                        ("t", [1, 3], [100000, 2, 2], "video_grid_thw[0]"),
                                        ("rows", [9, 3], [1, 2, 2] * 9, "9 grids")):
        path = os.path.join(work, f"fwd_{name}.safetensors")
        key = "video_grid_thw" if name in ("t", "rows") else "image_grid_thw"
        safetensors(path, {"input_ids": ("I32", [len(ids)], ids), key: ("I32", shape, values)})
        rc, _, err = run([VLSTACK, "forward", "--model", model, "--input", path, "--output", out])
        assert rc == 2 and needle in err and "grid_thw" in err, (name, rc, err[-400:])
    # Grids that together describe more visual tokens than the prompt holds.
    path = os.path.join(work, "fwd_total.safetensors")
    safetensors(path, {"input_ids": ("I32", [len(ids)], ids),
                       "image_grid_thw": ("I32", [2, 3], [1, 4, 4, 1, 4, 8])})
    rc, _, err = run([VLSTACK, "forward", "--model", model, "--input", path, "--output", out])
    assert rc == 2 and "image_grid_thw[1]" in err, (rc, err[-400:])
    # A prompt over max_position_embeddings: refused unless --capacity asks for it.
    short = with_positions(model, work, "short_positions", cfg, 16)
    long_in = os.path.join(work, "long.safetensors")
    safetensors(long_in, {"input_ids": ("I32", [20], list(range(1, 21)))})
    rc, _, err = run([VLSTACK, "forward", "--model", short, "--input", long_in, "--output", out])
    assert rc == 2 and "max_position_embeddings 16" in err, (rc, err[-400:])
    rc, _, err = run([VLSTACK, "forward", "--model", short, "--input", long_in, "--output", out,
                      "--capacity", "32"])
    assert rc == 0, err[-400:]
    print("forward: ok")


def text_tool_cases(work):
    template = os.path.join(work, "plain.jinja")
    with open(template, "w") as f:
        f.write("{% for m in messages %}{{ m.content }}{% endfor %}"
                "{% if add_generation_prompt %}>{% endif %}")
    msgs = [{"role": "user", "content": "hi"}]
    keys = ",".join('"k%d": %d' % (i, i) for i in range(100000))
    lines = [
        (json.dumps({"messages": msgs, "add_generation_prompt": True}), "hi>"),
        (json.dumps({"messages": msgs, "add_generation_prompt": None}), "add_generation_prompt"),
        (json.dumps({"messages": msgs, "add_generation_prompt": 1}), "add_generation_prompt"),
        (json.dumps({"messages": msgs, "enable_thinking": "no"}), "enable_thinking"),
        (json.dumps({"messages": msgs, "tools": {}}), "tools"),
        (json.dumps({"messages": "hi"}), "messages"),
        ('{"messages": [], "messages": []}', "twice"),
        ('{"messages": %s}' % ("[" * 100000 + "]" * 100000), "nests"),
        ('{"messages": [{"role": "user", "content": "x", %s}]}' % keys, "x"),
        ('{"messages": [{"role": "user", "content": "y"}], %s}' % keys, "y"),
        (json.dumps({"messages": msgs}), "hi"),
    ]
    stdin = "".join(line + "\n" for line, _ in lines).encode()
    rc, out, err = run([VLSTACK, "chat-template", "--template", template], stdin=stdin)
    assert rc == 2, (rc, err[-400:])
    for (line, want), o in zip(lines, json_lines(out, len(lines))):
        if isinstance(o, str):
            assert o == want, (line[:80], o)
        else:
            assert want.lower() in o["error"].lower(), (line[:80], o)

    tok_in = ['"ab"', "[" * 100000 + "]" * 100000, '{"bytes_b64": 5}', '"a" "b"', '"ba"']
    rc, out, _ = run([VLSTACK, "tokenize", "--tokenizer", TOKENIZER],
                     stdin="".join(t + "\n" for t in tok_in).encode())
    res = json_lines(out, len(tok_in))
    assert rc == 2 and res[0] == [2] and res[4] == [1, 0], res
    assert "nests" in res[1]["error"] and "error" in res[2] and "error" in res[3], res
    det_in = ["[0,1]", "[1.5]", "[true]", "[4294967297]", "[-1]", '["1"]', "[2]"]
    rc, out, _ = run([VLSTACK, "detokenize", "--tokenizer", TOKENIZER],
                     stdin="".join(t + "\n" for t in det_in).encode())
    res = json_lines(out, len(det_in))
    assert rc == 2 and res[0] == "ab" and res[-1] == "ab", res
    for r in res[1:-1]:
        assert "token ids" in r["error"], res
    print("text tools: ok")


def main():
    global VLSTACK, SANITIZED
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--sanitized", action="store_true")
    args = ap.parse_args()
    VLSTACK = os.path.abspath(args.vlstack)
    SANITIZED = args.sanitized
    with tempfile.TemporaryDirectory(prefix="vls_hostile_") as work:
        model = os.path.join(work, "model")
        rc, _, err = run([VLSTACK, "make-test-model", "--out", model, "--hidden", "64",
                          "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                          "--intermediate", "128", "--vocab", "300", "--deepstack", "1",
                          "--untied"])
        assert rc == 0, err
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        batch_cases(model, work, cfg)
        forward_cases(model, work, cfg)
        text_tool_cases(work)
    print("hostile_requests_test: ok")


if __name__ == "__main__":
    main()
