"""Redaction of secret values from every line agent-run stores (streams, messages, answers, logs)."""

import re

REDACTED = "[REDACTED]"
# Shapes of common provider keys, redacted even when we were not told the value.
_KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-]{16,}|sk-ant-[A-Za-z0-9_\-]{16,})\b")
_MIN_SECRET_LENGTH = 4


class Redactor:
    def __init__(self, secrets: list[str]) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET_LENGTH}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return _KEY_SHAPES.sub(REDACTED, text)
