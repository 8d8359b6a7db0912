"""Keyset pages: a list is read newest first by (created_at, id), and a page's `next_cursor`
names the last item it holds; the next page starts after it, however many rows are older. A
cursor is opaque to callers (pass `next_cursor` back as `cursor`); it is `CREATED_AT/ID`."""

import re

CURSOR_PATTERN = r"^[0-9]{1,17}(\.[0-9]{1,20})?/[a-z]{2}_[0-9a-z]{1,60}$"
CURSOR = re.compile(CURSOR_PATTERN)


def cursor_of(created_at: float, item_id: str) -> str:
    """The cursor after an item (repr keeps every bit of the float)."""
    return f"{created_at!r}/{item_id}"


def after(cursor: str | None) -> tuple[float, str] | None:
    """The (created_at, id) a page starts after; None for the first page. The params model
    checked the cursor's form (CURSOR_PATTERN)."""
    if cursor is None:
        return None
    created_at, item_id = cursor.split("/", 1)
    return float(created_at), item_id
