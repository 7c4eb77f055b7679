#!/usr/bin/env python3
"""The findings of issue 31 against `vlstack serve`, each as a client meets it, over raw sockets.

usage: /usr/bin/python3 tests/server/transport_test.py --vlstack PATH [--verbose]

Each case bounds time and the server's memory (VmRSS from /proc, before and after), and after each
the server still answers /health and a chat request:
- a 200,000-character unknown field name (a remote crash when std::regex parsed the message);
- a request line, a header line, a chunk-size line that never end; a 16 MiB body to /health, to an
  unrouted path, and gzip-declared; a Range header of many ranges;
- request smuggling shapes: Content-Length with Transfer-Encoding, two Content-Lengths,
  `Transfer-Encoding: gzip, chunked`, chunk data without its CRLF: refused, the connection closed;
- 64 clients connecting at once, 10 rounds: no connection reset;
- 500 idle keep-alive connections: under 5 % of a core;
- the log line of a request refused before routing carries its own id, not the previous one's;
- Expect: 100-continue, HTTP/1.0, HEAD, OPTIONS, 405 with Allow;
- image bombs inside the old pixel bound: a 13,377² 1-bit PNG (~30 KB) and a 633-byte JPEG declaring
  13,000², each answered 400 at once with bounded memory, six at once from clients that hang up;
- a FIFO inside --allow-local-files refused at once; a path outside it answered alike whether it
  exists or not;
- SIGTERM while a client trickles a header byte every second: exit 0 within seconds.
Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import raw_http_test as rh  # noqa: E402  (the server, raw sockets, the runner)

from raw_http_test import Failure, check, raw, parse_responses, status_of  # noqa: E402

CHAT_BODY = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                        "temperature": 0}).encode()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bounded(srv, what, fn, max_mb=64, max_s=15):
    """Runs fn; fails when the server's RSS grew more than MAX_MB or it took over MAX_S."""
    before = rss_mb(srv.proc.pid)
    t = time.time()
    fn()
    took = time.time() - t
    grew = rss_mb(srv.proc.pid) - before
    check(grew < max_mb, f"{what}: the server grew by {grew:.0f} MB")
    check(took < max_s, f"{what}: took {took:.1f} s")
    return grew, took


def send_stream(port, head, gen_bytes, total, timeout=10):
    """Sends HEAD then TOTAL bytes from GEN_BYTES in 64 KiB pieces, stopping at the first error;
    returns (bytes the server answered, how it ended, bytes sent)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sent = 0
    got = b""
    how = "eof"
    try:
        s.sendall(head)
        piece = gen_bytes(65536)
        while sent < total:
            try:
                s.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                how = "reset"
                break
            except socket.timeout:
                how = "stalled"
                break
            sent += len(piece)
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except socket.timeout:
            how = "timeout"
        except ConnectionResetError:
            how = "reset"
    finally:
        s.close()
    return got, how, sent


def png_bomb(side=13377):
    """A 1-bit grayscale PNG of SIDE x SIDE, all zeros: tens of KB that decode to SIDE² pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    row = b"\x00" * (1 + (side + 7) // 8)
    raw_rows = zlib.compress(row * side, 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", raw_rows) + chunk(b"IEND", b""))


def jpeg_bomb(side=13000, size=633):
    """A small real JPEG whose frame header is patched to SIDE x SIDE, cut to SIZE bytes."""
    from io import BytesIO
    from PIL import Image
    buf = BytesIO()
    Image.new("RGB", (16, 16), (120, 30, 200)).save(buf, "JPEG", quality=90)
    data = bytearray(buf.getvalue())
    i = data.find(b"\xff\xc0")
    data[i + 5:i + 9] = struct.pack(">HH", side, side)
    return bytes(data[:size]) if len(data) > size else bytes(data)


def image_chat_body(url):
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "x"}]}], "max_tokens": 2}


def closes_after(data, how):
    return how in ("eof", "reset")


def cases(R, srv):
    port = srv.port

    def huge_field():
        for path in ("/v1/chat/completions", "/v1/completions"):
            body = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
            body["x" * 200_000] = 1
            st, _, b = rh.request(port, "POST", path, body)
            check(st == 400, f"{path} with a 200,000-character unknown field: {st}")
            e = json.loads(b)["error"]
            check(e.get("param") == "x" * 200_000, f"{path}: param is not the field: {str(e)[:200]}")
    R.run("a 200,000-character unknown field name: 400 naming it, no crash", huge_field, port)

    def endless_lines():
        shapes = [
            (b"GET /" , lambda n: b"a" * n),
            (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: ", lambda n: b"v" * n),
            (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
             lambda n: b"f" * n),
            (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;",
             lambda n: b"e" * n),
        ]
        for head, gen in shapes:
            def one():
                got, how, sent = send_stream(port, head, gen, 64 << 20)
                # The server stops reading within 36 KiB (plus what the kernel's socket buffers hold).
                check(sent < (24 << 20), f"{head[:40]!r}...: the server read {sent >> 20} MiB of an endless line")
                st = status_of(got) if got else None
                print(f"     endless line after {head[:24]!r}: {sent >> 10} KiB sent before the server closed, answered {st}")
                check(st in (None, 400, 413, 414, 431), f"{head[:40]!r}...: answered {st}")
            grew, took = bounded(srv, f"an endless line after {head[:40]!r}", one, max_mb=48)
            print(f"       the server's RSS grew {grew:.1f} MB in {took:.2f} s")
    R.run("a request line, header line, chunk-size or extension line without an end", endless_lines, port)

    def bodies_not_read():
        for method, path, extra in (("POST", "/health", b""), ("PUT", "/health", b""), ("PATCH", "/v1/models", b""),
                                    ("DELETE", "/metrics", b""), ("POST", "/no/such/path", b""),
                                    ("POST", "/health", b"Content-Encoding: gzip\r\n")):
            head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {16 << 20}\r\n".encode() + extra
                    + b"Content-Type: application/json\r\n\r\n")

            def one():
                t = time.time()
                got, how, sent = send_stream(port, head, lambda n: b"\x1f" * n, 16 << 20)
                r = parse_responses(got)
                check(r and r[0][0] in (404, 405), f"{method} {path} with a 16 MiB body: {got[:120]!r}")
                if r[0][0] == 405:
                    check("allow" in r[0][1], f"{method} {path}: 405 without Allow")
                check(time.time() - t < 6, f"{method} {path}: answered after {time.time() - t:.1f} s")
            bounded(srv, f"{method} {path} with a 16 MiB body", one, max_mb=24)
    R.run("bodies to routes that take none: 404/405 from the header, the body not buffered", bodies_not_read, port)

    def ranges():
        rng = "bytes=" + ",".join(f"{i}-{i + 1000}" for i in range(0, 8000, 7))
        st, h, body = rh.request(port, "GET", "/", headers={"Range": rng[:8190]})
        check(st == 200 and "content-range" not in h, f"GET / with Range: {st} {h}")
        st2, _, whole = rh.request(port, "GET", "/")
        check(len(body) == len(whole), f"GET / with Range: {len(body)} bytes, the page is {len(whole)}")
    R.run("Range on generated content is ignored (200, the whole page once)", ranges, port)

    def smuggling():
        chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY)
        shapes = {
            "Content-Length with Transfer-Encoding": (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunk, (400,)),
            "Transfer-Encoding then Content-Length": (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunk, (400,)),
            "two different Content-Lengths": (b"Content-Length: %d\r\nContent-Length: 5\r\n" % len(CHAT_BODY), CHAT_BODY, (400,)),
            "two equal Content-Lengths": (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(CHAT_BODY), len(CHAT_BODY)), CHAT_BODY, (400,)),
            "a Content-Length list": (b"Content-Length: %d, %d\r\n" % (len(CHAT_BODY), len(CHAT_BODY)), CHAT_BODY, (400,)),
            "Transfer-Encoding: gzip, chunked": (b"Transfer-Encoding: gzip, chunked\r\n", chunk, (400, 501)),
            "Transfer-Encoding: chunked, identity": (b"Transfer-Encoding: chunked, identity\r\n", chunk, (400, 501)),
            "two Transfer-Encodings": (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunk, (400, 501)),
            "chunk data without CRLF": (b"Transfer-Encoding: chunked\r\n", b"%x\r\n%sXX0\r\n\r\n" % (len(CHAT_BODY), CHAT_BODY), (400,)),
            "a chunk longer than its size": (b"Transfer-Encoding: chunked\r\n", b"2\r\nabcdef\r\n0\r\n\r\n", (400,)),
            "two Host headers": (b"Host: y\r\nContent-Length: %d\r\n" % len(CHAT_BODY), CHAT_BODY, (400,)),
        }
        follow = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        for name, (hdrs, body, want) in shapes.items():
            req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + hdrs
                   + b"\r\n" + body + follow)
            got, how = raw(port, req, timeout=10)
            r = parse_responses(got) if got.startswith(b"HTTP/") else []
            check(len(r) == 1 and r[0][0] in want,
                  f"{name}: expected one answer in {want}, got {[x[0] for x in r]} ({how}) {got[:160]!r}")
            check(how in ("eof", "reset"), f"{name}: the connection was kept ({how})")
            check(r[0][1].get("connection", "").lower() == "close", f"{name}: no Connection: close")
    R.run("request smuggling shapes are refused and the connection closed", smuggling, port)

    def http_details():
        # Expect: 100-continue gets its interim answer before the body is sent.
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(CHAT_BODY))
        first = s.recv(4096)
        check(first.startswith(b"HTTP/1.1 100"), f"Expect: 100-continue: {first[:80]!r}")
        s.sendall(CHAT_BODY)
        got = b""
        while b"\r\n\r\n" not in got or len(parse_responses(got)) == 0:
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
        check(status_of(got) == 200, f"the body after 100 Continue: {got[:120]!r}")
        # HTTP/1.0: answered, then closed.
        got, how = raw(port, b"GET /health HTTP/1.0\r\n\r\n")
        check(status_of(got) == 200 and how == "eof", f"HTTP/1.0: {got[:80]!r} {how}")
        # HEAD: the headers, no body.
        got, how = raw(port, b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, rest = got.partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 200") and rest == b"", f"HEAD: {got[:200]!r}")
        st, h, _ = rh.request(port, "OPTIONS", "/v1/chat/completions")
        check(st == 204 and "POST" in h.get("allow", ""), f"OPTIONS: {st} {h}")
        st, h, _ = rh.request(port, "GET", "/v1/chat/completions")
        check(st == 405 and "POST" in h.get("allow", ""), f"GET on a POST route: {st} {h}")
    R.run("Expect: 100-continue, HTTP/1.0, HEAD, OPTIONS, 405 with Allow", http_details, port)

    def burst():
        resets = 0
        for _ in range(10):
            out = [None] * 64
            barrier = threading.Barrier(64)

            def one(i):
                barrier.wait()
                out[i] = raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=20)
            ts = [threading.Thread(target=one, args=(i,)) for i in range(64)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            resets += sum(1 for d, how in out if how != "eof" or status_of(d) != 200)
        check(resets == 0, f"{resets} of 640 connections were reset or unanswered")
        print("     64 clients at once, 10 rounds: 0 of 640 reset or unanswered")
    R.run("64 clients connecting at once, 10 rounds: no resets", burst, port)

    def idle_connections():
        socks = []
        try:
            for _ in range(500):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                socks.append(s)
            for s in socks:  # every one answered and kept alive
                check(s.recv(4096).startswith(b"HTTP/1.1 200"), "an idle connection's first answer")
            c0, t0 = cpu_s(srv.proc.pid), time.time()
            time.sleep(3)
            share = (cpu_s(srv.proc.pid) - c0) / (time.time() - t0)
            check(share < 0.05, f"500 idle connections cost {share * 100:.1f} % of a core")
            print(f"     500 idle connections: {share * 100:.2f} % of a core")
        finally:
            for s in socks:
                s.close()
    R.run("500 idle keep-alive connections cost under 5 % of a core", idle_connections, port)

    def refused_log_ids():
        rh.request(port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
        raw(port, b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        time.sleep(0.3)
        lines = srv.requests()[-3:]
        check(len(lines) == 3, f"log lines: {lines}")
        ids = [l["id"] for l in lines]
        check(len(set(ids)) == 3, f"the refused requests reuse an id: {ids}")
        check(all("prompt_tokens" not in l for l in lines[1:]), f"a refused request logged usage: {lines[1:]}")
        check([l["status"] for l in lines[1:]] == [400, 404], f"statuses: {[l['status'] for l in lines]}")
    R.run("log lines of refused requests carry their own id and no usage", refused_log_ids, port)

    def image_bombs():
        import base64
        for name, data, mime in (("a 13,377² 1-bit PNG", png_bomb(), "png"), ("a 633-byte JPEG declaring 13,000²", jpeg_bomb(), "jpeg")):
            url = f"data:image/{mime};base64," + base64.b64encode(data).decode()

            def one():
                st, _, body = rh.request(port, "POST", "/v1/chat/completions", image_chat_body(url), timeout=30)
                check(st == 400, f"{name} ({len(data)} bytes): {st} {body[:200]!r}")
            bounded(srv, name, one, max_mb=96, max_s=3)
            # Six at once from clients that hang up at once: nothing piles up.
            body = json.dumps(image_chat_body(url)).encode()
            req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body

            def six():
                socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(6)]
                for sk in socks:
                    sk.sendall(req)
                for sk in socks:
                    sk.close()
                time.sleep(1.5)
            bounded(srv, f"six of {name} whose clients hang up", six, max_mb=160, max_s=10)
    R.run("image bombs inside the old pixel bound: 400 at once, memory bounded", image_bombs, port)

    def local_files():
        fifo = os.path.join(srv.allowed, "pipe.png")
        os.mkfifo(fifo)
        t = time.time()
        st, _, body = rh.request(port, "POST", "/v1/chat/completions", image_chat_body(fifo), timeout=15)
        check(st == 400 and time.time() - t < 3, f"a FIFO in the allowed folder: {st} after {time.time() - t:.1f} s {body[:200]!r}")
        answers = []
        for path in ("/etc/passwd", "/etc/no-such-file-here", os.path.join(srv.allowed, "..", "x.png")):
            st, _, body = rh.request(port, "POST", "/v1/chat/completions", image_chat_body(path))
            e = json.loads(body)["error"]
            answers.append((st, e["message"].replace(path, "PATH"), e.get("code")))
        check(len(set(answers)) == 1 and answers[0][0] == 400,
              f"paths outside the allowed folder are answered differently: {answers}")
    R.run("a FIFO in the allowed folder is refused at once; outside paths answer alike", local_files, port)


def trickle_then_sigterm(R, vlstack, model):
    def case():
        srv = rh.Server(vlstack, ["--model", model, "--port", "0", "--slots", "1", "--capacity", "512",
                                  "--precision", "f32", "--threads", "1", "--drain-timeout", "30"])
        stop = threading.Event()
        try:
            def trickle():
                try:
                    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                    for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                        if stop.is_set():
                            break
                        s.send(bytes([b]))
                        time.sleep(0.5)
                except OSError:
                    pass
            threads = [threading.Thread(target=trickle, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(4)]
            time.sleep(2)
            t0 = time.time()
            srv.proc.send_signal(signal.SIGTERM)
            try:
                rc = srv.proc.wait(15)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.time() - t0
            check(rc == 0, f"SIGTERM with trickling clients: exit {rc} after {took:.1f} s")
            check(took < 8, f"SIGTERM with trickling clients took {took:.1f} s")
            print(f"     SIGTERM with 4 trickling and 4 idle clients: exit 0 after {took:.2f} s")
            for s in idle:
                s.close()
        finally:
            stop.set()
            srv.stop(signal.SIGKILL)
    R.run("SIGTERM while clients trickle header bytes and others idle: exit 0 at once", case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    rh.VERBOSE = a.verbose
    if not os.path.isfile(rh.NPM_TOKENIZER):
        print(f"transport_test: SKIP: {rh.NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    R = rh.Runner()
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "model")
        p = subprocess.run([a.vlstack, "make-test-model", "--out", model] + rh.SMALL, capture_output=True,
                           text=True, env=dict(os.environ, VLS_TOKENIZER_JSON=rh.NPM_TOKENIZER))
        check(p.returncode == 0, f"make-test-model: {p.stderr}")
        allowed = os.path.join(work, "imgs")
        os.makedirs(allowed)
        srv = rh.Server(a.vlstack, ["--model", model, "--port", "0", "--slots", "2", "--capacity", "1024",
                                    "--max-body-mb", "1", "--precision", "f32", "--threads", "2",
                                    "--allow-local-files", allowed])
        srv.allowed = allowed
        try:
            cases(R, srv)
            R.run("SIGTERM: exit 0", lambda: check(srv.stop() == 0, f"exit {srv.proc.returncode}"))
        finally:
            srv.stop(signal.SIGKILL)
        trickle_then_sigterm(R, a.vlstack, model)
    sys.exit(R.finish())


if __name__ == "__main__":
    main()
