"""Usage totals on batch views (the batch's and each run's, with its account and route: the
tool, the CLI text and the web batch page) and the user's price table: a cost computed from
`[prices."runtime:model"]` when the engine reports none, never invented otherwise."""

import re

import pytest

from agent_run.domain.errors import ConfigInvalid
from tests.batch_harness import make_repo, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, make_home, remove_home


def test_batch_and_run_views_total_what_their_runs_reported(daemon, web):
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(make_repo()),
            "prompt": "tokens: 7\ncost: 0.01",
            "runs": 2,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    for run in batch["runs"]:
        assert run["usage"] == {
            "executions": 1,
            "input_tokens": 7,
            "output_tokens": 7,
            "total_tokens": 14,
            "cost_usd": 0.01,
            "cost_reported_by": 1,
        }
        assert (run["account"], run["route"]) == (None, None)
    assert batch["usage"]["total_tokens"] == 28 and batch["usage"]["cost_usd"] == 0.02
    assert batch["usage"]["executions"] == 2
    text = cli(daemon.home, "batch", "show", batch["id"], "--format", "text").stdout
    assert "usage 28 tokens (14 in, 14 out), cost $0.0200" in text, text
    page = web.client().get(f"/batches/{batch['id']}").text
    assert re.search(r'id="batch-usage">28 tokens \(14 in, 14 out\) · cost \$0\.0200<', page)
    routes = page[page.index('id="run-routes"') :]
    assert routes.count("<td>14</td><td>$0.0100</td>") == 2


def test_a_batch_whose_engines_report_no_cost_shows_the_cost_as_unknown(daemon):
    batch = daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(make_repo()), "prompt": "cost: none", "runs": 1},
    )
    batch = wait_batch(daemon, batch["id"])
    assert batch["usage"]["cost_usd"] is None and batch["usage"]["total_tokens"] > 0
    text = cli(daemon.home, "batch", "show", batch["id"], "--format", "text").stdout
    assert "cost unknown" in text


PRICED = TEST_CONFIG + '[prices."demo:demo-1"]\ninput_per_mtok = 2.0\noutput_per_mtok = 10.0\n'


@pytest.fixture
def priced(workdir):
    home = make_home(PRICED)
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def _run(daemon, workdir, task: str, **caps) -> dict:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), **caps})
    return daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]


def test_the_price_table_prices_what_an_engine_reports_no_cost_for(priced, workdir):
    # 500k tokens each way: 0.5 x $2 + 0.5 x $10
    view = _run(priced, workdir, "cost: none\ntokens: 500000")
    assert view["state"] == "succeeded", view
    assert view["execution"]["cost_usd"] == pytest.approx(6.0)
    assert view["execution"]["cost_source"] == "price_table"
    own = _run(priced, workdir, "cost: 0.25\ntokens: 500000")  # the engine's own cost wins
    assert (own["execution"]["cost_usd"], own["execution"]["cost_source"]) == (0.25, "engine")
    capped = _run(priced, workdir, "cost: none\ntokens: 500000", max_cost_usd=5.0)
    assert (capped["state"], capped["failure_kind"]) == ("failed", "budget_exceeded"), capped
    assert (
        "reported cost $6.0000 passed max_cost_usd $5.0000"
        in (capped["execution"]["failure_message"])
    )


def test_without_a_price_the_cost_stays_null(daemon, workdir):
    view = _run(daemon, workdir, "cost: none\ntokens: 500000")
    assert (view["execution"]["cost_usd"], view["execution"]["cost_source"]) == (None, None)


@pytest.mark.parametrize(
    "entry,field",
    [
        (
            '[prices."nope:demo-1"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n',
            "prices.nope:demo-1",
        ),
        ('[prices."demo:gpt"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n', "prices.demo:gpt"),
        (
            '[prices."demo:demo-1"]\ninput_per_mtok = -1.0\noutput_per_mtok = 1.0\n',
            "prices.demo:demo-1.input_per_mtok",
        ),
        (
            '[prices."demo:demo-1"]\ninput_per_mtok = true\noutput_per_mtok = 1.0\n',
            "prices.demo:demo-1.input_per_mtok",
        ),
        ('[prices."demo:demo-1"]\ninput_per_mtok = 1.0\n', "prices.demo:demo-1.output_per_mtok"),
    ],
)
def test_a_bad_price_is_refused_naming_its_dotted_path(entry, field):
    from agent_run.config.model import parse_config

    with pytest.raises(ConfigInvalid) as refused:
        parse_config(TEST_CONFIG + entry)
    assert refused.value.field == field
