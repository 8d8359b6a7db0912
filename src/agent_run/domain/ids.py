"""Identifiers: sortable, prefixed, random enough to never collide on one machine."""

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _base32(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """`prefix_` + 10 chars of milliseconds + 8 random chars: sorts by creation time."""
    millis = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(5), "big")
    return f"{prefix}_{_base32(millis, 10)}{_base32(rand, 8)}"


def new_agent_id() -> str:
    return new_id("ag")


def new_execution_id() -> str:
    return new_id("ex")
