"""Drive the real engine CLIs against the mock provider and print what they do.

Not a test: a runnable record of how each CLI is pointed at ``MockProvider`` (argv, environment,
generated config) and of what it sends and prints. Run from the repository root after
``npm ci``::

    python tests/support/try_engines.py                   # every engine, every scenario
    python tests/support/try_engines.py claude qwen       # some engines
    python tests/support/try_engines.py codex -s tool -v  # one scenario, dump requests

Engines: ``codex`` (``codex exec --json``), ``codex-app`` (``codex app-server`` over JSON-RPC
on stdio), ``claude`` (``claude -p --output-format stream-json``), ``qwen``
(``qwen -p --output-format stream-json``). Scenarios: ``text`` (plain answer), ``tool`` (one
shell tool call, then text), ``429``, ``429-retry-after`` (``retry-after: 1``) and ``401``
(faults answered to every request, with the engines' retries turned down). More faults on
request with ``-s``: ``500``, ``529``, ``malformed``, ``cut``, ``silent-after-headers``,
``silent-before-headers``.

Each run gets a fresh generated home (``CODEX_HOME`` / ``CLAUDE_CONFIG_DIR`` / ``QWEN_HOME``
with ``HOME`` in the same folder), an explicit environment (nothing inherited but PATH basics),
a temporary working directory, stdin from ``/dev/null`` and a watchdog.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mock_provider import Fault, MockProvider, Reply, Text, ToolCall  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = REPO_ROOT / "node_modules" / ".bin"
PLANTED_KEY = "sk-mock-planted-key"
CODEX_MODEL = "gpt-5.5"  # a slug Codex knows, so it advertises its full tool set
# --chatty leaves the engines' side traffic on (Claude's non-essential calls, Qwen's memory
# extraction) to observe which auxiliary requests they make.
QUIET_SIDE_TRAFFIC = True
WATCHDOG_SECONDS = float(os.environ.get("TRY_ENGINES_WATCHDOG", "90"))


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    stdin_lines: list[dict[str, Any]] | None = None  # for JSON-RPC engines


def base_env(home: Path) -> dict[str, str]:
    return {
        "PATH": f"{NODE_BIN}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home / "tmp"),
    }


# --------------------------------------------------------------------------- engine launchers


def codex_overrides(mp: MockProvider, *, retries: bool) -> list[str]:
    tries = 1 if retries else 0
    pairs = {
        "model_provider": '"mock"',
        "model_providers.mock.name": '"mock"',
        "model_providers.mock.base_url": f'"{mp.url}/v1"',
        "model_providers.mock.env_key": '"MOCK_API_KEY"',
        "model_providers.mock.wire_api": '"responses"',
        "model_providers.mock.request_max_retries": str(tries),
        "model_providers.mock.stream_max_retries": str(tries),
        "model_providers.mock.stream_idle_timeout_ms": "20000",
    }
    argv: list[str] = []
    for key, value in pairs.items():
        argv += ["-c", f"{key}={value}"]
    return argv


def codex_env(home: Path) -> dict[str, str]:
    (home / "codex").mkdir(parents=True, exist_ok=True)  # Codex refuses a missing CODEX_HOME
    env = base_env(home)
    env.update({"CODEX_HOME": str(home / "codex"), "MOCK_API_KEY": PLANTED_KEY})
    return env


def launch_codex(mp: MockProvider, home: Path, prompt: str, retries: bool) -> Launch:
    argv = [
        str(NODE_BIN / "codex"),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        CODEX_MODEL,
        *codex_overrides(mp, retries=retries),
        prompt,
    ]
    return Launch(argv, codex_env(home))


def launch_codex_app(mp: MockProvider, home: Path, prompt: str, retries: bool) -> Launch:
    argv = [str(NODE_BIN / "codex"), "app-server", *codex_overrides(mp, retries=retries)]
    # thread/start and turn/start need the thread id; the runner fills "$THREAD".
    lines = [
        {
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": {"name": "try_engines", "version": "0"}},
        },
        {"method": "initialized"},
        {
            "id": 2,
            "method": "thread/start",
            "params": {
                "model": CODEX_MODEL,
                "approvalPolicy": "never",
                "sandbox": "danger-full-access",
            },
        },
        {
            "id": 3,
            "method": "turn/start",
            "params": {"threadId": "$THREAD", "input": [{"type": "text", "text": prompt}]},
        },
    ]
    return Launch(argv, codex_env(home), stdin_lines=lines)


def launch_claude(mp: MockProvider, home: Path, prompt: str, retries: bool) -> Launch:
    env = base_env(home)
    env.update(
        {
            "CLAUDE_CONFIG_DIR": str(home / "claude"),
            "ANTHROPIC_BASE_URL": mp.url,
            "ANTHROPIC_API_KEY": PLANTED_KEY,
            "IS_SANDBOX": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "2" if retries else "0",
            "API_TIMEOUT_MS": "30000",
        }
    )
    if QUIET_SIDE_TRAFFIC:
        env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    argv = [
        str(NODE_BIN / "claude"),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Bash,Write,Edit",
        "--permission-mode",
        "acceptEdits",
        "--setting-sources",
        "",
        "--strict-mcp-config",
    ]
    return Launch(argv, env)


def launch_qwen(mp: MockProvider, home: Path, prompt: str, retries: bool) -> Launch:
    qwen_home = home / "qwen"
    qwen_home.mkdir(parents=True, exist_ok=True)
    settings = {
        "memory": {"enableManagedAutoMemory": not QUIET_SIDE_TRAFFIC},
        # 0.24 reads these under "model"; top-level "generationConfig" is ignored. They tune
        # only the outer rate-limit loop: an inner loop still makes 7 attempts (no knob), and
        # the OpenAI SDK under it retries each of those 3 times.
        "model": {
            "generationConfig": {
                "maxRetries": 2 if retries else 0,
                "timeout": 30000,
                "retryInitialDelayMs": 500,
                "retryMaxDelayMs": 2000,
            }
        },
        "security": {"auth": {"selectedType": "openai"}},
    }
    (qwen_home / "settings.json").write_text(json.dumps(settings, indent=2))
    env = base_env(home)
    env.update(
        {
            "QWEN_HOME": str(qwen_home),
            "OPENAI_BASE_URL": f"{mp.url}/v1",
            "OPENAI_API_KEY": PLANTED_KEY,
            "OPENAI_MODEL": "mock-model",
        }
    )
    argv = [
        str(NODE_BIN / "qwen"),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--approval-mode",
        "yolo",
    ]
    return Launch(argv, env)


LAUNCHERS: dict[str, Callable[[MockProvider, Path, str, bool], Launch]] = {
    "codex": launch_codex,
    "codex-app": launch_codex_app,
    "claude": launch_claude,
    "qwen": launch_qwen,
}
SHELL_TOOL: dict[str, Callable[[str], ToolCall]] = {
    "codex": lambda cmd: ToolCall("exec_command", {"cmd": cmd}),
    "codex-app": lambda cmd: ToolCall("exec_command", {"cmd": cmd}),
    "claude": lambda cmd: ToolCall("Bash", {"command": cmd, "description": "print marker"}),
    "qwen": lambda cmd: ToolCall(
        "run_shell_command", {"command": cmd, "description": "print marker"}
    ),
}


# --------------------------------------------------------------------------- scenarios

SCENARIOS = ["text", "tool", "429", "429-retry-after", "401"]
EXTRA_SCENARIOS = [
    "500",
    "529",
    "malformed",
    "cut",
    "silent-after-headers",
    "silent-before-headers",
]


def scenario_script(engine: str, scenario: str) -> tuple[list[Reply], bool]:
    """The replies for one scenario and whether engine retries stay on."""
    if scenario == "text":
        return [Text("Hello from the mock provider.")], True
    if scenario == "tool":
        return [
            SHELL_TOOL[engine]("echo tool-ran-$((40+2))"),
            Text("The command printed 42."),
        ], True
    if scenario == "429":
        return [Fault.http(429, times=None)], False
    if scenario == "429-retry-after":
        return [Fault.http(429, retry_after=1, times=None)], False
    if scenario == "401":
        return [Fault.http(401, times=None)], False
    extra_faults = {
        "500": Fault.http(500, times=None),
        "529": Fault.http(529, times=None),
        "malformed": Fault.malformed(times=None),
        "cut": Fault.cut(times=None),
        "silent-after-headers": Fault.silent_after_headers(times=None),
        "silent-before-headers": Fault.silent_before_headers(times=None),
    }
    if scenario in extra_faults:
        return [extra_faults[scenario]], False
    raise ValueError(scenario)


# --------------------------------------------------------------------------- running


def run(engine: str, scenario: str, verbose: bool) -> None:
    script, retries = scenario_script(engine, scenario)
    root = Path(tempfile.mkdtemp(prefix=f"try-{engine}-{scenario}-"))
    home, workdir = root / "home", root / "work"
    (home / "tmp").mkdir(parents=True)
    workdir.mkdir()
    prompt = "Say hello. (try_engines)"
    with MockProvider(script) as mp:
        launch = LAUNCHERS[engine](mp, home, prompt, retries)
        started = time.monotonic()
        if launch.stdin_lines is None:
            code, lines, stderr = run_headless(launch, workdir)
        else:
            code, lines, stderr = run_json_rpc(launch, workdir)
        elapsed = time.monotonic() - started
    print(
        f"\n=== {engine} / {scenario}: exit {code}, {elapsed:.1f}s, "
        f"{len(mp.requests)} requests ({len(mp.main_requests())} main)"
    )
    first = mp.requests[0].received_at if mp.requests else 0.0
    for request in mp.requests:
        print(f"  req +{request.received_at - first:5.1f}s", describe_request(request, verbose))
    for line in lines:
        print("  out", summarise_event(line))
    if stderr.strip():
        tail = stderr.strip().splitlines()[-6:]
        print("  err", "\n  err ".join(t[:200] for t in tail))
    shutil.rmtree(root, ignore_errors=True)


def run_headless(launch: Launch, workdir: Path) -> tuple[int | None, list[str], str]:
    child = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=WATCHDOG_SECONDS)
    except subprocess.TimeoutExpired:
        # `codex` is a Node wrapper around a native binary: end the whole process group, or
        # the grandchild keeps the pipes open.
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        return None, stdout.splitlines() + ["<watchdog: killed>"], stderr
    return child.returncode, stdout.splitlines(), stderr


def run_json_rpc(launch: Launch, workdir: Path) -> tuple[int | None, list[str], str]:
    """Speak the Codex app-server protocol until the turn completes (or the watchdog)."""
    child = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdin and child.stdout
    pending = list(launch.stdin_lines or [])
    thread_id: str | None = None
    lines: list[str] = []
    deadline = time.monotonic() + WATCHDOG_SECONDS

    def send_until_blocked() -> None:
        while pending:
            message = json.loads(json.dumps(pending[0]).replace("$THREAD", thread_id or "$THREAD"))
            if "$THREAD" in json.dumps(message):
                return
            child.stdin.write(json.dumps(message) + "\n")
            child.stdin.flush()
            pending.pop(0)

    send_until_blocked()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([child.stdout], [], [], 1.0)
        if not ready:
            continue
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        message = json.loads(line)
        if message.get("id") == 2 and "result" in message:
            thread_id = message["result"]["thread"]["id"]
            send_until_blocked()
        if "method" in message and "id" in message:  # a server request, e.g. approval
            child.stdin.write(
                json.dumps({"id": message["id"], "result": {"decision": "accept"}}) + "\n"
            )
            child.stdin.flush()
        if message.get("method") == "turn/completed":
            break
    else:
        lines.append("<watchdog: killed>")
    child.stdin.close()
    try:
        code = child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        code = child.wait()
    return code, lines, child.stderr.read() if child.stderr else ""


# --------------------------------------------------------------------------- summaries


def describe_request(request: Any, verbose: bool) -> str:
    body = request.body if isinstance(request.body, dict) else {}
    auth = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    keyed = "key=planted" if PLANTED_KEY in auth else f"key={auth[:20]!r}"
    limit = body.get("max_tokens", body.get("max_output_tokens"))
    tools = request.tool_names()
    reply = type(request.reply).__name__ if request.reply else "-"
    if isinstance(request.reply, Fault):
        reply = f"Fault({request.reply.kind} {request.reply.status})"
    results = [r.output[:40] for r in request.tool_results()]
    summary = (
        f"{request.method} {request.path} [{request.role}] {keyed} model={body.get('model')}"
        f" stream={body.get('stream')} max={limit} tools={len(tools)}"
        f" results={results} -> {reply}"
    )
    if request.role == "auxiliary" or verbose:
        system = " ".join(request.text().split())[:160]
        summary += f"\n        text: {system!r}"
    if verbose and tools:
        summary += f"\n        tools: {tools}"
    return summary


def summarise_event(line: str) -> str:
    try:
        event = json.loads(line)
    except ValueError:
        return line[:200]
    kind = event.get("type") or event.get("method") or f"response#{event.get('id')}"
    if event.get("subtype"):
        kind += f"/{event['subtype']}"
    details: dict[str, Any] = {}
    for key in (
        "is_error",
        "result",
        "api_error_status",
        "num_turns",
        "error",
        "attempt",
        "error_status",
        "retry_delay_ms",
        "message",
    ):
        if key in event and not isinstance(event[key], dict | list):
            details[key] = event[key]
    if isinstance(event.get("error"), dict):
        details["error"] = event["error"].get("message") or event["error"]
    item = event.get("item") or (event.get("params") or {}).get("item")
    if isinstance(item, dict):
        details["item"] = {
            k: item.get(k)
            for k in ("type", "text", "command", "exit_code", "aggregated_output")
            if item.get(k)
        }
    params = event.get("params")
    if isinstance(params, dict) and isinstance(params.get("turn"), dict):
        turn = params["turn"]
        details["turn"] = {"status": turn.get("status"), "error": turn.get("error")}
    elif isinstance(params, dict) and isinstance(params.get("error"), dict):
        details["error"] = {k: params["error"].get(k) for k in ("message", "codexErrorInfo")}
        details["willRetry"] = params.get("willRetry")
    elif isinstance(params, dict) and "item" not in params:
        details["params"] = json.dumps(params)[:160]
    message = event.get("message")
    if isinstance(message, dict):
        blocks = []
        for block in message.get("content") or []:
            if block.get("type") == "text":
                blocks.append(f"text:{block['text'][:80]!r}")
            elif block.get("type") == "tool_use":
                blocks.append(f"tool_use:{block['name']}{json.dumps(block.get('input'))[:80]}")
            elif block.get("type") == "tool_result":
                blocks.append(f"tool_result:{_short(block.get('content'))!r}")
        details["content"] = blocks
    text = json.dumps(details, ensure_ascii=False)
    return f"{kind} {text[:400]}"


def _short(value: Any) -> str:
    return (value if isinstance(value, str) else json.dumps(value))[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engines", nargs="*", default=["codex", "codex-app", "claude", "qwen"])
    parser.add_argument(
        "-s",
        "--scenario",
        action="append",
        choices=SCENARIOS + EXTRA_SCENARIOS,
        help="repeatable; default: " + " ".join(SCENARIOS),
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--chatty",
        action="store_true",
        help="leave the engines' side traffic on, to see auxiliary requests",
    )
    args = parser.parse_args()
    global QUIET_SIDE_TRAFFIC
    QUIET_SIDE_TRAFFIC = not args.chatty
    if not NODE_BIN.is_dir():
        sys.exit(f"{NODE_BIN} is missing: run `npm ci` in {REPO_ROOT}")
    for engine in args.engines:
        for scenario in args.scenario or SCENARIOS:
            run(engine, scenario, args.verbose)


if __name__ == "__main__":
    main()
