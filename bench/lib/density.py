#!/usr/bin/python3
"""Sandbox density and create rate (issue 15), the driver of bench/density.sh. Not a test.

One run, in this order, each phase with the same 8 concurrent clients:
  1. peers: `runc run -d` and `crun run -d` of an equivalent OCI bundle (the base image's layers
     under a fresh overlay per container, the base template's limits: 512 MiB, 1024 pids, one
     CPU; pid/net/ipc/uts/mount namespaces; PID 1 `sleep infinity`), N creates each; then runc
     is filled to L live containers and its memory measured like abx's;
  2. abx: N `POST /sandboxes {"templateID":"base"}` (201 = envd answers inside the sandbox),
     then filled to L live sandboxes, left idle, and the memory measured:
       host side   growth of the memory cgroup abxd runs in (made by this script: abxd's RSS,
                   the kernel memory abxd's work allocates — netns, veth, nft, mounts, loop
                   devices' setup — and page cache it wrote), split into RSS, kernel and cache;
       in-sandbox  the sandboxes' own memory cgroups (memory.usage_in_bytes, v1 or v2);
       machine     MemTotal - MemAvailable growth (includes everyone else on the machine).
Every sandbox and container is deleted at the end (also on failure).
"""
import argparse
import concurrent.futures
import ctypes
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows import row  # noqa: E402

MIB = 1 << 20


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))]


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    return out


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kv(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                out[k] = int(v)
    except (OSError, ValueError):
        pass
    return out


def proc_status(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.strip()
    pss = None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"rss": int(st["VmRSS"].split()[0]) * 1024, "pss": pss, "threads": int(st["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Memcg:
    """A memory cgroup this script makes under its own one (v1 memory hierarchy or v2), for
    abxd or the peer's runtime invocations, so their memory is measured apart from the rest of
    the machine."""

    def __init__(self, name):
        self.v2 = False
        own = None
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctrls.split(","):
                    own = ("/sys/fs/cgroup/memory", path)
                elif ctrls == "" and own is None:
                    own = ("/sys/fs/cgroup", path)
                    self.v2 = True
        if own is None:
            raise RuntimeError("no memory cgroup")
        if self.v2:
            # v2: a process may not sit in an inner node; the caller's own group is one.
            raise RuntimeError("cgroup v2 hosts: not supported by this bench yet")
        self.dir = os.path.join(own[0] + own[1], name)
        self.parent = own[0] + own[1]
        os.makedirs(self.dir, exist_ok=True)

    def enter(self, pid):
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def leave(self, pid):
        with open(os.path.join(self.parent, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def sample(self):
        st = read_kv(os.path.join(self.dir, "memory.stat"))
        return {"usage": read_int(os.path.join(self.dir, "memory.usage_in_bytes")) or 0,
                "kmem": read_int(os.path.join(self.dir, "memory.kmem.usage_in_bytes")) or 0,
                "rss": st.get("total_rss", 0), "cache": st.get("total_cache", 0)}

    def remove(self):
        # abxd's watchdog process may outlive abxd by a few seconds.
        for _ in range(300):
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


def sandbox_memcg_usage(ids):
    """Sum of memory.usage_in_bytes (v1) / memory.current (v2) of abx sandboxes, by id."""
    total, found = 0, 0
    for sid in ids:
        for path in (f"/sys/fs/cgroup/memory/abx/{sid}/memory.usage_in_bytes",
                     f"/sys/fs/cgroup/abx/{sid}/memory.current"):
            v = read_int(path)
            if v is not None:
                total += v
                found += 1
                break
    return total, found


def run_clients(n, clients, create_one):
    """n calls of create_one(i) -> (ok, value) from `clients` threads; returns (wall s, [ms],
    [values of successes], [errors])."""
    lat, vals, errs = [], [], []
    lock = threading.Lock()
    next_i = [0]

    def worker():
        while True:
            with lock:
                i = next_i[0]
                if i >= n or len(errs) > max(10, n // 10):
                    return
                next_i[0] += 1
            t0 = time.perf_counter()
            ok, v = create_one(i)
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                if ok:
                    lat.append(ms)
                    vals.append(v)
                else:
                    errs.append(v)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, lat, vals, errs


# --- abx -----------------------------------------------------------------------------------------

class Abxd:
    def __init__(self, binary, home, store, memcg, extra_args):
        self.home = home
        self.out = open(os.path.join(home, "abxd.out"), "w+")
        self.log = open(os.path.join(home, "abxd.log"), "w")
        # Enter the measured cgroup before exec, so everything abxd does is charged there.
        cg = os.path.join(memcg.dir, "cgroup.procs")
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", f'echo $$ > {cg} && exec "$@"', "sh", binary, "--home",
             os.path.join(home, "home"), "--listen", "127.0.0.1:0", "--image-store", store,
             "--dns-upstream", "127.0.0.1:9", "--kill-sandboxes", "--log-level", "warn",
             *extra_args],
            stdout=self.out, stderr=self.log, start_new_session=True)
        for _ in range(600):
            self.out.seek(0)
            m = re.search(r"^listening on 127\.0\.0\.1:(\d+)$", self.out.read(), re.M)
            if m:
                self.port = int(m.group(1))
                with open(os.path.join(home, "home", "api_key")) as f:
                    self.key = f.read().strip()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("abxd did not start: " + open(self.log.name).read()[-500:])

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def abx_creator(abxd):
    local = threading.local()

    def call(method, path, body=None):
        if not hasattr(local, "c"):
            local.c = abxd.conn()
        h = {"X-API-KEY": abxd.key}
        if body is not None:
            h["Content-Type"] = "application/json"
        try:
            local.c.request(method, path, body=body, headers=h)
            r = local.c.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            local.c = abxd.conn()
            return 0, str(e).encode()

    def create(_i):
        st, body = call("POST", "/sandboxes", '{"templateID":"base","timeout":3600}')
        if st != 201:
            return False, f"{st} {body[:200].decode(errors='replace')}"
        return True, json.loads(body)["sandboxID"]

    def delete(sid):
        st, body = call("DELETE", f"/sandboxes/{sid}")
        return st in (200, 204, 404), f"{st} {body[:200].decode(errors='replace')}"

    return create, delete


# --- the OCI peer --------------------------------------------------------------------------------

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
MNT_DETACH = 2


def base_layers(store):
    with open(os.path.join(store, "refs.json")) as f:
        digest = json.load(f)["refs"]["base"]
    with open(os.path.join(store, "blobs", *digest.split(":"))) as f:
        m = json.load(f)
    return [os.path.join(store, "layers", *l["digest"].split(":")) for l in m["layers"]]


class OciPeer:
    """`<runtime> run -d` of a bundle equivalent to a base sandbox; create() is what is timed:
    mkdir, overlay mount (mount(2) directly, as abxd does), config.json, `run -d` returning
    (the container's PID 1 has exec'd)."""

    def __init__(self, runtime, work, store, tag):
        self.rt = runtime
        self.work = os.path.join(work, runtime)
        self.state = os.path.join(self.work, "state")
        self.tag = tag
        os.makedirs(self.state)
        # overlayfs: the topmost layer comes first in lowerdir.
        self.lower = ":".join(reversed(base_layers(store)))
        spec_dir = os.path.join(self.work, "spec")
        os.makedirs(spec_dir)
        subprocess.run(["runc", "spec"], cwd=spec_dir, check=True)
        with open(os.path.join(spec_dir, "config.json")) as f:
            s = json.load(f)
        s["process"]["terminal"] = False
        s["process"]["args"] = ["/bin/sleep", "infinity"]
        s["root"]["readonly"] = False
        s["hostname"] = "sandbox"
        s["linux"]["resources"] = {
            "memory": {"limit": 512 * MIB}, "pids": {"limit": 1024},
            "cpu": {"quota": 100000, "period": 100000},
            "devices": s["linux"].get("resources", {}).get("devices", [])}
        self.spec = s
        self.ids = {}
        self.lock = threading.Lock()

    def cgroup_parent(self):
        return f"abx-bench-density-{self.tag}-{self.rt}"

    def create(self, i):
        cid = f"abx-bench-{self.tag}-{self.rt}-{i}"
        d = os.path.join(self.work, str(i))
        rootfs = os.path.join(d, "bundle", "rootfs")
        for sub in ("upper", "work"):
            os.makedirs(os.path.join(d, sub))
        os.makedirs(rootfs)
        opts = f"lowerdir={self.lower},upperdir={d}/upper,workdir={d}/work"
        if libc.mount(b"overlay", rootfs.encode(), b"overlay", 0, opts.encode()) != 0:
            return False, "mount overlay: " + os.strerror(ctypes.get_errno())
        spec = dict(self.spec)
        spec["root"] = {"path": rootfs, "readonly": False}
        spec["linux"] = dict(spec["linux"], cgroupsPath=f"/{self.cgroup_parent()}/{cid}")
        with open(os.path.join(d, "bundle", "config.json"), "w") as f:
            json.dump(spec, f)
        # The container's stdio is the runtime's: a file, never a pipe (the container would
        # hold it open and the wait for the runtime's exit would never end).
        err_path = os.path.join(d, "run.err")
        with open(err_path, "w") as err:
            r = subprocess.run([self.rt, "--root", self.state, "run", "-d", "--bundle",
                                os.path.join(d, "bundle"), cid], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=err)
        with self.lock:
            self.ids[cid] = d
        if r.returncode != 0:
            with open(err_path) as f:
                return False, f"{self.rt} run: {f.read().strip()[-200:]}"
        return True, cid

    def delete(self, cid):
        d = self.ids.get(cid)
        subprocess.run([self.rt, "--root", self.state, "delete", "--force", cid],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if d:
            libc.umount2(os.path.join(d, "bundle", "rootfs").encode(), MNT_DETACH)
            shutil.rmtree(d, ignore_errors=True)
        with self.lock:
            self.ids.pop(cid, None)
        return True, ""

    def memcg_usage(self):
        return read_int(f"/sys/fs/cgroup/memory/{self.cgroup_parent()}/memory.usage_in_bytes") or 0

    def cleanup(self):
        for cid in list(self.ids):
            self.delete(cid)
        for ctl in os.listdir("/sys/fs/cgroup"):
            p = os.path.join("/sys/fs/cgroup", ctl, self.cgroup_parent())
            if os.path.isdir(p):
                try:
                    os.rmdir(p)
                except OSError:
                    pass


# --- measuring -----------------------------------------------------------------------------------

def create_phase(name, n, clients, create):
    wall, lat, ids, errs = run_clients(n, clients, create)
    res = {"name": name, "n": n, "ok": len(ids), "fail": len(errs), "wall_s": wall,
           "rate": len(ids) / wall if wall > 0 else 0.0, "p50": pct(lat, 50), "p99": pct(lat, 99),
           "errors": errs[:3]}
    print(f"[bench] {name}: {len(ids)}/{n} in {wall:.1f}s ({res['rate']:.1f}/s), "
          f"p50 {res['p50']:.0f} ms, p99 {res['p99']:.0f} ms"
          + (f", {len(errs)} failed: {errs[0]}" if errs else ""), file=sys.stderr)
    return res, ids


def delete_all(ids, clients, delete):
    wall, _, _, errs = run_clients(len(ids), clients, lambda i: delete(ids[i]))
    return wall, errs


def machine_used():
    m = meminfo()
    return m["MemTotal"] - m["MemAvailable"], m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--abxd", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--creates", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--live", type=int, default=500)
    ap.add_argument("--settle", type=float, default=15)
    ap.add_argument("--peers", default="runc,crun")
    ap.add_argument("--peer-live", type=int, default=-1, help="runc containers held (default --live)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--tag", default="", help="names the cgroups it makes (default its pid)")
    ap.add_argument("--hold", type=float, default=0, help="seconds to keep them after measuring")
    ap.add_argument("--abxd-arg", action="append", default=[], help="extra abxd flag (repeatable)")
    args = ap.parse_args()
    if args.peer_live < 0:
        args.peer_live = args.live
    tag = args.tag or str(os.getpid())
    peers = [p for p in args.peers.split(",") if p and shutil.which(p)]
    report = {"clients": args.clients, "creates": args.creates, "live": args.live}
    cleanups = []
    try:
        # 1. peers
        report["peers"], report["unavailable"] = {}, {}
        for rt in peers:
            peer = OciPeer(rt, args.work, args.store, tag)
            cleanups.append(peer.cleanup)
            cg = Memcg(f"abx-bench-density-{tag}-{rt}-host")
            cleanups.append(cg.remove)
            cg.enter(os.getpid())  # this script's children (the runtime) are charged there
            try:
                ok, w = peer.create(-1)  # warm-up: page cache of the layers and the binaries
                if not ok:
                    print(f"[bench] peer {rt} unavailable: {w}", file=sys.stderr)
                    report["unavailable"][rt] = w
                    continue
                peer.delete(w)
                pr = {}
                used0, _ = machine_used()
                cg0 = cg.sample()
                pr["create"], ids = create_phase(f"{rt} run -d", args.creates, args.clients,
                                                 peer.create)
                live = args.peer_live if rt == "runc" else 0
                if live > len(ids):
                    more, extra = create_phase(f"{rt} fill to {live}", live - len(ids),
                                               args.clients, lambda i: peer.create(i + 100000))
                    ids += extra
                    pr["fill"] = more
                if live:
                    time.sleep(args.settle)
                    used1, _ = machine_used()
                    cg1 = cg.sample()
                    n = len(ids)
                    inside = peer.memcg_usage()
                    pr["mem"] = {"n": n, "host": (cg1["usage"] - cg0["usage"]) / n,
                                 "host_kmem": (cg1["kmem"] - cg0["kmem"]) / n,
                                 "host_cache": (cg1["cache"] - cg0["cache"]) / n,
                                 "inside": inside / n, "machine": (used1 - used0) / n}
                pr["delete_s"], _ = delete_all(ids, args.clients, peer.delete)
                report["peers"][rt] = pr
            finally:
                cg.leave(os.getpid())
            peer.cleanup()

        # 2. abx
        cg = Memcg(f"abx-bench-density-{tag}-abxd")
        cleanups.append(cg.remove)
        home = os.path.join(args.work, "abx")
        os.makedirs(os.path.join(home, "home"))
        abxd = Abxd(args.abxd, home, args.store, cg, args.abxd_arg)
        cleanups.insert(0, abxd.stop)
        create, delete = abx_creator(abxd)
        ok, w = create(-1)  # warm-up: first create (image, page cache, thread pool)
        if not ok:
            raise RuntimeError("abx warm-up create failed: " + w)
        delete(w)
        time.sleep(1)
        live_ids = []
        cleanups.insert(0, lambda: delete_all(live_ids, args.clients, delete))
        used0, mi0 = machine_used()
        cg0, ps0 = cg.sample(), proc_status(abxd.proc.pid)
        ab = {}
        ab["create"], ids = create_phase("abx POST /sandboxes", args.creates, args.clients, create)
        live_ids += ids
        if args.live > len(live_ids):
            ab["fill"], extra = create_phase(f"abx fill to {args.live}", args.live - len(live_ids),
                                             args.clients, create)
            live_ids += extra
        time.sleep(args.settle)
        used1, mi1 = machine_used()
        cg1, ps1 = cg.sample(), proc_status(abxd.proc.pid)
        n = len(live_ids)
        inside, found = sandbox_memcg_usage(live_ids)
        ab["mem"] = {
            "n": n, "cgroups_found": found,
            "host": (cg1["usage"] - cg0["usage"]) / n,
            "host_rss": (cg1["rss"] - cg0["rss"]) / n,
            "host_kmem": (cg1["kmem"] - cg0["kmem"]) / n,
            "host_cache": (cg1["cache"] - cg0["cache"]) / n,
            "abxd_rss": (ps1["rss"] - ps0["rss"]) / n,
            "abxd_pss": ((ps1["pss"] or 0) - (ps0["pss"] or 0)) / n,
            "abxd_rss_total": ps1["rss"], "abxd_threads": (ps0["threads"], ps1["threads"]),
            "abxd_fds": (ps0["fds"], ps1["fds"]),
            "inside": inside / max(1, found), "machine": (used1 - used0) / n,
            "machine_kernel": {k: (mi1[k] - mi0[k]) / n for k in
                               ("Slab", "SUnreclaim", "KernelStack", "PageTables", "Percpu")
                               if k in mi0}}
        if args.hold:
            print(f"[bench] holding {n} sandboxes {args.hold:.0f} s (abxd pid {abxd.proc.pid})",
                  file=sys.stderr)
            time.sleep(args.hold)
        ab["delete_s"], derr = delete_all(live_ids, args.clients, delete)
        if derr:
            print(f"[bench] {len(derr)} deletes failed: {derr[0]}", file=sys.stderr)
        live_ids.clear()
        report["abx"] = ab
    finally:
        for c in cleanups:
            try:
                c()
            except Exception as e:  # cleanup goes on
                print(f"[bench] cleanup: {e}", file=sys.stderr)

    print_report(report, args)


def print_report(r, args):
    kib = lambda b: b / 1024.0  # noqa: E731
    ab = r["abx"]
    peers = r["peers"]
    print(f"density (issue 15): {args.creates} creates with {args.clients} concurrent clients, "
          f"then {args.live} live idle sandboxes ({args.settle:.0f} s settle)")
    print(f"{'create (8 clients)':40} {'ok':>5} {'fail':>5} {'creates/s':>10} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'abx/peer':>9}")
    rows = [("abx POST /sandboxes (201: envd up)", ab["create"])]
    rows += [(f"{rt} run -d (overlay, same limits)", p["create"]) for rt, p in peers.items()]
    for name, c in rows:
        ratio = ab["create"]["rate"] / c["rate"] if c["rate"] else float("nan")
        print(f"{name:40} {c['ok']:5d} {c['fail']:5d} {c['rate']:10.1f} {c['p50']:8.0f} "
              f"{c['p99']:8.0f} {ratio:8.2f}x")
    for name, res in [("abx", ab)] + list(peers.items()):
        if "fill" in res:
            f = res["fill"]
            print(f"{name} fill {args.creates} -> {args.creates + f['ok']}: {f['rate']:.1f} "
                  f"creates/s, p50 {f['p50']:.0f} ms, p99 {f['p99']:.0f} ms; delete of all: "
                  f"{res['delete_s']:.1f} s")
    m = ab["mem"]
    pm = peers.get("runc", {}).get("mem")
    for rt, why in r["unavailable"].items():
        print(f"{rt}: unavailable on this machine: {why}")
    print(f"\nidle memory per sandbox at {m['n']} live (KiB)      {'abx':>10} {'runc':>10}")

    def line(label, a, p=None):
        ps = f"{kib(p):10.0f}" if p is not None else f"{'-':>10}"
        print(f"  {label:46} {kib(a):10.0f} {ps}")
    line("host side (memcg of abxd / of runc's calls)", m["host"], pm and pm["host"])
    line("  of which RSS (anon)", m["host_rss"])
    line("  of which kernel (kmem)", m["host_kmem"], pm and pm["host_kmem"])
    line("  of which page cache", m["host_cache"], pm and pm["host_cache"])
    line("  abxd VmRSS growth", m["abxd_rss"])
    line("  abxd Pss growth", m["abxd_pss"])
    line("host side without page cache", m["host"] - m["host_cache"],
         pm and pm["host"] - pm["host_cache"])
    line("in-sandbox (its memory cgroup)", m["inside"], pm and pm["inside"])
    line("total: host side without page cache + in-sandbox",
         m["host"] - m["host_cache"] + m["inside"],
         pm and pm["host"] - pm["host_cache"] + pm["inside"])
    line("machine: MemTotal-MemAvailable growth", m["machine"], pm and pm["machine"])
    for k, v in m["machine_kernel"].items():
        line(f"  machine {k} growth", v)
    print(f"abxd: RSS {m['abxd_rss_total'] / MIB:.1f} MiB at {m['n']} live, threads "
          f"{m['abxd_threads'][0]} -> {m['abxd_threads'][1]}, fds {m['abxd_fds'][0]} -> "
          f"{m['abxd_fds'][1]}; sandbox cgroups found {m['cgroups_found']}/{m['n']}")
    host_nc = (m["host"] - m["host_cache"]) / MIB
    print(f"aim host side < 1 MiB per sandbox (without reclaimable page cache): "
          f"{host_nc:.2f} MiB {'MET' if host_nc < 1 else 'MISSED'}; with page cache "
          f"{m['host'] / MIB:.2f} MiB")

    rc = peers.get("runc", {})
    pc = rc.get("create")
    row("density", f"creates/s, {args.clients} clients (base; 201 = envd up)", ab["create"]["rate"],
        "runc run -d" if pc else "-", pc["rate"] if pc else "-", "creates/s", "higher")
    row("density", f"create p50, {args.clients} clients", ab["create"]["p50"],
        "runc run -d" if pc else "-", pc["p50"] if pc else "-", "ms", "lower")
    row("density", f"create p99, {args.clients} clients", ab["create"]["p99"],
        "runc run -d" if pc else "-", pc["p99"] if pc else "-", "ms", "lower")
    if "fill" in ab:
        pf = rc.get("fill")
        row("density", f"creates/s, {args.clients} clients, from {args.creates} to {args.live} live",
            ab["fill"]["rate"], "runc run -d" if pf else "-", pf["rate"] if pf else "-",
            "creates/s", "higher")
    cc = peers.get("crun", {}).get("create")
    if cc:
        row("density", f"creates/s, {args.clients} clients, vs crun", ab["create"]["rate"],
            "crun run -d", cc["rate"], "creates/s", "higher")
    row("density", f"host-side memory per idle sandbox at {m['n']} (no page cache)", host_nc,
        "runc" if pm else "-", (pm["host"] - pm["host_cache"]) / MIB if pm else "-", "MiB",
        "lower", "<1")
    row("density", f"in-sandbox memory per idle sandbox at {m['n']} (envd)", m["inside"] / MIB,
        "runc (sleep)" if pm else "-", pm["inside"] / MIB if pm else "-", "MiB", "lower")
    row("density", f"total memory per idle sandbox at {m['n']} (host side + in-sandbox)",
        (m["host"] - m["host_cache"] + m["inside"]) / MIB, "runc (sleep)" if pm else "-",
        (pm["host"] - pm["host_cache"] + pm["inside"]) / MIB if pm else "-", "MiB", "lower")


if __name__ == "__main__":
    main()
