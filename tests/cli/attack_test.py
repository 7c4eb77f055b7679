#!/usr/bin/env python3
"""Hostile input through the commands, as an attacker would send it (issue 15).

Every case runs the `vlstack` binary under a 4 GiB address-space cap and a 60 s limit and checks
that the process refuses the input with a clear error (exit 1 or 2, never a signal or an abort),
within the time, with a peak RSS under 2 GiB; in `batch`, that one hostile line gets its error
line and every other line its tokens. The classes are those of docs/limits.md: shapes read
before they are checked, sizes trusted before allocation, deep nesting, exceptions escaping,
templates without budgets, quadratic work, corrupt artifacts, unsafe output writes and silent
coercion.

Usage: attack_test.py --vlstack PATH [--only SUBSTRING] [--sanitized]

--sanitized (the ASan/UBSan build, where CI runs this too): AddressSanitizer reserves terabytes
of address space, so the cap is left off and the cases that are about memory bounds (the "size"
group) are skipped; the rest run so that a read out of bounds is reported even where it would not
crash.
"""
import argparse
import json
import os
import resource
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib

ADDRESS_SPACE = 4 << 30  # the cap the checks run under
MAX_RSS_KIB = 2 << 20  # 2 GiB
TIME_LIMIT_S = 60

VLSTACK = None
SANITIZED = False
FAILURES = []


def fail(name, why):
    FAILURES.append(f"{name}: {why}")
    print(f"FAIL {name}: {why}", flush=True)


def run(cmd, stdin_text=None, nofile=None, timeout=TIME_LIMIT_S):
    """Runs cmd under the caps; returns (rc, stdout, stderr, seconds, peak_rss_kib); rc is
    negative (-signal) when a signal ended it and None when it ran past the limit."""
    def limits():
        if not SANITIZED:
            resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryFile() as inp:
        if stdin_text is not None:
            inp.write(stdin_text.encode() if isinstance(stdin_text, str) else stdin_text)
            inp.seek(0)
        start = time.time()
        p = subprocess.Popen(cmd, stdin=inp, stdout=out, stderr=err, preexec_fn=limits)
        rc = None
        rss = 0
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                rss = usage.ru_maxrss
                p.returncode = rc
                break
            if time.time() - start > timeout:
                p.kill()
                _, _, usage = os.wait4(p.pid, 0)
                rss = usage.ru_maxrss
                p.returncode = -9
                break
            time.sleep(0.02)
        seconds = time.time() - start
        out.seek(0)
        err.seek(0)
        return (rc, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                seconds, rss)


def expect_refused(name, cmd, needles, stdin_text=None, codes=(1, 2), nofile=None):
    """The command must exit with one of `codes` and print every needle (case-insensitive, any
    of the alternatives separated by '|') on stderr, in time and memory."""
    rc, out, err, seconds, rss = run(cmd, stdin_text=stdin_text, nofile=nofile)
    if not check_process(name, rc, seconds, rss, err):
        return None
    if rc not in codes:
        fail(name, f"exit {rc}, expected one of {codes}; stderr: {err[-400:]}")
        return None
    low = err.lower()
    for needle in needles:
        if not any(alt.lower() in low for alt in needle.split("|")):
            fail(name, f"stderr does not say {needle!r}: {err[-400:]}")
            return None
    print(f"ok   {name} ({seconds:.1f} s, {rss // 1024} MiB): {last_line(err)}", flush=True)
    return out


def check_process(name, rc, seconds, rss, err):
    if rc is None or (rc == -9 and seconds >= TIME_LIMIT_S):
        fail(name, f"ran past {TIME_LIMIT_S} s")
        return False
    if rc < 0 or rc == 134 or rc == 139:
        fail(name, f"killed by signal / aborted (exit {rc}); stderr: {err[-600:]}")
        return False
    if rss > MAX_RSS_KIB and not SANITIZED:
        fail(name, f"peak RSS {rss // 1024} MiB > 2 GiB")
        return False
    return True


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:160] if lines else ""


# --- inputs ---------------------------------------------------------------------------------

def safetensors(path, tensors):
    """tensors: name -> (dtype 'I32'|'F32', shape, flat values)."""
    header = {}
    data = b""
    for name, (dtype, shape, values) in tensors.items():
        fmt = "<%d%s" % (len(values), "i" if dtype == "I32" else "f")
        blob = struct.pack(fmt, *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def nested(depth, leaf="1"):
    return "[" * depth + leaf + "]" * depth


def config_of(model):
    with open(os.path.join(model, "config.json")) as f:
        return json.load(f)


def copy_model(src, dst, edit=None, raw=None):
    """A copy of a model folder (weights symlinked) whose config.json is edited or replaced."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        s = os.path.join(src, name)
        if name == "config.json":
            continue
        os.symlink(s, os.path.join(dst, name))
    if raw is not None:
        with open(os.path.join(dst, "config.json"), "wb") as f:
            f.write(raw)
    else:
        cfg = config_of(src)
        if edit:
            edit(cfg)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
    return dst


def replace_file(model, name, raw):
    path = os.path.join(model, name)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(raw)


# --- the cases ------------------------------------------------------------------------------

def batch_lines(tmp, model, lines, name, extra=(), nofile=None):
    """Runs batch over `lines` (dicts or raw strings); returns the parsed output lines."""
    reqs = os.path.join(tmp, name + ".jsonl")
    with open(reqs, "wb") as f:
        for line in lines:
            text = line if isinstance(line, (str, bytes)) else json.dumps(line)
            f.write(text.encode() if isinstance(text, str) else text)
            f.write(b"\n")
    rc, out, err, seconds, rss = run([VLSTACK, "batch", "--model", model, "--requests", reqs,
                                      "--slots", "2", *extra], nofile=nofile)
    if not check_process(name, rc, seconds, rss, err):
        return None
    results = []
    for i, text in enumerate(out.splitlines()):
        try:
            results.append(json.loads(text))
        except ValueError:
            fail(name, f"output line {i + 1} is not JSON: {text[:200]!r}")
            return None
    if len(results) != len(lines):
        fail(name, f"{len(results)} output lines for {len(lines)} requests; stderr: {err[-300:]}")
        return None
    return results


def expect_batch(name, tmp, model, good, bad, needle, extra=()):
    """Good lines around each hostile line: the hostile line gets an error naming `needle`, the
    others their tokens."""
    lines = [good, bad, good]
    results = batch_lines(tmp, model, lines, name, extra)
    if results is None:
        return
    for i, r in enumerate(results):
        if i == 1:
            err = str(r.get("error", ""))
            if not err:
                fail(name, f"the hostile line got no error: {json.dumps(r)[:200]}")
                return
            if not any(alt.lower() in err.lower() for alt in needle.split("|")):
                fail(name, f"its error does not say {needle!r}: {err[:300]}")
                return
        elif r.get("error") or not r.get("tokens"):
            fail(name, f"good line {i + 1} was disturbed: {json.dumps(r)[:300]}")
            return
    print(f"ok   {name}: {str(results[1]['error'])[:140]}", flush=True)


def forward_cases(tmp, model):
    cfg = config_of(model)
    pad = cfg["image_token_id"]
    vpad = cfg["video_token_id"]
    vs, ve = cfg["vision_start_token_id"], cfg["vision_end_token_id"]
    ids = [1, 2, vs, pad, pad, pad, pad, ve, 3]
    good = os.path.join(tmp, "good.safetensors")
    safetensors(good, {"input_ids": ("I32", [4], [1, 2, 3, 4])})
    out = os.path.join(tmp, "out.safetensors")
    bad = {
        "grid_n1": {"input_ids": ("I32", [len(ids)], ids),
                    "image_grid_thw": ("I32", [2, 1], [1, 2])},
        "grid_n0": {"input_ids": ("I32", [len(ids)], ids),
                    "image_grid_thw": ("I32", [2, 0], [])},
        "video_huge_t": {"input_ids": ("I32", [5], [1, vs, vpad, ve, 2]),
                         "video_grid_thw": ("I32", [1, 3], [1000000000, 2, 2])},
        "video_max_grid": {"input_ids": ("I32", [5], [1, vs, vpad, ve, 2]),
                           "video_grid_thw": ("I32", [1, 3], [2147483647] * 3)},
        "image_huge_hw": {"input_ids": ("I32", [len(ids)], ids),
                          "image_grid_thw": ("I32", [1, 3], [1, 2000000, 2000000])},
    }
    for case, tensors in bad.items():
        path = os.path.join(tmp, case + ".safetensors")
        safetensors(path, tensors)
        expect_refused(f"forward_{case}", [VLSTACK, "forward", "--model", model, "--input", path,
                                           "--output", out], ["grid_thw"])
        expect_batch(f"batch_{case}", tmp, model, {"input": good, "max_new_tokens": 2},
                     {"input": path, "max_new_tokens": 2}, "grid_thw")


def size_cases(tmp, model):
    good = os.path.join(tmp, "good.safetensors")
    out = os.path.join(tmp, "out.safetensors")
    expect_refused("forward_capacity_max", [VLSTACK, "forward", "--model", model, "--input", good,
                                            "--output", out, "--capacity", str(1 << 24)],
                   ["capacity|memory|bytes"])
    reqs = os.path.join(tmp, "one.jsonl")
    with open(reqs, "w") as f:
        f.write(json.dumps({"input": good, "max_new_tokens": 2}) + "\n")
    expect_refused("batch_slots_capacity", [VLSTACK, "batch", "--model", model, "--requests", reqs,
                                            "--slots", "256", "--capacity", str(1 << 22)],
                   ["memory|bytes"])
    expect_refused("threads_huge", [VLSTACK, "forward", "--model", model, "--input", good,
                                    "--output", out, "--threads", "100000"], ["threads"],
                   codes=(2,))
    big_nmax = copy_model(model, os.path.join(tmp, "m_nmax"),
                          lambda c: c.update(deepstack_language_layer_indices=[0],
                                             deepstack_max_visual_positions=2**31 - 1))
    expect_refused("config_deepstack_nmax", [VLSTACK, "forward", "--model", big_nmax, "--input",
                                             good, "--output", out],
                   ["deepstack_max_visual_positions"])
    for name, value in [("max_new_tokens_2e9", 2000000000), ("max_new_tokens_2p32", 4294967297),
                        ("max_new_tokens_float", 2.7), ("max_new_tokens_bool", True),
                        ("max_new_tokens_negative", -1), ("max_new_tokens_string", "3")]:
        expect_batch(f"batch_{name}", tmp, model, {"input": good, "max_new_tokens": 2},
                     {"input": good, "max_new_tokens": value}, "max_new_tokens")
    expect_batch("batch_temperature_string", tmp, model, {"input": good, "max_new_tokens": 2},
                 {"input": good, "max_new_tokens": 2, "temperature": "hot"}, "temperature")
    expect_batch("batch_ignore_eos_int", tmp, model, {"input": good, "max_new_tokens": 2},
                 {"input": good, "max_new_tokens": 2, "ignore_eos": 1}, "ignore_eos")


def nesting_cases(tmp, model):
    good = os.path.join(tmp, "good.safetensors")
    out = os.path.join(tmp, "out.safetensors")
    deep = nested(200000)
    expect_batch("batch_deep_id", tmp, model, {"input": good, "max_new_tokens": 2},
                 '{"id": %s, "input": "%s"}' % (deep, good), "nest|deep")
    expect_batch("batch_duplicate_key", tmp, model, {"input": good, "max_new_tokens": 2},
                 '{"input": "%s", "max_new_tokens": 2, "max_new_tokens": 900}' % good,
                 "twice|duplicate")
    cfg_text = json.dumps(config_of(model))
    deep_cfg = copy_model(model, os.path.join(tmp, "m_deep"),
                          raw=(cfg_text[:-1] + ', "x": ' + deep + "}").encode())
    expect_refused("config_deep", [VLSTACK, "forward", "--model", deep_cfg, "--input", good,
                                   "--output", out], ["config.json", "nest|deep"])
    gen_deep = copy_model(model, os.path.join(tmp, "m_gen_deep"))
    replace_file(gen_deep, "generation_config.json", ('{"x": %s}' % deep).encode())
    expect_refused("generation_config_deep", [VLSTACK, "forward", "--model", gen_deep, "--input",
                                              good, "--output", out],
                   ["generation_config.json", "nest|deep"])
    nul = copy_model(model, os.path.join(tmp, "m_nul"), raw=cfg_text.encode() + b"\0garbage")
    expect_refused("config_nul_garbage", [VLSTACK, "forward", "--model", nul, "--input", good,
                                          "--output", out], ["config.json", "nul"])
    same = copy_model(model, os.path.join(tmp, "m_same_ids"),
                      lambda c: c.update(video_token_id=c["image_token_id"]))
    expect_refused("config_image_eq_video", [VLSTACK, "forward", "--model", same, "--input", good,
                                             "--output", out], ["video_token_id"])
    tok = os.path.join(tmp, "deep_tokenizer.json")
    with open(tok, "w") as f:
        f.write('{"model": %s}' % deep)
    expect_refused("tokenizer_deep", [VLSTACK, "tokenize", "--tokenizer", tok], ["nest|deep"],
                   stdin_text='"hi"\n')
    tok2 = os.path.join(tmp, "typed_tokenizer.json")
    with open(tok2, "w") as f:
        json.dump({"version": "1.0", "added_tokens": [{"id": "x", "content": 5}],
                   "model": {"type": 5, "vocab": {}, "merges": []}}, f)
    expect_refused("tokenizer_wrong_types", [VLSTACK, "tokenize", "--tokenizer", tok2],
                   ["tokenizer"], stdin_text='"hi"\n')


def template_cases(tmp):
    conv = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                       "add_generation_prompt": True})
    templates = {
        "template_deep_parens": ("{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}", "nest|deep"),
        "template_deep_lists": ("{{ " + "[" * 100000 + "]" * 100000 + " }}", "nest|deep"),
        "template_deep_ifs": ("{% if true %}" * 20000 + "x" + "{% endif %}" * 20000, "nest|deep"),
        "template_nested_loops": ("{% for a in range(100000) %}{% for b in range(100000) %}x"
                                  "{% endfor %}{% endfor %}", "budget|limit|steps|iterations"),
        "template_recursive_macro": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
                                     "recurs|depth|limit"),
        "template_string_repeat": ('{{ "x" * 1000000000 }}', "kMaxRenderOutputBytes"),
        "template_string_doubling": ('{% set ns = namespace(s="x") %}{% for i in range(64) %}'
                                     '{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}',
                                     "kMaxRenderOutputBytes"),
        "template_indent_huge": ('{{ "a\\nb" | indent(1000000000) }}', "kMaxRenderOutputBytes"),
        "template_tojson_indent": ('{{ messages | tojson(indent=1000000000) }}',
                                   "kMaxRenderOutputBytes"),
    }
    for name, (source, needle) in templates.items():
        path = os.path.join(tmp, name + ".jinja")
        with open(path, "w") as f:
            f.write(source)
        expect_refused(name, [VLSTACK, "chat-template", "--template", path], [needle],
                       stdin_text=conv + "\n")
    plain = os.path.join(tmp, "plain.jinja")
    with open(plain, "w") as f:
        f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
    deep_content = ('{"messages": [{"role": "user", "content": %s}]}' % nested(200000, '"x"'))
    expect_refused("chat_request_deep_content", [VLSTACK, "chat-template", "--template", plain],
                   ["nest|deep"], stdin_text=deep_content + "\n")
    null_prompt = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                              "add_generation_prompt": None})
    expect_refused("chat_request_null_bool", [VLSTACK, "chat-template", "--template", plain],
                   ["add_generation_prompt"], stdin_text=null_prompt + "\n")
    keys = ",".join('"k%d": %d' % (i, i) for i in range(100000))
    many = '{"messages": [{"role": "user", "content": "hi", %s}]}' % keys
    rc, out, err, seconds, rss = run([VLSTACK, "chat-template", "--template", plain],
                                     stdin_text=many + "\n")
    if check_process("chat_request_100k_keys", rc, seconds, rss, err):
        if seconds > 5:
            fail("chat_request_100k_keys", f"took {seconds:.1f} s")
        else:
            print(f"ok   chat_request_100k_keys ({seconds:.1f} s, exit {rc})", flush=True)


def utf8_cases(tmp, model):
    good = os.path.join(tmp, "good.safetensors")
    # Raw bytes that are not UTF-8 in the file name end up in the error message.
    bad = b'{"input": "\xff\xfe\xe2\x82.safetensors", "max_new_tokens": 2}'
    expect_batch("batch_invalid_utf8_error", tmp, model, {"input": good, "max_new_tokens": 2},
                 bad, "safetensors|utf|json")
    long_name = "\u20ac" * 400 + ".safetensors"  # an error message cut inside a character
    expect_batch("batch_cut_utf8_error", tmp, model, {"input": good, "max_new_tokens": 2},
                 {"input": long_name, "max_new_tokens": 2}, "safetensors|no such|not found")


def artifact_cases(tmp, model):
    good = os.path.join(tmp, "good.safetensors")
    out = os.path.join(tmp, "out.safetensors")
    art = os.path.join(tmp, "model.vlsa")
    rc, _, err, _, _ = run([VLSTACK, "compile", "--model", model, "--out", art])
    if rc != 0:
        fail("artifact_compile", f"compile failed: {err[-300:]}")
        return
    use = ["--precision", "bf16", "--capacity", "4096"]
    rc, _, err, _, _ = run([VLSTACK, "forward", "--model", model, "--input", good, "--output", out,
                            *use, "--artifact", art])
    if rc != 0:
        fail("artifact_clean", f"the untouched artifact does not load: {err[-300:]}")
        return
    data = bytearray(open(art, "rb").read())
    n = len(data)
    for name, edit in [("artifact_zeroed", lambda d: d.__setitem__(
            slice(n // 2, n // 2 + 4096), bytes(min(4096, n - n // 2)))),
                       ("artifact_bit_flip", lambda d: d.__setitem__(n - 100, d[n - 100] ^ 1))]:
        bad = bytearray(data)
        edit(bad)
        path = os.path.join(tmp, name + ".vlsa")
        with open(path, "wb") as f:
            f.write(bad)
        expect_refused(name, [VLSTACK, "forward", "--model", model, "--input", good, "--output",
                              out, *use, "--artifact", path],
                       ["checksum|integrity|corrupt"])
    deep = os.path.join(tmp, "deep_header.vlsa")
    header = ('{"x": %s}' % nested(100000)).encode()
    with open(deep, "wb") as f:
        f.write(b"VLSPREP1" + struct.pack("<Q", len(header)) + header)
    expect_refused("artifact_deep_header", [VLSTACK, "forward", "--model", model, "--input", good,
                                            "--output", out, *use, "--artifact", deep],
                   ["artifact|header"])


def output_cases(tmp, model):
    good = os.path.join(tmp, "good.safetensors")
    target = os.path.join(tmp, "target.safetensors")
    with open(target, "w") as f:
        f.write("old")
    link = os.path.join(tmp, "link.safetensors")
    os.symlink(target, link)
    rc, _, err, seconds, rss = run([VLSTACK, "forward", "--model", model, "--input", good,
                                    "--output", link])
    if check_process("output_symlink", rc, seconds, rss, err):
        if not os.path.islink(link):
            fail("output_symlink", "the symlink was replaced by a regular file")
        elif rc == 0 and open(target, "rb").read(3) == b"old":
            fail("output_symlink", "exit 0 but the link's target was not written")
        else:
            print(f"ok   output_symlink (exit {rc}, link kept)", flush=True)
    if os.geteuid() == 0:
        dev = os.path.join(tmp, "null_device")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        rc, _, err, seconds, rss = run([VLSTACK, "forward", "--model", model, "--input", good,
                                        "--output", dev])
        if check_process("output_device", rc, seconds, rss, err):
            if not stat.S_ISCHR(os.lstat(dev).st_mode):
                fail("output_device", "the device node was replaced by a regular file")
            else:
                print(f"ok   output_device (exit {rc}, device kept)", flush=True)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    rc, _, err, seconds, rss = run([VLSTACK, "forward", "--model", model, "--input", good,
                                    "--output", fifo], timeout=20)
    if check_process("output_fifo", rc, seconds, rss, err):
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
            fail("output_fifo", "the FIFO was replaced by a regular file")
        else:
            print(f"ok   output_fifo (exit {rc}, FIFO kept)", flush=True)


def fd_case(tmp, model):
    inputs = []
    for i in range(20):
        path = os.path.join(tmp, f"in{i}.safetensors")
        safetensors(path, {"input_ids": ("I32", [3], [1 + i, 2, 3])})
        inputs.append(path)
    lines = [{"id": i, "input": inputs[i % 20], "max_new_tokens": 1} for i in range(2000)]
    results = batch_lines(tmp, model, lines, "batch_2000_inputs_nofile_128", ("--slots", "4"),
                          nofile=128)
    if results is None:
        return
    bad = [r for r in results if r.get("error") or not r.get("tokens")]
    if bad:
        fail("batch_2000_inputs_nofile_128", f"{len(bad)} lines failed, e.g. {bad[0]}")
    else:
        print("ok   batch_2000_inputs_nofile_128: every line has its tokens", flush=True)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(width, height, rows=None):
    """An 8-bit RGB PNG; `rows` None: a bomb, the header of a huge image and a tiny IDAT."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    body = png_chunk(b"IDAT", zlib.compress(rows if rows is not None else b"\x00" * 64))
    return b"\x89PNG\r\n\x1a\n" + ihdr + body + png_chunk(b"IEND", b"")


def image_cases(tmp, model):
    """Hostile images and preprocessor configs through `vision` and `forward --image`."""
    out = os.path.join(tmp, "img_out.safetensors")
    ids = config_of(model)
    vs, pad, ve = ids["vision_start_token_id"], ids["image_token_id"], ids["vision_end_token_id"]
    inp = os.path.join(tmp, "img_in.safetensors")
    safetensors(inp, {"input_ids": ("I32", [5], [1, vs, pad, ve, 2])})
    good_png = png_bytes(8, 8, b"".join(b"\x00" + bytes(range(24)) for _ in range(8)))
    files = {
        "bomb.png": (png_bytes(60000, 60000), ["pixels|kMaxImagePixels"]),
        "wide.png": (png_bytes(70000, 1), ["kMaxImageSide|side"]),
        "truncated.png": (good_png[: len(good_png) // 2], ["truncated|corrupt"]),
        "bitflip.png": (good_png[:40] + bytes([good_png[40] ^ 0xFF]) + good_png[41:], ["png"]),
        "garbage.jpg": (b"\xff\xd8\xff\xe0" + b"\x13" * 300, ["jpeg"]),
        "gif.png": (b"GIF89a" + b"\x00" * 50, ["gif"]),
        "empty.png": (b"", ["empty|not an image"]),
        "text.webp": (b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8, ["webp"]),
        "sliver.png": (png_bytes(1, 300, b"".join(b"\x00\x00\x00\x00" for _ in range(300))),
                       ["aspect ratio"]),
    }
    for name, (data, needles) in files.items():
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        expect_refused("vision_" + name, [VLSTACK, "vision", "--model", model, "--image", path,
                                          "--output", out], [name] + needles)
        expect_refused("forward_image_" + name, [VLSTACK, "forward", "--model", model, "--input",
                                                 inp, "--image", path, "--output", out], [name])
    ok = os.path.join(tmp, "ok.png")
    with open(ok, "wb") as f:
        f.write(good_png)
    for name, edit, needle in [
            ("negative_min_pixels", lambda c: c.update(min_pixels=-5), "min_pixels"),
            ("min_over_max", lambda c: c.update(size={"shortest_edge": 10**9,
                                                      "longest_edge": 1}), "shortest_edge|min"),
            ("std_zero", lambda c: c.update(image_std=[0, 0.5, 0.5]), "image_std"),
            ("patch_huge", lambda c: c.update(patch_size=10**9), "patch_size"),
            ("deep", None, "nest|deep")]:
        bad = os.path.join(tmp, "pp_" + name)
        copy_model(model, bad)
        pp = os.path.join(bad, "preprocessor_config.json")
        if edit is None:
            replace_file(bad, "preprocessor_config.json", nested(100000).encode())
        else:
            c = json.load(open(pp))
            edit(c)
            replace_file(bad, "preprocessor_config.json", json.dumps(c).encode())
        expect_refused("preprocessor_" + name, [VLSTACK, "vision", "--model", bad, "--image", ok,
                                                "--output", out], ["preprocessor_config.json", needle])
    for name, edit, needle in [
            ("vision_depth_huge", lambda c: c["vision_config"].update(depth=10**6), "depth"),
            ("vision_heads_zero", lambda c: c["vision_config"].update(num_heads=0), "num_heads"),
            ("vision_pos_not_square", lambda c: c["vision_config"].update(num_position_embeddings=15),
             "num_position_embeddings")]:
        bad = os.path.join(tmp, name)
        copy_model(model, bad, edit=edit)
        expect_refused(name, [VLSTACK, "vision", "--model", bad, "--image", ok, "--output", out],
                       [needle])


def main():
    global VLSTACK, SANITIZED
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--sanitized", action="store_true")
    args = ap.parse_args()
    SANITIZED = args.sanitized
    VLSTACK = os.path.abspath(args.vlstack)
    with tempfile.TemporaryDirectory(prefix="vls_attack_") as tmp:
        model = os.path.join(tmp, "model")
        p = subprocess.run([VLSTACK, "make-test-model", "--out", model, "--untied"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"make-test-model failed: {p.stderr}")
        good = os.path.join(tmp, "good.safetensors")
        safetensors(good, {"input_ids": ("I32", [4], [1, 2, 3, 4])})
        groups = [("forward", lambda: forward_cases(tmp, model)),
                  ("size", lambda: size_cases(tmp, model)),
                  ("nesting", lambda: nesting_cases(tmp, model)),
                  ("template", lambda: template_cases(tmp)),
                  ("utf8", lambda: utf8_cases(tmp, model)),
                  ("artifact", lambda: artifact_cases(tmp, model)),
                  ("output", lambda: output_cases(tmp, model)),
                  ("fd", lambda: fd_case(tmp, model)),
                  ("image", lambda: image_cases(tmp, model))]
        for name, fn in groups:
            if args.only in name and not (SANITIZED and name == "size"):
                fn()
    if FAILURES:
        print(f"\n{len(FAILURES)} attack(s) not handled:")
        for f in FAILURES:
            print("  " + f)
        sys.exit(1)
    print("all attacks refused cleanly")


if __name__ == "__main__":
    main()
