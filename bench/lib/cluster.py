#!/usr/bin/python3
"""abxd --cluster benchmark (issue 43), driven by bench/cluster.sh. Not a test.

One etcd member and two abxd nodes, all on loopback, started here: n1 (capacity 10) is the front
door, n2 (capacity 1000) the owner: placement (most free slots) puts every create sent to n1 on
n2. Measured in one run:
  1. create: POST /sandboxes (base) through n1, placed on n2 and forwarded (remote), against the
     same create sent to n2 itself (local); the two kinds alternate, each sandbox deleted on n2
     after. p50 of each, ratio (aim: remote <= 1.3x local).
  2. relay: one base sandbox on n2; envd's Process/Start of `echo hi` (what commands.run sends, a
     Connect stream read to its end frame) on three keep-alive connections called in turn: direct
     (inside the sandbox's network namespace, to envd's port), through n2's proxy (the owner), and
     through n1 (relayed to n2's listener, one hop). The proxy's own overhead is owner - direct;
     the hop's is relayed - owner (aim: hop <= 1.2x the proxy's overhead).
     Beside them, in the same turns, a second cluster of two nodes with mutual TLS between them
     (its own etcd member; t1 front door, t2 owner; certificates from scripts/cluster-certs.sh):
     t2's proxy and t1's relay to t2 over a TLS tunnel. What mutual TLS adds to the hop is the
     TLS hop (relayed_tls - owner_tls) against the plain one, and relayed_tls against relayed.
  3. list: GET /v2/sandboxes and GET /sandboxes through n1, with no other placement records in
     etcd, with N (1000) records written straight into etcd's /abx/sandboxes/ (records naming n2,
     of the caller's team, of sandboxes that do not run: creating 1000 real sandboxes would
     measure the nodes' own listing, not etcd), and with none again. p50 of each phase; what the
     records add (aim: <= 5 ms).
Prints a report and appends summary rows (lib/rows.py).
"""
import argparse
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, HERE)
sys.path.insert(0, BENCH)
from api_client import Api  # noqa: E402
from rows import row  # noqa: E402
from abxd import connect_envelope, interleaved  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def b64(s):
    return base64.b64encode(s.encode()).decode()




def wait_etcd(port):
    for _ in range(200):
        try:
            etcd_call(port, "/v3/kv/put", {"key": b64("probe"), "value": b64("1")})
            return
        except (OSError, SystemExit):
            time.sleep(0.05)
    sys.exit("etcd did not come up")


def start_etcd(etcd, work, name, procs):
    """A one-member etcd on free loopback ports: its client port."""
    ec, ep = free_port(), free_port()
    c, p = f"http://127.0.0.1:{ec}", f"http://127.0.0.1:{ep}"
    procs.append(subprocess.Popen(
        [etcd, "--name", name, "--data-dir", os.path.join(work, name),
         "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
         "--initial-advertise-peer-urls", p, "--initial-cluster", f"{name}={p}",
         "--initial-cluster-state", "new", "--logger", "zap", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_etcd(ec)
    return ec


def start_nodes(abxd, work, specs, procs):
    """abxd nodes from specs [(name, extra args)]; each {port, home, proc, key, api} once up."""
    nodes = {}
    for name, extra in specs:
        port = free_port()
        home = os.path.join(work, name)
        os.mkdir(home)
        out = open(os.path.join(home, "out"), "w")
        log = open(os.path.join(home, "log"), "w")
        proc = subprocess.Popen(
            [abxd, "--home", home, "--listen", f"127.0.0.1:{port}", "--kill-sandboxes",
             "--dns-upstream", "127.0.0.1:9", "--log-level", "warn", "--node-name", name]
            + [a.replace("{port}", str(port)) for a in extra],
            stdout=out, stderr=log)
        procs.append(proc)
        nodes[name] = {"port": port, "home": home, "proc": proc}
    for name, n in nodes.items():
        for _ in range(400):
            with open(os.path.join(n["home"], "out")) as f:
                if "listening on " in f.read():
                    break
            if n["proc"].poll() is not None:
                sys.exit(f"{name} exited: {open(os.path.join(n['home'], 'log')).read()[-500:]}")
            time.sleep(0.05)
        with open(os.path.join(n["home"], "api_key")) as f:
            n["key"] = f.read().strip()
        n["api"] = Api(n["port"], n["key"], timeout=120)
    return nodes


def etcd_call(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, body=json.dumps(body))
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        sys.exit(f"etcd {path}: {r.status} {data[:200]}")
    return json.loads(data)


def p50(v):
    return statistics.median(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--abxd", default=os.path.join(ROOT, "build/dev/src/platform/abxd"))
    ap.add_argument("--etcd", default=shutil.which("etcd") or "/usr/bin/etcd")
    ap.add_argument("--creates", type=int, default=int(os.environ.get("BENCH_CREATES", 30)),
                    help="creates of each kind (remote, local)")
    ap.add_argument("--calls", type=int, default=int(os.environ.get("BENCH_CALLS", 2000)),
                    help="turns of the relay section (every path once per turn)")
    ap.add_argument("--lists", type=int, default=int(os.environ.get("BENCH_LISTS", 200)),
                    help="list calls per phase and path")
    ap.add_argument("--records", type=int, default=int(os.environ.get("BENCH_RECORDS", 1000)))
    ap.add_argument("--keep", action="store_true")
    args, _ = ap.parse_known_args()
    work = tempfile.mkdtemp(prefix="abx-bench-cluster-")
    os.chmod(work, 0o755)
    procs = []
    report = {}
    try:
        ec = start_etcd(args.etcd, work, "e1", procs)
        c = f"http://127.0.0.1:{ec}"
        secret = os.path.join(work, "secret")
        with open(secret, "w") as f:
            f.write(os.urandom(24).hex())
        os.chmod(secret, 0o600)
        nodes = start_nodes(args.abxd, work, [
            (name, ["--sandbox-net", f"10.219.{i * 32}.0/19", "--cluster", c,
                    "--advertise-url", "http://127.0.0.1:{port}", "--cluster-secret-file", secret,
                    "--cluster-capacity", str(cap)])
            for i, (name, cap) in enumerate((("n1", 10), ("n2", 1000)))], procs)
        # The mutual-TLS cluster: its own etcd member, t1 (front) and t2 (owner).
        pki = os.path.join(work, "pki")
        certs = os.path.join(ROOT, "scripts", "cluster-certs.sh")
        subprocess.run([certs, "ca", pki], check=True, stdout=subprocess.DEVNULL)
        for name in ("t1", "t2"):
            subprocess.run([certs, "node", pki, name, "IP:127.0.0.1"], check=True,
                           stdout=subprocess.DEVNULL)
        ect = start_etcd(args.etcd, work, "e2", procs)
        tnodes = {}
        for i, (name, cap) in enumerate((("t1", 10), ("t2", 1000))):
            internal = free_port()
            tnodes.update(start_nodes(args.abxd, work, [
                (name, ["--sandbox-net", f"10.219.{64 + i * 32}.0/19",
                        "--cluster", f"http://127.0.0.1:{ect}", "--cluster-secret-file", secret,
                        "--cluster-capacity", str(cap), "--cluster-ca", os.path.join(pki, "ca.pem"),
                        "--cluster-cert", os.path.join(pki, f"{name}.pem"),
                        "--cluster-key", os.path.join(pki, f"{name}.key"),
                        "--cluster-listen", f"127.0.0.1:{internal}"])], procs))
        n1, n2 = nodes["n1"], nodes["n2"]

        # 1. create: remote (through n1, placed on n2) and local (n2), alternating.
        lat = {"remote": [], "local": []}
        for i in range(2 * args.creates + 2):
            kind = "remote" if i % 2 == 0 else "local"
            front = n1 if kind == "remote" else n2
            t0 = time.perf_counter()
            st, body = front["api"].call("POST", "/sandboxes", {"templateID": "base", "timeout": 120})
            ms = (time.perf_counter() - t0) * 1000
            if st != 201:
                sys.exit(f"{kind} create: {st} {body[:300]}")
            sid = json.loads(body)["sandboxID"]
            if not os.path.isdir(os.path.join(n2["home"], "sandboxes", sid)):
                sys.exit(f"{kind} create: sandbox {sid} is not on n2")
            if i >= 2:  # the first of each kind warms up
                lat[kind].append(ms)
            st, _ = n2["api"].call("DELETE", f"/sandboxes/{sid}")
            if st != 204:
                sys.exit(f"delete {sid}: {st}")
        report["create"] = {k: {"n": len(v), "p50": p50(v)} for k, v in lat.items()}

        # 2. relay: Process/Start of `echo hi` direct, through the owner, relayed by n1.
        st, body = n2["api"].call("POST", "/sandboxes", {"templateID": "base", "timeout": 900})
        if st != 201:
            sys.exit(f"create: {st} {body[:300]}")
        sb = json.loads(body)
        sid, token = sb["sandboxID"], sb["envdAccessToken"]
        with open(os.path.join(n2["home"], "sandboxes", sid, "init")) as f:
            netns = f"/proc/{f.read().split()[0]}/ns/net"
        hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
               "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
        body = connect_envelope({"process": {"cmd": "/bin/echo", "args": ["hi"]}})
        path = "/process.Process/Start"
        t1, t2 = tnodes["t1"], tnodes["t2"]
        st, tbody = t1["api"].call("POST", "/sandboxes", {"templateID": "base", "timeout": 900})
        if st != 201:
            sys.exit(f"create through t1: {st} {tbody[:300]}")
        tsb = json.loads(tbody)
        if not os.path.isdir(os.path.join(t2["home"], "sandboxes", tsb["sandboxID"])):
            sys.exit("the TLS cluster's sandbox is not on t2")
        thdr = dict(hdr, **{"E2b-Sandbox-Id": tsb["sandboxID"],
                            "X-Access-Token": tsb["envdAccessToken"]})
        paths = {"direct": (f"http://127.0.0.1:49983{path}", hdr, body, netns),
                 "owner": (f"http://127.0.0.1:{n2['port']}{path}", hdr, body, None),
                 "relayed": (f"http://127.0.0.1:{n1['port']}{path}", hdr, body, None),
                 "owner_tls": (f"http://127.0.0.1:{t2['port']}{path}", thdr, body, None),
                 "relayed_tls": (f"http://127.0.0.1:{t1['port']}{path}", thdr, body, None)}
        lat = interleaved(paths, args.calls, b'"end"')
        r = {k: p50(v) for k, v in lat.items()}
        # Paired per turn: the hop's and the proxy's added time in each turn, then their medians.
        r["proxy_adds"] = p50([o - d for o, d in zip(lat["owner"], lat["direct"])])
        r["hop_adds"] = p50([x - o for x, o in zip(lat["relayed"], lat["owner"])])
        r["tls_hop_adds"] = p50([x - o for x, o in zip(lat["relayed_tls"], lat["owner_tls"])])
        r["n"] = args.calls
        report["relay"] = r
        n2["api"].call("DELETE", f"/sandboxes/{sid}")
        t2["api"].call("DELETE", f"/sandboxes/{tsb['sandboxID']}")

        # 3. list through n1 with 0, N and 0 placement records in etcd.
        team = None
        for kv in etcd_call(ec, "/v3/kv/range", {"key": b64("/abx/sandboxes/"),
                                                 "range_end": b64("/abx/sandboxes0")}).get("kvs", []):
            team = json.loads(base64.b64decode(kv["value"]))["team"]
        if team is None:
            # The relay section's sandbox is gone: make one to read the team from its record.
            st, body = n1["api"].call("POST", "/sandboxes", {"templateID": "base", "timeout": 120})
            sid = json.loads(body)["sandboxID"]
            kv = etcd_call(ec, "/v3/kv/range", {"key": b64("/abx/sandboxes/" + sid)})["kvs"][0]
            team = json.loads(base64.b64decode(kv["value"]))["team"]
            n2["api"].call("DELETE", f"/sandboxes/{sid}")

        def phase():
            out = {}
            for lp in ("/v2/sandboxes", "/sandboxes"):
                v = []
                for i in range(args.lists + 5):
                    t0 = time.perf_counter()
                    st, data = n1["api"].call("GET", lp)
                    if st != 200:
                        sys.exit(f"list {lp}: {st} {data[:200]}")
                    if i >= 5:
                        v.append((time.perf_counter() - t0) * 1000)
                out[lp] = p50(v)
            return out

        lists = {"none": phase()}
        t0 = time.perf_counter()
        for i in range(args.records):
            rid = f"benchrecord{i:09d}"
            rec = {"sandboxID": rid, "node": "n2", "team": team, "templateID": "base",
                   "alias": "base", "clientID": "bench", "startedAt": "2026-01-01T00:00:00.000Z",
                   "endAt": ""}
            etcd_call(ec, "/v3/kv/put", {"key": b64("/abx/sandboxes/" + rid),
                                         "value": b64(json.dumps(rec))})
        report["records_written_s"] = time.perf_counter() - t0
        lists["records"] = phase()
        etcd_call(ec, "/v3/kv/deleterange", {"key": b64("/abx/sandboxes/benchrecord"),
                                             "range_end": b64("/abx/sandboxes/benchrecore")})
        lists["none_again"] = phase()
        report["list"] = lists
    finally:
        etcds = [p for p in procs if os.path.basename(p.args[0]) == "etcd"]
        abxds = [p for p in procs if p not in etcds]
        for proc in reversed(abxds):
            proc.send_signal(signal.SIGTERM)
        for proc in reversed(abxds):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in etcds:
            proc.kill()
            proc.wait()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    cr = report["create"]
    ratio = cr["remote"]["p50"] / cr["local"]["p50"]
    print(f"create p50 (base, {cr['remote']['n']} of each, alternating; ms): remote "
          f"{cr['remote']['p50']:.1f} / local {cr['local']['p50']:.1f} = {ratio:.2f}x (aim <= 1.3x)")
    row("cluster", "create through a front node, placed on another, p50", round(cr["remote"]["p50"], 1),
        "the same create on the owner itself", round(cr["local"]["p50"], 1), "ms", "lower", ">=0.77x")
    r = report["relay"]
    hop_ratio = r["hop_adds"] / r["proxy_adds"] if r["proxy_adds"] > 0 else float("inf")
    print(f"Process/Start echo hi p50 at 1 connection, {r['n']} interleaved turns (us): direct "
          f"{r['direct']:.0f} / owner's proxy {r['owner']:.0f} / relayed by another node "
          f"{r['relayed']:.0f}")
    print(f"  added per turn, p50 (us): the owner's proxy {r['proxy_adds']:.0f}, the relay hop "
          f"{r['hop_adds']:.0f} = {hop_ratio:.2f}x the proxy's (aim <= 1.2x)")
    row("cluster", "command call (Process/Start echo hi): one relay hop adds p50, 1 conn",
        round(r["hop_adds"], 1), "the owner's proxy adds", round(r["proxy_adds"], 1), "us", "lower",
        ">=0.83x")
    row("cluster", "command call p50, relayed by another node", round(r["relayed"]),
        "through the owner's proxy", round(r["owner"]), "us", "lower")
    tls_ratio = r["tls_hop_adds"] / r["hop_adds"] if r["hop_adds"] > 0 else float("inf")
    print(f"  mutual TLS between nodes (same turns; us): owner's proxy {r['owner_tls']:.0f} / "
          f"relayed over TLS {r['relayed_tls']:.0f}; the TLS hop adds {r['tls_hop_adds']:.0f} "
          f"per turn, p50 = {tls_ratio:.2f}x the plain hop; relayed over TLS / relayed plain = "
          f"{r['relayed_tls'] / r['relayed']:.2f}x")
    row("cluster", "command call: one relay hop over mutual TLS adds p50, 1 conn",
        round(r["tls_hop_adds"], 1), "the plain relay hop adds", round(r["hop_adds"], 1), "us",
        "lower")
    li = report["list"]
    for lp in ("/v2/sandboxes", "/sandboxes"):
        base_ms = (li["none"][lp] + li["none_again"][lp]) / 2
        added = li["records"][lp] - base_ms
        print(f"GET {lp} through n1 p50 ({args.lists} calls per phase; ms): no records "
              f"{li['none'][lp]:.2f}, {args.records} records {li['records'][lp]:.2f}, none again "
              f"{li['none_again'][lp]:.2f}: the records add {added:.2f} ms (aim <= 5)")
        row("cluster", f"GET {lp} through a front node: {args.records} placement records in etcd add",
            round(added, 2), "-", "-", "ms", "lower", "<5")
    print(f"({args.records} records written straight into etcd in {report['records_written_s']:.1f} s; "
          "they name a live node and run nowhere)")
    print("json: " + json.dumps(report))


if __name__ == "__main__":
    main()
