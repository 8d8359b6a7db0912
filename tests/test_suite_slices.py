"""The suite's slices: a test that reaches the real engine CLIs must say so with `engines`."""

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
"""
    )
    fast = pytester.runpytest("--fast", "-p", "no:cacheprovider")
    fast.assert_outcomes(passed=1, deselected=3)
    full = pytester.runpytest("-p", "no:cacheprovider")
    full.assert_outcomes(passed=4)


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
