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
