"""Built-in documentation topics served by the `doc` tool: short, exact, generated where possible."""

from agent_run.domain.failures import FAILURE_ADVICE
from agent_run.domain.states import ALLOWED_TRANSITIONS
from agent_run.engines.demo_program import __doc__ as DEMO_DOC
from agent_run.engines.registry import all_engine_specs


def _states() -> str:
    lines = ["Execution states and allowed transitions (terminal states never reopen):"]
    for state, targets in ALLOWED_TRANSITIONS.items():
        lines.append(
            f"  {state.value:<11} -> {', '.join(sorted(t.value for t in targets)) or '(terminal)'}"
        )
    lines.append("An agent's state is the state of its latest execution.")
    return "\n".join(lines)


def _failures() -> str:
    lines = ["Failure kinds (match on the kind, never on text):"]
    lines += [f"  {kind.value:<22} {advice}" for kind, advice in FAILURE_ADVICE.items()]
    return "\n".join(lines)


OVERVIEW = """agent-run supervises coding-agent CLIs as durable jobs.

start    -> returns an agent id at once; the engine runs under its own detached supervisor
wait     -> bounded; returns timed_out: true rather than hanging
answer   -> the sealed answer, re-hashed against its sha256 on every read
agent / list_agents / transcript -> what happened, from SQLite
cancel / steer -> commands the supervisor picks up within a fraction of a second

"succeeded" means: the engine reported completion, its process group is gone, and a
non-empty, non-error answer was sealed. Anything else is a named failure kind.
Topics: """

_CONFIG = """config.toml (in the home; `agent-run init` writes a commented one):

schema_version = 1            required
default_runtime = "demo"      a key of [runtimes]
[supervisor] stall_seconds, wall_seconds, cancel_grace_seconds,
             storage_buffer_bytes (events held in memory while the disk is full; 4 MiB),
             storage_wait_seconds (how long a finished run waits for space; 600),
             busy_timeout_seconds (how long one write waits for the database's lock before
             the supervisor holds it and tries again; 5),
             nice (agents' niceness, and their sessions' scheduling groups'; 5)
[daemon]     reconcile_interval_seconds, answer_scrub_seconds (each sealed answer is re-hashed
             once per this period; 3600)
[retention]  agent_days (a terminal agent's rows, events, messages and logs go; 30),
             engine_home_days (its engine home goes; 7), prune_answers (sealed answers go
             too; false), interval_seconds (the daemon's pass; 86400). `agent-run prune
             --dry-run` previews; never a running agent, a live batch's agent or a worktree.
[runtimes.NAME] engine ({engines}), enabled, binary, models, default_model,
               auth = {{ env = "VAR" }} or {{ file = "PATH" }} (never the secret itself), or
                      {{ login = "native" }} ({sign_ins}: the engine's own sign-in, made with
                      `agent-run login NAME`; optional dir = the engine's credential folder),
               base_url, allow_plain_http_loopback, env (non-secret), stall_seconds, wall_seconds

Unknown keys, wrong types and a missing schema_version are refused with the dotted path."""


def _config() -> str:
    """The config topic, its engines read from the registry (built-ins and plug-ins)."""
    specs = all_engine_specs()
    return _CONFIG.format(
        engines="|".join(spec.name for spec in specs),
        sign_ins=", ".join(spec.name for spec in specs if spec.sign_in) or "none",
    )


def topics() -> dict[str, str]:
    found = {
        "overview": "",
        "states": _states(),
        "failures": _failures(),
        "demo": (DEMO_DOC or "").strip(),
        "config": _config(),
    }
    found["overview"] = OVERVIEW + ", ".join(found)
    return found
