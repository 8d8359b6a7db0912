"""The worker tools an engine child may call, as a table: name, params model, description."""

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_run.domain.states import Verdict


class FinishParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    summary: str = Field(min_length=1, max_length=200_000,
                         description="your final answer: what you did and what you found")
    status: Literal["done", "blocked", "failed"] = Field(
        description="done: the task is complete; blocked: you need something you cannot get; "
                    "failed: you could not do it")


class SubmitScoreParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: float = Field(ge=0, le=100, description="0 (unusable) to 100 (excellent)")
    reason: str = Field(min_length=1, max_length=20_000, description="why this score")


class ResultFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=4_096, description="a file you changed, relative to your folder")
    explanation: str = Field(min_length=1, max_length=20_000, description="what you changed in it and why")


class SubmitResultParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    files: list[ResultFile] = Field(min_length=1, max_length=500)


class CreateCommitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1, max_length=10_000, description="the commit message")
    files: list[str] = Field(min_length=1, max_length=1_000, description="files to commit, relative to your folder")


@dataclass(frozen=True)
class WorkerTool:
    name: str
    params: type[BaseModel]
    description: str


WORKER_TOOLS: dict[str, WorkerTool] = {t.name: t for t in (
    WorkerTool("finish", FinishParams,
               "Call this exactly once when you are finished. The summary becomes your answer; "
               "the status says whether the task is done, blocked or failed."),
    WorkerTool("create_commit", CreateCommitParams,
               "Commit the given files (paths relative to your working folder) on your branch, with "
               "this message. Returns the commit sha."),
    WorkerTool("submit_score", SubmitScoreParams,
               "Submit your review score (0-100) of the change you were asked to review, with the reason."),
    WorkerTool("submit_result", SubmitResultParams,
               "Submit your result once: every file you changed, each with an explanation."),
)}

assert {v.value for v in Verdict} == set(FinishParams.model_fields["status"].annotation.__args__)
