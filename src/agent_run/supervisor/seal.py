"""Sealing an answer (answer.md + answer.json with bytes and sha256) and verifying it later."""

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain.errors import AnswerIntegrity
from agent_run.system.home import write_private_file


@dataclass(frozen=True)
class SealedAnswer:
    path: Path
    sha256: str
    bytes: int


def seal_answer(directory: Path, text: str, *, agent_id: str, execution_id: str) -> SealedAnswer:
    data = text.encode()
    digest = hashlib.sha256(data).hexdigest()
    answer_path = directory / "answer.md"
    write_private_file(answer_path, data)
    proof = {
        "agent_id": agent_id,
        "execution_id": execution_id,
        "sha256": digest,
        "bytes": len(data),
        "sealed_at": time.time(),
    }
    write_private_file(directory / "answer.json", (json.dumps(proof, indent=2) + "\n").encode())
    return SealedAnswer(answer_path, digest, len(data))


def keep_reply(directory: Path, text: str) -> Path:
    """An unsealed reply (a failed execution's text, for diagnosis): 0600, atomic, fsynced."""
    path = directory / "reply.md"
    write_private_file(path, text.encode())
    return path


def read_verified_answer(path: Path, sha256: str, size: int) -> str:
    """Re-read and re-hash the sealed answer; any mismatch is an integrity error, never a pass."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AnswerIntegrity(
            f"sealed answer {path} cannot be read: {exc.strerror}", path=str(path)
        ) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256 or len(data) != size:
        raise AnswerIntegrity(
            f"sealed answer {path} does not match its proof (sha256 {digest[:12]}... != {sha256[:12]}...)",
            path=str(path),
            expected_sha256=sha256,
            actual_sha256=digest,
        )
    return data.decode()
