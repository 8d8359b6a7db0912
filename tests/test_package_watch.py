"""The fork server's package stamp: scanned again only when inotify saw a change, and exactly as
strict as a scan on every call (real folders, real files, the real kernel queue)."""

import os
import shutil
from pathlib import Path

import pytest

from agent_run.supervisor.package_watch import (
    TRUSTED_FILESYSTEMS,
    PackageWatch,
    _unescape,
    filesystem_of,
    package_stamp,
)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "agent_run"
    (root / "supervisor").mkdir(parents=True)
    (root / "__init__.py").write_text('__version__ = "1"\n')
    (root / "supervisor" / "run.py").write_text("x = 1\n")
    (root / "web.css").write_text("body {}\n")
    return root


@pytest.fixture
def watch(package: Path):
    assert filesystem_of(package) in TRUSTED_FILESYSTEMS, "the temp folder is on a local disk"
    found = PackageWatch(package)
    assert found.watching
    yield found
    found.close()


def test_the_stamp_is_the_scans_and_is_not_scanned_again_while_nothing_changes(watch, package):
    assert watch.current() == package_stamp(package)
    for _ in range(5):
        assert watch.current() == package_stamp(package)
    assert watch.scans == 1


@pytest.mark.parametrize(
    "change",
    [
        "append",
        "same_size_rewrite_new_mtime",
        "touch",
        "new_file",
        "delete",
        "rename_over",
        "new_folder_then_file_in_it",
    ],
)
def test_every_change_to_a_source_file_changes_the_stamp_at_once(watch, package, change):
    run = package / "supervisor" / "run.py"
    before = watch.current()
    if change == "append":
        with open(run, "a") as fh:
            fh.write("y = 2\n")
    elif change == "same_size_rewrite_new_mtime":
        st = run.stat()
        with open(run, "r+") as fh:
            fh.write("x = 2\n")
        os.utime(run, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    elif change == "touch":
        st = run.stat()
        os.utime(run, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    elif change == "new_file":
        (package / "extra.py").write_text("")
    elif change == "delete":
        run.unlink()
    elif change == "rename_over":
        fresh = package / "supervisor" / ".run.py.tmp"
        fresh.write_text("x = 100\n")
        os.replace(fresh, run)
    elif change == "new_folder_then_file_in_it":
        (package / "engines").mkdir()
        assert watch.current() == package_stamp(package)  # the new folder is watched from here
        before = watch.current()
        (package / "engines" / "new.py").write_text("z = 3\n")
    after = watch.current()
    assert after == package_stamp(package)
    assert after != before


def test_a_change_to_other_files_rescans_but_keeps_the_stamp(watch, package):
    before = watch.current()
    (package / "web.css").write_text("body { color: red }\n")
    (package / "supervisor" / "__pycache__").mkdir()
    (package / "supervisor" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"x")
    assert watch.current() == before
    scans = watch.scans
    (package / "supervisor" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"yy")
    assert watch.current() == before
    assert watch.scans == scans, "a compiled file is not the package's source"


def test_a_package_half_removed_raises_as_the_scan_does_and_the_next_call_scans_again(
    watch, package
):
    watch.current()
    shutil.rmtree(package)
    with pytest.raises(FileNotFoundError):
        watch.current()
    with pytest.raises(FileNotFoundError):
        package_stamp(package)
    (package / "supervisor").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "2"\n')
    assert watch.current() == package_stamp(package)


def test_where_inotify_cannot_be_trusted_every_call_scans(tmp_path):
    # /proc is no local disk: the filesystem type alone decides, as for NFS or FUSE
    assert filesystem_of(Path("/proc/self")) == "proc"
    root = Path("/proc/self/fdinfo")
    untrusted = PackageWatch(root)
    assert not untrusted.watching
    untrusted.current()
    untrusted.current()
    assert untrusted.scans == 2


def test_mount_points_are_read_with_their_escapes():
    assert _unescape(r"/mnt/my\040disk\011tab\134slash") == "/mnt/my disk\ttab\\slash"


def test_the_installed_package_is_watched_here():
    watch = PackageWatch()
    try:
        assert watch.watching
        assert watch.current() == package_stamp()
    finally:
        watch.close()
