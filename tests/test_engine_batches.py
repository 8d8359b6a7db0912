"""Batches on the real engine CLIs against the mock provider: a ranked batch with Claude Code,
a validated batch with Codex, and a merge conflict's follow-up done by Claude Code."""

from pathlib import Path

import pytest

from tests.batch_harness import git, make_repo, runs_of, wait_batch
from tests.engine_harness import engine_daemon, runtime_block
from tests.support.mock_provider import Dynamic, MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules


def candidate_script(n: int) -> list:
    return [
        ToolCall(
            "Bash", {"command": f"echo 'candidate {n}' > feature.txt", "description": "write"}
        ),
        ToolCall(
            "mcp__agent_run_worker__create_commit",
            {"message": f"candidate {n} feature", "files": ["feature.txt"]},
        ),
        Text(f"Candidate {n} committed feature.txt."),
    ]


def reviewer_script(score: int) -> list:
    return [
        ToolCall(
            "mcp__agent_run_worker__submit_score", {"score": score, "reason": f"worth {score}"}
        ),
        Text("Reviewed."),
    ]


def test_ranked_batch_with_the_real_claude_cli(workdir):
    repo = make_repo()
    # concurrency 1 makes the order of model requests deterministic: c1, c2, then their reviewers.
    script = candidate_script(1) + candidate_script(2) + reviewer_script(60) + reviewer_script(90)
    with (
        MockProvider(script) as mp,
        engine_daemon(runtime_block("claude", "claude", mp.url, "claude-sonnet-4-5")) as (
            home,
            daemon,
        ),
    ):
        batch = daemon.call(
            "batch_start",
            {
                "workflow": "ranked",
                "project": str(repo),
                "runs": 2,
                "reviewers": 1,
                "concurrency": 1,
                "runtime": "claude",
                "prompt": "Add feature.txt.",
                "review_prompt": "Is it good?",
            },
        )
        done = wait_batch(daemon, batch["id"], timeout=240)
        assert done["state"] == "completed", done
        candidates = {c["index"]: c for c in runs_of(done, "candidate")}
        assert (candidates[1]["score"], candidates[2]["score"]) == (60, 90)
        assert (candidates[2]["rank"], candidates[1]["rank"]) == (1, 2)
        for n, c in candidates.items():
            assert git(repo, "log", "-1", "--format=%s", c["branch"]) == f"candidate {n} feature"
            assert (Path(c["worktree"]) / "feature.txt").read_text() == f"candidate {n}\n"
        # Reviewers ran read-only: Claude was not offered the write tools.
        reviewer_requests = mp.main_requests()[-4:]
        for request in reviewer_requests:
            names = set(request.tool_names())
            assert "Read" in names and not {"Bash", "Write", "Edit", "MultiEdit"} & names, names
        assert mp.unscripted == 0


def _worker_paths(request) -> list[str]:
    import re

    return re.findall(r"^- worker \d+: (\S+)$", request.text(), re.M)


def test_validated_batch_with_the_real_codex_cli(workdir):
    import json

    repo = make_repo()
    worker = [
        ToolCall("exec_command", {"cmd": "echo 42 > answer.txt"}),
        ToolCall(
            "mcp__agent_run_worker__submit_result",
            {"files": [{"path": "answer.txt", "explanation": "the answer"}]},
        ),
        Text("Submitted."),
    ]
    verdict = {
        "workers": [
            {"worker": 1, "pass": True, "reason": "42"},
            {"worker": 2, "pass": False, "reason": "late"},
        ],
        "winner": 1,
    }
    validator = [
        Dynamic(
            lambda r: ToolCall(
                "exec_command",
                {"cmd": "cat " + " ".join(f"{p}/answer.txt" for p in _worker_paths(r))},
            )
        ),
        ToolCall(
            "mcp__agent_run_worker__finish", {"summary": json.dumps(verdict), "status": "done"}
        ),
        Text("Validated."),
    ]
    with (
        MockProvider(worker + worker + validator) as mp,
        engine_daemon(runtime_block("codex", "codex", mp.url + "/v1", "gpt-5.5")) as (home, daemon),
    ):
        batch = daemon.call(
            "batch_start",
            {
                "workflow": "validated",
                "project": str(repo),
                "runs": 2,
                "concurrency": 1,
                "runtime": "codex",
                "prompt": "Write the answer to answer.txt.",
            },
        )
        done = wait_batch(daemon, batch["id"], timeout=240)
        assert done["state"] == "completed", done
        workers = runs_of(done, "worker")
        assert all((Path(w["workdir"]) / "answer.txt").read_text() == "42\n" for w in workers)
        assert all(w["result"]["files"][0]["path"] == "answer.txt" for w in workers)
        result = runs_of(done, "validator")[0]["result"]
        assert result["winner"] == 1 and [v["pass"] for v in result["workers"]] == [True, False]
        # The validator read both worker worktrees (read-only sandbox, from the project folder).
        cat_output = mp.main_requests()[-2].tool_results()[-1].output
        # Whole lines: Codex heads a tool's output with a random `Chunk ID: <hex>`, which can
        # itself hold "42" (one run in ~50).
        assert [line for line in cat_output.splitlines() if line.strip() == "42"] == ["42"] * 2, (
            cat_output
        )
        assert mp.unscripted == 0


def _merge_command(request) -> str:
    """The command the follow-up the model was sent names (`git merge <into>`)."""
    import re

    [command] = re.findall(r"`(git merge [^`]+)`", request.text())
    return command


def test_a_merge_conflicts_follow_up_is_done_by_the_real_claude_cli_in_its_sandbox(workdir):
    """A run's branch and main both change README.md: `run_merge` conflicts, and Claude Code runs
    the command the follow-up names with its Bash tool, in its sandbox (HEAD read-only),
    resolves, commits with plain git; the run then merges cleanly, the resolution on main."""
    from tests.test_run_merge import commit_in, parents

    repo = make_repo()
    resolve = "printf '# resolved\\n' > README.md && git add README.md && git commit --no-edit"
    script = [
        Text("Nothing to change."),
        Dynamic(lambda r: ToolCall("Bash", {"command": _merge_command(r), "description": "m"})),
        ToolCall("Bash", {"command": resolve, "description": "resolve"}),
        Text("Merged main and resolved README.md."),
    ]
    with (
        MockProvider(script) as mp,
        engine_daemon(runtime_block("claude", "claude", mp.url, "claude-sonnet-4-5")) as (
            _,
            daemon,
        ),
    ):
        batch = daemon.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(repo),
                "runs": 1,
                "runtime": "claude",
                "prompt": "Look around.",
            },
        )
        done = wait_batch(daemon, batch["id"], timeout=240)
        [run] = runs_of(done, "worker")
        assert done["state"] == "completed", done
        run_tip = commit_in(Path(run["worktree"]), {"README.md": "# on the run\n"}, "run's readme")
        main_tip = commit_in(repo, {"README.md": "# on main\n"}, "main's readme")
        conflict = daemon.call("run_merge", {"run_id": run["id"]})
        assert conflict["conflicts"] == ["README.md"], conflict
        daemon.call("run_followup", {"run_id": run["id"], "text": conflict["followup_text"]})
        done = wait_batch(daemon, batch["id"], timeout=240)
        assert done["state"] == "completed", done
        tip = git(repo, "rev-parse", run["branch"])
        assert parents(repo, tip) == [run_tip, main_tip], mp.main_requests()[-1].text()[-2000:]
        merged = daemon.call("run_merge", {"run_id": run["id"]})
        assert merged["new_sha"] == git(repo, "rev-parse", "main"), merged
        assert (repo / "README.md").read_text() == "# resolved\n"
        assert mp.unscripted == 0
