"""Agent views, the read side of the agent tools: `agent`, `list_agents`, `answer`,
`transcript` and `wait`, shaped from the store's rows into result models."""

import json
import sqlite3
import time

from agent_run.domain import errors
from agent_run.domain.failures import FailureKind
from agent_run.domain.requests import AgentParams, ListAgentsParams, TranscriptParams, WaitParams
from agent_run.domain.states import ExecutionState
from agent_run.domain.views import (
    AgentList,
    AgentSummary,
    AgentView,
    AnswerView,
    ExecutionView,
    TranscriptItem,
    TranscriptPage,
    TurnPrompt,
    WaitResult,
)
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import answer_verified, sealed_answer_path, verified_answer
from agent_run.services.routing import with_next_route
from agent_run.store import agents as agents_q
from agent_run.store import events as events_q


def latest_execution_or_raise(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row:
    execution = agents_q.latest_execution(conn, agent_id)
    if execution is None:
        raise errors.AgentNotFound(f"no agent {agent_id}", field="agent_id")
    return execution


def execution_view(row: sqlite3.Row) -> ExecutionView:
    kind = FailureKind(row["failure_kind"]) if row["failure_kind"] else None
    return ExecutionView(
        id=row["id"],
        number=row["number"],
        kind=row["kind"],
        account=row["account"],
        route=row["route"],
        route_reason=row["route_reason"],
        state=row["state"],
        failure_kind=kind,
        failure_advice=kind.advice_for(row["host"]) if kind else None,
        failure_message=row["failure_message"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        verdict=row["verdict"],
        engine_session_id=row["engine_session_id"],
        answer_sha256=row["answer_sha256"],
        answer_bytes=row["answer_bytes"],
        answer_verified=answer_verified(row),
        answer_checked_at=row["answer_checked_at"],
        usage=json.loads(row["usage_json"]) if row["usage_json"] else None,
        cost_usd=row["cost_usd"],
        cost_source=row["cost_source"],
        max_tokens=row["max_tokens"],
        max_cost_usd=row["max_cost_usd"],
    )


def read_agent_view(conn: sqlite3.Connection, agent_id: str) -> AgentView:
    # One read transaction, so the view is consistent with the revision it reports.
    conn.execute("BEGIN")
    try:
        view = agent_view_in(conn, agent_id)
    finally:
        conn.execute("COMMIT")
    return view


def sandbox_of(plan_json: str) -> str:
    """The runtime's `sandbox` the execution ran with (a plan stored before it: bubblewrap)."""
    return str(json.loads(plan_json).get("runtime_config", {}).get("sandbox") or "bubblewrap")


def agent_view_in(conn: sqlite3.Connection, agent_id: str) -> AgentView:
    """The agent's view, read inside the caller's transaction."""
    agent = agents_q.get_agent(conn, agent_id)
    if agent is None:
        raise errors.AgentNotFound(f"no agent {agent_id}", field="agent_id")
    execution = agents_q.latest_execution(conn, agent_id)
    last = events_q.last_message(conn, agent_id)
    return AgentView(
        id=agent["id"],
        request_id=agent["request_id"],
        runtime=agent["runtime"],
        engine=agent["engine"],
        model=agent["model"],
        account=execution["account"],
        task=agent["task"],
        workdir=agent["workdir"],
        profile=agent["profile"],
        created_at=agent["created_at"],
        state=execution["state"],
        failure_kind=execution["failure_kind"],
        verdict=execution["verdict"],
        answer_verified=answer_verified(execution),
        execution=execution_view(execution),
        event_count=events_q.count_events(conn, agent_id),
        last_message=last["content"][:300] if last else None,
        revision=events_q.current_revision(conn),
        sandbox=sandbox_of(execution["plan_json"]),
        host=execution["host"],
    )


async def agent(ctx: ServiceContext, p: AgentParams) -> AgentView:
    return await with_next_route(ctx, await ctx.db(read_agent_view, p.agent_id))


async def list_agents(ctx: ServiceContext, p: ListAgentsParams) -> AgentList:
    """A page of agents; with `after_revision`, a revisioned long-poll for what changed since."""
    if p.after_revision is not None and p.wait_seconds > 0:
        if await ctx.db(events_q.current_revision) <= p.after_revision:
            await ctx.watcher.wait_past(p.after_revision, p.wait_seconds)

    def read(conn: sqlite3.Connection) -> AgentList:
        revision = events_q.current_revision(conn)
        rows, total = agents_q.list_agents(
            conn,
            states=[s.value for s in p.state or []],
            runtime=p.runtime,
            standalone=p.standalone,
            verdict=p.verdict.value if p.verdict else None,
            after_revision=p.after_revision,
            limit=p.limit,
            offset=p.offset,
        )
        items = [
            AgentSummary(
                id=r["id"],
                request_id=r["request_id"],
                runtime=r["runtime"],
                model=r["model"],
                account=r["account"],
                route=r["route"],
                sandbox=r["sandbox"] or "bubblewrap",
                state=r["state"],
                failure_kind=r["failure_kind"],
                task_preview=r["task"].strip().splitlines()[0][:120] if r["task"].strip() else "",
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                answer_sha256=r["answer_sha256"],
                answer_verified=answer_verified(r),
                verdict=r["verdict"],
            )
            for r in rows
        ]
        return AgentList(
            items=items, total=total, limit=p.limit, offset=p.offset, revision=revision
        )

    return await ctx.db(read)


# -- answers and transcripts ----------------------------------------------------------------


async def answer(ctx: ServiceContext, p: AgentParams) -> AnswerView:
    def read(conn: sqlite3.Connection) -> AnswerView:
        row = latest_execution_or_raise(conn, p.agent_id)
        if row["answer_sha256"] is None:
            state = ExecutionState(row["state"])
            why = "is still " + state.value if not state.terminal else f"ended {state.value}"
            kind = f" ({row['failure_kind']})" if row["failure_kind"] else ""
            raise errors.AnswerNotReady(
                f"agent {p.agent_id} has no sealed answer: it {why}{kind}",
                field="agent_id",
                state=state.value,
            )
        text = verified_answer(conn, ctx.home, row, "answer")  # a mismatch is recorded, then raised
        return AnswerView(
            agent_id=p.agent_id,
            execution_id=row["id"],
            text=text,
            sha256=row["answer_sha256"],
            bytes=row["answer_bytes"],
            path=str(sealed_answer_path(ctx.home, row)),
        )

    return await ctx.db(read)


async def transcript(ctx: ServiceContext, p: TranscriptParams) -> TranscriptPage:
    def read(conn: sqlite3.Connection) -> TranscriptPage:
        execution = latest_execution_or_raise(conn, p.agent_id)  # read state first: no lost tail
        rows = events_q.messages_page(conn, p.agent_id, after_id=p.cursor, limit=p.limit)
        items = [
            TranscriptItem(
                id=r["id"],
                execution_number=r["execution_number"],
                role=r["role"],
                name=r["name"],
                content=r["content"],
                ts=r["ts"],
                is_error=bool(r["is_error"]),
            )
            for r in rows
        ]
        state = ExecutionState(execution["state"])
        # The turns that begin in this page: after the cursor's turn, up to the last item's, or
        # (the page reaches the end) every later one, so a turn without messages has its prompt.
        full = len(items) >= p.limit
        turns = events_q.turn_prompts(
            conn,
            p.agent_id,
            events_q.turn_at(conn, p.agent_id, p.cursor) if p.cursor else 0,
            items[-1].execution_number if full else None,
        )
        return TranscriptPage(
            agent_id=p.agent_id,
            items=items,
            turns=[
                TurnPrompt(
                    number=t["number"],
                    kind=t["kind"],
                    prompt=t["prompt"],
                    created_at=t["created_at"],
                )
                for t in turns
            ],
            next_cursor=items[-1].id if items else p.cursor,
            state=state,
            finished=state.terminal and len(items) < p.limit,
        )

    return await ctx.db(read)


# -- waiting ----------------------------------------------------------------------------------


async def wait(ctx: ServiceContext, p: WaitParams) -> WaitResult:
    deadline = time.monotonic() + p.timeout_seconds
    view = await ctx.db(read_agent_view, p.agent_id)
    revision = view.revision
    while not view.state.terminal:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return WaitResult(agent=view, timed_out=True)
        await ctx.watcher.wait_past(revision, remaining, state_of=p.agent_id)
        # Woken when this agent's state changed: look at the state alone (one small read) and
        # build the whole view only to answer.
        state, revision = await ctx.db(agents_q.latest_state_and_revision, p.agent_id)
        if state is None or ExecutionState(state).terminal or time.monotonic() >= deadline:
            view = await ctx.db(read_agent_view, p.agent_id)
    return WaitResult(agent=await with_next_route(ctx, view), timed_out=False)
