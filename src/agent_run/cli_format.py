"""Human-readable rendering of tool results for `--format text`."""

import time
from typing import Any


def _ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    seconds = max(0, int(time.time() - ts))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


def _agent(a: dict[str, Any]) -> str:
    ex = a["execution"]
    lines = [f"{a['id']}  {a['state']}" + (f" ({a['failure_kind']})" if a["failure_kind"] else ""),
             f"  runtime {a['runtime']} / {a['model']}  profile {a['profile']}  created {_ago(a['created_at'])}",
             f"  workdir {a['workdir']}",
             f"  task    {a['task'].splitlines()[0][:100] if a['task'] else ''}",
             f"  execution #{ex['number']} {ex['id']}  events {a['event_count']}"]
    if ex.get("failure_advice"):
        lines.append(f"  why     {ex.get('failure_message') or ''}")
        lines.append(f"  advice  {ex['failure_advice']}")
    if a.get("verdict"):
        lines.append(f"  verdict {a['verdict']} (from the worker tool `finish`)")
    if ex.get("answer_sha256"):
        lines.append(f"  answer  {ex['answer_bytes']} bytes, sha256 {ex['answer_sha256']}")
        if ex.get("answer_verified") is False:
            lines.append("  answer  NOT VERIFIED: answer.md no longer matches its sha256"
                         " (see its integrity_failed event)")
    elif a.get("last_message"):
        lines.append(f"  last    {a['last_message'].splitlines()[0][:100]}")
    return "\n".join(lines)


def render(kind: str, data: Any) -> str:
    if kind in ("start", "agent"):
        return _agent(data)
    if kind == "wait":
        prefix = "still running (timed out)\n" if data["timed_out"] else ""
        return prefix + _agent(data["agent"])
    if kind == "list_agents":
        rows = [f"{i['id']}  {i['state']:<10} {i['runtime']:<8} {_ago(i['created_at']):>8}  {i['task_preview'][:60]}"
                + ("  [answer NOT VERIFIED]" if i.get("answer_verified") is False else "")
                for i in data["items"]]
        return "\n".join(rows + [f"{len(data['items'])} of {data['total']} agents"])
    if kind == "answer":
        return f"{data['text']}\n-- verified: {data['bytes']} bytes, sha256 {data['sha256']}"
    if kind == "transcript":
        return "\n".join(render("transcript_item", i) for i in data["items"])
    if kind == "transcript_item":
        who = data["role"] + (f"[{data['name']}]" if data.get("name") else "")
        return f"{who}: {data['content']}"
    if kind in ("cancel", "steer"):
        return f"{data['agent_id']}: {data['message']}"
    if kind == "doc":
        return data["text"]
    if kind in ("batch", "batch_start", "batch_cancel"):
        from agent_run.cli_batch import render_batch

        return render_batch(data)
    if kind == "list_batches":
        rows = [f"{i['id']}  {i['workflow']:<9} {i['state']:<9} {i['runs']:>3} runs  {_ago(i['created_at'])}"
                for i in data["items"]]
        return "\n".join(rows + [f"{len(data['items'])} of {data['total']} batches"])
    if kind in ("run_stop", "run_rerun", "run_resume", "run_followup"):
        return f"{data['run']['id']} ({data['run']['title']}): {data['message']}"
    if kind == "batch_review":
        parts = []
        for run in data["runs"]:
            parts.append(f"== {run['title']} ({run['branch']}) {len(run['commits'])} commit(s)")
            parts.append(run["diff"] or "(no changes to tracked files)")
            parts += [f"?? {u['path']}" for u in run["untracked"]]
        return "\n".join(parts)
    if kind == "batch_clean":
        rows = [f"{i['action']:<12} {i['worktree']}  dirty {len(i['dirty_files'])}  unmerged {i['unmerged_commits']}"
                for i in data["items"]]
        return "\n".join(rows + [data["message"]])
    return str(data)
