#!/usr/bin/python3
"""bench/run.sh's summary: reads the rows every bench appended to $BENCH_ROWS (bench_row in
lib/load.sh, row() in lib/rows.py: section, row, abx, peer, peer value, unit, better, aim; tab
separated), prints one table and writes it as markdown with the machine it ran on.

Usage: summary.py ROWS_FILE MARKDOWN_OUT [--ran a,b] [--failed a,b] [--only a,b] [--load-before L]

ratio: how many times better abx is than the peer of its row, from `better` (higher: abx/peer,
lower: peer/abx), printed "N.NN× better" (ratio >= 1) or "N.NN× worse" (1/ratio, when abx is
behind). aim: ">=0.5x" / "<=1x" test that ratio (">=0.5x": at most 2× worse); "<1000" / ">=20"
test abx's own value in the row's unit. met / missed, "-" when the row has no aim or nothing to
test it on.
"""
import datetime
import os
import platform
import re
import sys

COLS = ["bench", "row", "abx", "peer", "peer value", "unit", "ratio", "aim", "met"]


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def fmt(v):
    x = num(v)
    if x is None:
        return v
    if x == int(x) and abs(x) < 1e9:
        return str(int(x))
    a = abs(x)
    return f"{x:.3g}" if a < 10 else f"{x:.1f}" if a < 1000 else f"{x:.0f}"


def ratio_of(abx, peer, better):
    a, p = num(abx), num(peer)
    if a is None or p is None or a <= 0 or p <= 0:
        return None
    return a / p if better == "higher" else p / a


def ratio_text(r):
    if r is None:
        return "-"
    return f"{r:.2f}× better" if r >= 1 else f"{1 / r:.2f}× worse"


def check_aim(aim, abx, r):
    m = re.fullmatch(r"\s*(<=|>=|<|>)\s*([0-9.]+)\s*(x|×)?\s*", aim or "")
    if not m:
        return "-"
    op, k, on_ratio = m.group(1), float(m.group(2)), bool(m.group(3))
    v = r if on_ratio else num(abx)
    if v is None:
        return "-"
    ok = {"<": v < k, "<=": v <= k, ">": v > k, ">=": v >= k}[op]
    return "met" if ok else "missed"


def read_rows(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 7:
                    continue
                parts += ["-"] * (8 - len(parts))
                sec, name, abx, peer, pval, unit, better, aim = parts[:8]
                r = ratio_of(abx, pval, better)
                rows.append([sec, name, fmt(abx), peer, fmt(pval), unit, ratio_text(r), aim,
                             check_aim(aim, abx, r)])
    except FileNotFoundError:
        pass
    return rows


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1048576
    return {"cpu": model, "cores": os.cpu_count(), "mem": f"{mem:.1f} GiB",
            "kernel": platform.release(), "load": open("/proc/loadavg").read().split()[:3]}


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit("usage: summary.py ROWS_FILE MARKDOWN_OUT [--ran a,b] [--failed a,b] "
                 "[--only a,b] [--load-before L] [--stray S] [--steal name=pct,...]")
    rows_path, md_path = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    failed = [x for x in opts.get("--failed", "").split(",") if x]
    ran = [x for x in opts.get("--ran", "").split(",") if x]
    rows = read_rows(rows_path)
    m = machine()
    now = datetime.datetime.now(datetime.timezone.utc)
    load = f"{opts.get('--load-before', '?')} before, {m['load'][0]} after (1-min load average)"
    head = (f"{now:%Y-%m-%d %H:%M} UTC; {m['cores']} cores, {m['cpu']}, {m['mem']}, kernel "
            f"{m['kernel']}; load {load}")

    # Plain text table.
    widths = [max(len(COLS[i]), *(len(r[i]) for r in rows)) if rows else len(COLS[i])
              for i in range(len(COLS))]
    widths[1] = min(widths[1], 60)
    right = {2, 4}

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            c = c if len(c) <= widths[i] else c[:widths[i] - 1] + "…"
            out.append(c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
        return "  ".join(out).rstrip()
    print(f"\n=== summary: {len(rows)} rows from {len(ran)} benches ({head}) ===")
    print(line(COLS))
    for r in rows:
        print(line(r))
    met = sum(1 for r in rows if r[8] == "met")
    missed = [r for r in rows if r[8] == "missed"]
    print(f"aims: {met} met, {len(missed)} missed"
          + "".join(f"\n  missed: {r[0]} / {r[1]}: {r[2]} {r[5]} (aim {r[7]})" for r in missed))
    if failed:
        print("benches that FAILED (their rows are missing): " + ", ".join(failed))
    stray = opts.get("--stray", "")
    if stray:
        print("NOT A CLEAN MACHINE at the start: " + stray)
    # name=percent pairs from run.sh: the hypervisor's share of the vCPUs' time during each bench.
    steal = [x.split("=", 1) for x in opts.get("--steal", "").split(",") if "=" in x]
    steal_line = ("Steal (the share of the VM's CPU time its hypervisor gave to others, from "
                  "/proc/stat) during each bench: "
                  + ", ".join(f"{n} {p}" + ("%" if p != "n/a" else "") for n, p in steal)) if steal else ""
    if steal_line:
        print(steal_line)

    # Markdown.
    os.makedirs(os.path.dirname(os.path.abspath(md_path)), exist_ok=True)
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    with open(md_path, "w") as f:
        f.write(f"# abx benchmarks, {now:%Y-%m-%d}\n\n")
        f.write(f"Machine: {m['cores']} cores ({m['cpu']}), {m['mem']}, kernel {m['kernel']}; "
                f"load {load}. Run at {now:%Y-%m-%d %H:%M} UTC with `bench/run.sh"
                f"{' --only ' + opts['--only'] if opts.get('--only') else ''}`.\n\n")
        f.write("| " + " | ".join(c for c in COLS) + " |\n")
        f.write("|" + "|".join("---:" if i in right else "---" for i in range(len(COLS))) + "|\n")
        for r in rows:
            f.write("| " + " | ".join(esc(c) for c in r) + " |\n")
        f.write(f"\nAims: {met} met, {len(missed)} missed. Ratio: how many times better (or "
                "worse) abx is than the peer measured in the same run.\n")
        if failed:
            f.write("\nBenches that failed (no rows): " + ", ".join(failed) + "\n")
        if stray:
            f.write("\nNot a clean machine at the start (left running by something else): "
                    + stray + "\n")
        if steal_line:
            f.write(f"\n{steal_line}.\n")
    print(f"summary written to {md_path}")


if __name__ == "__main__":
    main()
