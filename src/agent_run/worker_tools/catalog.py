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


@dataclass(frozen=True)
class WorkerTool:
    name: str
    params: type[BaseModel]
    description: str


WORKER_TOOLS: dict[str, WorkerTool] = {t.name: t for t in (
    WorkerTool("finish", FinishParams,
               "Call this exactly once when you are finished. The summary becomes your answer; "
               "the status says whether the task is done, blocked or failed."),
)}

assert {v.value for v in Verdict} == set(FinishParams.model_fields["status"].annotation.__args__)
