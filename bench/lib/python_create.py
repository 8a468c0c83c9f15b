"""Driver of bench/python_create.sh (issue 37): create -> first command answered, a template
serving a Python module (abx-server --python) against one serving the C++ demo module
(abx-server --module), both FROM base, through one abxd. Per round, for each template in
alternating order: POST /sandboxes, then POST /commands/demo through abxd's proxy until the first
200 (retried every 2 ms, as the SDK polls), then DELETE. Prints one line per create and a JSON
summary line "PYCREATE {...}". With PAUSE_MS, each create comes that long after the last DELETE
(creates arriving at most that often; with abxd --sandbox-pool the refill boots meanwhile).
Usage: python_create.py URL KEY CXX_TEMPLATE PY_TEMPLATE N WARMUP [PAUSE_MS]"""
import http.client
import json
import os
import statistics
import sys
import time
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_client import Api, create_steps, machine_jiffies  # noqa: E402


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))]


def main():
    url, key, cxx, py, n, warmup = sys.argv[1:7]
    n, warmup = int(n), int(warmup)
    pause_s = float(sys.argv[7]) / 1000 if len(sys.argv) > 7 else 0.0
    u = urlparse(url)
    api = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def req(conn, method, path, body=None, headers=None):
        h = dict(headers or {})
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.read()

    metrics = Api(u.port, key)  # abxd's create timeline, on a connection of its own

    def steps():
        return create_steps(metrics)

    step_ms = {"cxx": {}, "py": {}}
    pooled = {"cxx": 0, "py": 0}  # creates that took a sandbox from abxd's pool (a "pool" step)

    def one(template, name=None):
        before = steps() if name else {}
        time.sleep(pause_s)
        t0 = time.perf_counter()
        st, data = req(api, "POST", "/sandboxes", {"templateID": template, "timeout": 120},
                       {"X-API-KEY": key})
        if st != 201:
            sys.exit(f"create {template}: {st} {data[:300]!r}")
        t_created = time.perf_counter()
        sb = json.loads(data)
        sid = sb["sandboxID"]
        hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49982",
               "X-Access-Token": sb["envdAccessToken"]}
        tries = 0
        try:
            call = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            deadline = t0 + 30
            while True:
                tries += 1
                try:
                    st, data = req(call, "POST", "/commands/demo", {"x": 42, "y": "world"}, hdr)
                except (ConnectionError, http.client.HTTPException):
                    call.close()
                    call = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                    st, data = 0, b""
                if st == 200:
                    break
                if time.perf_counter() > deadline:
                    sys.exit(f"{template}: no 200 from /commands/demo in 30 s ({st} {data[:300]!r})")
                time.sleep(0.002)
            t1 = time.perf_counter()
            call.close()
            # Read after the clock stopped (the metrics request costs neither side time).
            if name:
                for k, (c, total) in steps().items():
                    c0, t0_ = before.get(k, (0, 0.0))
                    if c > c0:
                        step_ms[name].setdefault(k, []).append(total - t0_)
                        pooled[name] += k == "pool"
            if json.loads(data) != {"result": "42: world"}:
                sys.exit(f"{template}: demo answered {data!r}")
        finally:
            req(api, "DELETE", f"/sandboxes/{sid}", headers={"X-API-KEY": key})
        return (t1 - t0) * 1e3, (t_created - t0) * 1e3, tries

    for i in range(warmup):
        for t in (cxx, py):
            one(t)
    res = {"cxx": [], "py": []}
    b0, a0 = machine_jiffies()
    for i in range(n):
        order = (("cxx", cxx), ("py", py)) if i % 2 == 0 else (("py", py), ("cxx", cxx))
        for name, t in order:
            first, created, tries = one(t, name)
            res[name].append((first, created, tries))
            print(f"{i + 1:3} {name:4} create->first 200 {first:8.1f} ms   create answered "
                  f"{created:8.1f} ms   calls {tries}", flush=True)
    b1, a1 = machine_jiffies()
    out = {"busy_pct": round(100.0 * (b1 - b0) / max(1, a1 - a0), 1)}
    for name in res:
        firsts = [r[0] for r in res[name]]
        out[name] = {"p50": statistics.median(firsts), "p95": pct(firsts, 95),
                     "create_p50": statistics.median(r[1] for r in res[name]),
                     "max_calls": max(r[2] for r in res[name]),
                     "pooled": pooled[name],
                     # Where abxd's part of each create went (GET /metrics around it): median ms.
                     "steps_ms": {k: round(statistics.median(v), 2)
                                  for k, v in step_ms[name].items()}}
    print("PYCREATE " + json.dumps(out))


main()
