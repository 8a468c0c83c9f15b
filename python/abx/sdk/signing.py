"""AK/SK request signing (ABX-HMAC-SHA256), byte for byte what ``src/auth/signing.cc`` does.

::

    CanonicalRequest = Method "\\n" CanonicalURI "\\n" CanonicalQuery "\\n"
                       CanonicalHeaders "\\n" SignedHeaders "\\n" hex(SHA256(body))
    StringToSign     = "ABX-HMAC-SHA256\\n" hex(SHA256(CanonicalRequest))
    Signature        = hex(HMAC-SHA256(secret, StringToSign))
    Authorization: ABX-HMAC-SHA256 Credential=<ak>,SignedHeaders=<a;b;c>,Signature=<hex>

with ``x-abx-date`` (``20260102T030405Z``), ``x-abx-nonce`` (32 lower-case hex) and
``x-abx-content-sha256``. Signed: ``host``, ``content-type`` when present and every
``x-abx-*`` header. The canonical URI and query are AWS SigV4's (see abx/auth/signing.h).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import quote_from_bytes, unquote_to_bytes

ALGORITHM = "ABX-HMAC-SHA256"
DATE_HEADER = "x-abx-date"
NONCE_HEADER = "x-abx-nonce"
CONTENT_HASH_HEADER = "x-abx-content-sha256"

_HEX = set(b"0123456789abcdefABCDEF")


def _decode(s: str, plus_is_space: bool) -> bytes:
    b = s.encode("utf-8")
    # Strict like the C++ decoder: a bad or truncated escape is an error.
    i = b.find(b"%")
    while i != -1:
        if i + 2 >= len(b) or b[i + 1] not in _HEX or b[i + 2] not in _HEX:
            raise ValueError(f"bad percent-escape in {s!r}")
        i = b.find(b"%", i + 3)
    if plus_is_space:
        b = b.replace(b"+", b" ")
    return unquote_to_bytes(b)


def _encode(b: bytes) -> str:
    # Unreserved A-Za-z0-9-._~ kept; everything else %XX, upper-case.
    return quote_from_bytes(b, safe="-._~")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_uri(path: str) -> str:
    if not path:
        return "/"
    if not path.startswith("/"):
        raise ValueError("request path must start with '/'")
    return "/".join(_encode(_decode(seg, False)) for seg in path.split("/"))


def canonical_query(query: str) -> str:
    pairs: List[Tuple[str, str]] = []
    for part in query.split("&"):
        if not part:
            continue
        k, eq, v = part.partition("=")
        pairs.append((_encode(_decode(k, True)), _encode(_decode(v, True)) if eq else ""))
    pairs.sort()
    return "&".join(f"{k}={v}" for k, v in pairs)


def _normalise(v: str) -> str:
    # Trim, and collapse inner runs of spaces and tabs to one space (SigV4's rule).
    out = []
    space = False
    for c in v:
        if c in " \t":
            space = True
            continue
        if space and out:
            out.append(" ")
        space = False
        out.append(c)
    return "".join(out)


def canonical_request(method: str, target: str, headers: Sequence[Tuple[str, str]],
                      signed_headers: Sequence[str], payload_sha256_hex: str) -> str:
    path, _, query = target.partition("?")
    out = f"{method}\n{canonical_uri(path)}\n{canonical_query(query)}\n"
    for name in signed_headers:
        values = [v for (n, v) in headers if n.lower() == name]
        if not values:
            raise ValueError(f"signed header {name!r} is missing")
        for v in values:
            if "\r" in v or "\n" in v:
                raise ValueError(f"header {name!r} contains a line break")
        out += name + ":" + ",".join(_normalise(v) for v in values) + "\n"
    out += "\n" + ";".join(signed_headers) + "\n" + payload_sha256_hex
    return out


def string_to_sign(creq: str) -> str:
    return ALGORITHM + "\n" + sha256_hex(creq.encode("utf-8"))


def format_date(unix_seconds: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(unix_seconds))


def sign(method: str, target: str, headers: Sequence[Tuple[str, str]], body: bytes,
         access_key_id: str, secret: str, *, now: Optional[int] = None,
         nonce: Optional[str] = None) -> Dict[str, str]:
    """Returns the headers to add (x-abx-date, x-abx-nonce, x-abx-content-sha256,
    authorization). ``headers`` must hold exactly one Host and none of those."""
    if not access_key_id or not secret:
        raise ValueError("signing needs an access key id and a secret")
    names = [n.lower() for n, _ in headers]
    if names.count("host") != 1:
        raise ValueError("request needs one Host header")
    for h in (DATE_HEADER, NONCE_HEADER, CONTENT_HASH_HEADER, "authorization"):
        if h in names:
            raise ValueError(f"request already carries {h}")
    body_hash = sha256_hex(body)
    added = {
        DATE_HEADER: format_date(int(time.time()) if now is None else now),
        NONCE_HEADER: nonce or secrets.token_hex(16),
        CONTENT_HASH_HEADER: body_hash,
    }
    full = list(headers) + list(added.items())
    signed = sorted({"host"} | {n.lower() for n, _ in full
                                if n.lower().startswith("x-abx-") or n.lower() == "content-type"})
    creq = canonical_request(method, target, full, signed, body_hash)
    mac = hmac.new(secret.encode("utf-8"), string_to_sign(creq).encode("utf-8"),
                   hashlib.sha256).hexdigest()
    added["authorization"] = (f"{ALGORITHM} Credential={access_key_id},"
                              f"SignedHeaders={';'.join(signed)},Signature={mac}")
    return added
