#!/usr/bin/env python3
"""Network benchmark probes (bench/network.sh). Standard library only; runs on the host, in a
test network namespace and inside sandboxes (python3 of the base image).

  net_probe.py serve HOST PORT          blast server: every connection gets BYTES bytes
                                        (first line from the client: the byte count), then close
  net_probe.py throughput HOST PORT MB  one download of MB MiB; prints MiB/s
  net_probe.py connect HOST PORT N      N sequential TCP connect+close; prints the median
                                        and p90 connect time in microseconds
"""
import socket
import statistics
import sys
import threading
import time


def serve(host, port):
    chunk = memoryview(b"\0" * (1 << 20))
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(256)

    def handle(c):
        with c:
            f = c.makefile("rb")
            line = f.readline(64)
            try:
                left = int(line.strip() or b"0")
            except ValueError:
                return
            while left > 0:
                n = min(left, len(chunk))
                c.sendall(chunk[:n])
                left -= n

    while True:
        c, _ = ls.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def throughput(host, port, mib):
    want = mib << 20
    s = socket.create_connection((host, port), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    t0 = time.perf_counter()
    s.sendall(b"%d\n" % want)
    got = 0
    buf = bytearray(1 << 20)
    while got < want:
        n = s.recv_into(buf)
        if n == 0:
            break
        got += n
    dt = time.perf_counter() - t0
    s.close()
    if got != want:
        sys.exit("short read: %d of %d" % (got, want))
    print("%.1f" % (got / dt / (1 << 20)))


def connect(host, port, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        s = socket.create_connection((host, port), timeout=5)
        times.append((time.perf_counter() - t0) * 1e6)
        s.sendall(b"0\n")
        s.close()
    times.sort()
    print("%.0f %.0f" % (statistics.median(times), times[int(len(times) * 0.9)]))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif cmd == "throughput":
        throughput(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "connect":
        connect(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
