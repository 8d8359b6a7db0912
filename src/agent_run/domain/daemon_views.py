"""Views of the daemon itself: its status (`api status`) and its `doctor` report."""

from typing import Literal

from pydantic import Field

from agent_run.domain.views import View


class ConfigRefusal(View):
    message: str = Field(description="why the new config.toml was refused (names the dotted field)")
    field: str | None = None
    revision: str = Field(description="the refused file's revision")
    at: float


class DaemonStatus(View):
    pid: int
    home: str
    version: str
    started_at: float
    uptime_seconds: float
    config_path: str
    config_file_exists: bool
    config_revision: str = Field(
        description="sha256 prefix of the config.toml the daemon runs with "
        "(`defaults` without a file)"
    )
    config_loaded_at: float
    config_refused: ConfigRefusal | None = Field(
        default=None,
        description="set while config.toml holds a config the daemon refused: it "
        "keeps running with the last good one (config_revision)",
    )
    live_agents: int = Field(description="agents whose latest execution is not terminal")


class DoctorCheck(View):
    check: str
    level: Literal["ok", "warn", "bad"]
    detail: str
    fix: str | None = Field(
        default=None, description="what to do about it (the exact config block, a command)"
    )


class DoctorReport(View):
    ok: bool = Field(description="no check is bad (warnings allowed)")
    pid: int = Field(description="the daemon that ran the checks, in its own environment")
    checks: list[DoctorCheck]


class PrunedAgent(View):
    agent_id: str
    ended_at: float = Field(description="when its last execution ended")
    action: Literal["removed", "activity_removed", "engine_home"] = Field(
        description="removed: its rows and files; activity_removed: its events, messages, logs "
        "and engine home, while the agent, its executions and sealed answers stay (it has a "
        "sealed answer and prune_answers is false, or an ended batch names it); engine_home: "
        "only its engine home (it ended less than agent_days ago)"
    )
    paths: list[str] = Field(description="files and folders removed (or that would be)")
    bytes: int = Field(description="bytes of those files")
    rows: int = Field(description="database rows deleted (or that would be)")


class PruneResult(View):
    dry_run: bool
    agents: list[PrunedAgent]
    bytes_freed: int = Field(description="bytes of the files removed (or that would be)")
    rows_deleted: int
