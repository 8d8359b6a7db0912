"""Redaction of secret values from every line agent-run stores (streams, messages, answers, logs).

Engines print JSON, so a secret containing `"`, `\\`, a newline or non-ASCII text reaches us
escaped (`\\"`, `\\\\`, `\\n`, `\\u00e9`), and twice escaped when a tool result that is itself
JSON is embedded in a stream line. Every such form is matched on the text as it arrives,
before anything is decoded, as well as the raw value.
"""

import json
import re

REDACTED = "[REDACTED]"
# Shapes of common provider keys, redacted even when we were not told the value.
_KEY_SHAPES = r"\b(?:sk-ant-[A-Za-z0-9_\-]{16,}|sk-[A-Za-z0-9_\-]{16,})\b"
# Compiled once at import (in the zygote, for every supervisor it forks): compiling a pattern
# per agent cost each supervisor ~0.5 ms of CPU and ~110 copy-on-write page faults.
_KEY_PATTERN = re.compile(_KEY_SHAPES)
_MIN_SECRET_LENGTH = 4
_UNICODE_ESCAPE = re.compile(r"\\u[0-9a-f]{4}")


def _json_escapes(value: str) -> set[str]:
    """The forms a JSON encoder may give `value` inside a string literal."""
    forms = {
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value, ensure_ascii=True)[1:-1],
    }
    for form in list(forms):
        forms.add(_UNICODE_ESCAPE.sub(lambda m: m.group(0)[:2] + m.group(0)[2:].upper(), form))
        if "/" in form:
            forms.add(form.replace("/", "\\/"))
    return forms


def secret_forms(value: str) -> set[str]:
    """The raw value, its JSON-escaped forms, and those escaped once more."""
    once = _json_escapes(value)
    twice = {form for inner in once for form in _json_escapes(inner)}
    return {value} | once | twice


class Redactor:
    def __init__(self, secrets: list[str]) -> None:
        self.values: set[str] = set()
        self.add(secrets)

    def add(self, secrets: list[str]) -> None:
        """Redact these values too from now on (a sign-in's tokens after the engine refreshed)."""
        values = self.values | {s for s in secrets if len(s) >= _MIN_SECRET_LENGTH}
        forms = {form for value in values for form in secret_forms(value)}
        # Longest first, so a secret containing another is replaced whole.
        ordered = sorted(forms, key=len, reverse=True)
        self.values, self.forms, self.longest = values, ordered, len(ordered[0]) if ordered else 0

    def __call__(self, text: str) -> str:
        # Every occurrence of every form goes, then anything shaped like a provider key; a form
        # is a literal, so it is replaced as one (no pattern to build per agent).
        for form in self.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return _KEY_PATTERN.sub(REDACTED, text)


class StreamRedactor:
    """Redacts a text stream given in arbitrary pieces (a secret may straddle two reads).

    Only a tail that could be the start of a secret is held back until more text or the end
    arrives, so a split secret is still seen whole while everything else (an engine's last
    error line before a long retry wait, say) is stored at once.
    """

    def __init__(self, redact: Redactor) -> None:
        self.redact = redact
        self.carry = ""

    def feed(self, text: str) -> str:
        done = self.redact(self.carry + text)
        keep = self._held_back(done)
        self.carry = done[len(done) - keep :] if keep else ""
        return done[: len(done) - keep]

    def _held_back(self, text: str) -> int:
        """The length of the longest tail of `text` that is a proper prefix of a secret form."""
        for size in range(min(self.redact.longest - 1, len(text)), 0, -1):
            tail = text[-size:]
            if any(form.startswith(tail) for form in self.redact.forms):
                return size
        return 0

    def close(self) -> str:
        done, self.carry = self.redact(self.carry), ""
        return done
