"""A keep-alive client of abxd's API for the benches (abxd.py, lib/cluster.py,
lib/python_create.py), abxd's create timeline from its metrics, and the machine's busy time."""
import http.client
import json
import re
import sys


class Api:
    """Calls abxd's API at 127.0.0.1:`port` with its API key over one keep-alive connection."""

    def __init__(self, port, key, timeout=60):
        self.port, self.key, self.timeout = port, key, timeout
        self.conn = self._connect()

    def _connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def call(self, method, path, body=None, headers=None):
        """(status, body bytes) of `method path` with `body` sent as JSON."""
        h = {"X-API-KEY": self.key}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        h.update(headers or {})
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # abxd closed the keep-alive connection while it sat idle (a bench section can
                # run for minutes): a new connection, once.
                self.conn.close()
                self.conn = self._connect()
                if attempt == 2:
                    raise
        return r.status, r.read()


def create_steps(api):
    """abxd's GET /metrics: {step: (count, sum ms)} of its successful creates so far."""
    st, body = api.call("GET", "/metrics")
    if st != 200:
        sys.exit(f"GET /metrics: {st} {body[:200]}")
    steps = {}
    for line in body.decode().splitlines():
        m = re.match(r'abx_create_step_seconds_(sum|count)\{step="([a-z_]+)"\} (\S+)$', line)
        if m:
            count, total = steps.get(m.group(2), (0, 0.0))
            if m.group(1) == "sum":
                total = float(m.group(3)) * 1000
            else:
                count = int(float(m.group(3)))
            steps[m.group(2)] = (count, total)
    return steps


def step_means(before, after):
    """{step: mean ms} of the creates between two create_steps() snapshots."""
    return {k: (total - before.get(k, (0, 0.0))[1]) / (n - before.get(k, (0, 0))[0])
            for k, (n, total) in after.items() if n > before.get(k, (0, 0))[0]}


def machine_jiffies():
    """(busy, total) jiffies of all CPUs from /proc/stat (busy: user, nice, system, irq, softirq,
    steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return busy, busy + v[3] + v[4]
