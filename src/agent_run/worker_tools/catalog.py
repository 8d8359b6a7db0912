"""The worker tools an engine child may call, as a table: name, JSON Schema, description.

Stdlib only: this is imported by the per-agent worker-tools server, which must start fast.
The schemas are what pydantic emitted for the former param models, kept byte-for-byte;
`validation.validate` enforces them with pydantic-compatible coercions and messages.
"""

from typing import Any, NamedTuple

from agent_run.domain.states import Verdict


def _text(title: str, description: str, max_length: int) -> dict[str, Any]:
    return {
        "description": description,
        "maxLength": max_length,
        "minLength": 1,
        "title": title,
        "type": "string",
    }


def _object(title: str, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "additionalProperties": False,
        "properties": properties,
        "required": list(properties),
        "title": title,
        "type": "object",
    }


FINISH_SCHEMA = _object(
    "FinishParams",
    {
        "summary": _text("Summary", "your final answer: what you did and what you found", 200_000),
        "status": {
            "description": "done: the task is complete; blocked: you need something you cannot get; "
            "failed: you could not do it",
            "enum": ["done", "blocked", "failed"],
            "title": "Status",
            "type": "string",
        },
    },
)

CREATE_COMMIT_SCHEMA = _object(
    "CreateCommitParams",
    {
        "message": _text("Message", "the commit message", 10_000),
        "files": {
            "description": "files to commit, relative to your folder",
            "items": {"type": "string"},
            "maxItems": 1000,
            "minItems": 1,
            "title": "Files",
            "type": "array",
        },
    },
)

SUBMIT_SCORE_SCHEMA = _object(
    "SubmitScoreParams",
    {
        "score": {
            "description": "0 (unusable) to 100 (excellent)",
            "maximum": 100,
            "minimum": 0,
            "title": "Score",
            "type": "number",
        },
        "reason": _text("Reason", "why this score", 20_000),
    },
)

SUBMIT_RESULT_SCHEMA = _object(
    "SubmitResultParams",
    {
        "files": {
            "items": {"$ref": "#/$defs/ResultFile"},
            "maxItems": 500,
            "minItems": 1,
            "title": "Files",
            "type": "array",
        },
    },
    **{
        "$defs": {
            "ResultFile": _object(
                "ResultFile",
                {
                    "path": _text("Path", "a file you changed, relative to your folder", 4_096),
                    "explanation": _text("Explanation", "what you changed in it and why", 20_000),
                },
            )
        }
    },
)


class WorkerTool(NamedTuple):
    name: str
    schema: dict[str, Any]
    description: str


WORKER_TOOLS: dict[str, WorkerTool] = {
    t.name: t
    for t in (
        WorkerTool(
            "finish",
            FINISH_SCHEMA,
            "Call this exactly once when you are finished. The summary becomes your answer; "
            "the status says whether the task is done, blocked or failed.",
        ),
        WorkerTool(
            "create_commit",
            CREATE_COMMIT_SCHEMA,
            "Commit the given files (paths relative to your working folder) on your branch, with "
            "this message. Returns the commit sha.",
        ),
        WorkerTool(
            "submit_score",
            SUBMIT_SCORE_SCHEMA,
            "Submit your review score (0-100) of the change you were asked to review, with the reason.",
        ),
        WorkerTool(
            "submit_result",
            SUBMIT_RESULT_SCHEMA,
            "Submit your result once: every file you changed, each with an explanation.",
        ),
    )
}

assert {v.value for v in Verdict} == set(FINISH_SCHEMA["properties"]["status"]["enum"])
