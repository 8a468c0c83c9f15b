#!/usr/bin/python3
"""abxd benchmark (issue 4): API create->ready, proxy overhead, commands.run round trip, and
many live sandboxes. Not a test. Usage: bench/abxd.sh [--no-build] [--creates N] [--live N]

Measured in one run on this machine:
  1. create->ready: POST /sandboxes (template base) as the client sees it — abxd answers 201 only
     once envd answers inside the sandbox — for N sequential creates (each deleted after), p50/95/99.
     Compared with published figures of hosted platforms (not measured here: labelled as such).
  2. proxy overhead: POST /commands/demo with wrk (1 connection, keep-alive) through abxd's proxy
     into a demo sandbox, vs the same abx-server binary + module on the host loopback directly.
  3. commands.run: envd Process/Start of `echo hi` through the proxy, to the end-of-stream frame.
  4. live sandboxes: N base sandboxes alive at once; abxd RSS, system memory used per sandbox,
     and GET /sandboxes/{id} p50/p99 at that size.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

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


class Api:
    def __init__(self, port, key):
        self.port, self.key = port, key
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method, path, body=None, headers=None):
        h = {"X-API-KEY": self.key}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        h.update(headers or {})
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, data


def start_abxd(bin_dir, home):
    out = open(os.path.join(home, "abxd.out"), "w+")
    err = open(os.path.join(home, "abxd.log"), "w")
    p = subprocess.Popen([os.path.join(bin_dir, "src/platform/abxd"), "--home", home, "--listen",
                          "127.0.0.1:0", "--kill-sandboxes"], stdout=out, stderr=err)
    for _ in range(400):
        out.seek(0)
        m = re.search(r"^listening on .*:(\d+)$", out.read(), re.M)
        if m:
            with open(os.path.join(home, "api_key")) as f:
                return p, int(m.group(1)), f.read().strip()
        time.sleep(0.05)
    p.kill()
    sys.exit("abxd did not start; see " + os.path.join(home, "abxd.log"))


def wrk_p50_us(port, headers, duration):
    lua = os.path.join(tempfile.mkdtemp(), "h.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.body = \'{"x":42,"y":"world"}\'\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        for k, v in headers.items():
            f.write(f'wrk.headers["{k}"] = "{v}"\n')
        f.write('function done(s, l, r) io.write(string.format("WRKJSON %d %d %d %d\\n", '
                's.requests, s.duration, l:percentile(50), l:percentile(99))) end\n')
    r = subprocess.run(["wrk", "-t", "1", "-c", "1", "-d", f"{duration}s", "--latency", "-s", lua,
                        f"http://127.0.0.1:{port}/commands/demo"], capture_output=True, text=True)
    m = re.search(r"^WRKJSON (\d+) (\d+) (\d+) (\d+)$", r.stdout, re.M)
    if not m or "Non-2xx" in r.stdout:
        sys.exit("wrk failed:\n" + r.stdout + r.stderr)
    n, dur, p50, p99 = map(int, m.groups())
    return {"calls_per_sec": n / (dur / 1e6), "p50_us": p50, "p99_us": p99}


def connect_envelope(obj):
    raw = json.dumps(obj).encode()
    return b"\x00" + len(raw).to_bytes(4, "big") + raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--creates", type=int, default=int(os.environ.get("BENCH_CREATES", 100)))
    ap.add_argument("--live", type=int, default=int(os.environ.get("BENCH_LIVE", 500)))
    ap.add_argument("--runs", type=int, default=50, help="commands.run round trips")
    ap.add_argument("--duration", type=int, default=int(os.environ.get("BENCH_DURATION", 5)))
    args, _ = ap.parse_known_args()
    if os.geteuid() != 0:
        sys.exit("abxd bench needs root")
    home = tempfile.mkdtemp(prefix="abx-bench-")
    proc, port, key = start_abxd(args.build_dir, home)
    api = Api(port, key)
    report = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    try:
        # 1. create -> ready
        lat = []
        for _ in range(args.creates):
            t0 = time.perf_counter()
            st, body = api.call("POST", "/sandboxes", {"templateID": "base", "timeout": 60})
            lat.append((time.perf_counter() - t0) * 1000)
            if st != 201:
                sys.exit(f"create failed: {st} {body[:200]}")
            sid = json.loads(body)["sandboxID"]
            api.call("DELETE", f"/sandboxes/{sid}")
        report["create_ms"] = {"n": len(lat), "p50": pct(lat, 50), "p95": pct(lat, 95),
                               "p99": pct(lat, 99)}

        # 2. proxy overhead on a command call
        st, body = api.call("POST", "/sandboxes", {"templateID": "demo", "timeout": 600})
        sb = json.loads(body)
        sid, token = sb["sandboxID"], sb["envdAccessToken"]
        hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49982", "X-Access-Token": token}
        for _ in range(200):  # the command server starts just after envd
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/commands", headers=hdr)
            if c.getresponse().status == 200:
                break
            time.sleep(0.05)
        proxied = wrk_p50_us(port, hdr, args.duration)
        direct_out = tempfile.TemporaryFile(mode="w+")
        direct = subprocess.Popen(
            [os.path.join(args.build_dir, "src/server/abx-server"), "--module",
             os.path.join(args.build_dir, "examples/commands/libabx_demo_commands.so"),
             "--port", "0"], stdout=direct_out, stderr=subprocess.DEVNULL,
            env=dict(os.environ, ABX_ACCESS_TOKEN="bench"))
        dport = None
        for _ in range(200):
            direct_out.seek(0)
            m = re.search(r"listening on .*:(\d+)", direct_out.read())
            if m:
                dport = int(m.group(1))
                break
            time.sleep(0.05)
        direct_res = wrk_p50_us(dport, {"X-Access-Token": "bench"}, args.duration)
        direct.send_signal(signal.SIGTERM)
        direct.wait()
        report["proxy"] = {"via_abxd": proxied, "direct": direct_res,
                           "added_p50_us": proxied["p50_us"] - direct_res["p50_us"]}

        # 3. commands.run: Process/Start `echo hi` through the proxy, to the end frame
        env_hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
                   "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
        body = connect_envelope({"process": {"cmd": "/bin/echo", "args": ["hi"]}})
        runs = []
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(args.runs):
            t0 = time.perf_counter()
            conn.request("POST", "/process.Process/Start", body=body, headers=env_hdr)
            r = conn.getresponse()
            data = r.read()
            runs.append((time.perf_counter() - t0) * 1000)
            if r.status != 200 or b'"end"' not in data:
                sys.exit(f"Process/Start failed: {r.status} {data[:300]}")
        report["commands_run_ms"] = {"n": len(runs), "p50": pct(runs, 50), "p99": pct(runs, 99)}
        api.call("DELETE", f"/sandboxes/{sid}")

        # 4. many live sandboxes
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
        for sid in ids:
            api.call("DELETE", f"/sandboxes/{sid}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        shutil.rmtree(home, ignore_errors=True)
    report["load_after"] = os.getloadavg()[0]

    c = report["create_ms"]
    print(f"\nabxd benchmark ({report['cpus']} cores, load {report['load_before']:.2f} -> "
          f"{report['load_after']:.2f})")
    print(f"{'measure':44} {'value':>12} {'ratio':>10}")
    print(f"{'create->ready p50 / p95 / p99 (ms, n=' + str(c['n']) + ')':44} "
          f"{c['p50']:5.1f}/{c['p95']:.1f}/{c['p99']:.1f}")
    for name, ms in PUBLISHED_CREATE_MS.items():
        print(f"{'  vs ' + name + ' ' + str(ms) + ' ms':44} {'':>12} {ms / c['p50']:9.1f}x")
    p = report["proxy"]
    print(f"{'command call p50 via abxd proxy (us)':44} {p['via_abxd']['p50_us']:12d} "
          f"{p['via_abxd']['p50_us'] / max(1, p['direct']['p50_us']):9.2f}x")
    print(f"{'command call p50 direct to abx-server (us)':44} {p['direct']['p50_us']:12d}")
    print(f"{'proxy adds at p50 (us)':44} {p['added_p50_us']:12d}")
    r = report["commands_run_ms"]
    print(f"{'commands.run echo hi via proxy p50 / p99 (ms)':44} {r['p50']:6.2f}/{r['p99']:.2f}")
    lv = report["live"]
    print(f"{'live sandboxes':44} {lv['n']:12d}")
    print(f"{'  abxd RSS (MiB)':44} {lv['abxd_rss_mib']:12.1f}")
    print(f"{'  system memory per sandbox (MiB)':44} {lv['mem_per_sandbox_mib']:12.2f}")
    print(f"{'  GET /sandboxes/{id} p50 / p99 (ms)':44} {lv['get_p50_ms']:6.2f}/{lv['get_p99_ms']:.2f}")
    aims = [("API create->ready p50 < 25 ms", c["p50"] < 25),
            ("proxy adds < 100 us p50", p["added_p50_us"] < 100)]
    for text, ok in aims:
        print(f"aim: {text}: {'met' if ok else 'not met'}")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "abxd.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
