"""Form posts: each calls one tool and redirects (303), or re-renders its form with the errors."""

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agent_run.domain import batch_models as bm
from agent_run.domain import requests as rq
from agent_run.domain.errors import DomainError
from agent_run.web.forms import batch_form, form_params, notify_field, notify_target
from agent_run.web.pages import inspect_project, page, proxy, run_context, runtimes
from agent_run.web.security import checked_form


def see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def field_errors(exc: DomainError, shown: frozenset[str] | None = None) -> dict[str, str]:
    """The tool's message for each bad field (InvalidParams lists every problem), keyed by the
    form field that shows it; one the form has no field for (`shown`) goes under `_`, named."""
    errors: dict[str, str] = {}
    problems = [e for e in exc.details.get("errors", []) if "field" in e] or [
        {"field": exc.field or "_", "message": exc.message}
    ]
    for problem in problems:
        name, message = notify_field(problem["field"]), problem["message"]
        if shown is not None and name != "_" and name not in shown:
            name, message = "_", f"{problem['field']}: {message}"
        errors[name] = f"{errors[name]}; {message}" if name in errors else message
    return errors


def with_notify(params: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    target = notify_target(form)
    return {**params, "notify": target} if target else params


# The fields each form shows an error beside; an error on any other field shows at the top.
NOTIFY_FORM = frozenset({"notify_transport", "notify_argv", "notify_thread_id"})
AGENT_FORM = (
    frozenset({"task", "workdir", "runtime", "model", "profile", "stall_seconds", "wall_seconds"})
    | NOTIFY_FORM
)
BATCH_FORM = (
    frozenset(
        {
            "workflow",
            "project",
            "base_ref",
            "worktree_root",
            "prompt",
            "generator_instruction",
            "runs",
            "concurrency",
            "reviewers",
            "review_prompt",
            "verify_command",
            "verify_timeout_seconds",
            "validator_prompt",
            "runtime",
            "model",
            "profile",
            "stall_seconds",
            "wall_seconds",
            "notify_runs",
        }
    )
    | NOTIFY_FORM
)


async def agent_create(request: Request) -> Response:
    form = await checked_form(request)
    params = with_notify(form_params(rq.StartParams, form), form)
    try:
        agent = await proxy(request).call("start", params)
    except DomainError as exc:
        return page(
            request,
            "agent_new.html",
            status=422,
            form=form,
            errors=field_errors(exc, AGENT_FORM),
            watch="",
            runtimes=await runtimes(request),
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
        params = with_notify(form_params(bm.BatchStartParams, sent), form)
        batch = await proxy(request).call("batch_start", params)
    except ValueError as exc:
        errors = {"generator_instruction": str(exc)}
    except DomainError as exc:
        errors = {}
        for name, message in field_errors(exc, BATCH_FORM | frozenset(shown_at)).items():
            errors[shown_at.get(name, name)] = message
    else:
        return see(f"/batches/{batch['id']}")
    return page(
        request,
        "batch_new.html",
        status=422,
        form=form,
        errors=errors,
        watch="",
        runtimes=await runtimes(request),
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
    try:
        await proxy(request).call(tool, params)
    except DomainError as exc:
        if exc.code.endswith("NotFound") or exc.code == "DaemonUnavailable":
            raise  # the error page says so
        # Refused (a locked run, a run that moved on): the run page again, the reason beside
        # the buttons, what was typed kept.
        context = await run_context(request)
        context["watch"] = ""  # this page's URL is the post's: no live refresh of it
        return page(
            request,
            "run.html",
            status=409 if exc.code in ("Conflict", "RunLocked") else 422,
            **context,
            action_error={"action": request.path_params["action"], "message": exc.message},
            typed=form,
        )
    return see(f"/batches/{batch_id}/runs/{run_id}")
