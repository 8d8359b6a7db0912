"""Shared fixtures: a fresh home per test, a real daemon process, a work directory, a git
project to run batches in."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.system.home import Home
from tests.batch_harness import BatchProject, make_repo
from tests.harness import (
    MADE_BY,
    TMPDIRS_MADE,
    DaemonProcess,
    make_home,
    remove_home,
    remove_tmpdirs,
    short_tmpdir,
)


@pytest.fixture(autouse=True)
def _remove_tmpdirs_of_the_test() -> Iterator[None]:
    """Remove every folder the test and its function fixtures made with short_tmpdir (homes,
    repositories with their worktrees), after those fixtures' own teardown (this one is set up
    first, so it is torn down last). Folders of wider-scoped fixtures are theirs to remove."""
    first = len(TMPDIRS_MADE)
    yield
    remove_tmpdirs(TMPDIRS_MADE[first:])


@pytest.fixture(scope="session", autouse=True)
def _no_folder_left_behind() -> Iterator[None]:
    """The session-end check, which fails the run: a folder this process made with short_tmpdir
    (a module or session fixture's too) still there when the session ends is removed and
    reported as an error at the teardown of the last test (each xdist worker checks its own).
    Set up before any other session fixture, so it is torn down after them all."""
    yield
    leftovers = remove_tmpdirs(TMPDIRS_MADE)
    if leftovers:
        made = "\n".join(f"  {path}  (made by {MADE_BY.get(path, '?')})" for path in leftovers)
        pytest.fail(f"temporary folders left behind (now removed):\n{made}", pytrace=False)


# The suite starts hundreds of Python processes (CLI calls, daemons, supervisors, web
# servers, xdist workers), each importing the same stack. Where PYTHONDONTWRITEBYTECODE is set,
# every one of them compiled every module from source again (a third of a CLI call's CPU), and
# pytest re-rewrote every test module's asserts in every worker. The suite writes bytecode
# caches (`__pycache__/`, git-ignored) like a default Python does; what runs is the same code.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Git as on a machine with no git config at all: no identity, hooks, signing or aliases of the
# contributor's ~/.gitconfig or /etc/gitconfig reach a test, a daemon or a supervisor, and
# nothing the suite does writes there. A test repository that commits names its own identity
# (tests/batch_harness.py's GIT); agent-run's own commits name theirs (system/git.py).
os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
os.environ["GIT_CONFIG_NOSYSTEM"] = "1"


@pytest.fixture
def home() -> Iterator[Home]:
    h = make_home()
    yield h
    remove_home(h)


@pytest.fixture
def daemon(home: Home) -> Iterator[DaemonProcess]:
    d = DaemonProcess(home).start()
    yield d
    d.stop()


@pytest.fixture
def daemon_for() -> Iterator:
    """start(config text) -> (home, daemon): a daemon on a home of its own with that config.toml,
    whose environment holds a variable nothing it starts for capacity may see."""
    started: list[tuple[Home, DaemonProcess]] = []

    def start(config: str) -> tuple[Home, DaemonProcess]:
        home = make_home(config)
        daemon = DaemonProcess(home, env={"SECRET_OF_THE_DAEMON": "x"}).start()
        started.append((home, daemon))
        return home, daemon

    yield start
    for home, daemon in started:
        daemon.stop()
        remove_home(home)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = short_tmpdir("arw-")
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def batch_project(daemon: DaemonProcess) -> Iterator[BatchProject]:
    """The daemon and a fresh git repository to run batches in; the repository's folder (with
    the runs' worktrees beside it) is removed afterwards."""
    project = BatchProject(daemon, make_repo())
    yield project
    import shutil

    shutil.rmtree(project.repo.parent, ignore_errors=True)


@pytest.fixture
def web(daemon):
    from tests.web_harness import WebProcess

    w = WebProcess(daemon.home).start()
    yield w
    w.stop()


# -- suite slices ---------------------------------------------------------------------------
# A test that drives the real engine CLIs is marked `engines`; one that drives a browser,
# `browser`; one that needs sshd, `sshd`; one that bootstraps a fresh machine from PyPI (uv and
# the locked wheels into a new HOME, about a minute), `fresh`. `--fast` deselects all four, so
# the quick loop needs no npm, apt, sshd or network. The marks are explicit; a test that
# reaches node_modules without the `engines` mark fails (tests.engine_harness.node_bin), so
# `--fast` cannot depend on npm silently.
SLOW_SLICES = ("engines", "browser", "sshd", "fresh")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="skip tests that need the real engine CLIs, a browser, sshd or PyPI (fresh)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast"):
        return
    kept, dropped = [], []
    for item in items:
        slow = any(item.get_closest_marker(name) for name in SLOW_SLICES)
        (dropped if slow else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from tests import engine_harness

    engine_harness.running_test_is_marked["engines"] = (
        item.get_closest_marker("engines") is not None
    )
