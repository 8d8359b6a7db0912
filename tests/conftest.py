"""Shared fixtures: a fresh home per test, a real daemon process, a work directory."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.home import Home
from tests.harness import DaemonProcess, make_home, remove_home, short_tmpdir


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
def workdir() -> Iterator[Path]:
    path = short_tmpdir("arw-")
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def web(daemon):
    from tests.web_harness import WebProcess

    w = WebProcess(daemon.home).start()
    yield w
    w.stop()


# -- suite slices ---------------------------------------------------------------------------
# A test module that drives the real engine CLIs (it names node_modules or the engine harness)
# is an `engines` test; one that drives a browser is a `browser` test; one that needs sshd is
# an `sshd` test. `--fast` deselects all three, so the quick loop needs no npm, apt or sshd.
_SLOW_SLICES = {"engines": ("node_modules", "engine_harness"), "browser": ("playwright",),
                "sshd": ("sshd",)}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="skip tests that need the real engine CLIs, a browser or sshd")


def _slices_of(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        source = path.read_text()
        cache[path] = {name for name, needles in _SLOW_SLICES.items()
                       if any(needle in source for needle in needles)}
    return cache[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cache: dict[Path, set[str]] = {}
    kept, dropped = [], []
    for item in items:
        slices = _slices_of(Path(item.fspath), cache)
        for name in slices:
            item.add_marker(name)
        slices |= {name for name in _SLOW_SLICES if item.get_closest_marker(name)}
        (dropped if config.getoption("--fast") and slices else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
