"""A batch's identity and the list of batches (issue 37, item 1): its title (given, or its
prompt's first line), the list's title, prompt excerpt and counts, search by words through the
FTS5 index, state filters and keyset cursors that compose with them, and archiving."""

import json
import sqlite3

import pytest

from agent_run.domain.errors import DomainError
from agent_run.domain.run_results import default_title
from agent_run.store import batches as batches_q
from agent_run.store import db as store_db
from tests.batch_harness import BatchProject, runs_of, wait_batch
from tests.harness import short_tmpdir


def _refused(daemon, method: str, params: dict, field: str) -> DomainError:
    """`method` refuses `params`, naming `field`."""
    with pytest.raises(DomainError) as caught:
        daemon.call(method, params)
    assert caught.value.field == field, (caught.value.code, caught.value.message)
    return caught.value


def test_a_batch_is_titled_by_its_own_title_or_its_prompts_first_line(
    batch_project: BatchProject,
) -> None:
    daemon = batch_project.daemon
    untitled = batch_project.finish(
        "repeated", runs=1, prompt="\n   Fix the flaky login test  \nanswer: fixed"
    )
    titled = batch_project.finish(
        "repeated", runs=2, title="Login: pick the best fix", prompt="answer: done"
    )
    assert untitled["title"] == "Fix the flaky login test"
    assert titled["title"] == "Login: pick the best fix"
    listed = {b["id"]: b for b in daemon.call("list_batches", {})["items"]}
    row = listed[titled["id"]]
    assert (row["title"], row["workflow"], row["runs"], row["counts"]) == (
        "Login: pick the best fix",
        "repeated",
        2,
        {"succeeded": 2},
    )
    assert row["prompt_excerpt"] == "answer: done"
    assert listed[untitled["id"]]["prompt_excerpt"] == "Fix the flaky login test answer: fixed"
    # A title is one line: a control character is refused, naming the field.
    _refused(
        daemon,
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(batch_project.repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "answer: x",
            "title": "two\nlines",
        },
        "title",
    )


def test_a_default_title_is_one_line_of_plain_text() -> None:
    assert default_title("\n\t Fix it \r\nmore") == "Fix it"
    assert default_title("\x1b[31mred\x07 alert\nmore") == "[31mred  alert"
    assert len(default_title("x" * 500)) == 200


def test_list_batches_finds_batches_by_words_and_composes_with_state(
    batch_project: BatchProject,
) -> None:
    daemon = batch_project.daemon
    flaky = batch_project.finish("repeated", runs=1, prompt="Make the flaky tests pass\nanswer: x")
    docs = batch_project.finish(
        "repeated", runs=1, title="Docs", prompt="Rewrite the README tour\nanswer: y"
    )
    failing = batch_project.finish("repeated", runs=1, prompt="Fix flaky CI on arm\nfail: auth")
    assert failing["state"] == "failed"

    def found(**params) -> list[str]:
        return [b["id"] for b in daemon.call("list_batches", params)["items"]]

    assert found(q="flak") == [failing["id"], flaky["id"]]  # a word is also a prefix
    assert found(q="flaky tests") == [flaky["id"]]  # every word must match
    assert found(q="readme") == [docs["id"]]  # the prompt, case-insensitive
    assert found(q="docs") == [docs["id"]]  # the title
    assert found(q=batch_project.repo.parent.name) == found()  # the project folder
    assert found(q="flaky", state=["failed"]) == [failing["id"]]
    assert daemon.call("list_batches", {"q": "flaky"})["total"] == 2
    # No FTS syntax reaches SQLite: quotes, operators and parentheses are words or nothing.
    assert found(q='flaky" OR "docs') == []
    assert found(q="NOT (flaky") == []
    _refused(daemon, "list_batches", {"q": '" ( *'}, "q")


def test_pages_follow_the_cursor_through_every_filter(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    made = [
        batch_project.start("repeated", runs=1, prompt=f"answer: page {n}")["id"] for n in range(5)
    ]
    for batch_id in made:
        wait_batch(daemon, batch_id)

    def pages(**params) -> list[list[str]]:
        got, cursor = [], None
        while True:
            page = daemon.call(
                "list_batches", {**params, "limit": 2, **({"cursor": cursor} if cursor else {})}
            )
            got.append([b["id"] for b in page["items"]])
            cursor = page["next_cursor"]
            if cursor is None:
                return got

    newest_first = list(reversed(made))
    assert pages() == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
    assert pages(q="page") == pages()
    assert pages(q="page", state=["completed"]) == pages()
    assert pages(state=["failed"]) == [[]]
    _refused(daemon, "list_batches", {"cursor": "1.5/bt_x", "offset": 1}, "offset")
    _refused(daemon, "list_batches", {"cursor": "not a cursor"}, "cursor")


def test_an_ended_batch_is_archived_out_of_the_list_and_back(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    kept = batch_project.finish("repeated", runs=1, prompt="answer: kept")
    gone = batch_project.finish("repeated", runs=1, prompt="answer: archived")
    live = batch_project.start("repeated", runs=1, prompt="steps: 400\nstep_seconds: 0.05")
    refused = _refused(daemon, "batch_archive", {"batch_id": live["id"]}, "batch_id")
    assert refused.code == "Conflict" and refused.details["state"] in ("queued", "running")
    daemon.call("batch_cancel", {"batch_id": live["id"]})
    wait_batch(daemon, live["id"])

    view = daemon.call("batch_archive", {"batch_id": gone["id"]})
    assert view["archived_at"] is not None
    listed = daemon.call("list_batches", {})
    assert gone["id"] not in [b["id"] for b in listed["items"]] and listed["total"] == 2
    everything = daemon.call("list_batches", {"include_archived": True})
    assert [b["id"] for b in everything["items"]] == [live["id"], gone["id"], kept["id"]]
    assert daemon.call("list_batches", {"q": "archived"})["items"] == []
    # A rerun reopens it: live again, it is listed again.
    run = daemon.call("batch", {"batch_id": gone["id"]})["runs"][0]
    daemon.call("run_rerun", {"run_id": run["id"]})
    again = wait_batch(daemon, gone["id"])
    assert again["archived_at"] is None
    assert gone["id"] in [b["id"] for b in daemon.call("list_batches", {})["items"]]
    # archived=false brings one back by hand.
    daemon.call("batch_archive", {"batch_id": kept["id"]})
    daemon.call("batch_archive", {"batch_id": kept["id"], "archived": False})
    assert daemon.call("list_batches", {"q": "kept"})["total"] == 1
    assert runs_of(again, "worker")[0]["attempt"] == 2


def _plans(conn: sqlite3.Connection, **filters) -> list[str]:
    """The query plan of every statement list_batches runs with these filters."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    batches_q.list_batches(conn, limit=50, **filters)
    conn.set_trace_callback(None)
    ours = [s for s in statements if s.startswith("SELECT") and "FROM batches" in s]
    assert len(ours) == 2, statements  # the total and the page (values bound in the text)
    return [row[3] for sql in ours for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"after": (1.0, "bt_x")},
        {"include_archived": True, "after": (1.0, "bt_x")},
        {"states": ["blocked"], "after": (1.0, "bt_x")},
        {"q": "flaky", "after": (1.0, "bt_x")},
    ],
)
def test_a_page_of_batches_is_an_index_range_never_a_table_scan(filters) -> None:
    conn = store_db.connect(short_tmpdir("arl-") / "state.db")
    plans = _plans(conn, **filters)
    assert plans and not [p for p in plans if p.startswith("SCAN batches") and "INDEX" not in p]
    assert any("USING INDEX" in p or "VIRTUAL TABLE" in p for p in plans), plans
    conn.close()


def test_the_upgrade_titles_old_batches_and_indexes_them_for_search() -> None:
    path = short_tmpdir("aru-") / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    ours = next(n for n, name, _ in store_db.migrations() if name.endswith("_batch_results.sql"))
    for number, _name, sql in store_db.migrations():
        if number < ours:
            for statement in store_db._split_sql(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
    for batch_id, prompt in (("bt_old", "\n\n  Tidy the parser \r\nsteps: 2"), ("bt_none", None)):
        config = json.dumps({"prompt": prompt} if prompt else {})
        conn.execute(
            "INSERT INTO batches (id, request_hash, workflow, config_json, project_root,"
            " project_subdir, base_ref, base_sha, worktree_root, state, created_at, updated_at)"
            " VALUES (?, 'h', 'repeated', ?, '/p', '', 'HEAD', 'abc', '/w', 'completed', 1, 1)",
            (batch_id, config),
        )
    store_db.migrate(conn)
    titles = dict(conn.execute("SELECT id, title FROM batches").fetchall())
    assert titles == {"bt_old": "Tidy the parser", "bt_none": ""}
    rows, total = batches_q.list_batches(conn, limit=10, q="parser")
    assert ([r["id"] for r in rows], total) == (["bt_old"], 1)
    conn.close()
