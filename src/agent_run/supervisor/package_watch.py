"""What the installed package is now, for the fork server's "never fork old code" check, without a
stat of every source file on every start.

`package_stamp` is that stat scan: how many `.py` files, their total size and the sum of their
mtimes (any one file changed changes it; the version lives in `__init__.py`). ~140 files cost
1.7 ms here, on the path of every start. `PackageWatch.current()` gives the same stamp, but scans
again only after the kernel said something in the package's folders changed (inotify: a write,
a truncation, a new mtime, a file created, removed or renamed, a folder added). The kernel queues
that event before the changing call returns, so a change made before `current()` is asked is
always seen, as the scan would see it: the check is exactly as strict, and costs one `read` of
an empty queue. Where inotify cannot be trusted or had (a network or FUSE filesystem, whose
remote writers it never sees; no instance or watch left) every call scans, as before.
"""

import ctypes
import errno
import os
import threading
from pathlib import Path

# inotify(7): what changes a folder's files or their metadata, and the folder itself going.
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_ONLYDIR = 0x01000000
WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
# Local filesystems, where every write goes through this kernel and so reaches inotify.
TRUSTED_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs", "bcachefs"}
)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def package_stamp(root: Path = PACKAGE_ROOT) -> str:
    """The stamp by a stat of every source file (`__pycache__` left out)."""
    return _scan(root, None)


def _scan(root: Path, watch: "_Inotify | None") -> str:
    """The stamp; with `watch`, each folder is watched before its entries are read, so a change
    to it from then on is queued even if this scan has already passed it."""
    mtimes = count = size = 0
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        if watch is not None:
            watch.add(folder)
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    count, size, mtimes = count + 1, size + st.st_size, mtimes + st.st_mtime_ns
    return f"{count}-{size}-{mtimes}"


class WatchFailed(Exception):
    """inotify gave out (no instance or watch left, or a read failed): scan every time."""


class _Inotify:
    """A non-blocking inotify instance (libc through ctypes); WatchFailed where none can be had."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _failure("inotify_init1")
        self.fd = fd

    def add(self, folder: str) -> None:
        """Watch `folder` (again: the same watch, no cost). A folder gone meanwhile is left to
        the scan to report; WatchFailed otherwise (ENOSPC: no watch left)."""
        if self.libc.inotify_add_watch(self.fd, os.fsencode(folder), WATCH_MASK) < 0:
            if ctypes.get_errno() == errno.ENOENT:
                return
            raise _failure(f"inotify_add_watch {folder}")

    def drain(self) -> bool:
        """Whether any event was queued since the last drain (all of them read now)."""
        seen = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return seen
            except OSError as exc:
                raise WatchFailed(f"inotify read: {exc}") from None
            if not data:
                return seen
            seen = True

    def close(self) -> None:
        os.close(self.fd)


def _failure(what: str) -> WatchFailed:
    return WatchFailed(f"{what}: {os.strerror(ctypes.get_errno())}")


def filesystem_of(path: Path) -> str | None:
    """The type of the filesystem `path` is on (the longest mount point over it in
    /proc/self/mountinfo), or None if that cannot be read."""
    target = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if "-" not in fields:
                    continue
                point = _unescape(fields[4])
                after = fields[fields.index("-") + 1 :]
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if after and inside and len(point) >= len(best):
                    best, kind = point, after[0]
    except OSError:
        return None
    return kind


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


class PackageWatch:
    """The package's stamp, scanned again only when inotify reported a change. Thread-safe."""

    def __init__(self, root: Path = PACKAGE_ROOT) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.stamp: str | None = None
        self.scans = 0  # for tests: how often the files were stat-ed
        self.watch: _Inotify | None = None
        if filesystem_of(root) in TRUSTED_FILESYSTEMS:
            try:
                self.watch = _Inotify()
            except (WatchFailed, OSError, AttributeError):  # none left, or a libc without it
                self.watch = None

    @property
    def watching(self) -> bool:
        return self.watch is not None

    def current(self) -> str:
        """The stamp now. A scan's own OSError (the package half removed by an upgrade) is
        raised as `package_stamp` raises it, and the next call scans again."""
        with self.lock:
            if self.watch is not None:
                try:
                    if self.watch.drain() or self.stamp is None:
                        self.stamp = None  # until this scan completes
                        self.scans += 1
                        self.stamp = _scan(self.root, self.watch)
                    return self.stamp
                except WatchFailed:
                    self.watch.close()
                    self.watch, self.stamp = None, None
            self.scans += 1
            return _scan(self.root, None)

    def close(self) -> None:
        with self.lock:
            if self.watch is not None:
                self.watch.close()
                self.watch = None
