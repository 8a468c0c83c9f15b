"""HTTP/1.1 over the standard library: a keep-alive pool per endpoint, retries of idempotent
requests, and the two authentication schemes of the control plane."""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import quote, urlsplit

from . import signing
from .config import ConnectionConfig
from .errors import AbxError, Timeout, Unavailable

USER_AGENT = "abx-python/0.1"
_RETRY_STATUS = (429, 502, 503, 504)


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        h = f"[{self.host}]" if ":" in self.host else self.host
        return h if self.port == default else f"{h}:{self.port}"


def parse_url(url: str) -> Endpoint:
    u = urlsplit(url)
    if u.scheme not in ("http", "https"):
        raise AbxError(f"{url!r} is not an http:// or https:// URL", type="InvalidArgument")
    if not u.hostname:
        raise AbxError(f"{url!r} has no host", type="InvalidArgument")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise AbxError(f"bad port in {url!r}", type="InvalidArgument") from None
    return Endpoint(u.scheme, u.hostname, port, u.path.rstrip("/"))


def url_encode(s: str) -> str:
    return quote(s, safe="-_.~/")


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class Transport:
    """One pool of idle connections per (scheme, host, port); thread-safe."""

    def __init__(self, config: ConnectionConfig):
        self.config = config
        self._idle: Dict[Tuple[str, str, int], List[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def _dial(self, ep: Endpoint, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
        c = cls(ep.host, ep.port, timeout=self.config.connect_timeout)
        try:
            c.connect()
        except socket.timeout as e:
            raise Unavailable(f"connect to {ep.authority}: timed out") from e
        except OSError as e:
            raise Unavailable(f"connect to {ep.authority}: {e.strerror or e}") from e
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sock.settimeout(timeout)
        return c

    def _checkout(self, ep: Endpoint, timeout: float):
        key = (ep.scheme, ep.host, ep.port)
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                c = idle.pop()
                c.sock.settimeout(timeout)
                return c, True
        return self._dial(ep, timeout), False

    def _checkin(self, ep: Endpoint, c: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault((ep.scheme, ep.host, ep.port), [])
            if len(idle) < 64:
                idle.append(c)
                return
        c.close()

    def close(self) -> None:
        with self._lock:
            conns = [c for v in self._idle.values() for c in v]
            self._idle.clear()
        for c in conns:
            c.close()

    def send(self, ep: Endpoint, method: str, target: str, body: bytes = b"",
             headers: Optional[Dict[str, str]] = None, *, idempotent: bool = False,
             timeout: Optional[float] = None,
             before_send: Optional[Callable[[str, str, Dict[str, str], bytes], None]] = None
             ) -> Response:
        """Sends one request, retrying idempotent ones on connection failures and
        429/502/503/504 (``max_retries`` times, exponential backoff with jitter), and any
        request whose connection failed before it was sent. A pooled connection the server
        already closed is replaced once, without counting as an attempt."""
        full_target = ep.base_path + target
        timeout = timeout or self.config.request_timeout
        backoff = self.config.retry_backoff
        stale_retry_used = False
        attempt = 0
        while True:
            h = {"Host": ep.authority, "User-Agent": USER_AGENT}
            if headers:
                h.update(headers)
            if body or method in ("POST", "PUT", "PATCH"):
                h["Content-Length"] = str(len(body))
            if before_send is not None:
                before_send(method, full_target, h, body)
            reused = False
            retry = False
            try:
                conn, reused = self._checkout(ep, timeout)
            except Unavailable as e:
                err: AbxError = e
                retry = True  # nothing was sent
            else:
                try:
                    conn.request(method, full_target, body=body if "Content-Length" in h else None,
                                 headers=h)
                    r = conn.getresponse()
                    data = r.read()
                except socket.timeout as e:
                    conn.close()
                    raise Timeout(f"{method} {target}: no answer within {timeout:g} s") from e
                except (http.client.HTTPException, OSError) as e:
                    conn.close()
                    if reused and not stale_retry_used:
                        stale_retry_used = True
                        continue
                    err = Unavailable(f"{method} {target}: {e.__class__.__name__}: {e}")
                    retry = idempotent
                else:
                    if idempotent and r.status in _RETRY_STATUS and \
                            attempt < self.config.max_retries:
                        conn.close()
                        retry = True
                        err = AbxError(f"{method} {target}: {r.status}", status=r.status)
                    else:
                        if r.will_close:
                            conn.close()
                        else:
                            self._checkin(ep, conn)
                        return Response(r.status, r.headers, data)
            if not retry or attempt >= self.config.max_retries:
                raise err
            time.sleep(backoff + random.uniform(0, backoff / 2))
            backoff *= 2
            attempt += 1

    def open_stream(self, ep: Endpoint, method: str, target: str, body: bytes,
                    headers: Dict[str, str], idle_timeout: float) -> http.client.HTTPResponse:
        """A request on a fresh connection of its own, for a streamed answer; the caller reads
        the response and closes it."""
        conn = self._dial(ep, idle_timeout)
        h = {"Host": ep.authority, "User-Agent": USER_AGENT, "Content-Length": str(len(body))}
        h.update(headers)
        try:
            conn.request(method, ep.base_path + target, body=body, headers=h)
            r = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise Timeout(f"{method} {target}: no answer within {idle_timeout:g} s") from e
        except (http.client.HTTPException, OSError) as e:
            conn.close()
            raise Unavailable(f"{method} {target}: {e.__class__.__name__}: {e}") from e
        r._abx_conn = conn  # closed with the response
        return r


def control_auth(config: ConnectionConfig):
    """(static headers, before_send hook) for the control plane: X-API-KEY, or a fresh
    ABX-HMAC-SHA256 signature on every attempt."""
    if config.uses_signing():
        ak, sk = config.access_key_id, config.secret_access_key

        def before_send(method: str, target: str, h: Dict[str, str], body: bytes) -> None:
            for k in ("authorization", "x-abx-date", "x-abx-nonce", "x-abx-content-sha256"):
                h.pop(k, None)
            h.update(signing.sign(method, target, list(h.items()), body, ak, sk))

        return {}, before_send
    if config.api_key:
        return {"X-API-KEY": config.api_key}, None
    return {}, None
