"""The one tool table: every operation's name, params, result, handler, doc and annotations.

The socket daemon, the MCP server and the CLI are all generated from this table. Handlers are
named as `module:function` and imported only by the daemon, so front-ends stay light.
"""

import importlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agent_run import __version__
from agent_run.domain import account_models as am
from agent_run.domain import batch_models as bm
from agent_run.domain import compare_models as cm
from agent_run.domain import daemon_views as dv
from agent_run.domain import host_models as hm
from agent_run.domain import notices as nt
from agent_run.domain import push_models as pm
from agent_run.domain import requests as rq
from agent_run.domain import views as vw
from agent_run.domain.batch_states import BatchState
from agent_run.domain.states import ExecutionState


@dataclass(frozen=True)
class CliExtras:
    """What a tool's CLI verb does beyond one call; frozen into `cli/spec.json` with the params."""

    wait_flag: bool = False  # `--wait`: then wait (in slices) for the agent the call returned
    waits: bool = False  # the verb itself is a wait, done in slices of `slice_seconds`
    follow: str | None = (
        None  # `--follow`: "transcript" pages until the agent ends, "batch" redraws
    )
    slice_seconds: float = 60.0  # one `wait` call of a longer wait
    # end state -> exit status ("timed_out": still running); for a verb that neither waits
    # nor follows, a boolean field of its result -> the exit status when it is true
    exit_codes: tuple[tuple[str, int], ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()  # (field, the flag it is known by) e.g. `--text`
    local: bool = False  # the CLI runs the handler in-process (no daemon): needs no ctx
    human: bool = False  # text by default when stdout is a terminal (`--format` still wins)
    # False: a question about the daemon (`api status`) starts none (it says none answers, or
    # that the user stopped it); every other verb starts one, even one the user stopped
    # (`api stop`), as the user's own command.
    starts_daemon: bool = True


# Exit statuses of a verb that waits for an agent, and of `batch show --follow` (1 is any error).
_E, _B = ExecutionState, BatchState
AGENT_EXIT = ((_E.SUCCEEDED, 0), (_E.FAILED, 2), (_E.LOST, 2), (_E.CANCELLED, 3), ("timed_out", 4))
BATCH_EXIT = ((_B.COMPLETED, 0), (_B.FAILED, 2), (_B.BLOCKED, 2), (_B.CANCELLED, 3))
# A verb that neither waits nor follows: a true boolean field of its result -> exit status.
MERGE_EXIT = (("would_conflict", 2),)


@dataclass(frozen=True)
class Tool:
    name: str
    params: type[BaseModel]
    result: type[BaseModel]
    handler: str
    doc: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    verb: str | None = None  # CLI verb when it differs from the name; "group verb" nests it
    positional: tuple[str, ...] = field(default_factory=tuple)  # CLI positional arguments
    cli: CliExtras = field(default_factory=CliExtras)

    @property
    def cli_verb(self) -> str:
        return self.verb or self.name.replace("_", "-")

    def resolve(self) -> Callable[[Any, BaseModel], Awaitable[BaseModel]]:
        module, function = self.handler.split(":")
        return getattr(importlib.import_module(module), function)

    def schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.doc,
            "inputSchema": self.params.model_json_schema(),
            "outputSchema": self.result.model_json_schema(),
            "annotations": {
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
            },
        }


_A = "agent_run.services.agents"
_V = "agent_run.services.agent_views"
_M = "agent_run.services.agent_commands"
_B = "agent_run.batches.service"
_R = "agent_run.batches.review"

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "start",
            rq.StartParams,
            vw.AgentView,
            f"{_A}:start",
            "Start a durable agent: returns its id at once while the engine runs under a detached "
            "supervisor. Pass request_id to make retries safe (same request -> same agent). Then "
            "call wait (bounded) and answer.",
            read_only=False,
            idempotent=False,
            cli=CliExtras(wait_flag=True, exit_codes=AGENT_EXIT),
        ),
        Tool(
            "resume",
            rq.ResumeParams,
            vw.AgentView,
            f"{_A}:resume",
            "Continue a finished agent in the same engine session (its history intact) with a new "
            "prompt: a new execution of the same agent id. Then wait and answer as after start.",
            read_only=False,
            idempotent=False,
            positional=("agent_id",),
            cli=CliExtras(aliases=(("prompt", "--text"),)),
        ),
        Tool(
            "cancel",
            rq.CancelParams,
            vw.CancelResult,
            f"{_M}:cancel",
            "Cancel a running agent: native interrupt, then TERM, then KILL of its engine group. "
            "Cancelling a finished agent changes nothing and says so (accepted: false).",
            read_only=False,
            destructive=True,
            positional=("agent_id",),
        ),
        Tool(
            "steer",
            rq.SteerParams,
            vw.SteerResult,
            f"{_M}:steer",
            "Send a message to a running agent. Delivered where the engine can take input mid-run "
            "(into the running turn, or as its next turn), otherwise refused with the reason.",
            read_only=False,
            idempotent=False,
            positional=("agent_id",),
        ),
        Tool(
            "delivery_status",
            rq.DeliveryStatusParams,
            vw.DeliveryStatus,
            "agent_run.services.notices:delivery_status",
            "How the completion notices of an agent or a batch (their `notify`), or one notice by "
            "its id, were delivered: state (pending, sending, delivered, retry_wait, failed, "
            "expired), attempts, last error and the last attempt's evidence (classifier, exit "
            "status or errno, duration, byte counts, redacted output tails). Give exactly one of "
            "agent_id, batch_id, notice_id.",
            read_only=True,
            verb="delivery status",
            positional=("agent_id",),
        ),
        Tool(
            "list_agents",
            rq.ListAgentsParams,
            vw.AgentList,
            f"{_V}:list_agents",
            "List agents, newest first, with filters and paging; `total` is exact.",
            read_only=True,
            verb="agents",
        ),
        Tool(
            "agent",
            rq.AgentParams,
            vw.AgentView,
            f"{_V}:agent",
            "One agent: state, failure kind with advice, latest execution, last message.",
            read_only=True,
            positional=("agent_id",),
        ),
        Tool(
            "answer",
            rq.AgentParams,
            vw.AnswerView,
            f"{_V}:answer",
            "The agent's sealed answer, re-hashed against its recorded sha256 on every read; a "
            "mismatch is an AnswerIntegrity error. AnswerNotReady until the agent succeeded.",
            read_only=True,
            positional=("agent_id",),
        ),
        Tool(
            "transcript",
            rq.TranscriptParams,
            vw.TranscriptPage,
            f"{_V}:transcript",
            "The agent's normalized messages, a page at a time: pass next_cursor back as cursor.",
            read_only=True,
            positional=("agent_id",),
            cli=CliExtras(follow="transcript"),
        ),
        Tool(
            "events",
            rq.EventsParams,
            vw.EventsPage,
            "agent_run.services.events:events",
            "The agent's normalized event log (state changes, commands, steering, reports, integrity), "
            "oldest first, a page at a time: pass next_after back as after_seq; kinds filters.",
            read_only=True,
            positional=("agent_id",),
        ),
        Tool(
            "wait",
            rq.WaitParams,
            vw.WaitResult,
            f"{_V}:wait",
            "Wait until the agent is terminal, at most timeout_seconds; on timeout returns "
            "timed_out: true with the current view instead of an error. Call again to keep waiting.",
            read_only=True,
            positional=("agent_id",),
            cli=CliExtras(waits=True, exit_codes=AGENT_EXIT),
        ),
        Tool(
            "changes",
            rq.ChangesParams,
            vw.ChangesResult,
            "agent_run.services.changes:changes",
            "What changed after a revision: the ids of agents and batches with an event newer than "
            "after_revision, and the revision to pass next time. With wait_seconds, a long-poll that "
            "returns as soon as anything changes (or empty after the wait).",
            read_only=True,
        ),
        Tool(
            "doc",
            rq.DocParams,
            vw.DocResult,
            "agent_run.services.doc_tool:doc",
            "Built-in documentation: overview, states, failures, demo, config.",
            read_only=True,
            positional=("topic",),
            cli=CliExtras(local=True, human=True),
        ),
        Tool(
            "batch_start",
            bm.BatchStartParams,
            bm.BatchView,
            f"{_B}:batch_start",
            "Start a batch: many agents at once, each in its own git worktree of the project, pinned to "
            "base_ref's commit. Workflows: repeated (the prompt N times), generated (a read-only "
            "generator makes N tasks), ranked (N candidates, each ending in one commit, scored by "
            "read-only reviewers; optional verify_command), validated (N workers submit results, one "
            "read-only validator picks a winner). Invalid config is refused before anything is made.",
            read_only=False,
            idempotent=False,
            verb="batch start",
        ),
        Tool(
            "list_batches",
            bm.ListBatchesParams,
            bm.BatchList,
            f"{_B}:list_batches",
            "List batches, newest first: each with its title, workflow, state, run counts per "
            "state and the start of its prompt. Filters: project, state, q (words in the title, "
            "prompt or project folder); archived batches only with include_archived. Pages: pass "
            "next_cursor back as cursor.",
            read_only=True,
            verb="batch list",
        ),
        Tool(
            "batch",
            bm.BatchParams,
            bm.BatchView,
            f"{_B}:batch",
            "One batch: its title, prompt (config.prompt), state (queued, running, blocked, completed, "
            "failed, cancelled) and every run with its state, attempts, worktree and result: answer "
            "excerpt, diff stats, verify, duration, tokens and cost, score, rank and how it came about "
            "(ranking_rule), reviewers' reasons; a running run's current activity.",
            read_only=True,
            verb="batch show",
            positional=("batch_id",),
            cli=CliExtras(follow="batch", exit_codes=BATCH_EXIT),
        ),
        Tool(
            "batch_archive",
            bm.BatchArchiveParams,
            bm.BatchView,
            f"{_B}:batch_archive",
            "Set an ended batch aside: list_batches leaves it out unless include_archived. "
            "archived=false brings it back; a batch reopened by a rerun is listed again by itself.",
            read_only=False,
            verb="batch archive",
            positional=("batch_id",),
        ),
        Tool(
            "runs_compare",
            cm.RunsCompareParams,
            cm.RunsCompare,
            "agent_run.batches.compare:runs_compare",
            "Put 2 to 4 runs of a batch side by side: each one's answer, diff stats, verify, "
            "score, rank and reviewers' reasons, and for every file any of them changed, each "
            "run's diff of that file against the pinned base (bounded, cut with a marker).",
            read_only=True,
            verb="batch compare",
            positional=("batch_id", "run_ids"),
        ),
        Tool(
            "batch_cancel",
            bm.BatchParams,
            bm.BatchView,
            f"{_B}:batch_cancel",
            "Cancel a batch: running agents are cancelled, queued runs dropped, finished results kept.",
            read_only=False,
            destructive=True,
            verb="batch cancel",
            positional=("batch_id",),
        ),
        Tool(
            "run_show",
            bm.RunParams,
            bm.RunDetail,
            "agent_run.batches.run_reads:run_show",
            "One run of a batch by its id: its batch, stage, state, attempts (each with its agent "
            "id), worktree and branch, score, rank, result and failure.",
            read_only=True,
            verb="run show",
            positional=("run_id",),
        ),
        Tool(
            "run_answer",
            bm.RunParams,
            vw.AnswerView,
            "agent_run.batches.run_reads:run_answer",
            "The sealed answer of a run's agent (its latest attempt), re-hashed on every read like "
            "answer; AnswerNotReady until that agent succeeded.",
            read_only=True,
            verb="run answer",
            positional=("run_id",),
        ),
        Tool(
            "run_stop",
            bm.RunParams,
            bm.RunActionResult,
            f"{_B}:run_stop",
            "Stop one run of a batch (its agent is cancelled). In a ranked or validated batch a "
            "stopped run is set aside: stopping the failed run it is blocked on unblocks it, and "
            "the next stage goes on with the runs that remain.",
            read_only=False,
            destructive=True,
            verb="run stop",
            positional=("run_id",),
        ),
        Tool(
            "run_rerun",
            bm.RunParams,
            bm.RunActionResult,
            f"{_B}:run_rerun",
            "Run a settled run again as a new attempt in the same worktree; earlier attempts stay "
            "readable. In ranked batches a candidate's reviews are redone; in validated ones the validator.",
            read_only=False,
            idempotent=False,
            verb="run rerun",
            positional=("run_id",),
        ),
        Tool(
            "run_resume",
            bm.RunResumeParams,
            bm.RunActionResult,
            f"{_B}:run_resume",
            "Continue a failed or stopped run's agent in its own engine session.",
            read_only=False,
            idempotent=False,
            verb="run resume",
            positional=("run_id",),
            cli=CliExtras(aliases=(("prompt", "--text"),)),
        ),
        Tool(
            "run_followup",
            bm.RunFollowupParams,
            bm.RunActionResult,
            f"{_B}:run_followup",
            "An extra turn on a settled run. Runs of ranked and validated batches are locked (their "
            "results feed the ranking / verdict) until reopened with reopen=true.",
            read_only=False,
            idempotent=False,
            verb="run followup",
            positional=("run_id",),
        ),
        Tool(
            "run_merge",
            bm.RunMergeParams,
            bm.RunMergeResult,
            "agent_run.batches.merge:run_merge",
            "Merge a settled run's branch into a branch (default: the batch's base branch), squashed "
            "or as a merge commit, without touching any worktree; the branch moves only if it did "
            "not move meanwhile. A conflict changes nothing and lists the paths with a follow-up "
            "text asking the run to merge the target into its branch. dry_run=true only checks.",
            read_only=False,
            idempotent=False,
            verb="run merge",
            positional=("run_id",),
            cli=CliExtras(exit_codes=MERGE_EXIT),
        ),
        Tool(
            "run_push",
            pm.RunPushParams,
            pm.RunPushResult,
            "agent_run.batches.push:run_push",
            "Push a settled run's branch (merged=true: the branch run_merge merged it into) to a "
            "git remote of the project, never forced; pull_request=true then opens a pull request "
            "into the batch's base branch with `gh pr create` (gh installed, remote on GitHub), or "
            "returns the compare page to open one, or says why not.",
            read_only=False,
            idempotent=False,
            verb="run push",
            positional=("run_id",),
        ),
        Tool(
            "batch_review",
            bm.BatchReviewParams,
            bm.BatchReview,
            f"{_R}:batch_review",
            "Each run's changes against the pinned base: commits, the diff (committed and uncommitted) "
            "and previews of untracked files.",
            read_only=True,
            verb="batch review",
            positional=("batch_id",),
        ),
        Tool(
            "batch_clean",
            bm.BatchCleanParams,
            bm.BatchCleanResult,
            f"{_R}:batch_clean",
            "Preview, then (confirm=true) remove a batch's worktrees and branches. Dirty worktrees and "
            "unmerged branches are kept unless force=true.",
            read_only=False,
            destructive=True,
            verb="batch clean",
            positional=("batch_id",),
        ),
    )
}

# --- capacity (docs/capacity.md)
_C = "agent_run.services.capacity"
TOOLS.update(
    {
        t.name: t
        for t in (
            Tool(
                "limits",
                rq.LimitsParams,
                vw.LimitsResult,
                f"{_C}:limits",
                "Current quota readings per (runtime, account, lane, window): known (fresh), remaining %, "
                "reset, age, burn, risk (high <= 10 %, medium <= 30 %, else by burn against the sustainable "
                "rate; unknown when stale) and one line of advice. Reads stored samples: no provider call.",
                read_only=True,
            ),
            Tool(
                "capacity_order",
                rq.EmptyParams,
                vw.CapacityOrderResult,
                f"{_C}:capacity_order",
                "Routes (runtime, account, lane) ranked for new work from fresh readings: priority = "
                "(1 + slack of the limiting window) x weight; omitted (a window at 0 %), deferred (stale or "
                "conflicting), unavailable runtimes (no reading). Rules: docs/capacity.md.",
                read_only=True,
                verb="capacity order",
            ),
            Tool(
                "capacity_collect",
                rq.EmptyParams,
                vw.CollectResult,
                f"{_C}:capacity_collect",
                "Ask every `command` and `codex_appserver` source once and store their readings; a "
                "failing source is reported (with its backoff) and gives no evidence. The daemon also "
                "does this every [capacity] collect_interval_seconds.",
                read_only=False,
                verb="capacity collect",
            ),
        )
    }
)
# --- end capacity

_F = "agent_run.batches.folders"
TOOLS.update(
    {
        t.name: t
        for t in (
            Tool(
                "list_dir",
                bm.FolderParams,
                bm.DirListing,
                f"{_F}:list_dir",
                "The folders inside a folder (symlinks resolved, hidden ones left out), confined to the "
                "allowed roots (`[web] roots` in config, default $HOME); without path, the roots. For "
                "picking a project folder.",
                read_only=True,
                verb="folders list",
                positional=("path",),
            ),
            Tool(
                "project_inspect",
                bm.FolderParams,
                bm.ProjectInfo,
                f"{_F}:project_inspect",
                "What a folder under the allowed roots is as a batch project: its repository root, "
                "subdirectory, branch and HEAD (is_repository: false when it is in no git repository).",
                read_only=True,
                verb="folders inspect",
                positional=("path",),
            ),
        )
    }
)

_D = "agent_run.services"
TOOLS.update(
    {
        t.name: t
        for t in (
            Tool(
                "status",
                rq.EmptyParams,
                dv.DaemonStatus,
                f"{_D}.daemon_status:status",
                "The daemon: pid, home, version, uptime, the config.toml revision it runs with (and a "
                "refused newer one: it keeps the last good config), and the count of live agents.",
                read_only=True,
                verb="api status",
                cli=CliExtras(starts_daemon=False),
            ),
            Tool(
                "doctor",
                rq.EmptyParams,
                dv.DoctorReport,
                f"{_D}.doctor:doctor",
                "Checks run in the daemon, with its PATH and environment: config (revision, refusal, "
                "permissions), each runtime's binary and --version, auth variables set (never values), "
                "native sign-in, base_url reachable, engine home writable; engine CLIs installed but "
                "not configured, with the block to enable them.",
                read_only=True,
            ),
            Tool(
                "prune",
                rq.PruneParams,
                dv.PruneResult,
                f"{_D}.retention:prune",
                "Apply `[retention]`: remove terminal agents' rows, events, messages and logs after "
                "agent_days (an agent with a sealed answer keeps its row and answer unless "
                "prune_answers), their engine homes after engine_home_days. dry_run lists what would "
                "go and the bytes freed. Never a running agent, an agent of a live batch, or a "
                "worktree. The daemon also runs it every retention.interval_seconds (daily).",
                read_only=False,
                destructive=True,
            ),
        )
    }
)

_U = "agent_run.services"
TOOLS.update(
    {
        t.name: t
        for t in (
            Tool(
                "accounts",
                am.AccountsParams,
                am.AccountsResult,
                f"{_U}.accounts:accounts",
                "Each enabled runtime's accounts (its own auth, then `[runtimes.X.accounts.LABEL]`): which is "
                "the default, whether it is signed in, and the display email the engine's sign-in file holds; "
                "never a token. Sign in with `agent-run login RUNTIME --account LABEL`.",
                read_only=True,
            ),
            Tool(
                "models",
                am.ModelsParams,
                am.ModelsResult,
                f"{_U}.accounts:models",
                "Each enabled runtime's configured models, default model and accounts. `start` refuses a "
                "model not listed here.",
                read_only=True,
            ),
            Tool(
                "usage",
                am.UsageParams,
                am.UsageResult,
                f"{_U}.usage:usage",
                "Tokens and cost grouped by runtime, account, model, day and/or batch, from what the engines "
                "reported; cost is null where no engine reported one (never an invented price).",
                read_only=True,
            ),
        )
    }
)

# --- hosts: agents on other machines over ssh (docs/scaling.md)
_H = "agent_run.services.hosts"
TOOLS.update(
    {
        t.name: t
        for t in (
            Tool(
                "hosts",
                hm.HostsParams,
                hm.HostsResult,
                f"{_H}:hosts",
                "The configured `[hosts.NAME]` (agents run there by `start --host NAME`): each link's "
                "state, the host's agent-run version and daemon, the last error, and the agents placed "
                "there that are live or unreachable. check=true connects to each now.",
                read_only=True,
            ),
            Tool(
                "abandon",
                hm.AbandonParams,
                hm.AbandonResult,
                f"{_H}:abandon",
                "Give up on an agent whose host is unreachable: it ends here failed / abandoned "
                "(nothing proved it ended: it may still run there). Refused for any other state; "
                "no elapsed time ever ends an unreachable agent by itself.",
                read_only=False,
                destructive=True,
                positional=("agent_id",),
            ),
        )
    }
)
# --- end hosts

# Served on the socket only: protocol plumbing, not operations.
SOCKET_ONLY: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "ping",
            rq.EmptyParams,
            vw.Pong,
            "agent_run.tools.table:ping",
            "Liveness check.",
            read_only=True,
        ),
        Tool(
            "notice_channel",
            nt.ChannelParams,
            nt.ChannelBatch,
            "agent_run.services.notice_channel:notice_channel",
            "An `agent-run mcp` session's subscription: acknowledge pushed notices, take the "
            "session's owed ones (long-poll). Used by the MCP server only.",
            read_only=False,
            idempotent=False,
        ),
        Tool(
            "mirror_read",
            hm.MirrorReadParams,
            hm.MirrorPage,
            "agent_run.services.mirror_read:mirror_read",
            "What a daemon on another machine copies of an agent it placed here (`start --host`): "
            "events and messages after its cursors and the execution now, in one read. Used by "
            "the host mirror only.",
            read_only=True,
        ),
        Tool(
            "tools",
            rq.EmptyParams,
            vw.ToolsResult,
            "agent_run.tools.table:list_tools",
            "Every tool's name, description, input and output JSON schema and annotations.",
            read_only=True,
        ),
    )
}


ALL_TOOLS: dict[str, Tool] = {**TOOLS, **SOCKET_ONLY}


def tool_schemas() -> list[dict[str, Any]]:
    return [tool.schema() for tool in TOOLS.values()]


async def ping(ctx: Any, _p: rq.EmptyParams) -> vw.Pong:
    """The daemon answers: its version, pid and home (`ctx` is the daemon's ServiceContext)."""
    return vw.Pong(
        version=__version__,
        pid=os.getpid(),
        home=str(ctx.home.root),
        parked=ctx.watcher.parked,
        notice_passes=ctx.notice_passes,
    )


async def list_tools(_ctx: Any, _p: rq.EmptyParams) -> vw.ToolsResult:
    return vw.ToolsResult(tools=tool_schemas())
