"""The pages (GET): home, agent, batch, run and the two forms; each one or a few tool calls."""

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from agent_run.domain.batch_states import BATCH_ENDED, RUN_SETTLED, BatchState, RunState
from agent_run.domain.errors import DomainError, RunNotFound
from agent_run.domain.states import Verdict
from agent_run.web.diffs import split_diff
from agent_run.web.runtimes import RuntimeChoices, runtime_choices
from agent_run.web.security import checked_form
from agent_run.web.session import read_session

LOG_EVENTS = 2000  # the Log tab shows at most this many events


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render a page; `watch` names the ids whose changes make the page refresh its live parts."""
    env = request.app.state.env
    context.setdefault("watch", "*")
    html = env.get_template(template).render(
        csrf=request.app.state.guard.csrf, request=request, **context
    )
    return HTMLResponse(html, status_code=status)


def proxy(request: Request) -> Any:
    return request.app.state.proxy


async def runtimes(request: Request) -> RuntimeChoices:
    """What the Runtime and Model fields offer: the daemon's `models` roster, asked afresh."""
    return await runtime_choices(proxy(request))


HOME_BATCHES = 50  # batches per Home page by default (`?limit=`; older ones: `?offset=`)
HOME_AGENTS = 50  # standalone agents on Home, and agents that say they are blocked


def _count(request: Request, name: str, default: int, most: int) -> int:
    value = request.query_params.get(name, "")
    return min(int(value), most) if value.isdigit() else default


async def home(request: Request) -> HTMLResponse:
    project = request.query_params.get("project") or None
    offset = _count(request, "offset", 0, 2**62)
    size = max(1, _count(request, "limit", HOME_BATCHES, 500))
    mine = {"project": project} if project else {}
    call = proxy(request).call
    batches, blocked, agents, blocked_agents = await asyncio.gather(
        call("list_batches", {"limit": size, "offset": offset, **mine}),
        call("list_batches", {"limit": HOME_BATCHES, "state": [BatchState.BLOCKED], **mine}),
        # Filtered by the daemon, so a 100-run batch does not push them off the page.
        call("list_agents", {"limit": HOME_AGENTS, "standalone": True}),
        call("list_agents", {"limit": HOME_AGENTS, "verdict": Verdict.BLOCKED}),
    )
    shown = batches["items"]
    # Blocked batches (of any page) and this page's batches with failed runs need you; only
    # those are read in full (for their failed runs and reason).
    wanted = {b["id"]: b for b in blocked["items"]}
    wanted.update((b["id"], b) for b in shown if b["counts"].get(RunState.FAILED))
    needs_you = await asyncio.gather(*(call("batch", {"batch_id": i}) for i in wanted))
    projects = sorted({b["project_root"] for b in shown} | ({project} if project else set()))
    return page(
        request,
        "home.html",
        batches=shown,
        paging={
            "offset": offset,
            "total": batches["total"],
            "newer": max(0, offset - size) if offset else None,
            "size": size,
            "older": offset + len(shown) if offset + len(shown) < batches["total"] else None,
        },
        needs_you=needs_you,
        agents=agents["items"],
        agents_total=agents["total"],
        blocked_agents=blocked_agents["items"],
        projects=projects,
        project=project,
        revision=batches["revision"],
    )


async def agent_new(request: Request) -> HTMLResponse:
    choices = await runtimes(request)
    return page(request, "agent_new.html", form={}, errors={}, watch="", runtimes=choices)


async def agent_page(request: Request) -> HTMLResponse:
    agent_id = request.path_params["agent_id"]
    agent, notice = await asyncio.gather(
        proxy(request).call("agent", {"agent_id": agent_id}),
        proxy(request).call("delivery_status", {"agent_id": agent_id}),
    )
    tab = request.query_params.get("tab", "session")
    session = await read_session(request, agent_id) if tab != "log" else None
    log = await read_log(request, agent_id) if tab == "log" else None
    return page(
        request,
        "agent.html",
        agent=agent,
        notice=notice,
        session=session,
        log=log,
        tab=tab,
        watch=agent_id,
        revision=agent["revision"],
    )


async def read_log(request: Request, agent_id: str) -> dict[str, Any]:
    """The agent's events for the Log tab (`events`, filtered by `?kind=`), and the kinds it has."""
    kind = request.query_params.get("kind") or None
    everything = await proxy(request).call("events", {"agent_id": agent_id, "limit": 1000})
    kinds = sorted({e["kind"] for e in everything["items"]} | ({kind} if kind else set()))
    items: list[dict[str, Any]] = []
    after = 0
    while len(items) < LOG_EVENTS:
        chunk = await proxy(request).call(
            "events",
            {
                "agent_id": agent_id,
                "after_seq": after,
                "limit": 1000,
                **({"kinds": [kind]} if kind else {}),
            },
        )
        items += chunk["items"]
        after = chunk["next_after"]
        if len(chunk["items"]) < 1000:
            break
    return {
        "items": items[:LOG_EVENTS],
        "kinds": kinds,
        "kind": kind,
        "truncated": len(items) >= LOG_EVENTS,
    }


async def batch_new(request: Request) -> HTMLResponse:
    form: dict[str, Any] = {}
    template = request.query_params.get("template")
    if template:
        source = await proxy(request).call("batch", {"batch_id": template})
        form = {k: v for k, v in source["config"].items() if v is not None}
        form.update(
            workflow=source["workflow"], base_ref=source["base_ref"], project=source["project_root"]
        )
        if source["workflow"] == "generated":
            form["generator_instruction"] = form.pop("prompt", "")
    if request.query_params.get("project"):
        form["project"] = request.query_params["project"]
    return page(
        request,
        "batch_new.html",
        form=form,
        errors={},
        watch="",
        runtimes=await runtimes(request),
        inspect=await inspect_project(request, form.get("project")),
    )


async def inspect_project(request: Request, folder: str | None) -> dict[str, Any] | None:
    """`project_inspect` of the chosen folder, or the reason it cannot be inspected."""
    if not folder:
        return None
    try:
        return await proxy(request).call("project_inspect", {"path": folder})
    except DomainError as exc:
        return {"error": exc.message}


async def folders(request: Request) -> HTMLResponse:
    listing = await proxy(request).call(
        "list_dir", {"path": request.query_params.get("path") or None}
    )
    return page(request, "folders.html", listing=listing, carry=None, watch="")


async def folders_posted(request: Request) -> HTMLResponse:
    """The picker opened from the New batch form (its "Browse folders…" posts the whole form):
    every link carries what was typed, so choosing a folder returns to the form as it was."""
    form = await checked_form(request)
    picked = form.pop("path", None)  # none: opened from the form, at the folder typed there
    path = form.get("project", "") if picked is None else picked
    note = None
    try:
        listing = await proxy(request).call("list_dir", {"path": path.strip() or None})
    except DomainError as exc:  # a typed folder the picker cannot show: start from the roots
        listing, note = await proxy(request).call("list_dir", {}), exc.message
    carry = {k: v for k, v in form.items() if k != "project" and v != ""}
    return page(request, "folders.html", listing=listing, carry=carry, note=note, watch="")


async def batch_new_posted(request: Request) -> HTMLResponse:
    """The New batch form again, filled with what was posted (from the picker's "use")."""
    form = {k: v for k, v in (await checked_form(request)).items() if v != ""}
    return page(
        request,
        "batch_new.html",
        form=form,
        errors={},
        watch="",
        runtimes=await runtimes(request),
        inspect=await inspect_project(request, form.get("project")),
    )


async def batch_page(request: Request) -> HTMLResponse:
    batch = await proxy(request).call("batch", {"batch_id": request.path_params["batch_id"]})
    return page(
        request,
        "batch.html",
        batch=batch,
        sections=batch_sections(batch),
        can_cancel=batch["state"] not in BATCH_ENDED,
        watch=batch["id"],
        revision=batch["revision"],
    )


def batch_sections(batch: dict[str, Any]) -> dict[str, Any]:
    runs = batch["runs"]
    candidates = sorted(
        (r for r in runs if r["stage"] == "candidate"),
        key=lambda r: (r["rank"] is None, r["rank"] or 0, r["index"]),
    )
    reviews: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if r["stage"] == "reviewer" and r["parent_run_id"]:
            reviews.setdefault(r["parent_run_id"], []).append(r)
    sections: dict[str, Any] = {"candidates": candidates, "reviews": reviews}
    if batch["workflow"] == "validated":
        sections["validation"] = validation_section(runs)
        others = [r for r in runs if r["stage"] not in ("worker", "validator")]
    elif batch["workflow"] == "generated":
        sections["generation"] = generation_section(runs)
        others = [r for r in runs if r["stage"] != "generator"]
    else:
        others = [r for r in runs if r["stage"] not in ("candidate", "reviewer")]
    sections["others"] = others
    return sections


def validation_section(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Validated: each worker beside the validator's pass/reason for it, and the winner."""
    validator = next((r for r in runs if r["stage"] == "validator"), None)
    verdict = validator["result"] if validator and isinstance(validator["result"], dict) else {}
    by_worker = {v.get("worker"): v for v in verdict.get("workers") or [] if isinstance(v, dict)}
    workers = [
        {
            "run": r,
            "verdict": by_worker.get(r["index"]),
            "winner": verdict.get("winner") == r["index"],
        }
        for r in runs
        if r["stage"] == "worker"
    ]
    return {
        "validator": validator,
        "workers": workers,
        "winner": verdict.get("winner"),
        "has_verdict": bool(verdict),
    }


def generation_section(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Generated: the generator and the tasks it made, each with the run that works on it."""
    generator = next((r for r in runs if r["stage"] == "generator"), None)
    made = generator["result"] if generator and isinstance(generator["result"], list) else []
    workers = {r["index"]: r for r in runs if r["stage"] == "worker"}
    tasks = [
        {"number": n, "title": t.get("title"), "prompt": t.get("prompt"), "run": workers.get(n)}
        for n, t in enumerate(made, start=1)
        if isinstance(t, dict)
    ]
    return {"generator": generator, "tasks": tasks}


async def batch_clean_preview(request: Request) -> HTMLResponse:
    batch_id = request.path_params["batch_id"]
    preview = await proxy(request).call("batch_clean", {"batch_id": batch_id})
    return page(request, "clean.html", batch_id=batch_id, preview=preview, watch="")


async def run_page(request: Request) -> HTMLResponse:
    return page(request, "run.html", **await run_context(request))


async def run_context(request: Request) -> dict[str, Any]:
    """What the Run page shows: the run, the attempt asked for (`?attempt=`), its agent, the tab."""
    # One run, not the whole batch: a 50-run batch's view is what a live refresh of each open
    # run page would otherwise read, twice a second.
    batch_id, run_id = request.path_params["batch_id"], request.path_params["run_id"]
    detail = await proxy(request).call("run_show", {"run_id": run_id})
    if detail["batch_id"] != batch_id:
        raise RunNotFound(f"no run {run_id} in {batch_id}", field="run_id")
    run = detail["run"]
    batch = {
        "id": batch_id,
        "workflow": detail["workflow"],
        "state": detail["batch_state"],
        "base_sha": detail["base_sha"],
        "revision": detail["revision"],
    }
    tab = request.query_params.get("tab", "session")
    attempt = _attempt(run, request.query_params.get("attempt"))
    agent_id = attempt["agent_id"] if attempt else None
    context: dict[str, Any] = {
        "batch": batch,
        "run": run,
        "tab": tab,
        "attempt": attempt,
        "actions": run_actions(batch, run),
        "revision": batch["revision"],
        "watch": " ".join(filter(None, [batch["id"], agent_id])),
    }
    if agent_id:  # the head shows the attempt's agent (task, route, times, usage) on every tab
        context["agent"] = await proxy(request).call("agent", {"agent_id": agent_id})
    if tab == "changes":
        review = await proxy(request).call(
            "batch_review", {"batch_id": batch["id"], "run_id": run["id"]}
        )
        context["review"] = review["runs"][0] if review["runs"] else None
        if context["review"]:
            context["files"] = split_diff(
                context["review"]["diff"], context["review"]["diff_truncated"]
            )
    elif agent_id:
        if tab == "log":
            context["log"] = await read_log(request, agent_id)
        else:
            context["session"] = await read_session(request, agent_id)
    return context


def _attempt(run: dict[str, Any], wanted: str | None) -> dict[str, Any] | None:
    attempts = run["attempts"]
    for a in attempts:
        if wanted and str(a["attempt"]) == wanted:
            return a
    return attempts[-1] if attempts else None


def run_actions(batch: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """Which buttons the lifecycle allows now, and why follow-up is locked when it is."""
    live = batch["state"] != BatchState.CANCELLED
    settled = run["state"] in RUN_SETTLED
    return {
        "stop": run["state"] in (RunState.QUEUED, RunState.RUNNING),
        "rerun": live and settled,
        "resume": live
        and run["state"] in (RunState.FAILED, RunState.CANCELLED)
        and bool(run["agent_id"]),
        "followup": live and settled and bool(run["agent_id"]),
        "merge": settled and bool(run["branch"]),
        "locked_reason": (
            "this run's result feeds the batch's "
            f"{'ranking' if batch['workflow'] == 'ranked' else 'verdict'}; "
            "a follow-up must reopen it"
        )
        if run["locked"]
        else None,
    }
