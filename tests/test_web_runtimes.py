"""The Runtime and Model fields offer the daemon's roster (the `models` tool, the same one
`start` and `batch_start` check against): selects when every runtime lists its models, free
text for the model otherwise, and free text with the reason when the daemon cannot say."""

import re
from collections.abc import Iterator

import pytest

from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, make_home, remove_home

RUNTIMES = (
    TEST_CONFIG.replace('models = ["demo-1"]', 'models = ["demo-1", "demo-2"]')
    + """
[runtimes.quick]
engine = "demo"
models = ["quick-1"]
auth = { env = "QUICK_SECRET_VARIABLE" }
[runtimes.off]
engine = "demo"
enabled = false
models = ["off-1"]
"""
)


@pytest.fixture(name="home")
def runtimes_home() -> Iterator[Home]:
    h = make_home(RUNTIMES)
    yield h
    remove_home(h)


def options(html, select_id):
    select = re.search(rf'<select id="{select_id}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no <select id={select_id}>"
    return select.group(1)


def start_agent(web, client, workdir, **fields):
    form = {"task": "answer: picked", "workdir": str(workdir), "csrf": web.csrf(client), **fields}
    return client.post("/agents", data=form, headers={"origin": web.origin})


def test_the_forms_offer_the_enabled_runtimes_and_their_models(web, daemon, workdir):
    client = web.client()
    for path in ("/agents/new", "/batches/new"):
        html = client.get(path).text
        runtimes = re.findall(r'<option value="([^"]*)"', options(html, "f-runtime"))
        assert runtimes == ["", "demo", "quick"], (
            path
        )  # "off" is disabled; "" is the default (demo)
        assert "default (demo)" in html
        models = options(html, "f-model")
        groups = dict(
            re.findall(r'<optgroup label="(\w+)" data-runtime="\w+">(.*?)</optgroup>', models, re.S)
        )
        assert set(groups) == {"demo", "quick"}
        assert re.findall(r'value="([^"]+)"', groups["demo"]) == ["demo-1", "demo-2"]
        assert "demo-1 (default)" in groups["demo"] and "off-1" not in html
        assert "QUICK_SECRET_VARIABLE" not in html  # auth stays out of the page
    started = start_agent(web, client, workdir, runtime="quick", model="quick-1")
    assert started.status_code == 303, started.text
    agent = daemon.call("agent", {"agent_id": started.headers["location"].rsplit("/", 1)[1]})
    assert (agent["runtime"], agent["model"]) == ("quick", "quick-1")
    refused = start_agent(web, client, workdir, runtime="quick", model="demo-2")
    assert refused.status_code == 422
    assert re.search(r'id="e-model">[^<]+<', refused.text), refused.text
    # What was chosen stays chosen, in its runtime's group.
    assert re.search(r'<option value="quick" selected>', refused.text)
    assert re.search(
        r'<option value="demo-2" selected>demo-2 \(not offered\)</option>', refused.text
    )


def test_a_runtime_without_a_model_list_keeps_the_model_free_text(web, daemon, workdir):
    # No restart: `models` re-reads a changed config.toml, as `start` does.
    daemon.home.config_path.write_text(RUNTIMES + '[runtimes.open]\nengine = "demo"\n')
    client = web.client()
    html = client.get("/agents/new").text
    assert "open" in re.findall(r'<option value="([^"]*)"', options(html, "f-runtime"))
    assert re.search(r'<input id="f-model" name="model" list="f-models"', html)
    listed = re.search(r'<datalist id="f-models">(.*?)</datalist>', html, re.S).group(1)
    assert re.findall(r'value="([^"]+)"', listed) == ["demo-1", "demo-2", "quick-1"]
    started = start_agent(web, client, workdir, runtime="open", model="any-model-at-all")
    assert started.status_code == 303, started.text
    agent = daemon.call("agent", {"agent_id": started.headers["location"].rsplit("/", 1)[1]})
    assert (agent["runtime"], agent["model"]) == ("open", "any-model-at-all")


def test_an_invalid_config_edit_leaves_the_roster_the_daemon_serves(web, daemon, workdir):
    """The form offers what the daemon accepts, not what config.toml says: an invalid edit is
    refused by the daemon, which keeps its roster, so the form keeps offering it."""
    daemon.home.config_path.write_text("schema_version = 1\nbogus = 1\n")
    client = web.client()
    html = client.get("/batches/new").text
    runtimes = re.findall(r'<option value="([^"]*)"', options(html, "f-runtime"))
    assert runtimes == ["", "demo", "quick"]
    assert "bogus" not in html
    started = start_agent(web, client, workdir, runtime="quick", model="quick-1")
    assert started.status_code == 303, started.text


def test_without_the_daemon_both_fields_are_free_text_and_say_why(web, daemon):
    daemon.stop()  # the test web process never autostarts one
    html = web.client().get("/batches/new").text
    assert re.search(r'<input id="f-runtime" name="runtime"', html)
    assert re.search(r'<input id="f-model" name="model"', html)
    assert "The daemon could not list the runtimes (" in html
