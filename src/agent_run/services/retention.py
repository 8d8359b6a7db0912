"""Retention: the `prune` tool and the daemon's daily pass. What `[retention]` says is old goes:
rows first (one transaction, re-checked under the write lock), files after. Never a running
agent, an agent of a live batch, or a path outside the home's `agents/` and `homes/`."""

import json
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_run.config.model import RetentionConfig
from agent_run.domain.daemon_views import PrunedAgent, PruneResult
from agent_run.domain.requests import PruneParams
from agent_run.services.context import ServiceContext
from agent_run.store.retention import DueAgent, delete_agent_rows, due_agents
from agent_run.system.home import Home

DAY_SECONDS = 86_400.0
SEALED_ANSWER_FILES = frozenset({"answer.md", "answer.json"})
Rows = Literal["whole", "activity", "none"]


@dataclass(frozen=True)
class Planned:
    item: PrunedAgent
    rows: Rows  # what goes from the database: all its rows, its activity rows, or none
    paths: list[Path]


def _inside(path: Path, folder: Path) -> bool:
    resolved = path.resolve()
    return resolved != folder.resolve() and resolved.is_relative_to(folder.resolve())


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size if path.exists() or path.is_symlink() else 0
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _engine_homes(home: Home, agent: DueAgent) -> list[Path]:
    found: list[Path] = []
    for execution in agent.executions:
        raw = json.loads(execution.plan_json).get("engine_home")
        path = Path(raw) if raw else home.homes_dir / execution.runtime / agent.agent_id
        if path not in found and path.exists() and _inside(path, home.homes_dir):
            found.append(path)
    return found


def _activity_files(home: Home, agent: DueAgent, keep_answers: bool) -> list[Path]:
    """Each known execution's files but (when kept) its sealed answer."""
    paths = []
    for execution in agent.executions:
        folder = home.execution_dir(agent.agent_id, execution.id)
        if not folder.is_dir() or not _inside(folder, home.agents_dir):
            continue
        for entry in sorted(folder.iterdir()):
            if keep_answers and execution.sealed and entry.name in SEALED_ANSWER_FILES:
                continue
            paths.append(entry)
    return paths


def plan_agent(home: Home, policy: RetentionConfig, agent: DueAgent, now: float) -> Planned | None:
    """What retention does to one due agent; None when nothing of it is left to remove."""
    homes = _engine_homes(home, agent)
    rows: Rows
    if agent.ended_at <= now - policy.agent_days * DAY_SECONDS:
        keep = agent.in_batch or (agent.sealed and not policy.prune_answers)
        if keep:
            rows, action = "activity", "activity_removed"
            paths = _activity_files(home, agent, keep_answers=True) + homes
            row_count = agent.activity_rows
        else:
            folder = home.agents_dir / agent.agent_id
            rows, action = "whole", "removed"
            paths = (
                [folder] if folder.is_dir() and _inside(folder, home.agents_dir) else []
            ) + homes
            row_count = agent.activity_rows + len(agent.executions) + 1
    elif agent.ended_at <= now - policy.engine_home_days * DAY_SECONDS:
        rows, action, paths, row_count = "none", "engine_home", homes, 0
    else:
        return None
    if not paths and row_count == 0:
        return None
    item = PrunedAgent(
        agent_id=agent.agent_id,
        ended_at=agent.ended_at,
        action=action,
        paths=[str(path) for path in paths],
        bytes=sum(_size(path) for path in paths),
        rows=row_count,
    )
    return Planned(item, rows, paths)


def _plan(
    _conn: sqlite3.Connection, home: Home, policy: RetentionConfig, due: list[DueAgent], now: float
) -> list[Planned]:
    return [planned for agent in due if (planned := plan_agent(home, policy, agent, now))]


def _remove(_conn: sqlite3.Connection, paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _oldest_kept(policy: RetentionConfig, now: float) -> float:
    return now - min(policy.agent_days, policy.engine_home_days) * DAY_SECONDS


async def prune_now(ctx: ServiceContext, *, dry_run: bool) -> PruneResult:
    ctx.refresh_config()  # a `[retention]` just edited applies to this pass
    policy = ctx.config.retention
    now = time.time()
    due = await ctx.db(due_agents, _oldest_kept(policy, now))
    planned = await ctx.db(_plan, ctx.home, policy, due, now)
    if not dry_run:
        deleted = await ctx.db(
            delete_agent_rows,
            _oldest_kept(policy, now),
            {p.item.agent_id: p.rows for p in planned},
        )
        planned = [p for p in planned if p.item.agent_id in deleted]  # resumed meanwhile: kept
        await ctx.db(_remove, [path for p in planned for path in p.paths])
        ctx.log.info(
            "retention.pruned",
            agents=len(planned),
            bytes=sum(p.item.bytes for p in planned),
            rows=sum(deleted.values()),
        )
    return PruneResult(
        dry_run=dry_run,
        agents=[p.item for p in planned],
        bytes_freed=sum(p.item.bytes for p in planned),
        rows_deleted=sum(p.item.rows for p in planned),
    )


async def prune(ctx: ServiceContext, p: PruneParams) -> PruneResult:
    return await prune_now(ctx, dry_run=p.dry_run)
