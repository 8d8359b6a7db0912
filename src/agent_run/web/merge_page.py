"""The Merge page of a run: GET shows `run_merge`'s dry run (what would merge where, or the
conflicting paths with a pre-filled follow-up); POST (CSRF-checked) merges and shows the result."""

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from agent_run.domain.errors import DomainError
from agent_run.web.pages import page, proxy, run_actions
from agent_run.web.security import checked_form

STRATEGIES = ("squash", "merge")


def _params(run_id: str, fields: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"run_id": run_id}
    if fields.get("into", "").strip():
        params["into"] = fields["into"].strip()
    if fields.get("strategy") in STRATEGIES:
        params["strategy"] = fields["strategy"]
    if fields.get("message", "").strip():
        params["message"] = fields["message"]
    return params


async def _render(
    request: Request, params: dict[str, Any], status: int = 200, **context: Any
) -> HTMLResponse:
    batch = await proxy(request).call("batch", {"batch_id": request.path_params["batch_id"]})
    run = next((r for r in batch["runs"] if r["id"] == params["run_id"]), None)
    return page(
        request,
        "merge.html",
        status=status,
        batch=batch,
        run=run,
        actions=run_actions(batch, run) if run else {},
        form=params,
        watch="",
        **context,
    )


async def merge_preview(request: Request) -> HTMLResponse:
    params = _params(request.path_params["run_id"], request.query_params)
    try:
        result = await proxy(request).call("run_merge", {**params, "dry_run": True})
    except DomainError as exc:
        return await _render(request, params, status=409, error=exc)
    return await _render(request, params, result=result)


async def merge_apply(request: Request) -> HTMLResponse:
    form = await checked_form(request)
    params = _params(request.path_params["run_id"], form)
    try:
        result = await proxy(request).call("run_merge", params)
    except DomainError as exc:
        return await _render(request, params, status=409, error=exc)
    return await _render(request, params, status=200 if result["new_sha"] else 409, result=result)
