"""Connection options, read from the environment the way libabx and the CLI read it.

Every ``ABX_*`` variable also has an ``E2B_*`` spelling where the E2B SDKs have one (``ABX_*``
wins):

=============================  =====================================================
``ABX_API_URL``/``E2B_API_URL``  control plane; default ``https://api.<domain>`` when a
                                 domain is set, else ``http://127.0.0.1:3000``
``ABX_DOMAIN``/``E2B_DOMAIN``    sandbox domain (default ``localhost``)
``ABX_API_KEY``/``E2B_API_KEY``  sent as ``X-API-KEY`` on control-plane requests
``ABX_ACCESS_KEY_ID``,           AK/SK: sign control-plane requests (ABX-HMAC-SHA256)
``ABX_SECRET_ACCESS_KEY``        instead of sending the API key
``ABX_SANDBOX_URL``/             envd base URL (else the API URL with routing headers)
``E2B_SANDBOX_URL``
``ABX_SERVER_URL``               command-server base URL (same fallback)
``ABX_ACCESS_TOKEN``             sandbox access token for ``Sandbox.attach``
``ABX_HOME``                     local templates under ``$ABX_HOME/templates``
                                 (default ``~/.abx``)
``ABX_REQUEST_TIMEOUT_MS``,      request timeout and retries of idempotent requests
``ABX_MAX_RETRIES``
=============================  =====================================================
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Mapping, Optional


def _env(env: Mapping[str, str], abx: str, e2b: Optional[str] = None) -> str:
    v = env.get(abx, "")
    if not v and e2b:
        v = env.get(e2b, "")
    return v


@dataclasses.dataclass
class ConnectionConfig:
    api_url: str = "http://127.0.0.1:3000"
    domain: str = "localhost"
    api_key: str = ""
    access_key_id: str = ""  # with secret_access_key: AK/SK signing instead of the API key
    secret_access_key: str = ""
    sandbox_url: str = ""  # envd override; empty: api_url + routing headers
    server_url: str = ""  # command-server override; empty: api_url + routing headers
    access_token: str = ""  # Sandbox.attach only
    home: Optional[Path] = None
    connect_timeout: float = 10.0  # seconds
    request_timeout: float = 60.0  # seconds
    max_retries: int = 3  # idempotent requests: connection failures, 429/502/503/504
    retry_backoff: float = 0.1  # seconds, doubling

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides) -> "ConnectionConfig":
        """Defaults overlaid with the environment, then with ``overrides`` (field names)."""
        e = os.environ if env is None else env
        c = cls()
        d = _env(e, "ABX_DOMAIN", "E2B_DOMAIN")
        if d:
            c.domain = d
            c.api_url = "https://api." + d
        c.api_url = _env(e, "ABX_API_URL", "E2B_API_URL") or c.api_url
        c.api_key = _env(e, "ABX_API_KEY", "E2B_API_KEY")
        c.access_key_id = _env(e, "ABX_ACCESS_KEY_ID")
        c.secret_access_key = _env(e, "ABX_SECRET_ACCESS_KEY")
        c.sandbox_url = _env(e, "ABX_SANDBOX_URL", "E2B_SANDBOX_URL")
        c.server_url = _env(e, "ABX_SERVER_URL")
        c.access_token = _env(e, "ABX_ACCESS_TOKEN")
        h = _env(e, "ABX_HOME")
        if h:
            c.home = Path(h)
        t = _env(e, "ABX_REQUEST_TIMEOUT_MS")
        if t.isdigit() and int(t) > 0:
            c.request_timeout = int(t) / 1000
        r = _env(e, "ABX_MAX_RETRIES")
        if r.isdigit() and int(r) <= 20:
            c.max_retries = int(r)
        for k, v in overrides.items():
            if not hasattr(c, k):
                raise TypeError(f"ConnectionConfig has no field {k!r}")
            setattr(c, k, v)
        return c

    def abx_home(self) -> Path:
        if self.home is not None:
            return Path(self.home)
        h = os.environ.get("ABX_HOME")
        if h:
            return Path(h)
        return Path(os.path.expanduser("~")) / ".abx"

    def uses_signing(self) -> bool:
        return bool(self.access_key_id and self.secret_access_key)
