"""The suite's slices: a test that reaches the real engine CLIs must say so with `engines`."""

from pathlib import Path

import pytest

from tests.engine_harness import node_bin, runtime_block

pytest_plugins = ["pytester"]


def test_an_unmarked_test_cannot_reach_the_engine_clis():
    with pytest.raises(AssertionError, match="mark it @pytest.mark.engines"):
        node_bin()
    with pytest.raises(AssertionError, match="mark it @pytest.mark.engines"):
        runtime_block("r", "claude", "http://127.0.0.1:1", "m")


@pytest.mark.engines
def test_a_marked_test_gets_node_modules():
    assert node_bin().name == ".bin" and node_bin().parent.name == "node_modules"


def test_fast_deselects_every_slow_slice(pytester):
    pytester.makeconftest(open(__file__.replace("test_suite_slices.py", "conftest.py")).read())
    pytester.makepyfile(
        test_x="""
import pytest

def test_plain(): pass

@pytest.mark.engines
def test_engine(): pass

@pytest.mark.browser
def test_browser(): pass

@pytest.mark.sshd
def test_sshd(): pass

@pytest.mark.fresh
def test_fresh(): pass
"""
    )
    fast = pytester.runpytest("--fast", "-p", "no:cacheprovider")
    fast.assert_outcomes(passed=1, deselected=4)
    full = pytester.runpytest("-p", "no:cacheprovider")
    full.assert_outcomes(passed=5)


def test_a_zygote_daemon_is_its_own_session_with_a_popen_style_exit(home):
    import os

    from tests.harness import DaemonProcess

    daemon = DaemonProcess(home).start()
    try:
        pid = daemon.proc.pid
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
        assert daemon.proc.poll() is None and daemon.call("ping")["home"] == str(home.root)
        daemon.kill9()
        assert daemon.proc.returncode == -9 and daemon.proc.poll() == -9
    finally:
        daemon.stop()


# `--dist loadgroup` keeps an `xdist_group` on one worker (pytest 9.2 broke it silently with
# xdist 3.8: pyproject pins pytest below 9.2). Each test of this group records its worker in a
# file of this run; all must be one.
def _same_worker_as_the_rest_of_the_group(shared: Path) -> None:
    import os

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("one process: nothing to distribute")
    record = shared / "suite-slices-grouping"
    with record.open("a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\n")
    assert len(set(record.read_text().split())) == 1, record.read_text()


@pytest.mark.xdist_group("suite_slices_grouping")
@pytest.mark.parametrize("n", range(8))
def test_an_xdist_group_runs_on_one_worker(n, tmp_path_factory):
    # The parent of each worker's base temp is this run's, shared by its workers.
    _same_worker_as_the_rest_of_the_group(tmp_path_factory.getbasetemp().parent)
