#!/usr/bin/python3
"""abxd benchmark (issues 4 and 15): API create->ready, abxd's proxy side by side with nginx, and
many live sandboxes. Not a test. Usage: bench/abxd.sh [--no-build] [--creates N] [--live N]
[--duration S] [--rounds N] [--latency-rounds N] [--latency-seconds S]
[--interleaved-calls N] [--connections N]
[--sections create,proxy,live,parallel] [--clients N] [--parallel-creates N]

Measured in one run on this machine:
  1. create->ready: POST /sandboxes (template base) as the client sees it — abxd answers 201 only
     once envd answers inside the sandbox — for N sequential creates, each deleted after, p50/95/99.
     Two kinds alternate: a create right after the previous sandbox's DELETE answered (the aim's
     row, as this bench always measured it), while the kernel is still taking down that
     sandbox's network link and abxd's teardown thread its cgroups, layer and directories, and a
     create once that link is gone and that teardown done (its state and run dirs gone). Also
     how long the kernel took to remove the link, and the teardown to finish, after the DELETE
     answered.
     Compared with published figures of hosted platforms (not measured here: labelled as such).
  2. proxy: in front of the SAME servers of one demo sandbox — its abx-server (POST
     /commands/demo) and its envd (Process/Start of `echo hi`, a Connect stream read to its end
     frame) — wrk drives three paths: direct (wrk inside the sandbox's network namespace, to the
     server's loopback port), through abxd, and through nginx proxy_pass with upstream keep-alive.
     nginx runs inside the sandbox's netns with a listening socket made on the host's loopback (the
     socket is passed with nginx's own NGINX="fd;" inheritance), so like abxd it takes connections
     on the host and connects to the server's loopback port inside the sandbox: the same hops.
     At 1 connection the p50 each proxy adds to direct, measured two ways. Interleaved calls (the
     aim is judged on these): a keep-alive connection per path, one call on each in turn (order
     rotating), --interleaved-calls turns (the command call 5 times as many); the p50 of each
     path's calls, and abxd's latency minus nginx's per turn. Rounds of wrk: --latency-rounds
     rounds, each measuring the three paths back to back for --latency-seconds (order rotating),
     the added p50 taken within each round, and the median of the rounds reported. At
     --connections the calls/s through each: --rounds rounds, interleaved, the best round of each
     path kept.
  3. live sandboxes: N base sandboxes alive at once; abxd RSS, system memory used per sandbox,
     and GET /sandboxes/{id} p50/p99 at that size.
  4. parallel (not run by default): --clients clients (8), each with its own keep-alive
     connection, create a base sandbox and delete it, again and again, until --parallel-creates
     (200) are done: creates/s over the run and the creates' and DELETEs' p50/p99, against
     issue 44's aims (>= 200 creates/s on 2 cores, p99 <= 60 ms). The create section also
     reports its DELETEs' p50/p99 (aim p50 <= 5 ms).
"""
import argparse
import ctypes
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from rows import row  # noqa: E402
from api_client import Api, create_steps, machine_jiffies, step_means  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PUBLISHED_CREATE_MS = {"E2B (self-hosted, published)": 150.0, "Daytona (published)": 90.0}


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def mem_used_mib():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = int(v.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024.0


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def parallel_creates(port, key, clients, total):
    """`clients` threads, each with its own connection, create and delete `base` sandboxes until
    `total` creates are done: creates/s over the whole run, and the creates' and deletes' p50/p99."""
    lock = threading.Lock()
    left = [total]
    creates, deletes, failures = [], [], []

    def client():
        api = Api(port, key)
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t0 = time.perf_counter()
            st, body = api.call("POST", "/sandboxes", {"templateID": "base", "timeout": 60})
            t1 = time.perf_counter()
            if st != 201:
                with lock:
                    failures.append(f"{st} {body[:120]!r}")
                continue
            sid = json.loads(body)["sandboxID"]
            api.call("DELETE", f"/sandboxes/{sid}")
            t2 = time.perf_counter()
            with lock:
                creates.append((t1 - t0) * 1000)
                deletes.append((t2 - t1) * 1000)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    out = {"clients": clients, "creates": len(creates), "failures": failures[:5],
           "failed": len(failures), "wall_s": wall,
           "creates_per_s": len(creates) / wall if wall > 0 else 0.0}
    if creates:
        out["create_ms"] = {"p50": pct(creates, 50), "p99": pct(creates, 99)}
        out["delete_ms"] = {"p50": pct(deletes, 50), "p99": pct(deletes, 99)}
    return out


def pool_takes(api, series="abx_layer_pool_takes_total"):
    """abxd's GET /metrics: {"hit": n, "miss": n, ...} of one of its pools so far: the
    writable-layer pool's (default) or the sandbox pool's (abx_sandbox_pool_takes_total, which
    also counts "wait": a create that waited for the sandbox being booted)."""
    st, body = api.call("GET", "/metrics")
    if st != 200:
        sys.exit(f"GET /metrics: {st} {body[:200]}")
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^' + series + r'\{result="(hit|wait|miss)"\} (\d+)$', body.decode(), re.M)}


def takes_between(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in ("hit", "wait", "miss")}




# abxd's host ends of sandbox links: "ab", 8 hex digits (the daemon's home), the slot number.
ABX_LINK = re.compile(r"^ab[0-9a-f]{8}[0-9]+$")


def abx_links():
    return {n for n in os.listdir("/sys/class/net") if ABX_LINK.match(n)}


def wait_teardown(links, paths, timeout=10.0):
    """Waits until one of the links `links` (those there before the DELETE: the deleted
    sandbox's, and pooled sandboxes' with --sandbox-pool, which stay) is gone and none of `paths`
    exists (a deleted sandbox's state and run dirs, which abxd's teardown removes after the
    DELETE answered): the ms until the link was gone and until the paths were, each None on
    timeout."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    link_ms = dirs_ms = None
    while link_ms is None or dirs_ms is None:
        now = time.perf_counter()
        if link_ms is None and not (links and links <= abx_links()):
            link_ms = (now - t0) * 1000
        if dirs_ms is None and not any(os.path.lexists(p) for p in paths):
            dirs_ms = (now - t0) * 1000
        if now > deadline:
            print(f"warning: links {sorted(links)} or {paths} still there {timeout:.0f} s after "
                  "DELETE", file=sys.stderr)
            break
        time.sleep(0.0005)
    return link_ms, dirs_ms


def start_abxd(bin_dir, home, extra=()):
    out = open(os.path.join(home, "abxd.out"), "w+")
    err = open(os.path.join(home, "abxd.log"), "w")
    p = subprocess.Popen([os.path.join(bin_dir, "src/platform/abxd"), "--home", home, "--listen",
                          "127.0.0.1:0", "--kill-sandboxes",
                          # never the machine's resolver: a port where nothing answers
                          "--dns-upstream", "127.0.0.1:9", *extra], stdout=out, stderr=err)
    for _ in range(400):
        out.seek(0)
        m = re.search(r"^listening on .*:(\d+)$", out.read(), re.M)
        if m:
            with open(os.path.join(home, "api_key")) as f:
                return p, int(m.group(1)), f.read().strip()
        time.sleep(0.05)
    p.kill()
    sys.exit("abxd did not start; see " + os.path.join(home, "abxd.log"))


def wrk(url, headers, body, connections, duration, netns=None, method="POST", close=False):
    """wrk on keep-alive connections (one thread); netns: run it inside that network namespace;
    close: a new connection for every call instead (Connection: close: curl, `abx run`)."""
    lua = os.path.join(tempfile.mkdtemp(), "h.lua")
    if close:
        headers = dict(headers, Connection="close")
    with open(lua, "w") as f:
        f.write(f'wrk.method = "{method}"\n')
        # Decimal escapes: the body may be binary (a Connect envelope starts with a 0 byte).
        f.write('wrk.body = "' + "".join("\\%d" % b for b in body) + '"\n')
        for k, v in headers.items():
            f.write(f'wrk.headers["{k}"] = "{v}"\n')
        f.write('function done(s, l, r) io.write(string.format("WRKJSON %d %d %d %d %d\\n", '
                's.requests, s.duration, l:percentile(50), l:percentile(99), '
                's.errors.status + s.errors.connect + s.errors.read + s.errors.write + '
                's.errors.timeout)) end\n')
    # --timeout: a call is an error only after 30 s (wrk's default is 2 s): at 64 connections a
    # Process/Start waits behind 63 others, and where envd spawns slowly (~9 ms per `echo` on a
    # PVM guest) that queue alone is ~1-2 s.
    cmd = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s", "--timeout", "30s",
           "--latency", "-s", lua, url]
    if netns:
        cmd = ["nsenter", "--net=" + netns] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(os.path.dirname(lua), ignore_errors=True)
    m = re.search(r"^WRKJSON (\d+) (\d+) (\d+) (\d+) (\d+)$", r.stdout, re.M)
    if not m or int(m.group(5)) > 0:
        sys.exit(f"wrk {url} failed:\n" + r.stdout + r.stderr)
    n, dur, p50, p99, _ = map(int, m.groups())
    return {"calls_per_sec": n / (dur / 1e6), "p50_us": p50, "p99_us": p99}


def connect_envelope(obj):
    raw = json.dumps(obj).encode()
    return b"\x00" + len(raw).to_bytes(4, "big") + raw


# nginx in front of the same servers as abxd, doing comparable work: it routes on the
# E2b-Sandbox-Port header (abxd also reads E2b-Sandbox-Id and checks it), checks the access token,
# drops X-API-KEY, and keeps upstream connections alive (HTTP/1.1, keepalive pool). Both relay
# unbuffered (proxy_buffering/proxy_request_buffering off), as abxd does.
NGINX_CONF = """
daemon off;
master_process on;
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  upstream sb49982 {{ server 127.0.0.1:49982; keepalive 128; keepalive_requests 1000000; }}
  upstream sb49983 {{ server 127.0.0.1:49983; keepalive 128; keepalive_requests 1000000; }}
  map $http_e2b_sandbox_port $sandbox_port {{ 49982 sb49982; 49983 sb49983; default ""; }}
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 1000000;
    location / {{
      if ($sandbox_port = "") {{ return 502; }}
      if ($http_x_access_token != "{token}") {{ return 401; }}
      proxy_pass http://$sandbox_port;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-API-KEY "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"""


def start_nginx_in(netns, token):
    """nginx whose listening socket is on the host's loopback but which runs (and so connects
    upstream) inside the sandbox's network namespace, like abxd's open_tcp: the socket is made
    here and handed over with nginx's own inheritance protocol (NGINX="fd;")."""
    d = tempfile.mkdtemp(prefix="abx-bench-nginx-")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF.format(dir=d, port=port, token=token))
    p = subprocess.Popen(["nsenter", "--net=" + netns, "/usr/sbin/nginx", "-p", d, "-c",
                          os.path.join(d, "nginx.conf")], pass_fds=[sock.fileno()],
                         env={"NGINX": f"{sock.fileno()};", "PATH": "/usr/sbin:/usr/bin"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock.close()  # nginx holds it now
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/")
            c.getresponse().read()
            return p, port, d
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit("nginx did not start; see " + os.path.join(d, "error.log"))


def stop_nginx(p, d):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    shutil.rmtree(d, ignore_errors=True)


def check_call(port, path, headers, body, want):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    if r.status != 200 or want not in data:
        sys.exit(f"POST {path} through port {port}: {r.status} {data[:300]}")


def cpu_seconds(pids, children=False):
    """User + system CPU of the processes `pids`, and with `children` of their children (nginx's
    workers; not abxd's: those are its watchdog and the sandboxes' init processes)."""
    total, hz = 0, os.sysconf("SC_CLK_TCK")
    for pid in pids:
        kids = []
        for task in os.listdir(f"/proc/{pid}/task") if children else []:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
        for p in [pid] + kids:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / hz


def rotated(names, i):
    """names in round i's order: each round starts one later, so none always runs first."""
    return names[i % len(names):] + names[:i % len(names)]


def side_by_side(paths, rounds, duration, conns, cpu_of, lat_rounds, lat_duration):
    """Every path at 1 connection `lat_rounds` times (`lat_duration` s each) and at the busier
    counts `rounds` times (`duration` s each), interleaved. 1 connection: the rounds are kept
    whole, each round measuring every path back to back in an order that rotates from round to
    round, so the p50 a proxy adds is taken per round against direct's p50 of the same round (and
    the machine's drift hits both). Busier counts: the round with the most calls/s of each path is
    kept, with the CPU its proxy used per call in that round (cpu_of[path]: cpu_seconds'
    arguments)."""
    names = list(paths)
    out = {f"{name} c1": [] for name in names}
    for i in range(lat_rounds):
        for name in rotated(names, i):
            url, headers, body, netns = paths[name]
            out[f"{name} c1"].append(wrk(url, headers, body, 1, lat_duration, netns))
    best = {}
    for _ in range(rounds):
        for c in (c for c in conns if c != 1):
            for name, (url, headers, body, netns) in paths.items():
                c0 = cpu_seconds(*cpu_of.get(name, ([],)))
                r = wrk(url, headers, body, c, duration, netns)
                calls = r["calls_per_sec"] * duration
                r["proxy_cpu_us_per_call"] = (cpu_seconds(*cpu_of.get(name, ([],))) - c0) * 1e6 / calls
                key = f"{name} c{c}"
                if key not in best or r["calls_per_sec"] > best[key]["calls_per_sec"]:
                    best[key] = r
    out.update(best)
    return out


def new_connection_rounds(paths, rounds, duration):
    """Every path at 1 connection with a new connection per call, `rounds` times (`duration` s
    each) in an order that rotates from round to round; the median p50 of each."""
    names = list(paths)
    p50 = {name: [] for name in names}
    for i in range(rounds):
        for name in rotated(names, i):
            url, headers, body, netns = paths[name]
            p50[name].append(wrk(url, headers, body, 1, duration, netns, close=True)["p50_us"])
    return {name: statistics.median(v) for name, v in p50.items()}, p50


class KeepAlive:
    """One keep-alive HTTP/1.1 connection of a minimal client (TCP_NODELAY, whole request in one
    send, a response read to its end: Content-Length or chunked). netns: made inside that network
    namespace (setns(2) of this thread around the socket's creation and connect)."""

    def __init__(self, url, headers, body, netns=None):
        m = re.match(r"http://([^:/]+):(\d+)(/.*)$", url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        back = None
        if netns:
            libc = ctypes.CDLL(None, use_errno=True)
            back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            fd = os.open(netns, os.O_RDONLY)
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                sys.exit(f"setns {netns}: {os.strerror(ctypes.get_errno())}")
            os.close(fd)
        try:
            self.sock = socket.create_connection((host, port), timeout=30)
        finally:
            if back is not None:
                libc.setns(back, 0x40000000)
                os.close(back)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.request = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            sys.exit("a keep-alive connection closed mid-response")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def call(self):
        """One request and its whole response: (seconds, status, body)."""
        t0 = time.perf_counter()
        self.sock.sendall(self.request)
        status = int(self._line().split()[1])
        length, chunked = None, False
        while (line := self._line()) != b"":
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        body = b""
        if chunked:
            while (size := int(self._line().split(b";")[0], 16)) > 0:
                body += self._take(size)
                self._take(2)
            while self._line() != b"":  # trailers
                pass
        elif length is not None:
            body = self._take(length)
        return time.perf_counter() - t0, status, body


def interleaved(paths, calls, want):
    """Every path on a keep-alive connection of its own, one call at a time in turn: `calls`
    turns, each calling every path once in an order that rotates from turn to turn (after 50
    turns of warm-up). A call's neighbours on the other paths ran a moment before and after it,
    so what moves the server's own time (direct's p50 of Process/Start moved by hundreds of µs
    between rounds of wrk seconds apart: envd's spawn of `echo`) hits every path alike. Per path
    the latencies (µs), in turn order."""
    names = list(paths)
    conns = {name: KeepAlive(*paths[name]) for name in names}
    lat = {name: [] for name in names}
    for i in range(calls + 50):
        for name in rotated(names, i):
            secs, status, body = conns[name].call()
            if status != 200 or want not in body:
                sys.exit(f"{name}: {status} {body[:300]}")
            if i >= 50:
                lat[name].append(secs * 1e6)
    for c in conns.values():
        c.sock.close()
    return lat


def p50_difference_interval(a, b, resamples=200):
    """A 95% interval of median(a) - median(b) for paired samples (a[i] and b[i] from one turn):
    the turns resampled with replacement `resamples` times (a fixed seed: the same data give the
    same interval)."""
    rng = random.Random(0)
    n = len(a)
    d = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        d.append(statistics.median(a[i] for i in idx) - statistics.median(b[i] for i in idx))
    d.sort()
    return d[int(0.025 * resamples)], d[int(0.975 * resamples) - 1]


def print_p50_and_added(how, p50, added):
    """The 1-connection p50 of each path and what each proxy adds to direct's, measured `how`."""
    print(f"{'  p50 at 1 connection, ' + how + ' (us)':52} {p50['direct']:>4.0f} / "
          f"{p50['abxd']:.0f} / {p50['nginx']:.0f}")
    # Jitter can put a proxy's p50 under direct's: no ratio then.
    ratio = (f"{added['nginx'] / added['abxd']:9.2f}x" if min(added.values()) > 0
             else f"{'-':>10}")
    print(f"{'  added p50, ' + how + ': abxd vs nginx (us)':52} {added['abxd']:>5.0f} / "
          f"{added['nginx']:.0f} {ratio}")


def latency_summary(r):
    """From side_by_side's 1-connection rounds: per path the median p50, per proxy the median of
    what it added to direct's p50 in the same round, and per round abxd's p50 minus nginx's."""
    p50 = {k.split()[0]: [x["p50_us"] for x in v] for k, v in r.items() if k.endswith(" c1")}
    added = {via: [a - d for a, d in zip(p50[via], p50["direct"])] for via in ("abxd", "nginx")}
    diff = [a - n for a, n in zip(p50["abxd"], p50["nginx"])]
    return ({k: statistics.median(v) for k, v in p50.items()},
            {k: statistics.median(v) for k, v in added.items()}, added, diff)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--creates", type=int, default=int(os.environ.get("BENCH_CREATES", 100)))
    ap.add_argument("--live", type=int, default=int(os.environ.get("BENCH_LIVE", 500)))
    ap.add_argument("--live-creates", type=int, default=20,
                    help="the live section's sequential create/DELETE pairs made while --live "
                    "sandboxes are alive (issue 44: the create's figures at 300 live)")
    ap.add_argument("--duration", type=int, default=int(os.environ.get("BENCH_DURATION", 5)),
                    help="seconds of wrk per proxy measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the proxy section")
    ap.add_argument("--latency-rounds", type=int, default=9,
                    help="rounds of the proxy section at 1 connection (every path in each)")
    ap.add_argument("--latency-seconds", type=int, default=2,
                    help="seconds of wrk per path and round at 1 connection")
    ap.add_argument("--new-connection-rounds", type=int, default=5,
                    help="rounds of the command call with a new connection per call (every path "
                    "in each, --latency-seconds each; 0: none)")
    ap.add_argument("--interleaved-calls", type=int, default=2000,
                    help="turns of Process/Start calls at 1 connection, every path called once "
                    "per turn (the command call gets 5 times as many)")
    ap.add_argument("--connections", type=int, default=64, help="the proxy section's busy count")
    ap.add_argument("--abxd-arg", action="append", default=[],
                    help="an extra flag for abxd (repeatable; e.g. --abxd-arg=--layer-pool=0)")
    ap.add_argument("--sections", default="create,proxy,live",
                    help="comma-separated subset of create,proxy,live,parallel")
    ap.add_argument("--clients", type=int, default=8,
                    help="the parallel section's concurrent clients (each creates, then deletes)")
    ap.add_argument("--parallel-creates", type=int, default=200,
                    help="the parallel section's creates in all")
    args, _ = ap.parse_known_args()
    sections = set(args.sections.split(","))
    if os.geteuid() != 0:
        sys.exit("abxd bench needs root")
    home = tempfile.mkdtemp(prefix="abx-bench-")
    proc, port, key = start_abxd(args.build_dir, home, args.abxd_arg)
    api = Api(port, key)
    report = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    try:
        # 1. create -> ready
        lat = {"quiet": [], "after_delete": []}
        teardown = []
        deletes = []
        pending = set()  # the host ends of the last deleted sandbox's link, if not gone yet
        # The last deleted sandbox's state and run dirs and when its DELETE answered: abxd tears
        # it down after the answer (issue 44), and a quiet create waits for that too.
        pending_dir, deleted_at = None, 0.0
        background = []  # ms from a DELETE's answer until its state dir was gone
        steps_before = create_steps(api) if "create" in sections else {}
        sandbox_pool_before = pool_takes(api, "abx_sandbox_pool_takes_total")
        for i in range(args.creates if "create" in sections else 0):
            kind = "quiet" if i % 2 == 0 else "after_delete"
            if kind == "quiet" and pending:
                # Right after the previous DELETE answered: until its link and its dirs are gone,
                # each timed on its own (one polling loop).
                t0 = time.perf_counter()
                link_ms, dirs_ms = wait_teardown(pending, pending_dir or [])
                if link_ms is not None:
                    teardown.append(link_ms)
                if dirs_ms is not None and pending_dir:
                    background.append(dirs_ms + (t0 - deleted_at) * 1000)
            t0 = time.perf_counter()
            st, body = api.call("POST", "/sandboxes", {"templateID": "base", "timeout": 60})
            lat[kind].append((time.perf_counter() - t0) * 1000)
            if st != 201:
                sys.exit(f"create failed: {st} {body[:200]}")
            sid = json.loads(body)["sandboxID"]
            # Its link is one of these (with --sandbox-pool the pooled sandboxes' are there too,
            # and stay): the wait below ends once any of them is gone.
            pending = abx_links()
            t0 = time.perf_counter()
            api.call("DELETE", f"/sandboxes/{sid}")
            deleted_at = time.perf_counter()
            deletes.append((deleted_at - t0) * 1000)
            # Its state dir and run dir: the teardown removes the run dir last.
            pending_dir = [os.path.join(home, d, sid) for d in ("sandboxes", "run")]
        for kind, v in lat.items():
            if v:
                report["create_ms" if kind == "after_delete" else "create_quiet_ms"] = {
                    "n": len(v), "p50": pct(v, 50), "p95": pct(v, 95), "p99": pct(v, 99)}
        if "create" in sections:
            # Where the creates' time went inside abxd (issue 44): the mean of each step.
            after = create_steps(api)
            report["layer_pool_takes"] = pool_takes(api)
            report["sandbox_pool_takes"] = takes_between(
                sandbox_pool_before, pool_takes(api, "abx_sandbox_pool_takes_total"))
            report["create_steps_ms"] = step_means(steps_before, after)
        if teardown:
            report["link_teardown_ms"] = {"n": len(teardown), "p50": pct(teardown, 50)}
        if background:
            report["background_teardown_ms"] = {"n": len(background), "p50": pct(background, 50)}
        if deletes:
            report["delete_ms"] = {"n": len(deletes), "p50": pct(deletes, 50),
                                   "p99": pct(deletes, 99)}

        # 1b. creates from parallel clients (issue 44: 8 clients, >= 200 creates/s, p99 <= 60 ms):
        # each client creates a sandbox, deletes it, and again, until --parallel-creates are done.
        if "parallel" in sections:
            before = pool_takes(api, "abx_sandbox_pool_takes_total")
            report["parallel"] = parallel_creates(port, key, args.clients, args.parallel_creates)
            report["parallel"]["sandbox_pool_takes"] = takes_between(
                before, pool_takes(api, "abx_sandbox_pool_takes_total"))

        # 2. proxy overhead, side by side in front of the same servers in one demo sandbox:
        # its abx-server (POST /commands/demo) and its envd (Process/Start of `echo hi`, a
        # Connect stream read to its end frame).
        if "proxy" in sections:
            st, body = api.call("POST", "/sandboxes", {"templateID": "demo", "timeout": 600})
            if st != 201:
                sys.exit(f"create demo failed: {st} {body[:200]}")
            sb = json.loads(body)
            sid, token = sb["sandboxID"], sb["envdAccessToken"]
            with open(os.path.join(home, "sandboxes", sid, "init")) as f:
                netns = f"/proc/{f.read().split()[0]}/ns/net"
            cmd_hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49982", "X-Access-Token": token,
                       "Content-Type": "application/json"}
            env_hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
                       "Content-Type": "application/connect+json",
                       "Connect-Protocol-Version": "1"}
            cmd_body = b'{"x":42,"y":"world"}'
            env_body = connect_envelope({"process": {"cmd": "/bin/echo", "args": ["hi"]}})
            for _ in range(200):  # the command server starts just after envd
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/commands", headers=cmd_hdr)
                if c.getresponse().status == 200:
                    break
                time.sleep(0.05)
            ngx, nport, ndir = start_nginx_in(netns, token)
            try:
                for via in (port, nport):
                    check_call(via, "/commands/demo", cmd_hdr, cmd_body, b'"42: world"')
                    check_call(via, "/process.Process/Start", env_hdr, env_body, b'"end"')
                for name, path, hdr, bd, sport, want, turns in (
                        ("command", "/commands/demo", cmd_hdr, cmd_body, 49982, b'"42: world"',
                         5 * args.interleaved_calls),
                        ("envd", "/process.Process/Start", env_hdr, env_body, 49983, b'"end"',
                         args.interleaved_calls)):
                    paths = {"direct": (f"http://127.0.0.1:{sport}{path}", hdr, bd, netns),
                             "abxd": (f"http://127.0.0.1:{port}{path}", hdr, bd, None),
                             "nginx": (f"http://127.0.0.1:{nport}{path}", hdr, bd, None)}
                    report["proxy_" + name] = side_by_side(
                        paths, args.rounds, args.duration, [1, args.connections],
                        {"abxd": ([proc.pid],), "nginx": ([ngx.pid], True)},
                        args.latency_rounds, args.latency_seconds)
                    report["interleaved_" + name] = interleaved(paths, turns, want)
                    if name == "command" and args.new_connection_rounds > 0:
                        report["new_connection"] = new_connection_rounds(
                            paths, args.new_connection_rounds, args.latency_seconds)
            finally:
                stop_nginx(ngx, ndir)
            api.call("DELETE", f"/sandboxes/{sid}")

        # 3. many live sandboxes
        if "live" in sections:
            mem0 = mem_used_mib()
            ids = []
            t0 = time.perf_counter()
            for i in range(args.live):
                st, body = api.call("POST", "/sandboxes", {"templateID": "base", "timeout": 900})
                if st != 201:
                    print(f"[bench] create {i} failed: {st} {body[:200]}", file=sys.stderr)
                    break
                ids.append(json.loads(body)["sandboxID"])
            fill_s = time.perf_counter() - t0
            time.sleep(1)
            mem1 = mem_used_mib()
            gets = []
            for i in range(200):
                t1 = time.perf_counter()
                st, _ = api.call("GET", f"/sandboxes/{ids[i % len(ids)]}")
                gets.append((time.perf_counter() - t1) * 1000)
            report["live"] = {"n": len(ids), "fill_seconds": fill_s, "abxd_rss_mib": rss_mib(proc.pid),
                              "mem_per_sandbox_mib": (mem1 - mem0) / max(1, len(ids)),
                              "get_p50_ms": pct(gets, 50), "get_p99_ms": pct(gets, 99)}
            # What the live sandboxes cost the machine while idle: its busy share over 3 s.
            b0, t0j = machine_jiffies()
            time.sleep(3)
            b1, t1j = machine_jiffies()
            report["live"]["idle_busy_pct"] = 100.0 * (b1 - b0) / max(1, t1j - t0j)
            report["live"]["abxd_fds"] = len(os.listdir(f"/proc/{proc.pid}/fd"))
            # The create's figures with that many alive: create->ready and DELETE, and the mean
            # of each create step, to set beside the create section's (taken at 0 live).
            before = create_steps(api)
            made, gone = [], []
            for _ in range(args.live_creates):
                t1 = time.perf_counter()
                st, body = api.call("POST", "/sandboxes", {"templateID": "base", "timeout": 900})
                if st != 201:
                    print(f"[bench] create at {len(ids)} live failed: {st} {body[:200]}",
                          file=sys.stderr)
                    break
                made.append((time.perf_counter() - t1) * 1000)
                t1 = time.perf_counter()
                api.call("DELETE", f"/sandboxes/{json.loads(body)['sandboxID']}")
                gone.append((time.perf_counter() - t1) * 1000)
            if made:
                after = create_steps(api)
                report["live"]["create_ms"] = {"n": len(made), "p50": pct(made, 50),
                                               "p99": pct(made, 99)}
                report["live"]["delete_ms"] = {"n": len(gone), "p50": pct(gone, 50),
                                               "p99": pct(gone, 99)}
                report["live"]["create_steps_ms"] = step_means(before, after)
            for sid in ids:
                api.call("DELETE", f"/sandboxes/{sid}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        shutil.rmtree(home, ignore_errors=True)
    report["load_after"] = os.getloadavg()[0]

    print(f"\nabxd benchmark ({report['cpus']} cores, load {report['load_before']:.2f} -> "
          f"{report['load_after']:.2f})")
    print(f"{'measure':52} {'value':>12} {'ratio':>10}")
    if "create_ms" in report:
        c = report["create_ms"]
        print(f"{'create->ready p50/95/99 after a DELETE (ms, n=' + str(c['n']) + ')':52} "
              f"{c['p50']:5.1f}/{c['p95']:.1f}/{c['p99']:.1f}")
        for name, ms in PUBLISHED_CREATE_MS.items():
            print(f"{'  vs ' + name + ' ' + str(ms) + ' ms':52} {'':>12} {ms / c['p50']:9.1f}x")
        row("abxd", "create->ready p50", c["p50"], "-", "-", "ms", "lower", "<25")
    if "create_quiet_ms" in report:
        c = report["create_quiet_ms"]
        print(f"{'  with the last link gone p50 / p95 / p99 (n=' + str(c['n']) + ')':52} "
              f"{c['p50']:5.1f}/{c['p95']:.1f}/{c['p99']:.1f}")
        row("abxd", "create->ready p50, the last DELETE's link gone", c["p50"], "-", "-", "ms",
            "lower", "-")
    if "create_steps_ms" in report:
        steps = report["create_steps_ms"]
        print(f"{'  inside abxd, mean ms per step (GET /metrics):':52}")
        for name, ms in steps.items():
            print(f"{'    ' + name:52} {ms:12.3f}")
        print(f"{'    sum of the steps':52} {sum(steps.values()):12.3f}")
        takes = report.get("layer_pool_takes", {})
        print(f"{'  layers from the pool (hit / made at create)':52} "
              f"{takes.get('hit', 0)}/{takes.get('miss', 0)}")
        sp = report.get("sandbox_pool_takes", {})
        print(f"{'  sandboxes from the pool (hit / wait / booted at create)':52} "
              f"{sp.get('hit', 0)}/{sp.get('wait', 0)}/{sp.get('miss', 0)}")
    if "link_teardown_ms" in report:
        t = report["link_teardown_ms"]
        print(f"{'  the kernel removing the link after DELETE, p50':52} {t['p50']:12.1f}")
        row("abxd", "kernel's link teardown after a DELETE p50", t["p50"], "-", "-", "ms", "lower",
            "-")
    if "background_teardown_ms" in report:
        t = report["background_teardown_ms"]
        print(f"{'  the teardown after DELETE answered (its dirs gone), p50':52} {t['p50']:12.1f}")
    if "delete_ms" in report:
        d = report["delete_ms"]
        print(f"{'DELETE p50/99 (ms, n=' + str(d['n']) + '; aim p50 <= 5)':52} "
              f"{d['p50']:5.1f}/{d['p99']:.1f}")
        row("abxd", "DELETE p50", d["p50"], "-", "-", "ms", "lower", "<=5")
    if "parallel" in report:
        pr = report["parallel"]
        print(f"{str(pr['clients']) + ' parallel clients, create+delete each (n=' + str(pr['creates']) + ')':52}")
        print(f"{'  creates/s (aim >= 200 on 2 cores)':52} {pr['creates_per_s']:12.1f}")
        row("abxd", f"creates/s, {pr['clients']} clients", pr["creates_per_s"], "-", "-", "1/s",
            "higher", ">=200")
        if "create_ms" in pr:
            c, d = pr["create_ms"], pr["delete_ms"]
            print(f"{'  create->ready p50/99 (ms; aim p99 <= 60)':52} {c['p50']:5.1f}/{c['p99']:.1f}")
            print(f"{'  DELETE p50/99 (ms)':52} {d['p50']:5.1f}/{d['p99']:.1f}")
            row("abxd", f"create->ready p99, {pr['clients']} clients", c["p99"], "-", "-", "ms",
                "lower", "<=60")
        sp = pr.get("sandbox_pool_takes", {})
        print(f"{'  sandboxes from the pool (hit / wait / booted at create)':52} "
              f"{sp.get('hit', 0)}/{sp.get('wait', 0)}/{sp.get('miss', 0)}")
        if pr["failed"]:
            print(f"{'  failed creates':52} {pr['failed']:12d}  e.g. {pr['failures'][0]}")
    aims = []
    busy = args.connections
    for name, what in (("command", "command call"), ("envd", "Process/Start echo hi")):
        if "proxy_" + name not in report:
            continue
        r = report["proxy_" + name]
        med, added, per_round, diff = latency_summary(r)
        rate = {via: r[f"{via} c{busy}"]["calls_per_sec"] for via in ("direct", "abxd", "nginx")}
        print(f"{what}: direct / via abxd / via nginx proxy_pass")
        il = report.get("interleaved_" + name)
        if il:
            ip50 = {via: statistics.median(v) for via, v in il.items()}
            iadded = {via: ip50[via] - ip50["direct"] for via in ("abxd", "nginx")}
            turns = [a - b for a, b in zip(il["abxd"], il["nginx"])]
            print_p50_and_added(f"{len(turns)} interleaved turns", ip50, iadded)
            print(f"{'    abxd - nginx per turn: median, mean (us)':52} "
                  f"{statistics.median(turns):>5.0f} / {statistics.mean(turns):.0f}  (abxd lower in "
                  f"{100 * sum(t < 0 for t in turns) / len(turns):.0f}% of turns)")
            lo, hi = p50_difference_interval(il["abxd"], il["nginx"])
            print(f"{'    abxd p50 - nginx p50, 95% interval (us)':52} "
                  f"{ip50['abxd'] - ip50['nginx']:>5.0f}  [{lo:.0f}, {hi:.0f}] (turns resampled)")
        n = len(diff)
        print_p50_and_added(f"rounds of wrk, median of {n}", med, added)
        for via in ("abxd", "nginx"):
            print(f"{'    ' + via + ' added, per round (us)':52} "
                  + " ".join(f"{a:d}" for a in per_round[via]))
        print(f"{'    abxd p50 - nginx p50, per round (us)':52} "
              + " ".join(f"{d:d}" for d in diff)
              + f"  (median {statistics.median(diff):.0f}; abxd lower in "
              f"{sum(d < 0 for d in diff)}, equal in {sum(d == 0 for d in diff)} of {n})")
        print(f"{'  calls/s at ' + str(busy) + ' connections':52} {rate['direct']:>.0f} / "
              f"{rate['abxd']:.0f} / {rate['nginx']:.0f} {rate['abxd'] / rate['nginx']:9.2f}x")
        cpu = {via: r[f"{via} c{busy}"]["proxy_cpu_us_per_call"] for via in ("abxd", "nginx")}
        print(f"{'  proxy CPU per call at ' + str(busy) + ' connections (us)':52} {'-':>4} / "
              f"{cpu['abxd']:.1f} / {cpu['nginx']:.1f}")
        # The aim is judged on the interleaved calls when they ran: the rounds of wrk compare
        # p50s taken seconds apart, and envd's spawn moves more than that between them.
        judged = iadded if il else added
        row("abxd", f"{what}: proxy adds p50, 1 conn", judged["abxd"], "nginx proxy_pass",
            judged["nginx"], "us", "lower", ">=1x")
        if il:
            row("abxd", f"{what}: proxy adds p50, 1 conn (rounds of wrk)", added["abxd"],
                "nginx proxy_pass", added["nginx"], "us", "lower")
        row("abxd", f"{what}: through the proxy, {busy} conns", rate["abxd"], "nginx proxy_pass",
            rate["nginx"], "calls/s", "higher", ">=0.8x")
        aims.append((f"{what}: abxd adds <= nginx at p50", judged["abxd"] <= judged["nginx"]))
        if name == "command" and "new_connection" in report:
            nc, nc_rounds = report["new_connection"]
            print(f"{'  p50, a new connection per call (us)':52} {nc['direct']:>4.0f} / "
                  f"{nc['abxd']:.0f} / {nc['nginx']:.0f} {nc['nginx'] / nc['abxd']:9.2f}x")
            print(f"{'    abxd p50 - nginx p50, per round (us)':52} "
                  + " ".join(f"{a - b:d}" for a, b in zip(nc_rounds["abxd"], nc_rounds["nginx"])))
            row("abxd", f"{what}: p50, a new connection per call", nc["abxd"], "nginx proxy_pass",
                nc["nginx"], "us", "lower")
        aims.append((f"{what}: abxd >= 0.8x nginx's calls/s at {busy} connections",
                     rate["abxd"] >= 0.8 * rate["nginx"]))
    if "live" in report:
        lv = report["live"]
        print(f"{'live sandboxes':52} {lv['n']:12d}")
        print(f"{'  abxd RSS (MiB)':52} {lv['abxd_rss_mib']:12.1f}")
        print(f"{'  system memory per sandbox (MiB)':52} {lv['mem_per_sandbox_mib']:12.2f}")
        print(f"{'  GET /sandboxes/{id} p50 / p99 (ms)':52} "
              f"{lv['get_p50_ms']:6.2f}/{lv['get_p99_ms']:.2f}")
        print(f"{'  machine busy over 3 s with them idle (%)':52} {lv['idle_busy_pct']:12.1f}")
        print(f"{'  abxd open descriptors':52} {lv['abxd_fds']:12d}")
        if "create_ms" in lv:
            c, d = lv["create_ms"], lv["delete_ms"]
            print(f"{'  create->ready p50 / p99 at ' + str(lv['n']) + ' live (n=' + str(c['n']) + ')':52} "
                  f"{c['p50']:6.1f}/{c['p99']:.1f}")
            print(f"{'  DELETE p50 / p99 at ' + str(lv['n']) + ' live':52} "
                  f"{d['p50']:6.1f}/{d['p99']:.1f}")
            zero = report.get("create_steps_ms", {})
            print(f"{'  mean ms per create step, at 0 live -> at ' + str(lv['n']) + ':':52}")
            for name, ms in lv["create_steps_ms"].items():
                was = zero.get(name)
                print(f"{'    ' + name:52} {(f'{was:.3f}' if was is not None else '-'):>9} -> "
                      f"{ms:.3f}")
            print(f"{'    sum of the steps':52} {sum(zero.values()):9.3f} -> "
                  f"{sum(lv['create_steps_ms'].values()):.3f}")
    if "create_ms" in report:
        aims.insert(0, ("API create->ready p50 < 25 ms", report["create_ms"]["p50"] < 25))
    for text, ok in aims:
        print(f"aim: {text}: {'met' if ok else 'not met'}")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "abxd.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
