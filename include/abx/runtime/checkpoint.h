// abx::runtime checkpoint/restore: "pause to disk" of a whole sandbox with CRIU.
//
// checkpoint() writes a running sandbox's process tree (memory, fds, namespaces, mounts, the
// netns' own state) as CRIU images into a directory, plus a copy of its writable layer
// (`rw.img`) and `checkpoint.json` (what restore() needs; written last, so a directory without
// it is not a checkpoint). restore() rebuilds the sandbox around those images: a new state
// directory, the same user namespace slot, the root overlay and binds re-made idmapped, new
// cgroups, CRIU's restore, then the veth — and returns a Sandbox as spawn() would.
//
// The crash-safe pause to disk (abxd's): checkpoint() with keep_frozen leaves the sandbox frozen
// beside a complete checkpoint; the owner records the checkpoint, then release_checkpointed()
// (commit) — or recover() and removes the directory (abort). A resume that deletes the
// checkpoint afterwards restores with link_layer (no copy of the layer).
//
// What CRIU cannot do and abx does around it (docs/design/criu-spike.md): the veth is removed
// before the dump and re-made after (CRIU cannot restore a link whose peer is outside the
// sandbox's user namespace); the binds are named external mounts ("bind0".."bindN", in
// config.binds order) re-made on restore; the restored tree is put into its cgroups by running
// CRIU from a process already in them (--manage-cgroups=ignore); the overlay's volatile work dir
// is removed before the root is re-made.
//
// Needs CRIU 4.1.1 with abx's patches (scripts/install-criu.sh) and root. Supported sandboxes:
// an image or directory rootfs, a user namespace of its own, NetworkMode::kNone.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/timeline.h"
#include "abx/runtime/sandbox.h"

namespace abx::runtime {

inline constexpr const char* kDefaultCriu = "/usr/local/lib/abx/criu/criu";
// CRIU's run directory, compiled into abx's build (scripts/install-criu.sh: make RUNDIR=...):
// where each criu run keeps its cache of probed kernel features (criu.kdat). CRIU keeps that
// cache only on a tmpfs (so that a reboot, and with it any kernel change, clears it: the cache
// itself carries no boot id, only a magic and the build's time); without one every criu dump and
// restore probes the kernel again, 40-60 ms each. See prepare_criu_rundir().
inline constexpr const char* kCriuRunDir = "/run/abx/criu";

// --- Checkpoints are private and sealed ------------------------------------------------------
//
// CRIU restores whatever its images say (mount targets, credentials, ...), so a checkpoint is
// trusted only as far as it is abxd's own: every checkpoint directory is root-only (0700
// directories, 0600 files), and checkpoint() seals it — a manifest of every entry (relative
// path, type, mode, size, SHA-256 of the content) with an HMAC-SHA256 over it, in
// `checkpoint.mac` — with a key only its owner holds. restore() verifies the seal before it
// reads anything else of the checkpoint and refuses (failed_precondition, naming each entry
// that was changed, added or removed) a checkpoint that does not match.

inline constexpr const char* kSealFile = "checkpoint.mac";
inline constexpr std::size_t kCheckpointKeyBytes = 32;

// Writes `dir`/checkpoint.mac for the tree under `dir` as it is now (symlinks are entries,
// never followed). Errors: invalid_argument (a key shorter than kCheckpointKeyBytes), I/O.
// Entries named in `pending` (relative paths of regular files) are listed without their
// content: a keep_frozen checkpoint's rw.img, which its frozen sandbox's unmount still writes;
// complete_seal() seals them once that sandbox is gone, and verify_checkpoint() refuses them
// until then.
Status seal_checkpoint(const std::string& dir, std::string_view key,
                       const std::vector<std::string>& pending = {});

// Whether `dir`'s seal still has pending entries.
bool seal_pending(const std::string& dir);

// Seals the pending entries of `dir` as they are now, after verifying everything else (a no-op
// without pending entries). release_checkpointed() calls it; restore() too, for a checkpoint
// whose owner died between committing and releasing it. Errors: verify_checkpoint()'s.
Status complete_seal(const std::string& dir, std::string_view key);

// ok when `dir`'s tree is exactly what its checkpoint.mac lists and the MAC is `key`'s.
// failed_precondition otherwise ("checkpoint <dir> failed its integrity check, refusing to
// restore it: mountpoints-13.img changed (content); evil was added"), also for a missing or
// malformed seal; invalid_argument for a short key.
Status verify_checkpoint(const std::string& dir, std::string_view key);

// Makes `dir` and every directory under it 0700 and every regular file 0600, through fds and
// without following symlinks. For repairing checkpoint and snapshot trees.
Status make_private(const std::string& dir);

// The key in `path` (kCheckpointKeyBytes random bytes), made (0600, O_EXCL) when absent.
// failed_precondition when it is not a regular file of this uid with mode 0600 (another user
// may have read it) or has the wrong length.
Result<std::string> load_checkpoint_key(const std::string& path);

struct CheckpointOptions {
  std::string criu = kDefaultCriu;
  // false: pause to disk — the sandbox's processes are killed once the dump is complete and the
  // Sandbox is destroyed (state dir, cgroups, slot released); all of it lives in the checkpoint.
  // true: a snapshot — the sandbox keeps running (veth re-made, thawed).
  bool leave_running = false;
  // With leave_running: the crash-safe pause to disk. CRIU leaves the tree alive, but it stays
  // FROZEN and without its veth after checkpoint() returns, and the checkpoint's rw.img is a
  // hard link of the sandbox's own (the same inode; a copy when `dir` is on another filesystem),
  // synced while frozen. The caller then records the checkpoint and commits with
  // release_checkpointed(), or aborts with recover() and removes `dir` (whose layer the running
  // sandbox writes again). An owner that dies in between leaves a frozen sandbox that adopt()
  // and recover() (or cleanup_stale()) deal with. invalid_argument without leave_running.
  bool keep_frozen = false;
  // CRIU's --ghost-limit (bytes; 0 = CRIU's default of 1 MiB): deleted-but-open files larger
  // than this fail the dump (e.g. a bundle replaced under a running sandbox).
  std::uint64_t ghost_limit = 0;
  // How long criu dump may run. Past it criu is killed and checkpoint() fails with
  // deadline_exceeded, leaving the sandbox running as after any failed dump: a CRIU that hangs
  // (one waiting for a trap the machine never delivers did, for ever) must not hang the pause.
  std::chrono::milliseconds criu_timeout{std::chrono::minutes(5)};
  // The key the checkpoint is sealed with (kCheckpointKeyBytes or more; load_checkpoint_key()).
  // Required: invalid_argument without it.
  std::string mac_key;
  // false: the checkpoint is left unsealed (no manifest, no MAC; restore() then refuses it
  // unless told it is `verified`). Only for a checkpoint that never outlives the call that took
  // it and is restored by that same call: a fork's, which it removes once its children run (and
  // abxd removes at start: remove_cut_checkpoints). Saves hashing its memory images.
  bool seal = true;
  // When set, each step of the checkpoint is marked on it (checks, freeze, dump, layer, thaw,
  // seal).
  Timeline* timeline = nullptr;
};

struct CheckpointInfo {
  std::string dir;
  bool leave_running = false;
  std::uint64_t image_bytes = 0;  // CRIU's images (without rw.img)
  std::uint64_t layer_bytes = 0;  // allocated bytes of the rw.img copy
  // From freeze to thaw (snapshot), to the kill (pause to disk), or to checkpoint()'s return
  // (keep_frozen: still frozen then).
  std::chrono::milliseconds frozen{0};
  std::chrono::milliseconds dump{0};  // criu dump's wall time
  std::chrono::milliseconds seal{0};  // making the tree private and sealing it
  std::chrono::milliseconds total{0};
};

struct RestoreOptions {
  std::string criu = kDefaultCriu;
  // Where the re-made root and binds are staged for CRIU (<stage_dir>/<id>/): a directory whose
  // components are root-owned and searchable by everyone (the restored tree's user namespace
  // must reach them). Emptied and removed once the restore is done.
  std::string stage_dir = "/run/abx/restore";
  // Takes the checkpoint's rw.img into the new state dir by hard link instead of a copy (a copy
  // where the filesystems differ): for a resume whose checkpoint is deleted right after (a copy
  // of a 500 MiB layer costs hundreds of ms). The checkpoint's layer is then the running
  // sandbox's: it changes under the checkpoint, which must not be restored again. The
  // checkpoint's seal marks the layer pending first (a failed restore's mount changed it; the
  // next restore seals it again once it is free).
  bool link_layer = false;
  // How long criu restore may run. Past it criu and the tree it was making are killed and
  // restore() fails with deadline_exceeded; the checkpoint is left as it was.
  std::chrono::milliseconds criu_timeout{std::chrono::minutes(5)};
  // The key the checkpoint was sealed with: verified before anything else of it is used.
  // Required: invalid_argument without it.
  std::string mac_key;
  // The caller vouches for `dir`: restore() skips verify_checkpoint() (every other check stays).
  // For a fork restoring the unsealed checkpoint it has just taken (CheckpointOptions::seal), and
  // a create from a snapshot whose own seal, just verified, covers these images: hashing the
  // memory images again for each child costs ~1 ms per MiB of them. Not with link_layer.
  bool verified = false;
  // When set, each step of the restore is marked on it (verify, layer, slot, images, mounts,
  // cgroups, criu, finish): where a fork's or resume's time goes.
  Timeline* timeline = nullptr;
};

// ok when `criu` exists and `criu check` passes (checked once per path and process);
// failed_precondition with criu's output otherwise.
Status criu_available(const std::string& criu);

// Makes `dir` (absolute) a root-only tmpfs for CRIU's kernel-feature cache: a small tmpfs
// (mode 0700, uid/gid 0, 1 MiB, nosuid/nodev/noexec) mounted there unless `dir` already is the
// root of a tmpfs owned by root with mode 0700. One found otherwise (another mode or owner, or a
// plain directory) gets a fresh tmpfs mounted over it, so a cache anybody else could have
// written is never read. Every component above `dir` must be a root-owned directory writable
// by root only (failed_precondition otherwise: whoever can rename it could swap the cache).
// `dir` itself must be a directory, not a symlink. Errors leave CRIU working, only slower (it
// probes the kernel on every run).
Status prepare_criu_rundir(const std::string& dir = kCriuRunDir);

// Checkpoints `sb` into `dir` (absolute; created if missing, must be empty). The sandbox is
// frozen through its cgroup for the dump. Errors: failed_precondition (criu missing or `criu
// check` fails, an unsupported sandbox, `dir` not empty), insufficient_storage (ENOSPC while
// dumping), deadline_exceeded (criu ran past options.criu_timeout and was killed), internal with
// the last lines of CRIU's dump.log. After a failed dump the sandbox is
// running as before (thawed, its veth re-made; egress rules that match the host end by name
// apply to the new link) and `dir` has no checkpoint.json. An error after a complete pause-to-
// disk dump (moving rw.img, destroying) leaves the tree dead and says so; `dir` then has the
// images but no checkpoint.json, and the layer may still be in the state dir. With keep_frozen,
// a successful checkpoint() leaves the sandbox frozen and without its veth (see keep_frozen);
// any error leaves it running.
Result<CheckpointInfo> checkpoint(Sandbox& sb, const std::string& dir,
                                  const CheckpointOptions& options = {});

// Commits a keep_frozen checkpoint: destroys `sb` (which must be the sandbox checkpointed into
// `dir`) and waits until the loop device of its writable layer is detached, so the layer that
// `dir`'s rw.img shares is no longer mounted and restore() may mount it. Call it after the
// checkpoint is recorded; a plain destroy() is not enough before a restore (the kernel detaches
// the loop device asynchronously, and restore() would then wait for it or, with link_layer,
// refuse). Errors: destroy()'s, or deadline_exceeded when the device is still attached after 5 s.
// Then it completes the checkpoint's seal with `mac_key` (the layer's content, now final).
Status release_checkpointed(Sandbox& sb, const std::string& dir, std::string_view mac_key);

// Brings a sandbox that a checkpoint left frozen and without its veth (keep_frozen, or an owner
// that died mid-checkpoint, the sandbox found again by adopt()) back to running: re-makes the
// veth when the sandbox has one recorded whose host end is gone (config.link_ready is not run
// again: rules that match the host end by name apply to the new link), or makes it from the
// sandbox's slot when its config has a veth but none was recorded (a restore whose owner died
// before connecting it), then thaws it. A no-op
// on a running sandbox with its link. Errors: failed_precondition (the sandbox is not running;
// or its veth is gone and its config is unknown — adopt() it with its config; it is thawed
// anyway), or setup_veth()'s and the freezer's errors.
// A CRIU dump of the sandbox that its dead owner started and that still runs is waited for up
// to `criu_wait`, then killed (with its process group): a hung CRIU does not cost the sandbox.
Status recover(Sandbox& sb, std::chrono::milliseconds criu_wait = std::chrono::seconds(60));

// Lets a restored tree run: restore() leaves every task stopped until the init is recorded,
// then does this itself; an owner that finds a restore cut short by its predecessor's death
// after that record (the tree adopted, still stopped) calls it. Harmless on a running tree, but
// it also continues any task a user stopped: call it only for a cut restore.
Status continue_restored(Sandbox& sb);

// Restores the checkpoint in `dir` as a sandbox of `config` (what spawn() got: the same
// layers, binds (targets as checkpointed, sources re-made) and veth settings; argv is not run).
// The user namespace gets the checkpoint's slot when it is free (pause to disk); else (a fork
// of a snapshot whose sandbox still runs) another slot, with CRIU's userns image rewritten in
// a private copy of the images. Each restore gets its own copy of the writable layer, so one
// checkpoint can be restored any number of times (unless options.link_layer). While a loop
// device is still attached to the checkpoint's rw.img (a keep_frozen checkpoint whose sandbox
// was destroyed but not yet released), restore() first waits up to 5 s for its detach; with
// link_layer it then refuses (failed_precondition) rather than mount one filesystem twice. A
// `config.id` other than the checkpointed one becomes the restored hostname. The returned Sandbox
// behaves as an adopted one: wait() reports 0 when the init exits. The checkpoint's seal is
// verified before anything else (verify_checkpoint; a pending one is completed first once the
// layer is free), and every mount target on the rebuilt root is resolved without following
// symlinks before CRIU runs; CRIU reads a private copy of the images, idmapped and read-only.
// Errors: not_found (no checkpoint in `dir`), invalid_argument (no mac_key),
// failed_precondition (a checkpoint that fails its seal, naming what changed; a mount target
// that is or passes through a symlink; a corrupt checkpoint, a config that does not match it,
// criu unavailable), resource_exhausted (no free slot), already_exists (the id is in use),
// deadline_exceeded (criu ran past options.criu_timeout and was killed), internal with the last
// lines of CRIU's restore.log. Nothing in `dir` is changed or removed but its seal (completed
// when pending; with link_layer, the layer marked pending, and its rw.img is the restored
// sandbox's layer from then on); a failed restore leaves nothing else behind.
Result<Sandbox> restore(const std::string& dir, SandboxConfig config,
                        const RestoreOptions& options = {});

}  // namespace abx::runtime
