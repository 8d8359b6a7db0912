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


async def models(ctx: ServiceContext, p: ModelsParams) -> ModelsResult:
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
            )
            for name, runtime in _runtimes(ctx, p.runtime).items()
        ],
    )
