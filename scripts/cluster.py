#!/usr/bin/env python3
"""N `vlstack serve` replicas behind HAProxy on loopback (docs/deploy.md, ADR 0024).

    python3 scripts/cluster.py --vlstack build/src/cli/vlstack --model DIR [--replicas 3]
        [--port 8080] [--logs DIR] [--balance hash|roundrobin] [--demo] [-- SERVE FLAGS...]

Starts the replicas on the ports after --port (8081, 8082, ...), waits until each is ready, then
HAProxy on --port with deploy/haproxy/haproxy.cfg rendered for them (its metrics and status page
on --stats-port). Every log goes to one folder (--logs, default cluster-logs/): replica-N.log
(each replica's JSON request lines, restarts appended) and haproxy.log (one line per request,
with the replica that served it, the retries and the request id). Ctrl-C or SIGTERM stops them:
the replicas drain (SIGTERM), then HAProxy stops.

--demo talks to the cluster instead of waiting: conversations whose turns stay on one replica
(their prompts served from its KV cache), a rolling restart under load without a failed
request, and the balancer's view of the replicas; then it stops everything.

The module is also the tests' harness (tests/balancer/balancer_test.py): Cluster starts, kills
and restarts replicas one by one and reads HAProxy's view of them.
"""
import argparse
import csv
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "deploy/haproxy/haproxy.cfg")
LUA = os.path.join(REPO, "deploy/haproxy/conversation_key.lua")


def find_haproxy():
    """HAProxy's binary: on PATH, or where Debian puts it (/usr/sbin, not on a user's PATH)."""
    found = shutil.which("haproxy")
    if found is None and os.access("/usr/sbin/haproxy", os.X_OK):
        found = "/usr/sbin/haproxy"
    return found


def free_ports(n):
    """n distinct free TCP ports on loopback."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def render_config(replica_ports, port, stats_port, run_dir, balance="hash"):
    """deploy/haproxy/haproxy.cfg for these ports: each line it changes must be there once, so
    that the rendered file cannot silently drift from the one operators read."""
    text = open(CONFIG).read()

    def swap(old, new):
        nonlocal text
        if text.count(old) != 1:
            raise RuntimeError(f"{CONFIG}: expected one '{old}'")
        text = text.replace(old, new)

    swap("lua-load /etc/haproxy/conversation_key.lua", f"lua-load {LUA}")
    swap("stats socket /run/haproxy/admin.sock", f"stats socket {run_dir}/haproxy.sock")
    swap("bind 127.0.0.1:8080", f"bind 127.0.0.1:{port}")
    swap("bind 127.0.0.1:8404", f"bind 127.0.0.1:{stats_port}")
    if balance == "roundrobin":
        swap("balance hash var(txn.conv_key)", "balance roundrobin")
    elif balance != "hash":
        raise ValueError(f"--balance: hash or roundrobin, not {balance}")
    lines = text.split("\n")
    servers = [i for i, l in enumerate(lines) if l.strip().startswith("server vls")]
    if not servers or servers != list(range(servers[0], servers[0] + len(servers))):
        raise RuntimeError(f"{CONFIG}: expected one block of 'server vlsN' lines")
    block = [f"    server vls{i + 1} 127.0.0.1:{p}" for i, p in enumerate(replica_ports)]
    lines[servers[0]:servers[-1] + 1] = block
    return "\n".join(lines)


def http_get(port, path, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Cluster:
    def __init__(self, vlstack, model, replicas=3, port=8080, stats_port=None, logs="cluster-logs",
                 serve_args=(), balance="hash", replica_ports=None, quiet=False):
        self.vlstack = os.path.abspath(vlstack)
        self.model = model
        self.port = port
        self.replica_ports = replica_ports or [port + 1 + i for i in range(replicas)]
        self.stats_port = stats_port or port + 324  # 8080 -> 8404, HAProxy's customary port
        self.logs = os.path.abspath(logs)
        self.serve_args = list(serve_args)
        self.balance = balance
        self.quiet = quiet
        self.procs = [None] * len(self.replica_ports)
        self.haproxy = None
        os.makedirs(self.logs, exist_ok=True)

    def say(self, text):
        if not self.quiet:
            print(f"[cluster] {text}", flush=True)

    # --- replicas ---------------------------------------------------------------------------
    def start_replica(self, i):
        log = open(os.path.join(self.logs, f"replica-{i + 1}.log"), "a")
        cmd = [self.vlstack, "serve", "--model", self.model, "--host", "127.0.0.1", "--port",
               str(self.replica_ports[i]), "--overload-status", "503"] + self.serve_args
        self.procs[i] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        return self.procs[i]

    def wait_ready(self, i, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"replica {i + 1} exited with {self.procs[i].returncode}: see "
                                   f"{self.logs}/replica-{i + 1}.log")
            try:
                if http_get(self.replica_ports[i], "/health/ready", 2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"replica {i + 1} not ready after {timeout} s")

    def stop_replica(self, i, sig=signal.SIGTERM, timeout=60):
        """Sends sig and waits; returns the exit code (negative: killed by a signal)."""
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return None if p is None else p.returncode
        p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    # --- the balancer -----------------------------------------------------------------------
    def start_balancer(self):
        cfg = os.path.join(self.logs, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(render_config(self.replica_ports, self.port, self.stats_port, self.logs,
                                  self.balance))
        haproxy = find_haproxy()
        if haproxy is None:
            raise RuntimeError("haproxy is not installed (Debian package haproxy; "
                               "scripts/install_deps.sh installs it)")
        check = subprocess.run([haproxy, "-c", "-q", "-f", cfg], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy -c {cfg}: {check.stdout}{check.stderr}")
        log = open(os.path.join(self.logs, "haproxy.log"), "a")
        # -db: in the foreground, logging to stdout (the config logs to stdout).
        self.haproxy = subprocess.Popen([haproxy, "-db", "-f", cfg], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=log)
        log.close()
        self.wait_servers_up(range(len(self.replica_ports)))

    def stop_balancer(self):
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.send_signal(signal.SIGUSR1)  # soft stop: finishes what it forwards
            try:
                self.haproxy.wait(15)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
                self.haproxy.wait()

    def server_states(self):
        """HAProxy's view: {'vls1': 'UP', 'vls2': 'DOWN', ...} from its status page's CSV."""
        status, body = http_get(self.stats_port, "/stats;csv", 5)
        if status != 200:
            raise RuntimeError(f"HAProxy stats: {status}")
        rows = csv.DictReader(io.StringIO(body.decode().lstrip("# ")))
        return {r["svname"]: r["status"].split()[0] for r in rows
                if r["pxname"] == "replicas" and r["svname"].startswith("vls")}

    def wait_servers_up(self, indices, timeout=30):
        want = {f"vls{i + 1}" for i in indices}
        deadline = time.time() + timeout
        states = {}
        while time.time() < deadline:
            try:
                states = self.server_states()
                if all(states.get(n) == "UP" for n in want):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"HAProxy does not see {sorted(want)} up after {timeout} s: {states}")

    # --- everything -------------------------------------------------------------------------
    def start(self):
        for i in range(len(self.replica_ports)):
            self.start_replica(i)
        for i in range(len(self.replica_ports)):
            self.wait_ready(i)
            self.say(f"replica {i + 1} ready on 127.0.0.1:{self.replica_ports[i]}")
        self.start_balancer()
        self.say(f"HAProxy on http://127.0.0.1:{self.port} ({self.balance}); its status page "
                 f"http://127.0.0.1:{self.stats_port}/stats, metrics /metrics; logs in {self.logs}")

    def stop(self):
        for i in range(len(self.replica_ports)):
            p = self.procs[i]
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i in range(len(self.replica_ports)):
            self.stop_replica(i)
        self.stop_balancer()

    def rolling_restart(self, on_step=None):
        """Each replica in turn: SIGTERM (it drains and exits 0), started again, back in
        HAProxy's rotation, before the next."""
        for i in range(len(self.replica_ports)):
            code = self.stop_replica(i)
            if code != 0:
                raise RuntimeError(f"replica {i + 1} exited {code} on SIGTERM")
            self.start_replica(i)
            self.wait_ready(i)
            self.wait_servers_up([i])
            if on_step:
                on_step(i)


# --- the demo -------------------------------------------------------------------------------

def chat(port, messages, max_tokens=12, headers=None, timeout=120):
    """One non-streamed chat completion: (status, replica, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0.7,
                           "seed": 1})
        c.request("POST", "/v1/chat/completions", body,
                  dict({"Content-Type": "application/json"}, **(headers or {})))
        r = c.getresponse()
        data = r.read()
        return r.status, r.getheader("X-Vlstack-Replica"), json.loads(data or b"{}")
    finally:
        c.close()


def demo(cl):
    print("\n[demo] 6 conversations of 3 turns; each turn resends the whole conversation. The "
          "balancer hashes the conversation's head (system prompt and first question), so every "
          "turn lands on the replica that holds its KV cache: cached_tokens covers the earlier "
          "turns")
    for k in range(6):
        messages = [{"role": "system", "content": f"You are assistant number {k}. Answer briefly "
                     "and precisely; you help people understand how inference engines work."},
                    {"role": "user", "content": f"Question {k}: what is a KV cache?"}]
        line = []
        for turn in range(3):
            status, replica, body = chat(cl.port, messages)
            if status != 200:
                raise RuntimeError(f"demo request failed: {status} {body}")
            u = body["usage"]
            cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            line.append(f"turn {turn + 1}: {replica} {cached}/{u['prompt_tokens']} cached")
            messages += [{"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                         {"role": "user", "content": f"And follow-up {turn + 1}?"}]
        print(f"[demo] conversation {k}: " + "; ".join(line))
    print("\n[demo] a rolling restart while 4 clients keep asking: each replica gets SIGTERM "
          "(/health/ready turns 503, it finishes what it runs and exits 0), starts again and "
          "rejoins; the balancer retries what a draining replica refuses on another one")
    stop = threading.Event()
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def client(n):
        j = 0
        while not stop.is_set():
            j += 1
            try:
                status, _, _ = chat(cl.port, [{"role": "user", "content": f"client {n} asks {j}"}],
                                    max_tokens=8)
            except OSError:
                status = 0
            with lock:
                counts["ok" if status == 200 else "failed"] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        cl.rolling_restart(lambda i: print(f"[demo] replica {i + 1} restarted and back in rotation",
                                           flush=True))
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"[demo] during the rolling restart: {counts['ok']} requests answered, "
          f"{counts['failed']} failed")
    print(f"[demo] the balancer's view: {cl.server_states()}; its status page "
          f"http://127.0.0.1:{cl.stats_port}/stats")
    print(f"[demo] logs: {cl.logs}/haproxy.log (a line per request: replica, retries, request "
          f"id) and replica-N.log (the same request id in request_id)")
    return counts["failed"] == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vlstack", default=os.path.join(REPO, "build/src/cli/vlstack"),
                    help="the vlstack binary (default: build/src/cli/vlstack)")
    ap.add_argument("--model", required=True, help="the model folder every replica serves")
    ap.add_argument("--replicas", type=int, default=3, help="how many (default 3)")
    ap.add_argument("--port", type=int, default=8080, help="HAProxy's port; replicas take the next")
    ap.add_argument("--stats-port", type=int, default=None, help="HAProxy's metrics and status "
                    "page (default: --port + 324, i.e. 8404)")
    ap.add_argument("--logs", default="cluster-logs", help="the folder of every log and the "
                    "rendered haproxy.cfg (default cluster-logs)")
    ap.add_argument("--balance", default="hash", choices=["hash", "roundrobin"],
                    help="hash: by conversation (default); roundrobin: for comparison")
    ap.add_argument("--demo", action="store_true", help="talk to the cluster (affinity, a "
                    "rolling restart under load), then stop")
    ap.add_argument("serve_args", nargs="*", help="after --: flags for every `vlstack serve`")
    a = ap.parse_args()
    if a.replicas < 1 or a.replicas > 64:
        ap.error("--replicas: 1 to 64")
    if not os.access(a.vlstack, os.X_OK):
        ap.error(f"--vlstack: {a.vlstack} is not an executable (build it: scripts/build.sh)")
    if not os.path.isdir(a.model):
        ap.error(f"--model: {a.model} is not a folder")
    cl = Cluster(a.vlstack, a.model, a.replicas, a.port, a.stats_port, a.logs, a.serve_args,
                 a.balance)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    ok = True
    try:
        cl.start()
        if a.demo:
            ok = demo(cl)
        else:
            print("[cluster] Ctrl-C stops the replicas and the balancer", flush=True)
            while not stopping.wait(0.5):
                dead = [i + 1 for i, p in enumerate(cl.procs) if p.poll() is not None]
                if dead:
                    print(f"[cluster] replica(s) {dead} exited; see {cl.logs}", flush=True)
                    ok = False
                    break
    except KeyboardInterrupt:
        pass
    except RuntimeError as e:
        print(f"[cluster] error: {e}", file=sys.stderr, flush=True)
        ok = False
    finally:
        cl.say("stopping: the replicas drain, then HAProxy")
        cl.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
