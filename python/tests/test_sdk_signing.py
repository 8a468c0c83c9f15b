"""abx.sdk.signing against the vectors src/auth/signing_test.cc checks the C++ signer with."""

import hashlib
import hmac

import pytest

from abx.sdk import signing


def test_get_vanilla_canonical_request_text():
    creq = signing.canonical_request(
        "GET", "/", [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")],
        ["host", "x-amz-date"], signing.sha256_hex(b""))
    assert creq == ("GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                    "host;x-amz-date\n"
                    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    assert signing.sha256_hex(creq.encode()) == \
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"


def test_uri_and_query_rules():
    cu, cq = signing.canonical_uri, signing.canonical_query
    assert cu("") == "/"
    assert cu("/example space/") == "/example%20space/"
    assert cu("/example%20space/") == "/example%20space/"
    assert cu("/a%2fb") == "/a%2Fb"
    assert cu("/a%2fb") != cu("/a/b")
    assert cu("/a/../b//c") == "/a/../b//c"
    assert cu("/a+b") == "/a%2Bb"
    for bad in ("/%zz", "/%2", "relative"):
        with pytest.raises(ValueError):
            cu(bad)
    assert cq("b=2&a=1&a=0") == "a=0&a=1&b=2"
    assert cq("a=x+y") == "a=x%20y"
    assert cq("a=x%2By") == "a=x%2By"
    assert cq("a&&b=") == "a=&b="
    assert cq("k=%7e%2f") == "k=~%2F"
    with pytest.raises(ValueError):
        cq("a=%G0")


def test_dates():
    assert signing.format_date(1440938160) == "20150830T123600Z"


def test_sign_matches_an_independent_computation():
    # Fixed date and nonce: the Authorization is a pure function of the request.
    headers = [("Host", "127.0.0.1:3000"), ("Content-Type", "application/json")]
    body = b'{"templateID":"base"}'
    added = signing.sign("POST", "/sandboxes?x=1", headers, body, "ABXTESTKEY0000000001",
                         "a" * 64, now=1_800_000_000, nonce="0" * 32)
    body_hash = hashlib.sha256(body).hexdigest()
    assert added["x-abx-date"] == "20270115T080000Z"
    assert added["x-abx-content-sha256"] == body_hash
    creq = ("POST\n/sandboxes\nx=1\n"
            "content-type:application/json\nhost:127.0.0.1:3000\n"
            f"x-abx-content-sha256:{body_hash}\nx-abx-date:20270115T080000Z\n"
            f"x-abx-nonce:{'0' * 32}\n\n"
            "content-type;host;x-abx-content-sha256;x-abx-date;x-abx-nonce\n" + body_hash)
    sts = "ABX-HMAC-SHA256\n" + hashlib.sha256(creq.encode()).hexdigest()
    mac = hmac.new(b"a" * 64, sts.encode(), hashlib.sha256).hexdigest()
    assert added["authorization"] == (
        "ABX-HMAC-SHA256 Credential=ABXTESTKEY0000000001,"
        "SignedHeaders=content-type;host;x-abx-content-sha256;x-abx-date;x-abx-nonce,"
        f"Signature={mac}")


def test_sign_refuses_what_it_cannot_sign():
    with pytest.raises(ValueError):
        signing.sign("GET", "/", [], b"", "AK", "SK")  # no Host
    with pytest.raises(ValueError):
        signing.sign("GET", "/", [("Host", "h"), ("X-Abx-Date", "x")], b"", "AK", "SK")
    with pytest.raises(ValueError):
        signing.sign("GET", "/", [("Host", "h")], b"", "", "SK")
