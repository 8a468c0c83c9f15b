"""A keep-alive client of abxd's API for the benches (abxd.py, lib/cluster.py)."""
import http.client
import json


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
