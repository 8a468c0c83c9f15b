# Sourced by tests and benches that need an OCI registry: Debian's docker-registry on a free
# loopback port, its storage under a directory of the caller's.
#
#   . scripts/lib/registry.sh
#   start_test_registry "$work"   # sets reg_port and reg_pid; the caller kills reg_pid
#
# Returns once the registry answers GET /v2/, or fails (its log named) after 10 s.

start_test_registry() {
  local work=$1
  reg_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$reg_port
log:
  level: error
YML
  docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  reg_pid=$!
  local _
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$reg_port/v2/" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "docker-registry did not answer on 127.0.0.1:$reg_port within 10 s (log: $work/registry.log)" >&2
  return 1
}
