#!/usr/bin/env python3
"""The servers of the e2e tests' private "internet" (tests/e2e/network/internet.sh).

Stdlib only. Each subcommand is one long-running server bound to one address; internet.sh starts
them inside the test's network namespace and kills them on `down`. Every server appends one line
per event to its log file and flushes it at once, so a test can assert right after a request that
it arrived -- or that a request the sandbox's egress rules denied never did.

  http   --bind IP [--port 80]  --log FILE            HTTP/1.1, any method, any path
  https  --bind IP [--port 443] --log FILE --cert --key   the same over TLS, SNI logged
  echo   --bind IP [--port 7]   --log FILE            TCP (and UDP) echo
  dns    --bind IP [--port 53]  --log FILE --zone FILE    A/AAAA/CNAME over UDP and TCP
  probe  --http IP... --https IP... --echo IP... --dns IP [--cafile F] [--timeout S] [--pids F]
         waits until every listed server answers (internet.sh runs it inside the namespace)
  query  SERVER NAME [--type A|AAAA|CNAME|..] [--tcp]   one DNS query, for tests: prints
         `rcode=<NAME>` and one `<TYPE> <value>` line per answer; exit 0 NOERROR, 3 NXDOMAIN

HTTP(S) answers every request with 200 and the body `host=<label> hosthdr=<Host header>\n`
(label: the last octet of --bind unless --label is given), so a test can tell which server
answered and what Host it was sent.

Log lines (fields separated by single spaces):
  http-<ip>.log   `<peer> connect` for each TCP connection, then `<peer> <request line>` for
                  each request on it (so an empty log: nothing connected at all)
  https-<ip>.log  `<peer> connect`, `<peer> sni=<SNI or -> handshake` after the TLS handshake
                  (`<peer> handshake-failed <why>` when it fails), then
                  `<peer> sni=<SNI or -> <request line>` for each request
  (both)          after a request line, `<peer> hdr <Name>=<value>` for each Authorization or
                  X-Test-* header it carried, as sent (the transform e2e reads what abxd's egress
                  proxy injected; the response never echoes them)
  echo-<ip>.log   `<peer> tcp connect` / `<peer> udp <n> bytes`
  dns.log         `<qname> <qtype> <udp|tcp> <peer> <rcode>`  (qname lowercased, no final dot;
                  `- -` and FORMERR/DROPPED for a malformed query)

Zone file (re-read whenever it changes, so a test may edit it while the server runs):
  # comment
  web.abx.test 198.18.5.10          an A record (several lines: several records)
  name A 198.18.5.10                the same, with the type spelled out
  name AAAA 2001:db8::1             an AAAA record
  cname.abx.test CNAME web.abx.test a CNAME (chased within the zone in answers)
  *.wild.abx.test 198.18.5.10       a wildcard: any name with one or more labels before
                                    .wild.abx.test, unless the name itself is in the zone
Names not in the zone get NXDOMAIN; names in it without a record of the asked type get an empty
NOERROR answer (NODATA).
"""

import argparse
import http.server
import ipaddress
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time


# --- logging ---------------------------------------------------------------------------------

class LineLog:
    """Appends lines to a file, flushed one by one, from any thread.

    O_APPEND: internet.sh truncates the logs after its readiness probes, and the next line then
    lands at the start of the emptied file."""

    def __init__(self, path):
        self._f = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
        self._lock = threading.Lock()

    def line(self, text):
        text = text.replace("\n", "\\n").replace("\r", "\\r")
        with self._lock:
            self._f.write(text + "\n")
            self._f.flush()


def peer_str(addr):
    return "%s:%d" % (addr[0], addr[1])


# --- HTTP and HTTPS --------------------------------------------------------------------------

class Handler(http.server.BaseHTTPRequestHandler):
    """Answers every method and path with `host=<label> hosthdr=<Host>`; logs the request line."""

    protocol_version = "HTTP/1.1"
    server_version = "abx-inet"
    sys_version = ""

    def log_request(self, code="-", size="-"):
        pass  # logged in _answer, with the SNI for HTTPS

    def log_message(self, fmt, *args):
        pass  # no stderr noise; parse errors are still answered by the base class

    def _answer(self):
        srv = self.server
        sni = ""
        if srv.tls:
            sni = "sni=%s " % (getattr(self.connection, "abx_sni", None) or "-")
        srv.log.line("%s %s%s" % (peer_str(self.client_address), sni, self.requestline))
        for name, value in self.headers.items():
            if name.lower() == "authorization" or name.lower().startswith("x-test-"):
                srv.log.line("%s hdr %s=%s" % (peer_str(self.client_address), name, value))
        # Drain a request body, so keep-alive connections stay in step.
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        body = ("host=%s hosthdr=%s\n" % (srv.label, self.headers.get("Host", "-"))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _answer

    def do_CONNECT(self):
        # A proxy request must not be mistaken for a reachable upstream: answer it like the rest.
        self._answer()


class HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, bind, port, label, log, tls_ctx=None):
        self.label = label
        self.log = log
        self.tls = tls_ctx
        super().__init__((bind, port), Handler)

    def server_bind(self):
        # Not http.server's: that one calls socket.getfqdn(), a reverse lookup through the
        # system resolver, which is unreachable in the namespace (a 10 s stall at start) and must
        # not be asked anyway.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address):
        # TLS handshake here, in the connection's own thread: a client that connects and never
        # says hello holds up only itself, not the accept loop.
        self.log.line("%s connect" % peer_str(client_address))
        if self.tls is not None:
            request.settimeout(30)
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as e:
                self.log.line("%s handshake-failed %s" % (peer_str(client_address),
                                                          type(e).__name__))
                return
            self.log.line("%s sni=%s handshake" % (peer_str(client_address),
                                                   getattr(request, "abx_sni", None) or "-"))
        try:
            super().finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass
        finally:
            if self.tls is not None:
                try:
                    request.close()
                except OSError:
                    pass

    def handle_error(self, request, client_address):
        pass  # a client that goes away mid-request is not the server's failure


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def on_sni(sslsock, server_name, _ctx):
        # Called during the handshake (also with None when the client sent no SNI); kept on the
        # socket for the request log lines.
        sslsock.abx_sni = server_name
        return None

    ctx.sni_callback = on_sni
    return ctx


def default_label(bind):
    return bind.rsplit(".", 1)[-1] if "." in bind else bind


def run_http(args, tls=False):
    log = LineLog(args.log)
    ctx = tls_context(args.cert, args.key) if tls else None
    srv = HTTPServer(args.bind, args.port, args.label or default_label(args.bind), log, ctx)
    srv.serve_forever()


# --- echo ------------------------------------------------------------------------------------

class EchoTCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def run_echo(args):
    log = LineLog(args.log)

    class TCPHandler(socketserver.BaseRequestHandler):
        def handle(self):
            log.line("%s tcp connect" % peer_str(self.client_address))
            self.request.settimeout(60)
            try:
                while True:
                    data = self.request.recv(65536)
                    if not data:
                        break
                    self.request.sendall(data)
            except OSError:
                pass

    tcp = EchoTCP((args.bind, args.port), TCPHandler)
    # UDP echo on the same port: "other traffic to the address" is not only TCP.
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    udp.bind((args.bind, args.port))

    def udp_loop():
        while True:
            data, peer = udp.recvfrom(65536)
            log.line("%s udp %d bytes" % (peer_str(peer), len(data)))
            try:
                udp.sendto(data, peer)
            except OSError:
                pass

    threading.Thread(target=udp_loop, daemon=True).start()
    tcp.serve_forever()


# --- DNS -------------------------------------------------------------------------------------
# Hand-written RFC 1035 encoding: one question per query; answers with name compression pointing
# at the question (offset 12) for the first owner name, full names otherwise.

QTYPE = {1: "A", 5: "CNAME", 28: "AAAA", 2: "NS", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT",
         33: "SRV", 65: "HTTPS", 255: "ANY"}
T_A, T_CNAME, T_AAAA = 1, 5, 28
RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
               -1: "DROPPED"}  # -1: not answered (too short, or a response)


class Zone:
    """The zone file, re-read when its mtime or size changes."""

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self._records = {}  # name -> list of (type, value)
        self._lock = threading.Lock()

    def _load(self):
        st = os.stat(self.path)
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        records = {}
        with open(self.path, encoding="utf-8") as f:
            for raw in f:
                parts = raw.split("#", 1)[0].split()
                if not parts:
                    continue
                if len(parts) == 2:
                    name, rtype, value = parts[0], "A", parts[1]
                elif len(parts) == 3:
                    name, rtype, value = parts[0], parts[1].upper(), parts[2]
                else:
                    continue
                name = name.lower().rstrip(".")
                if rtype == "A":
                    rec = (T_A, socket.inet_aton(str(ipaddress.IPv4Address(value))))
                elif rtype == "AAAA":
                    rec = (T_AAAA, ipaddress.IPv6Address(value).packed)
                elif rtype == "CNAME":
                    rec = (T_CNAME, value.lower().rstrip("."))
                else:
                    continue
                records.setdefault(name, []).append(rec)
        self._records, self._stamp = records, stamp

    def lookup(self, name):
        """The records of `name` (exact, else the longest matching wildcard), or None."""
        with self._lock:
            try:
                self._load()
            except (OSError, ValueError) as e:
                print("zone: %s" % e, file=sys.stderr)
            recs = self._records
        if name in recs:
            return recs[name]
        labels = name.split(".")
        for i in range(1, len(labels)):
            wild = "*." + ".".join(labels[i:])
            if wild in recs:
                return recs[wild]
        return None


def encode_name(name):
    out = b""
    for label in name.split("."):
        if label:
            b = label.encode("ascii", "replace")[:63]
            out += bytes([len(b)]) + b
    return out + b"\x00"


def decode_name(msg, off):
    """(name, offset after the name); follows compression pointers."""
    labels, jumped, end, hops = [], False, off, 0
    while True:
        if off >= len(msg):
            raise ValueError("name runs past the message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg) or hops > 32:
                raise ValueError("bad pointer")
            ptr = ((n & 0x3F) << 8) | msg[off + 1]
            if not jumped:
                end = off + 2
            jumped, off, hops = True, ptr, hops + 1
            continue
        if n & 0xC0:
            raise ValueError("bad label")
        off += 1
        if n == 0:
            break
        labels.append(msg[off:off + n].decode("ascii", "replace"))
        off += n
    return ".".join(labels), (end if jumped else off)


def rr(owner, rtype, data, ttl=60):
    return owner + struct.pack("!HHIH", rtype, 1, ttl, len(data)) + data


def answer_dns(query, zone):
    """(response bytes or None to drop, qname, qtype name, rcode)."""
    if len(query) < 12:
        return None, "-", "-", -1
    qid, flags, qd, _an, _ns, _ar = struct.unpack("!HHHHHH", query[:12])
    if flags & 0x8000:
        return None, "-", "-", -1  # a response, not a query
    rd = flags & 0x0100
    opcode = (flags >> 11) & 0xF

    def reply(rcode, question=b"", answers=()):
        hflags = 0x8000 | (opcode << 11) | 0x0400 | rd | 0x0080 | rcode  # QR AA RD(copy) RA
        hdr = struct.pack("!HHHHHH", qid, hflags, 1 if question else 0, len(answers), 0, 0)
        return hdr + question + b"".join(answers)

    if opcode != 0:
        return reply(4), "-", "-", 4
    if qd != 1:
        return reply(1), "-", "-", 1
    try:
        qname, off = decode_name(query, 12)
        if off + 4 > len(query):
            raise ValueError("short question")
        qtype, qclass = struct.unpack("!HH", query[off:off + 4])
    except ValueError:
        return reply(1), "-", "-", 1
    question = query[12:off + 4]  # echoed as sent (keeps the client's 0x20 case)
    name = qname.lower().rstrip(".")
    tname = QTYPE.get(qtype, str(qtype))
    if qclass not in (1, 255):
        return reply(5, question), name, tname, 5  # REFUSED

    answers, owner, seen = [], b"\xc0\x0c", set()
    cur = name
    recs = zone.lookup(cur)
    if recs is None:
        return reply(3, question), name, tname, 3
    # Chase CNAMEs within the zone (bounded), then give the records of the asked type.
    while recs is not None and cur not in seen:
        seen.add(cur)
        cnames = [v for t, v in recs if t == T_CNAME]
        if cnames and qtype != T_CNAME:
            target = cnames[0]
            answers.append(rr(owner, T_CNAME, encode_name(target)))
            owner, cur = encode_name(target), target
            recs = zone.lookup(cur)
            continue
        for t, v in recs:
            if t == qtype or qtype == 255:
                answers.append(rr(owner, t, encode_name(v) if t == T_CNAME else v))
        break
    return reply(0, question, answers), name, tname, 0


def run_dns(args):
    log = LineLog(args.log)
    zone = Zone(args.zone)

    def handle(query, proto, peer):
        resp, qname, qtype, rcode = answer_dns(query, zone)
        log.line("%s %s %s %s %s" % (qname, qtype, proto, peer_str(peer),
                                     RCODE_NAMES.get(rcode, str(rcode))))
        return resp

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    udp.bind((args.bind, args.port))

    def udp_loop():
        while True:
            data, peer = udp.recvfrom(4096)
            resp = handle(data, "udp", peer)
            if resp is not None:
                if len(resp) > 512:
                    # No EDNS: the header with TC set and the question only; the client retries
                    # over TCP.
                    qlen = decode_name(resp, 12)[1] + 4
                    flags = struct.unpack("!H", resp[2:4])[0] | 0x0200
                    resp = resp[:2] + struct.pack("!HHHHH", flags, 1, 0, 0, 0) + resp[12:qlen]
                udp.sendto(resp, peer)

    class TCPHandler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.settimeout(30)
            f = self.request.makefile("rb")
            try:
                while True:
                    hdr = f.read(2)
                    if len(hdr) < 2:
                        return
                    (n,) = struct.unpack("!H", hdr)
                    query = f.read(n)
                    if len(query) < n:
                        return
                    resp = handle(query, "tcp", self.client_address)
                    if resp is None:
                        return
                    self.request.sendall(struct.pack("!H", len(resp)) + resp)
            except OSError:
                pass

    tcp = EchoTCP((args.bind, args.port), TCPHandler)
    threading.Thread(target=udp_loop, daemon=True).start()
    tcp.serve_forever()


# --- DNS client (for probes and tests) -------------------------------------------------------

def dns_query(server, name, qtype=T_A, port=53, tcp=False, timeout=2.0):
    """(rcode, [answer strings]) for one query; answers are `A 1.2.3.4` / `CNAME name`."""
    qid = int.from_bytes(os.urandom(2), "big")
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + \
        struct.pack("!HH", qtype, 1)
    if tcp:
        with socket.create_connection((server, port), timeout=timeout) as s:
            s.sendall(struct.pack("!H", len(q)) + q)
            f = s.makefile("rb")
            (n,) = struct.unpack("!H", f.read(2))
            resp = f.read(n)
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(q, (server, port))
            while True:
                resp, _ = s.recvfrom(4096)
                if resp[:2] == q[:2]:
                    break
    rid, flags, _qd, an, _ns, _ar = struct.unpack("!HHHHHH", resp[:12])
    if rid != qid:
        raise ValueError("id mismatch")
    _, off = decode_name(resp, 12)
    off += 4
    out = []
    for _ in range(an):
        _owner, off = decode_name(resp, off)
        t, _c, _ttl, ln = struct.unpack("!HHIH", resp[off:off + 10])
        off += 10
        data = resp[off:off + ln]
        if t == T_A:
            out.append("A " + socket.inet_ntoa(data))
        elif t == T_AAAA:
            out.append("AAAA " + str(ipaddress.IPv6Address(data)))
        elif t == T_CNAME:
            out.append("CNAME " + decode_name(resp, off)[0])
        else:
            out.append("%s ?" % QTYPE.get(t, t))
        off += ln
    return flags & 0xF, out


def run_query(args):
    """`query SERVER NAME [--type A] [--tcp]`: prints `rcode=<NAME>` then one answer per line;
    exit 0 on NOERROR, 3 on NXDOMAIN, 1 otherwise (no answer, timeout)."""
    qtype = {v: k for k, v in QTYPE.items()}.get(args.type.upper())
    if qtype is None:
        qtype = int(args.type)
    try:
        rcode, answers = dns_query(args.server, args.name, qtype, args.port, args.tcp,
                                   args.timeout)
    except (OSError, ValueError, struct.error) as e:
        print("error=%s" % type(e).__name__)
        return 1
    print("rcode=%s" % RCODE_NAMES.get(rcode, rcode))
    for a in answers:
        print(a)
    return 0 if rcode == 0 else (3 if rcode == 3 else 1)


# --- readiness probe -------------------------------------------------------------------------

def probe_once(args):
    """None when every server answered, else what did not."""
    for ip in args.http:
        try:
            with socket.create_connection((ip, 80), timeout=1) as s:
                s.sendall(b"GET /__probe HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
                if not s.recv(64).startswith(b"HTTP/1.1 200"):
                    return "http " + ip
        except OSError:
            return "http " + ip
    if args.https:
        ctx = ssl.create_default_context(cafile=args.cafile)
        for ip in args.https:
            try:
                with socket.create_connection((ip, 443), timeout=1) as raw:
                    with ctx.wrap_socket(raw, server_hostname="web.abx.test") as s:
                        s.sendall(b"GET /__probe HTTP/1.1\r\nHost: web.abx.test\r\n"
                                  b"Connection: close\r\n\r\n")
                        if not s.recv(64).startswith(b"HTTP/1.1 200"):
                            return "https " + ip
            except (OSError, ssl.SSLError):
                return "https " + ip
    for ip in args.echo:
        try:
            with socket.create_connection((ip, 7), timeout=1) as s:
                s.sendall(b"probe")
                if s.recv(16) != b"probe":
                    return "echo " + ip
        except OSError:
            return "echo " + ip
    if args.dns:
        for tcp in (False, True):
            try:
                if dns_query(args.dns, "probe.invalid", tcp=tcp, timeout=1)[0] != 3:
                    return "dns " + args.dns
            except (OSError, ValueError, struct.error):
                return "dns " + args.dns
    return None


def dead_pid(pids_file):
    """A pid listed in pids_file that is gone or a zombie (a server that exited), else None."""
    if not pids_file:
        return None
    with open(pids_file) as f:
        for pid in f.read().split():
            try:
                with open("/proc/%s/stat" % pid) as st:
                    if st.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return pid
            except OSError:
                return pid
    return None


def run_probe(args):
    deadline = time.monotonic() + args.timeout
    while True:
        missing = probe_once(args)
        if missing is None:
            return 0
        dead = dead_pid(args.pids)
        if dead is not None:
            print("server pid %s exited (waiting for %s)" % (dead, missing), file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print("not answering: %s" % missing, file=sys.stderr)
            return 1
        time.sleep(0.1)


# --- command line ----------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def server(name, port):
        s = sub.add_parser(name)
        s.add_argument("--bind", required=True)
        s.add_argument("--port", type=int, default=port)
        s.add_argument("--log", required=True)
        return s

    for name, port in (("http", 80), ("https", 443)):
        s = server(name, port)
        s.add_argument("--label", help="names the host in the body (default: last octet)")
        if name == "https":
            s.add_argument("--cert", required=True)
            s.add_argument("--key", required=True)
    server("echo", 7)
    server("dns", 53).add_argument("--zone", required=True)

    q = sub.add_parser("query", help="one DNS query, for tests")
    q.add_argument("server")
    q.add_argument("name")
    q.add_argument("--type", default="A")
    q.add_argument("--port", type=int, default=53)
    q.add_argument("--tcp", action="store_true")
    q.add_argument("--timeout", type=float, default=2.0)

    pr = sub.add_parser("probe", help="wait until the servers answer")
    pr.add_argument("--http", action="append", default=[])
    pr.add_argument("--https", action="append", default=[])
    pr.add_argument("--echo", action="append", default=[])
    pr.add_argument("--dns")
    pr.add_argument("--cafile")
    pr.add_argument("--timeout", type=float, default=15.0)
    pr.add_argument("--pids", help="file of server pids: fail at once when one has exited")

    args = p.parse_args()
    if args.cmd == "http":
        run_http(args)
    elif args.cmd == "https":
        run_http(args, tls=True)
    elif args.cmd == "echo":
        run_echo(args)
    elif args.cmd == "dns":
        run_dns(args)
    elif args.cmd == "query":
        return run_query(args)
    elif args.cmd == "probe":
        return run_probe(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
