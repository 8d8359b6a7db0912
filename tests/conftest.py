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
# A test that drives the real engine CLIs is marked `engines`; one that drives a browser,
# `browser`; one that needs sshd, `sshd`. `--fast` deselects all three, so the quick loop needs
# no npm, apt or sshd. The marks are explicit; a test that reaches node_modules without the
# `engines` mark fails (tests.engine_harness.node_bin), so `--fast` cannot depend on npm silently.
SLOW_SLICES = ("engines", "browser", "sshd")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="skip tests that need the real engine CLIs, a browser or sshd",
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
