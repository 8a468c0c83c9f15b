#!/usr/bin/env bash
# The same image under another OCI runtime (issue 10, item 8): abx's `base` image, pushed by
# `abxd image push` (which adds the /opt/abx runtime layer and makes abx-envd the entrypoint) to
# Debian's reference registry on loopback, copied out by skopeo into an OCI layout, unpacked into
# a runtime bundle and run by Debian's runc with the image's own entrypoint — then driven by the
# official e2b JS SDK (its debug mode talks to envd at localhost:49983) from inside the
# container's network namespace. Nothing leaves loopback; the container has its own netns.
# Env (set by ctest): ABXD_BIN, ABX_BUNDLE_DIR, ABX_IMAGE_STORE (with `base` imported).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runtime=${ABX_OCI_RUNTIME:-runc}
for v in ABXD_BIN ABX_BUNDLE_DIR ABX_IMAGE_STORE; do
  [ -n "${!v:-}" ] || { echo "runc e2e: set $v" >&2; exit 2; }
done
command -v "$runtime" >/dev/null || { echo "runc e2e: $runtime missing (scripts/install-deps.sh)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/abx-runc-XXXXXX")
name="abx-e2e-$$"
reg_pid=""
cleanup() {
  "$runtime" --root "$work/state" kill "$name" KILL 2>/dev/null || true
  "$runtime" --root "$work/state" delete --force "$name" 2>/dev/null || true
  if [ -n "$reg_pid" ]; then kill "$reg_pid" 2>/dev/null || true; wait "$reg_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Debian's docker-registry on a free loopback port (scripts/lib/registry.sh).
. "$here/../../../scripts/lib/registry.sh"
start_test_registry "$work"
port=$reg_port

echo "== abxd image push base -> 127.0.0.1:$port/abx/base:e2e"
if ! "$ABXD_BIN" --image-store "$ABX_IMAGE_STORE" --bundle "$ABX_BUNDLE_DIR" image push base \
  "127.0.0.1:$port/abx/base:e2e" 2>"$work/push.log"; then
  echo "runc e2e: push failed:" >&2; cat "$work/push.log" >&2; exit 1
fi

echo "== skopeo copy to an OCI layout"
skopeo copy --quiet --src-tls-verify=false "docker://127.0.0.1:$port/abx/base:e2e" "oci:$work/layout:e2e"

echo "== unpack into a $runtime bundle"
mkdir -p "$work/bundle/rootfs" "$work/state"
python3 - "$work/layout" "$work/bundle" "$runtime" <<'PY'
import json, os, subprocess, sys
layout, bundle, runtime = sys.argv[1], sys.argv[2], sys.argv[3]
def blob(d): return os.path.join(layout, "blobs", *d.split(":"))
index = json.load(open(os.path.join(layout, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
rootfs = os.path.join(bundle, "rootfs")
for layer in manifest["layers"]:  # the base image has no whiteouts; tar applies each in order
    subprocess.run(["tar", "-xf", blob(layer["digest"]), "-C", rootfs, "--numeric-owner"], check=True)
c = config.get("config", {})
args = c.get("Entrypoint", []) + c.get("Cmd", [])
assert args and args[0] == "/opt/abx/bin/abx-envd", f"entrypoint is {args}"
subprocess.run([runtime, "spec"], check=True, cwd=bundle)  # the runtime's default config.json
spec = json.load(open(os.path.join(bundle, "config.json")))
spec["process"]["terminal"] = False
spec["process"]["args"] = args
spec["process"]["env"] = c.get("Env", []) or ["PATH=/usr/local/bin:/usr/bin:/bin"]
spec["root"]["readonly"] = False
# Docker's (and so a Kubernetes node's) default capability set: envd switches users (SETUID,
# SETGID) and owns files as root does. runc's own spec default is narrower.
caps = ["CAP_" + c for c in ("CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID "
                             "SETFCAP SETPCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE").split()]
for k in ("bounding", "effective", "permitted"):
    spec["process"]["capabilities"][k] = caps
spec["process"]["capabilities"].pop("inheritable", None)
spec["process"]["capabilities"].pop("ambient", None)
spec["hostname"] = "abx-runc"
json.dump(spec, open(os.path.join(bundle, "config.json"), "w"), indent=1)
print("entrypoint:", " ".join(args))
PY

echo "== $runtime run -d $name"
if ! "$runtime" --root "$work/state" run -d --bundle "$work/bundle" --pid-file "$work/pid" "$name" \
  </dev/null >"$work/container.log" 2>&1; then
  echo "runc e2e: $runtime run failed:" >&2; cat "$work/container.log" >&2; exit 1
fi
pid=$(cat "$work/pid")

echo "== e2b SDK (debug mode: envd at localhost:49983) inside the container's netns"
rc=0
nsenter --net="/proc/$pid/ns/net" -- env ABX_JS_TESTS=runc.test.mjs "$here/../js/run.sh" || rc=$?
if [ "$rc" != 0 ]; then
  echo "--- container output"; cat "$work/container.log"
fi
exit "$rc"
