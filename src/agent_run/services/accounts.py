"""The `accounts` and `models` tools: each enabled runtime's accounts (signed in or not) and models."""

from agent_run.domain import errors
from agent_run.domain.account_models import (
    AccountsParams,
    AccountsResult,
    AccountView,
    ModelsParams,
    ModelsResult,
    RuntimeModels,
)
from agent_run.engines.accounts import account_auth, account_status
from agent_run.engines.options import AuthConfig, RuntimeOptions
from agent_run.services.context import ServiceContext
from agent_run.store import rosters as rosters_q
from agent_run.store.rosters import Roster


def _runtimes(ctx: ServiceContext, name: str | None) -> dict[str, RuntimeOptions]:
    enabled = {n: r for n, r in ctx.config.runtimes.items() if r.enabled}
    if name is None:
        return enabled
    if name not in enabled:
        raise errors.UnknownRuntime(
            f"no enabled runtime {name!r} (configured: {', '.join(enabled)})", field="runtime"
        )
    return {name: enabled[name]}


def _kind(auth: AuthConfig) -> str:
    return "login" if auth.login is not None else "env" if auth.env is not None else "file"


def _account_views(ctx: ServiceContext, name: str, runtime: RuntimeOptions) -> list[AccountView]:
    views = []
    if runtime.auth is not None:
        status = account_status(runtime.engine, name, runtime.auth, None)
        views.append(
            AccountView(
                runtime=name,
                account=None,
                is_default=runtime.default_account is None,
                auth=_kind(runtime.auth),
                signed_in=status.signed_in,
                email=status.email,
                detail=status.detail,
            )
        )
    for label in sorted(runtime.accounts):
        auth = account_auth(runtime, name, label, ctx.home.root)
        status = account_status(runtime.engine, name, auth, label)
        views.append(
            AccountView(
                runtime=name,
                account=label,
                is_default=runtime.default_account == label,
                auth=_kind(auth),
                signed_in=status.signed_in,
                email=status.email,
                detail=status.detail,
            )
        )
    return views


async def accounts(ctx: ServiceContext, p: AccountsParams) -> AccountsResult:
    """Reads files and the daemon's environment only; never a token in the answer."""
    found = _runtimes(ctx, p.runtime)

    def read(_conn: object) -> list[AccountView]:  # small file reads: off the event loop
        return [
            view for name, runtime in found.items() for view in _account_views(ctx, name, runtime)
        ]

    return AccountsResult(accounts=await ctx.db(read))


def available_models(configured: list[str], roster: Roster | None) -> list[str]:
    """Configured models intersected with the engine's cached roster."""
    if roster is None:
        return list(configured)
    if not configured:
        return list(roster.models)
    return [m for m in configured if m in roster.models]


async def check_roster(
    ctx: ServiceContext, runtime: str, configured: list[str], model: str
) -> None:
    """Refuse a model the runtime's cached roster does not list (after the config accepted it).
    Reads the cache only: never starts an engine process."""
    roster = (await ctx.db(rosters_q.rosters)).get(runtime)
    if roster is None or model in roster.models:
        return
    raise errors.InvalidRequest(
        f"model {model!r} is configured for runtime {runtime!r} but its engine does not list it "
        f"(configured: {', '.join(configured) or 'any'}; the engine's roster: "
        f"{', '.join(roster.models)})",
        field="model",
    )


async def models(ctx: ServiceContext, p: ModelsParams) -> ModelsResult:
    """The roster `start` and `batch_start` check against: config.toml re-read first if it
    changed (and is valid), as they do, so a form built from it offers what they accept."""
    ctx.refresh_config()
    cached = await ctx.db(rosters_q.rosters)
    return ModelsResult(
        default_runtime=ctx.config.default_runtime,
        runtimes=[
            RuntimeModels(
                runtime=name,
                engine=runtime.engine,
                models=list(runtime.models),
                default_model=runtime.default_model
                or (runtime.models[0] if runtime.models else None),
                accounts=sorted(runtime.accounts),
                default_account=runtime.default_account,
                roster=cached[name].models if name in cached else None,
                roster_observed_at=cached[name].observed_at if name in cached else None,
                available=available_models(runtime.models, cached.get(name)),
            )
            for name, runtime in _runtimes(ctx, p.runtime).items()
        ],
    )
