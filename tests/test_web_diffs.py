"""The Changes tab, one section per file: `web/diffs.py` splits real `git diff` output (renames,
deletions, binary files, quoted names, added lines that look like headers), and the tab shows
each file with its path and +/- counts, every untracked file's preview, and a cut note."""

import re
import subprocess
from pathlib import Path

from agent_run.web.diffs import MAX_FILE_LINES, split_diff
from tests.batch_harness import git, make_repo, wait_batch


def test_split_diff_reads_real_git_output_file_by_file():
    repo = make_repo({"README.md": "# project\n", "old.txt": "a\nb\n", "gone.txt": "bye\n"})
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "mv", "old.txt", "new name.txt")
    (repo / "new name.txt").write_text("a\nb\nc\n")
    (repo / "gone.txt").unlink()
    (repo / "README.md").write_text("++ not a header\n-- nor this\n")
    (repo / "café.bin").write_bytes(b"\x00\x01binary")
    (repo / "<img src=x>.md").write_text("probe\n")
    git(repo, "add", "-A")
    text = subprocess.run(
        ["git", "diff", "-M", base, "--"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    files = {f.path: f for f in split_diff(text)}
    assert set(files) == {"README.md", "new name.txt", "gone.txt", "café.bin", "<img src=x>.md"}
    readme = files["README.md"]
    assert (readme.added, readme.removed) == (2, 1) and "+++ not a header" not in readme.meta
    assert "+++ not a header" in readme.lines and "+-- nor this" in readme.lines
    renamed = files["new name.txt"]
    assert (renamed.added, renamed.removed) == (1, 0)
    assert any(m.startswith("rename from old.txt") for m in renamed.meta)
    assert (files["gone.txt"].added, files["gone.txt"].removed) == (0, 1)
    assert any(m.startswith("deleted file") for m in files["gone.txt"].meta)
    assert any(m.startswith("Binary files") for m in files["café.bin"].meta)
    assert not any(f.cut for f in files.values())
    cut = split_diff(text[: text.index("probe")], truncated=True)
    assert [f.cut for f in cut] == [False] * (len(cut) - 1) + [True]
    long = split_diff(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n" + "+l\n" * (MAX_FILE_LINES + 10)
    )[0]
    assert long.added == MAX_FILE_LINES + 10 and long.hidden == 11 and long.folded


def test_the_changes_tab_has_a_section_per_file_with_counts_and_each_untracked_preview(web, daemon):
    repo = make_repo({"README.md": "# project\nline two\n"})
    prompt = (
        "write: one.txt = first file\nwrite: two.txt = second file\n"
        "commit: Add two files\nanswer: done"
    )
    started = daemon.call(  # a ranked candidate: the stage that commits
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": prompt,
            "review_prompt": "score: 5",
        },
    )
    batch = wait_batch(daemon, started["id"])
    run = next(r for r in batch["runs"] if r["stage"] == "candidate")
    assert run["state"] == "succeeded", batch["state_reason"]
    worktree = Path(run["worktree"])
    (worktree / "README.md").write_text("# project, edited\n")  # uncommitted, tracked
    (worktree / "notes <b>.txt").write_text("an <b>untracked</b> note\n")
    (worktree / "later.txt").write_text("another\n")
    page = web.client().get(f"/batches/{batch['id']}/runs/{run['id']}?tab=changes").text
    sections = re.findall(
        r'<details class="file-diff" id="file-\d+" open>\s*<summary><span class="path">([^<]+)</span>'
        r' <span class="add">\+(\d+)</span> <span class="del">−(\d+)</span>',
        page,
    )
    assert sections == [("README.md", "1", "2"), ("one.txt", "1", "0"), ("two.txt", "1", "0")]
    assert "3 files changed" in page and "+3" in page and "−2" in page
    untracked = re.findall(
        r'<details class="untracked" open><summary><span class="path">([^<]+)</span>.*?'
        r'<pre class="preview">([^<]*)</pre>',
        page,
        re.S,
    )
    assert untracked == [
        ("later.txt", "another\n"),
        ("notes &lt;b&gt;.txt", "an &lt;b&gt;untracked&lt;/b&gt; note\n"),
    ]
    assert "diff-truncated" not in page
