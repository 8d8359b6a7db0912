"""Batches on the real engine CLIs against the mock provider: a ranked batch with Claude Code
(a validated batch with Codex lives beside the Codex engine tests)."""

from pathlib import Path

from tests.batch_harness import git, make_repo, runs_of, wait_batch
from tests.engine_harness import engine_daemon, runtime_block
from tests.support.mock_provider import MockProvider, Text, ToolCall


def candidate_script(n: int) -> list:
    return [ToolCall("Bash", {"command": f"echo 'candidate {n}' > feature.txt", "description": "write"}),
            ToolCall("mcp__agent_run_worker__create_commit", {"message": f"candidate {n} feature",
                                                              "files": ["feature.txt"]}),
            Text(f"Candidate {n} committed feature.txt.")]


def reviewer_script(score: int) -> list:
    return [ToolCall("mcp__agent_run_worker__submit_score", {"score": score, "reason": f"worth {score}"}),
            Text("Reviewed.")]


def test_ranked_batch_with_the_real_claude_cli(workdir):
    repo = make_repo()
    # concurrency 1 makes the order of model requests deterministic: c1, c2, then their reviewers.
    script = candidate_script(1) + candidate_script(2) + reviewer_script(60) + reviewer_script(90)
    with MockProvider(script) as mp, engine_daemon(runtime_block("claude", "claude", mp.url,
                                                                 "claude-sonnet-4-5")) as (home, daemon):
        batch = daemon.call("batch_start", {"workflow": "ranked", "project": str(repo), "runs": 2,
                                            "reviewers": 1, "concurrency": 1, "runtime": "claude",
                                            "prompt": "Add feature.txt.", "review_prompt": "Is it good?"})
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
