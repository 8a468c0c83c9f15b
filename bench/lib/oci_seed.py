#!/usr/bin/python3
"""Writes a deterministic multi-layer OCI image layout for the pull benchmark (bench/image_pull.sh).

Usage: oci_seed.py DIR [--scale F]   (F=1.0: five gzip layers, ~200 MB uncompressed)
Layers: incompressible binaries, many small compressible text files, half-random blobs, a deep
tree of tiny files with symlinks, and an update layer that overwrites files and whites one out.
"""
import gzip, hashlib, io, json, os, random, sys, tarfile

out = sys.argv[1]
scale = float(sys.argv[sys.argv.index("--scale") + 1]) if "--scale" in sys.argv else 1.0
rng = random.Random(10)
MB = 1 << 20
words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10)))
         for _ in range(2000)]
text = b" ".join(rng.choice(words) + (b"\n" if rng.random() < 0.1 else b"") for _ in range(400000))


def n(x):
    return max(1, int(x * scale))


def layer(entries):
    """entries: (path, bytes | ('dir',) | ('sym', target)) -> (gz blob, diff_id, size)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        seen = set()
        for path, data in entries:
            parts = path.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in seen:
                    seen.add(d)
                    ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o755
                    tf.addfile(ti)
            ti = tarfile.TarInfo(path); ti.mode = 0o644
            if isinstance(data, tuple) and data[0] == "sym":
                ti.type = tarfile.SYMTYPE; ti.linkname = data[1]; tf.addfile(ti)
            else:
                ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    tar = raw.getvalue()
    gz = gzip.compress(tar, compresslevel=6, mtime=0)
    return gz, "sha256:" + hashlib.sha256(tar).hexdigest(), len(tar)


def chunk(size):
    o = rng.randrange(0, len(text) - size)
    return text[o:o + size]


layers = [
    [(f"opt/bin/tool{i:02d}", rng.randbytes(3 * MB)) for i in range(n(24))],
    [(f"usr/share/doc/pkg{i // 100:02d}/file{i:04d}.txt", chunk(rng.randint(4, 20) * 1024))
     for i in range(n(4000))],
    [(f"var/lib/data/blob{i:02d}", rng.randbytes(MB // 2) + chunk(MB // 2)) for i in range(n(40))],
    [(f"srv/tree/a{i % 7}/b{i % 13}/c{i % 29}/f{i:05d}", chunk(rng.randint(1, 4) * 1024))
     for i in range(n(8000))] +
    [(f"srv/links/l{i:04d}", ("sym", f"../tree/a{i % 7}/b{i % 13}/c{i % 29}/f{i:05d}"))
     for i in range(n(500))],
    [(f"usr/share/doc/pkg00/file{i:04d}.txt", chunk(8192)) for i in range(n(50))] +
    [("opt/bin/.wh.tool00", b""), ("opt/update/new", rng.randbytes(10 * MB))],
]

os.makedirs(f"{out}/blobs/sha256", exist_ok=True)


def put(data):
    h = hashlib.sha256(data).hexdigest()
    with open(f"{out}/blobs/sha256/{h}", "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + h, "size": len(data)}


descs, diff_ids, total = [], [], 0
for entries in layers:
    gz, diff, size = layer(entries)
    d = put(gz); d["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
    descs.append(d); diff_ids.append(diff); total += size
config = {"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
          "rootfs": {"type": "layers", "diff_ids": diff_ids}}
cd = put(json.dumps(config).encode()); cd["mediaType"] = "application/vnd.oci.image.config.v1+json"
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": cd, "layers": descs}
md = put(json.dumps(manifest).encode()); md["mediaType"] = manifest["mediaType"]
md["annotations"] = {"org.opencontainers.image.ref.name": "bench"}
with open(f"{out}/index.json", "w") as f:
    json.dump({"schemaVersion": 2, "manifests": [md]}, f)
with open(f"{out}/oci-layout", "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
print(f"{len(descs)} {sum(d['size'] for d in descs)} {total}")
