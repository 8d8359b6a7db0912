"""Form posts: each calls one tool and redirects (303), or re-renders its form with the errors."""

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agent_run.domain import batch_models as bm
from agent_run.domain import requests as rq
from agent_run.domain.errors import DomainError
from agent_run.web.forms import batch_form, form_params
from agent_run.web.pages import inspect_project, page, proxy, runtimes
from agent_run.web.security import checked_form


def see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def field_errors(exc: DomainError) -> dict[str, str]:
    """The tool's message for each bad field (InvalidParams lists every problem)."""
    errors = {e["field"]: e["message"] for e in exc.details.get("errors", []) if "field" in e}
    errors.setdefault(exc.field or "_", exc.message)
    return errors


async def agent_create(request: Request) -> Response:
    form = await checked_form(request)
    params = form_params(rq.StartParams, form)
    try:
        agent = await proxy(request).call("start", params)
    except DomainError as exc:
        return page(
            request,
            "agent_new.html",
            status=422,
            form=form,
            errors=field_errors(exc),
            watch="",
            runtimes=runtimes(request),
        )
    return see(f"/agents/{agent['id']}")


async def agent_action(request: Request) -> Response:
    agent_id, action = request.path_params["agent_id"], request.path_params["action"]
    form = await checked_form(request)
    params: dict[str, Any] = {"agent_id": agent_id}
    if action == "steer":
        params["text"] = form.get("text", "")
    elif action == "resume":
        params["prompt"] = form.get("prompt", "")
    elif action != "cancel":
        return Response("404: no such action", status_code=404)
    await proxy(request).call(action, params)
    return see(f"/agents/{agent_id}")


async def batch_create(request: Request) -> Response:
    form = await checked_form(request)
    try:
        sent, shown_at = batch_form(form)
        batch = await proxy(request).call("batch_start", form_params(bm.BatchStartParams, sent))
    except ValueError as exc:
        errors = {"generator_instruction": str(exc)}
    except DomainError as exc:
        errors = {shown_at.get(name, name): message for name, message in field_errors(exc).items()}
    else:
        return see(f"/batches/{batch['id']}")
    return page(
        request,
        "batch_new.html",
        status=422,
        form=form,
        errors=errors,
        watch="",
        runtimes=runtimes(request),
        inspect=await inspect_project(request, form.get("project")),
    )


async def batch_cancel(request: Request) -> Response:
    await checked_form(request)
    batch_id = request.path_params["batch_id"]
    await proxy(request).call("batch_cancel", {"batch_id": batch_id})
    return see(f"/batches/{batch_id}")


async def batch_clean(request: Request) -> Response:
    form = await checked_form(request)
    batch_id = request.path_params["batch_id"]
    result = await proxy(request).call(
        "batch_clean", {"batch_id": batch_id, "confirm": True, "force": form.get("force") == "on"}
    )
    return page(request, "clean.html", batch_id=batch_id, preview=result, watch="")


RUN_TOOLS = {
    "stop": "run_stop",
    "rerun": "run_rerun",
    "resume": "run_resume",
    "followup": "run_followup",
}


async def run_action(request: Request) -> Response:
    batch_id, run_id = request.path_params["batch_id"], request.path_params["run_id"]
    tool = RUN_TOOLS.get(request.path_params["action"])
    if tool is None:
        return Response("404: no such action", status_code=404)
    form = await checked_form(request)
    params: dict[str, Any] = {"run_id": run_id}
    if tool == "run_followup":
        params.update(text=form.get("text", ""), reopen=form.get("reopen") == "on")
    elif tool == "run_resume" and form.get("prompt", "").strip():
        params["prompt"] = form["prompt"]
    await proxy(request).call(tool, params)
    return see(f"/batches/{batch_id}/runs/{run_id}")
