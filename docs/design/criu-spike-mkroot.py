#!/usr/bin/env python3
# Spike helper of docs/design/criu-spike.md (not part of abx): re-makes an abx sandbox root as
# abx's runtime does (src/runtime/mounts.cc) for `criu restore --root`: idmapped clones of the image
# layers and of the writable layer's mount, an overlay over them made with fsuid = the sandbox's first
# host id, attached at TARGET; plus idmapped read-only clones of the bind sources attached at
# staging paths (for criu --external mnt[KEY]:PATH).  Needs root.
#   criu-spike-mkroot.py FIRST_ID TARGET RWDIR LAYER[,LAYER...] [SRC=STAGING ...]
import ctypes, os, sys, signal

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_open_tree, SYS_move_mount, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_mount_setattr = 428, 429, 430, 431, 432, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0o2000000, 0x8000, 0x1000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 1, 2, 4, 0x100000
FSCONFIG_SET_FLAG, FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 0, 1, 6
MOVE_MOUNT_F_EMPTY_PATH = 4
CLONE_NEWUSER = 0x10000000
AT_FDCWD = -100


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def check(rc, what):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


def clone_tree(path, attrs, userns):
    fd = check(libc.syscall(SYS_open_tree, AT_FDCWD, path.encode(),
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), "open_tree " + path)
    a = MountAttr(attrs | MOUNT_ATTR_IDMAP, 0, 0, userns)
    check(libc.syscall(SYS_mount_setattr, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(a),
                       ctypes.sizeof(a)), "mount_setattr " + path)
    return fd


def fsconf(fs, key, val, what):
    check(libc.syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key.encode(), val.encode(), 0), what)


def main():
    first, target, rw, layers = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    binds = [a.split("=", 1) for a in sys.argv[5:]]
    # A user namespace with the sandbox's mapping, only to idmap the clones.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        check(libc.unshare(CLONE_NEWUSER), "unshare")
        os.write(w, b"x")
        signal.pause()
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    for f in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{f}", "w") as fh:
            fh.write(f"0 {first} 65536\n")
    userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    trees = [clone_tree(l, 0, userns) for l in reversed(layers)]  # top first
    rwt = clone_tree(rw, 0, userns)
    libc.setfsgid(first)
    libc.setfsuid(first)
    # as ScopedThreadFsIds: setfsuid drops the fs capabilities; put effective = permitted back
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    check(libc.syscall(125, hdr, data), "capget")
    data[0], data[3] = data[1], data[4]
    check(libc.syscall(126, hdr, data), "capset")
    fs = check(libc.syscall(SYS_fsopen, b"overlay", 1), "fsopen")
    for t in trees:
        fsconf(fs, "lowerdir+", f"/proc/self/fd/{t}", "lowerdir+")
    fsconf(fs, "upperdir", f"/proc/self/fd/{rwt}/upper", "upperdir")
    fsconf(fs, "workdir", f"/proc/self/fd/{rwt}/work", "workdir")
    check(libc.syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, b"volatile", None, 0), "volatile")
    check(libc.syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, None, None, 0), "create overlay")
    libc.setfsuid(0)
    libc.setfsgid(0)
    mnt = check(libc.syscall(SYS_fsmount, fs, 1, MOUNT_ATTR_NODEV), "fsmount")
    check(libc.syscall(SYS_move_mount, mnt, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
          "move_mount root")
    for src, stage in binds:
        t = clone_tree(src, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, userns)
        if os.path.isdir(src):
            os.makedirs(stage, exist_ok=True)
        else:
            open(stage, "a").close()
        check(libc.syscall(SYS_move_mount, t, b"", AT_FDCWD, stage.encode(), MOVE_MOUNT_F_EMPTY_PATH),
              "move_mount " + stage)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    print("root ready at", target)


main()
