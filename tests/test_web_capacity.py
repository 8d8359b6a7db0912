"""The web UI's Capacity page (limits and the route order, server-rendered and escaped, linked
from the nav) and the route shown on the agent page, against a real daemon whose `command`
collector is a real process."""

from pathlib import Path

from tests.harness import DaemonProcess, make_home, remove_home
from tests.test_capacity_sources import EXPLAINED_RUNTIMES, _collector_config
from tests.web_harness import WebProcess


def _rig(tmp_path: Path, mode: str, extra: str = "") -> tuple:
    home = make_home(_collector_config(mode, tmp_path / "runs.txt", extra=extra))
    daemon = DaemonProcess(home, env={"ALPHA_KEY": "key-a", "BETA_KEY": "key-b"}).start()
    daemon.call("capacity_collect", {})
    return home, daemon, WebProcess(home).start()


def test_capacity_page_shows_the_route_order_and_limits_linked_from_the_nav(
    tmp_path, workdir
) -> None:
    home, daemon, web = _rig(tmp_path, "ok")
    try:
        client = web.client()
        assert '<a href="/capacity">Capacity</a>' in client.get("/").text
        page = client.get("/capacity")
        assert page.status_code == 200
        html = page.text
        order = (
            html.index("<code>beta/-/default</code>"),
            html.index("<code>alpha/-/default</code>"),
        )
        assert order[0] < order[1], "beta (1.80) ranks above alpha (1.60)"
        assert "1.80" in html and "1.60" in html and "room to spare" in html
        agent = daemon.call(
            "start",
            {"task": "answer: ok", "workdir": str(workdir), "route": "auto", "model": "demo-1"},
        )
        shown = client.get(f"/agents/{agent['id']}").text
        assert "<code>beta/-/default</code>" in shown and "chosen by --route auto" in shown
        named = daemon.call(
            "start", {"task": "answer: ok", "workdir": str(workdir), "runtime": "alpha"}
        )
        assert "named by the request" in client.get(f"/agents/{named['id']}").text
    finally:
        web.stop()
        daemon.stop()
        remove_home(home)


def test_capacity_page_escapes_what_a_collector_reports(tmp_path) -> None:
    home, daemon, web = _rig(tmp_path, "html")
    try:
        html = web.client().get("/capacity").text
        assert "<i>lane</i>" not in html and "&lt;i&gt;lane&lt;/i&gt;" in html
    finally:
        web.stop()
        daemon.stop()
        remove_home(home)


def test_capacity_page_shows_credits_aliases_markers_and_labels(tmp_path) -> None:
    home, daemon, web = _rig(tmp_path, "explained", EXPLAINED_RUNTIMES)
    try:
        html = web.client().get("/capacity").text
        routes = html[html.index('<table class="capacity-routes">') : html.index("</table>")]
        # one row for the pool alpha and gamma share, named by gamma (weight 2)
        assert routes.count("<tr><td>") == 1 and "<code>gamma/-/default</code>" in routes
        assert "<code>gamma/-</code> (weight 2), <code>alpha/-</code> (weight 1)" in routes
        assert "2 (× 1.67)" in routes and "5.00" in routes  # 1.5 x 2 x (1 + 2/3)
        assert "slack +0.50, projected 50 % at reset" in routes
        assert 'data-marker="warmup"' in routes  # alpha and gamma read 7d at one moment
        assert '<span class="badge warn label">exhausted</span> window 5h is exhausted' in html
        assert '<span class="badge warn label">stale_sample</span>' in html
        assert "<code>broken</code>: /nonexistent/claude not found" in html
        limits = html[html.index('<table class="capacity-limits">') :]
        assert "warmup (one reading)" in limits and "no fresh reading" in limits
    finally:
        web.stop()
        daemon.stop()
        remove_home(home)
