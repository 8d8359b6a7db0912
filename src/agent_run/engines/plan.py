"""The execution plan: everything a supervisor needs to run one execution, versioned.

The daemon builds it at admission (`services/agents.py`) and stores it as
`executions.plan_json`; the supervisor validates it before it runs anything (`load_plan`).
It lives in the engines layer because it is what an engine is launched with and it holds the
engine's typed options. The task text is not in it: it is the execution's `prompt` column,
given to the engine beside the plan.

Versions: 1 (no `plan_version` key) held the prompt and every runtime key for every engine;
2 holds neither; 3 adds `commit_branch`. `load_plan` reads all three.
"""

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agent_run.engines.options import FIELD_ERROR, RuntimeOptions
from agent_run.engines.registry import UnknownEngine, engine_spec, runtime_options

PLAN_VERSION: Literal[3] = 3

# A runtime's options, validated against the model of the engine it names (and dumped whole).
EngineOptions = Annotated[SerializeAsAny[RuntimeOptions], PlainValidator(runtime_options)]


class PlanInvalid(ValueError):
    """A stored plan this supervisor cannot run; `field` is the dotted path at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ExecutionPlan(BaseModel):
    """Stored as `executions.plan_json`; read back only through `load_plan`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    plan_version: Literal[3] = PLAN_VERSION
    agent_id: str
    execution_id: str
    runtime: str
    engine: str
    model: str
    workdir: str
    profile: Literal["read_only", "write"]
    runtime_config: EngineOptions
    stall_seconds: float = Field(gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    cancel_grace_seconds: float = Field(ge=0)
    engine_home: str
    resume_session_id: str | None = None
    read_roots: list[str] = Field(default_factory=list)
    worker_tools: list[str] = Field(default_factory=lambda: ["finish"])
    # The one branch `create_commit` commits on for an agent of no batch run here (a batch run's
    # is its run's branch): the branch its workdir was on at admission (a run's worktree on a
    # host); None: create_commit is refused outside a batch run.
    commit_branch: str | None = None
    storage_buffer_bytes: int = Field(
        default=4 * 1024 * 1024, ge=0
    )  # events held while the disk is full
    storage_wait_seconds: float = Field(default=600.0, ge=0)  # how long the end waits for space
    nice: int = Field(default=0, ge=0, le=19)  # supervisor.priority (0 in plans made before it)
    # How long one write waits for another writer's lock before the supervisor holds its rows
    # and tries again (supervisor.busy_timeout_seconds; 5 s in plans made before it).
    busy_timeout_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _one_engine(self) -> "ExecutionPlan":
        if self.runtime_config.engine != self.engine:
            raise PydanticCustomError(
                f"{FIELD_ERROR}runtime_config",
                "runtime_config is for engine {options!r}, not the plan's {engine!r}",
                {"options": self.runtime_config.engine, "engine": self.engine},
            )
        return self

    def to_json(self) -> str:
        return self.model_dump_json()


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: drop the prompt (the execution row holds it) and the runtime keys the
    engine never read (version 1 stored every key of every engine, e.g. a demo's `base_url`)."""
    data = {key: value for key, value in data.items() if key != "prompt"}
    runtime_config = data.get("runtime_config")
    if isinstance(runtime_config, dict) and isinstance(runtime_config.get("engine"), str):
        try:
            fields = engine_spec(runtime_config["engine"]).options.model_fields
        except UnknownEngine:
            return data | {"plan_version": 2}  # validation names the engine
        data["runtime_config"] = {k: v for k, v in runtime_config.items() if k in fields}
    return data | {"plan_version": 2}


def _upgrade_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3: no `commit_branch` (create_commit only for batch runs, as then)."""
    return data | {"plan_version": 3}


def _first_error(exc: ValidationError) -> PlanInvalid:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"].startswith(FIELD_ERROR):
        loc.append(error["type"].removeprefix(FIELD_ERROR))
    field = ".".join(loc) or None
    where = f"`{field}`: " if field else ""
    return PlanInvalid(f"the execution plan is invalid: {where}{error['msg']}", field=field)


def load_plan(plan_json: str | bytes) -> ExecutionPlan:
    """Validate a stored plan of any version this build reads; PlanInvalid names what is wrong."""
    try:
        data = json.loads(plan_json)
    except ValueError as exc:
        raise PlanInvalid(f"the execution plan is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PlanInvalid("the execution plan is not a JSON object")
    version = data.get("plan_version", 1)
    if version == 1:
        data = _upgrade_v2(_upgrade_v1(data))
    elif version == 2:
        data = _upgrade_v2(data)
    elif version != PLAN_VERSION:
        raise PlanInvalid(
            f"plan_version {version!r} is not one this agent-run reads (1 to {PLAN_VERSION})",
            field="plan_version",
        )
    try:
        return ExecutionPlan.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc) from None
