#!/usr/bin/env bash
# Lint: (1) clang-format, (2) clang-tidy with .clang-tidy's short check list, (3) syscalls that
# set up or control sandboxes appear only in src/runtime (and the listed exceptions), (4) module
# layering, (5) every module of src/ has a row in docs/architecture.md.
# Usage: scripts/lint.sh [--build-dir DIR] [--format=report|fail] [--tidy=changed|all|none]
#                        [--base REV]
#   --format  fail (default: the files clang-format would change fail the lint) or report (print
#             them and pass).
#   --tidy    changed (default): the C++ files changed since --base (default origin/main, else
#             main) plus, when none changed, a fixed sample; all: every file in compile_commands;
#             none: skip.
set -euo pipefail
cd "$(dirname "$0")/.."

format_mode=fail
tidy_mode=changed
build_dir=build/dev
base=""
for a in "$@"; do
  case "$a" in
    --format=report|--format=fail) format_mode=${a#--format=} ;;
    --tidy=changed|--tidy=all|--tidy=none) tidy_mode=${a#--tidy=} ;;
    --build-dir=*) build_dir=${a#--build-dir=} ;;
    --base=*) base=${a#--base=} ;;
    --build-dir|--base) echo "lint: use $a=VALUE" >&2; exit 2 ;;
    *) echo "lint: unknown flag $a" >&2; exit 2 ;;
  esac
done
status=0
section() { printf '\n-- %s\n' "$*"; }

mapfile -t cxx_files < <(git ls-files -- 'src/*.cc' 'src/*.h' 'src/*.hpp' 'include/*.h' \
  'examples/*.cc' 'examples/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 'bench/*.h')

# (1) clang-format: the repository's .clang-format, every C++ file.
section "clang-format ($format_mode)"
unformatted=()
for f in "${cxx_files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if [ ${#unformatted[@]} -eq 0 ]; then
  echo "all ${#cxx_files[@]} files formatted"
else
  printf '  %s\n' "${unformatted[@]}"
  echo "${#unformatted[@]} of ${#cxx_files[@]} files need clang-format -i"
  if [ "$format_mode" = fail ]; then status=1; fi
fi

# (2) clang-tidy over the dev build's compile_commands.json (headers through HeaderFilterRegex).
if [ "$tidy_mode" != none ]; then
  section "clang-tidy ($tidy_mode)"
  if [ ! -f "$build_dir/compile_commands.json" ]; then
    echo "lint: $build_dir/compile_commands.json missing (cmake --preset dev first)" >&2
    exit 2
  fi
  if [ "$tidy_mode" = all ]; then
    mapfile -t tidy_files < <(python3 -c 'import json,sys,os
for e in json.load(open(sys.argv[1])):
    f=os.path.relpath(e["file"])
    if not f.startswith(("build/","..")): print(f)' "$build_dir/compile_commands.json" | sort -u)
  else
    if [ -z "$base" ]; then
      base=$(git rev-parse -q --verify origin/main || git rev-parse -q --verify main || true)
    fi
    mapfile -t tidy_files < <(
      { [ -n "$base" ] && git diff --name-only --diff-filter=d "$(git merge-base "$base" HEAD)" -- \
          'src/*.cc' 'examples/*.cc' 'tests/*.cc' 'bench/*.cc'; } | sort -u)
    if [ ${#tidy_files[@]} -eq 0 ]; then
      # Nothing changed (CI on main): a fixed sample, one translation unit per module.
      mapfile -t tidy_files < <(ls src/*/[a-z]*.cc | grep -v -e _test.cc -e _fuzz.cc \
        | awk -F/ '!seen[$2]++')
    fi
  fi
  echo "${#tidy_files[@]} file(s)"
  if [ ${#tidy_files[@]} -gt 0 ]; then
    # -quiet: only findings; warnings are errors through .clang-tidy's WarningsAsErrors.
    run-clang-tidy -quiet -p "$build_dir" -j "$(nproc)" "${tidy_files[@]/#/$PWD/}" \
      >"$build_dir/clang-tidy.log" 2>&1 || { status=1; }
    grep -E 'warning:|error:' "$build_dir/clang-tidy.log" | sort -u || true
    [ "$status" = 0 ] && echo "clang-tidy: clean" || echo "clang-tidy: findings (full log: $build_dir/clang-tidy.log)"
  fi
fi

# (3) Syscalls that build or control sandboxes (namespaces, mounts, seccomp, capabilities,
# cgroup writes, tracing) belong to src/runtime, where the child checklist orders them and the
# tests cover them (with its public headers, include/abx/runtime). Anything else calls runtime's
# API. Exceptions, each with its reason:
exceptions=(
  # envd is the sandbox's init: it must adopt and reap orphans like any PID 1.
  'src/envd/main.cc:.*(PR_SET_CHILD_SUBREAPER|<sys/prctl.h>)'
  # envd (PID 1) and the command server hold the access token: they make themselves non-dumpable
  # so that the sandbox's users cannot read their memory or take their descriptors.
  'src/envd/main.cc:.*PR_SET_DUMPABLE'
  'src/server/serve_main.cc:.*(PR_SET_DUMPABLE|<sys/prctl.h>)'
  # envd's files API acts as the requesting user on one thread: setfsuid/setfsgid/setgroups
  # through syscall(2), since glibc's setgroups applies to every thread (creds.cc says more).
  'src/envd/creds.cc:.*(syscall|SYS_set(fsuid|fsgid|groups))'
  # envd starts processes as posix_spawn does: clone(CLONE_VM | CLONE_VFORK), and in the child,
  # which shares envd's memory, the credentials through syscall(2) (process.cc says why).
  'src/envd/process.cc:.*(clone\(|syscall|SYS_set(groups|resgid|resuid))'
  # The envd flood test's forked abx-envd dies with the test (PR_SET_PDEATHSIG), so a test that
  # ctest kills leaves no daemon and no flood running.
  'src/envd/envd_test.cc:.*(PR_SET_PDEATHSIG|<sys/prctl.h>)'
  # Likewise every daemon a test starts (abx::testing::ChildProcess) dies with its test; its
  # test watches processes that are not its children exit through pidfds (syscall(2)).
  'tests/support/abx/testing/child_process.h:.*(PR_SET_PDEATHSIG|<sys/prctl.h>)'
  'tests/support/child_process_test.cc:.*(syscall|SYS_pidfd_(open|send_signal))'
  # The abxd end-to-end tests assert that a killed sandbox's cgroup is gone (read only).
  'tests/e2e/abxd_e2e_test.cc:.*fs::exists\("/sys/fs/cgroup/'
  # Layer extraction: libarchive's write_disk resolves names against the cwd, so the extraction
  # thread takes a private cwd (unshare(CLONE_FS): per-thread fs context, no namespace, no
  # privilege) and fchdirs into the layer; and overlayfs whiteouts are 0:0 character devices
  # (mknodat) made in the store's own directories, never a device from the archive.
  'src/image/extract.cc:.*(unshare\(CLONE_FS\)|mknodat\()'
  # The ruleset test applies its nftables scripts for real in a network namespace of its own
  # thread (tables belong to a netns), so it never touches the host's.
  'src/egress/ruleset_test.cc:.*unshare\(CLONE_NEWNET\)'
  # The boundary probes exist to attempt exactly these calls, on the host (positive controls)
  # and inside sandboxes (where they must fail); the driver puts host controls in a throwaway
  # cgroup with a pids/memory limit of its own.
  'tests/boundary/boundary_probe.cc:.*'
  'tests/boundary/boundary_test.cc:.*(/sys/fs/cgroup|cgroup\.procs|limit_in_bytes|(memory|pids)\.max)'
)
section "syscall placement"
pattern='(^|[^A-Za-z0-9_.>])(::)?(clone3?|unshare|setns|pivot_root|mount|umount2?|prctl|seccomp|ptrace|chroot|capset|sethostname|setdomainname|mknod(at)?|syscall)[[:space:]]*\(|SYS_[a-z_0-9]+|/sys/fs/cgroup|cgroup\.(procs|kill|freeze|subtree_control)|freezer\.state|(memory|pids|cpu)\.max|limit_in_bytes|<sys/(mount|prctl|ptrace|capability|fsuid)\.h>|<linux/(seccomp|filter|capability)\.h>|seccomp_[a-z_]+\('
violations=$(printf '%s\n' "${cxx_files[@]}" | grep -v -e '^src/runtime/' -e '^include/abx/runtime/' | xargs grep -nE "$pattern" \
  | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
for e in "${exceptions[@]}"; do
  violations=$(printf '%s\n' "$violations" | grep -vE "^${e%%:*}:[0-9]+:${e#*:}" || true)
done
violations=$(printf '%s\n' "$violations" | sed '/^$/d')
if [ -n "$violations" ]; then
  printf '%s\n' "$violations"
  echo "lint: sandbox syscalls outside src/runtime (call runtime's API, or add a reasoned exception)"
  status=1
else
  echo "only in src/runtime (+ ${#exceptions[@]} listed exceptions)"
fi

section "module layering"
# A module's private headers are reachable only from its own folder (no private include
# directories; see cmake/AbxHelpers.cmake). A "../" include would get around that.
up_includes=$(printf '%s\n' "${cxx_files[@]}" | xargs grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\.\./' || true)
if [ -n "$up_includes" ]; then
  printf '%s\n' "$up_includes"
  echo "lint: include another module's public header (abx/<module>/...), not its private files"
  status=1
else
  echo "no include reaches into another module's folder"
fi

section "architecture doc"
# Every module folder under src/ has a row in docs/architecture.md's module table, and every row
# a folder, so the doc cannot silently fall behind the tree: tests/architecture_doc.sh, which
# ctest runs too (architecture_doc).
if tests/architecture_doc.sh "$PWD"; then
  echo "every module in src/ has a row in docs/architecture.md"
else
  status=1
fi

exit "$status"
