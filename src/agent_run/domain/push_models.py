"""`run_push`: a run's branch (or the branch it was merged into) pushed to a git remote the user
configured, and a pull request opened from it (`gh`) or the page where to open one."""

from pydantic import Field

from agent_run.domain.batch_models import RunId, View
from agent_run.domain.requests import Params


class RunPushParams(Params):
    run_id: str = RunId
    remote: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        description="a git remote of the project (`git remote`), e.g. origin",
    )
    merged: bool = Field(
        default=False,
        description="push the branch run_merge merged the run into (as it is now), not the "
        "run's own branch",
    )
    branch: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="the branch on the remote (default: the same name)",
    )
    pull_request: bool = Field(
        default=False,
        description="then open a pull request from it into the batch's base branch: `gh pr "
        "create` when gh is installed and the remote is on GitHub, else its compare URL",
    )


class PullRequest(View):
    created: bool = Field(description="gh opened it")
    url: str | None = Field(default=None, description="the pull request, or where to open one")
    command: list[str] | None = Field(default=None, description="the gh command that was run")
    message: str


class RunPushResult(View):
    run_id: str
    remote: str
    remote_url: str = Field(description="the remote's URL, any credentials in it left out")
    local_ref: str
    remote_ref: str
    sha: str = Field(description="the commit pushed")
    message: str
    pull_request: PullRequest | None = None
