"""bench/run.sh's summary rows from the python benches: the same as bench_row in lib/load.sh.

row(section, name, abx, peer, peer_value, unit, better, aim="-") appends one tab-separated line to
$BENCH_ROWS (nothing when it is unset: the bench ran alone). abx and peer_value are numbers in
unit; peer is what ran beside abx in the same run ("-" with peer_value "-" for none); better is
"higher" or "lower"; aim is ">=0.5x" / "<=1x" (on the ratio run.sh prints: how many times better
abx is) or "<1000" / ">=20" (on abx itself), "-" for none.
"""
import os


def row(section, name, abx, peer, peer_value, unit, better, aim="-"):
    path = os.environ.get("BENCH_ROWS")
    if not path:
        return
    def fmt(v):
        if isinstance(v, float):
            return "%.4g" % v
        return str(v)
    fields = [section, name, fmt(abx), peer, fmt(peer_value), unit, better, aim]
    with open(path, "a") as f:
        f.write("\t".join(str(x).replace("\t", " ") for x in fields) + "\n")
