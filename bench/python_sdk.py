"""The Python SDK's call path (issue 37): `server.call("demo", x=…)` from abx.sdk vs doing the
same work the way one would without a persistent command server — `files.write` of a module
holding the same function, then `commands.run("python3 -c …")` importing and calling it — through
the same SDK, the same abxd and the same sandbox. Prints p50/p99 of each and the ratio (aim:
server.call >= 10x faster at p50). Run by bench/python_sdk.sh (ABX_API_URL, ABX_API_KEY set).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))

from abx.sdk import Sandbox, Unavailable  # noqa: E402
from rows import row  # noqa: E402

MODULE = '''def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"
'''
RUN = ("python3 -c 'import json, sys; sys.path.insert(0, \"/tmp/bench\"); "
       "from tools import demo; print(json.dumps(demo({x})))'")


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * (len(s) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--old-runs", type=int, default=50)
    ap.add_argument("--template", default="demo")
    a = ap.parse_args()
    with Sandbox.create(a.template, timeout=600) as sbx:
        deadline = time.monotonic() + 10
        while True:
            try:
                sbx.server.call("demo", x=0)
                break
            except Unavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for i in range(50):  # warm the pool and the server
            sbx.server.call("demo", x=i)
        call = []
        for i in range(a.calls):
            t0 = time.perf_counter_ns()
            r = sbx.server.call("demo", x=i, y="world")
            call.append((time.perf_counter_ns() - t0) / 1000)
            assert r == f"{i}: world", r
        old = []
        for i in range(a.old_runs):
            t0 = time.perf_counter_ns()
            sbx.files.write("/tmp/bench/tools.py", MODULE)
            r = sbx.commands.run(RUN.format(x=i))
            old.append((time.perf_counter_ns() - t0) / 1000)
            assert r.exit_code == 0 and r.stdout == f'"{i}: hello"\n', r
    c50, c99 = pct(call, 50), pct(call, 99)
    o50, o99 = pct(old, 50), pct(old, 99)
    print(f"server.call (abx.sdk, 1 caller, keep-alive)   n={len(call):5d}  p50 {c50:9.0f} us"
          f"  p99 {c99:9.0f} us  mean {statistics.mean(call):9.0f} us")
    print(f"files.write + commands.run python3 -c          n={len(old):5d}  p50 {o50:9.0f} us"
          f"  p99 {o99:9.0f} us  mean {statistics.mean(old):9.0f} us")
    print(f"ratio at p50: server.call is {o50 / c50:.1f}x faster (aim >= 10x)")
    row("python sdk", "server.call p50 vs files.write+commands.run python3 -c", c50,
        "files.write+commands.run", o50, "us", "lower", ">=10x")
    row("python sdk", "server.call p99 vs files.write+commands.run python3 -c", c99,
        "files.write+commands.run", o99, "us", "lower", "-")
    return 0 if o50 / c50 >= 10 else 3


if __name__ == "__main__":
    sys.exit(main())
