"""The Session view: the transcript as blocks (messages, grouped tool calls), followed by cursor.

A page is rendered with the whole transcript; from then on it follows it by the `transcript`
tool's cursor: `GET /agents/<id>/transcript?after=CURSOR&turn=N` answers the blocks after
CURSOR as HTML (JSON: `html`, `cursor`, `more`). Each block carries `data-after` (the cursor
before its first item) and `data-last` (its last item's id), so the page appends what is new
and never re-reads what it has. A tool group can still grow, so a page whose last block is one
asks from that block's start and replaces it; `turn` is the turn of the block before, so a turn
divider, with the prompt the turn was started with, appears exactly where a new turn starts.
"""

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from agent_run.domain.errors import DomainError, InvalidRequest

TRANSCRIPT_PAGE = 1000  # items per `transcript` call
TRANSCRIPT_PAGES = 20  # a page render reads at most this many calls' worth
TOOL_ROLES = ("tool", "tool_call", "tool_result")


def group_blocks(
    items: list[dict[str, Any]],
    after: int = 0,
    turn: int = 0,
    turns: list[dict[str, Any]] | None = None,
    more: bool = False,
) -> list[dict[str, Any]]:
    """Consecutive tool items of one turn fold into one block; every other item is a block.

    Each turn after `turn` opens with a prompt block (its divider and the prompt it was started
    with, from the `transcript` tool's `turns`) before its first item; when nothing more follows
    (`more` false) a turn with no item yet gets its prompt block at the end."""
    prompts = {t["number"]: t for t in turns or [] if t["number"] > turn}
    blocks: list[dict[str, Any]] = []

    def open_turns(upto: int | None) -> None:
        for number in sorted(n for n in prompts if upto is None or n <= upto):
            blocks.append(
                {
                    "kind": "prompt",
                    "items": [],
                    "prompt": prompts.pop(number),
                    "after": after,
                    "last": after,
                    "turn": number,
                    "new_turn": True,
                }
            )

    for item in items:
        open_turns(item["execution_number"])
        last = blocks[-1] if blocks else None
        is_tool = item["role"] in TOOL_ROLES
        if (
            is_tool
            and last
            and last["kind"] == "tools"
            and last["turn"] == item["execution_number"]
        ):
            last["items"].append(item)
        else:
            previous_turn = last["turn"] if last else turn
            blocks.append(
                {
                    "kind": "tools" if is_tool else "message",
                    "items": [item],
                    "after": after,
                    "turn": item["execution_number"],
                    "new_turn": item["execution_number"] != previous_turn,
                }
            )
        blocks[-1]["last"] = item["id"]
        after = item["id"]
    if not more:
        open_turns(None)
    return blocks


async def read_items(
    request: Request, agent_id: str, cursor: int, pages: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, bool]:
    """Up to `pages` calls of the transcript after `cursor`: the items, the turns beginning among
    them (with their prompts), the next cursor, whether more."""
    items: list[dict[str, Any]] = []
    turns: dict[int, dict[str, Any]] = {}
    for _ in range(pages):
        chunk = await request.app.state.proxy.call(
            "transcript", {"agent_id": agent_id, "cursor": cursor, "limit": TRANSCRIPT_PAGE}
        )
        items += chunk["items"]
        turns.update((t["number"], t) for t in chunk.get("turns", []))
        cursor = chunk["next_cursor"]
        if len(chunk["items"]) < TRANSCRIPT_PAGE:
            return items, list(turns.values()), cursor, False
    return items, list(turns.values()), cursor, True


async def read_answer(
    request: Request, agent_id: str
) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """The verified answer, or why there is none (integrity failures are shown)."""
    try:
        return await request.app.state.proxy.call("answer", {"agent_id": agent_id}), None
    except DomainError as exc:
        return None, {"code": exc.code, "message": exc.message}


async def read_session(request: Request, agent_id: str) -> dict[str, Any]:
    """The session for a page: the whole transcript on a navigation; on a live refresh only the
    answer (the page follows the transcript by cursor itself)."""
    session: dict[str, Any] = {"agent_id": agent_id, "blocks": [], "cursor": None}
    if request.headers.get("x-live") != "1":
        items, turns, session["cursor"], more = await read_items(
            request, agent_id, 0, TRANSCRIPT_PAGES
        )
        session["blocks"] = group_blocks(items, turns=turns, more=more)
    session["answer"], session["answer_error"] = await read_answer(request, agent_id)
    return session


def _number(request: Request, name: str) -> int:
    value = request.query_params.get(name, "0")
    if not value.isdigit():
        raise InvalidRequest(f"{name} must be a non-negative integer, got {value!r}", field=name)
    return int(value)


async def transcript_after(request: Request) -> JSONResponse:
    """`GET /agents/<id>/transcript?after=&turn=`: the blocks after a cursor, rendered."""
    agent_id = request.path_params["agent_id"]
    after, turn = _number(request, "after"), _number(request, "turn")
    items, turns, cursor, more = await read_items(request, agent_id, after, 1)
    blocks = group_blocks(items, after, turn, turns, more)
    macros = request.app.state.env.get_template("macros.html").module
    html = str(macros.transcript_blocks(blocks)) if blocks else ""  # type: ignore[attr-defined]
    return JSONResponse({"html": html, "cursor": cursor, "more": more, "count": len(items)})
