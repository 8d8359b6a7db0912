"""Params and results of the `accounts`, `models` and `usage` tools."""

from typing import Literal

from pydantic import Field

from agent_run.domain.requests import Params
from agent_run.domain.views import View

RuntimeName = Field(default=None, min_length=1, max_length=200, description="only this runtime")


class AccountsParams(Params):
    runtime: str | None = RuntimeName


class AccountView(View):
    runtime: str
    account: str | None = Field(description="the label; null: the runtime's own `auth`")
    is_default: bool = Field(description="what a run that names no account uses")
    auth: Literal["env", "file", "login"]
    signed_in: bool = Field(
        description="the credential is there (a sign-in file, a set variable, a file)"
    )
    email: str | None = Field(
        default=None, description="the display email the engine's sign-in file holds"
    )
    detail: str = Field(description="where the credential is, or what to run; never a token")


class AccountsResult(View):
    accounts: list[AccountView]


class ModelsParams(Params):
    runtime: str | None = RuntimeName


class RuntimeModels(View):
    runtime: str
    engine: str
    models: list[str] = Field(description="the configured models (any model when empty)")
    default_model: str | None
    accounts: list[str]
    default_account: str | None
    roster: list[str] | None = Field(
        default=None,
        description="the engine's own model list as the capacity collector last cached it "
        "(Codex app-server `model/list`); null: none cached",
    )
    roster_observed_at: float | None = None
    available: list[str] = Field(
        default_factory=list,
        description="the configured models the roster also lists (all configured ones when no "
        "roster is cached; the roster when any model is allowed)",
    )


class ModelsResult(View):
    runtimes: list[RuntimeModels]
    default_runtime: str


UsageGroup = Literal["runtime", "account", "model", "day", "batch"]


def _default_groups() -> list[UsageGroup]:
    return ["runtime", "account", "model", "day"]


class UsageParams(Params):
    by: list[UsageGroup] = Field(
        default_factory=_default_groups,
        min_length=1,
        max_length=5,
        description="group by these (day: UTC date the execution ended)",
    )
    runtime: str | None = RuntimeName
    batch_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^bt_[0-9a-z]+$",
        description="only this batch's runs",
    )
    since: float | None = Field(
        default=None, ge=0, description="only executions created at or after (epoch s)"
    )


class UsageRow(View):
    key: dict[str, str | None] = Field(
        description="the grouped values (account null: the runtime's own auth)"
    )
    executions: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(
        description="what the engines reported (or the `[prices]` table priced); null when "
        "none has a cost"
    )
    cost_reported_by: int = Field(description="how many of the executions reported a cost")


class UsageResult(View):
    rows: list[UsageRow]
    total: UsageRow
