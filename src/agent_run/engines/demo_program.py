"""The offline demo engine: a real child process that speaks Claude Code's stream-json.

Run as `python -m agent_run.engines.demo_program --model M`. It reads user messages (and
`control_request` interrupts) as stream-json lines on stdin, runs one turn per message in
order, and exits at end of input. The task text chooses the behaviour, one directive a line:

    answer: TEXT            final answer (default: a short echo of the task)
    write: PATH = CONTENT   write a file in the working directory (a Write tool call); refused
                            (an error tool result, nothing written, the turn goes on) under
                            the read_only profile or when PATH leads outside the working directory
    steps: N                N progress messages before answering ...
    step_seconds: S         ... S seconds apart (default 0.2)
    until: PATH             ... stopping early once PATH exists in the working folder (a test
                            lets a long agent end when it is ready, however slow the machine)
    sleep: S                silently wait S seconds before answering
    fail: KIND              fail: auth | rate_limit | quota | server | overloaded | crash |
                            malformed | error_reply | empty | hang | retry_forever
    echo_env: VAR           put the value of VAR in the answer and on stderr (redaction tests)
    spawn: S                start a background child that sleeps S seconds (group-kill tests)
    stderr: N               write N bytes of log lines to stderr (a chatty engine), after the
                            steps and before the tools
    finish: SUMMARY         call the worker tool `finish` through MCP (from --mcp-config) ...
    finish_status: STATUS   ... with this status: done (default) | blocked | failed
    recall: yes             answer with the answers of earlier turns of this session (resume)
    fold_steers: yes        a message that arrives during this turn joins it (as Claude Code does
                            with one sent while a tool runs) instead of queueing as the next turn,
                            echoed as Claude Code's --replay-user-messages does (isReplay), so
                            the supervisor knows no second turn is coming
    fold_steers: silent     ... the same, echoing nothing (an engine that folds without a word)
    commit: MESSAGE         commit the files written this turn with the worker tool create_commit
    score: N | auto         submit_score (auto: derived from the reviewed worktree's HEAD) ...
    score_reason: TEXT      ... with this reason (default: demo review)
    result: auto            submit_result listing the files written this turn
    tasks: auto | broken    answer with the JSON tasks a generator must return ("exactly N tasks")
    verdict: auto           finish with a validator verdict over the "- worker N: PATH" lines
    require: PATH           fail (an error reply) unless PATH exists in the working folder
    cost: USD | none        the turn's reported cost (default 0.0); none: report no cost
    tokens: N               the turn's reported input and output tokens (N each) for its answer
    step_tokens: N          each of the `steps` progress messages is a model call of its own
                            that reports N input and N output tokens in its `usage` (as Claude
                            Code's assistant lines do), before the turn's result; the result's
                            usage is then the steps' and the answer's together
    shell: COMMAND          run COMMAND with `sh -c` in the working directory (a Bash tool call:
                            the model's shell; its exit code and output are the tool result)
    quota: WINDOW=LEFT ...  report quota readings, as Claude Code's `rate_limit_event` lines, at
                            the start of the turn: WINDOW is `5h` or `7d`, or `LANE/5h`,
                            `LANE/7d` (a model lane, 1-64 of a-z, 0-9, `_`); LEFT the percent
                            left (0-100); the reset is the window's next multiple of its length
                            since the epoch. E.g. `quota: 5h=40 7d=90 sonnet/7d=75`. Without it,
                            the runtime's `quota` setting ([runtimes.NAME] quota = { "5h" = 40 },
                            passed as --quota), if any: `limits`, `capacity order` and
                            `--route auto` then work with no provider

Sessions are kept in $HOME/.demo-sessions/ID.jsonl: `--session-id ID` starts one,
`--resume ID` continues one with its history. `--profile read_only|write` (default write) is the
agent's profile.
"""

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from typing import Any

from agent_run.engines.demo_worker_client import call_worker_tool

_FAILURES = {
    "auth": (401, "Invalid API key · Please run /login"),
    "rate_limit": (429, "API Error: Request rejected (429) · rate limited"),
    "quota": (429, "API Error: 429 You exceeded your current quota"),
    "server": (500, "API Error: 500 Internal server error"),
    "overloaded": (529, "API Error: 529 Overloaded"),
}


class Directives:
    """What a task's directive lines ask for (a plain class, not a dataclass: the demo engine
    starts once per turn, and `dataclasses` is a fifth of its imports)."""

    def __init__(self) -> None:
        self.answer: str | None = None
        self.writes: list[tuple[str, str]] = []
        self.steps: int = 0
        self.step_seconds: float = 0.2
        self.until: str | None = None
        self.sleep: float = 0.0
        self.fail: str | None = None
        self.echo_env: list[str] = []
        self.spawn: float | None = None
        self.stderr: int = 0
        self.finish: str | None = None
        self.finish_status: str = "done"
        self.recall: bool = False
        self.fold_steers: str | None = None  # "yes" (echoed) | "silent"
        self.commit: str | None = None
        self.score: str | None = None
        self.score_reason: str = "demo review"
        self.result: bool = False
        self.tasks: str | None = None
        self.verdict: bool = False
        self.require: str | None = None
        self.cost: float | None = 0.0
        self.tokens: int | None = None
        self.step_tokens: int | None = None
        self.shells: list[str] = []
        self.quota: dict[str, float] | None = None


def _uuid4() -> str:
    """A random (version 4) UUID's text, without importing `uuid` (and `platform` with it)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_COUNTS = ("steps", "stderr", "tokens", "step_tokens")  # directives whose value is an integer


def parse_directives(task: str) -> Directives:
    d = Directives()
    for raw in task.splitlines():
        key, sep, value = raw.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep:
            continue
        if key == "answer":
            d.answer = value
        elif key == "write":
            path, _, content = value.partition("=")
            d.writes.append((path.strip(), content.strip()))
        elif key in _COUNTS:
            setattr(d, key, int(value))
        elif key == "step_seconds":
            d.step_seconds = float(value)
        elif key == "until":
            d.until = value
        elif key == "sleep":
            d.sleep = float(value)
        elif key == "fail":
            d.fail = value.lower()
        elif key == "echo_env":
            d.echo_env.append(value)
        elif key == "spawn":
            d.spawn = float(value)
        elif key == "finish":
            d.finish = value
        elif key == "finish_status":
            d.finish_status = value
        elif key == "recall":
            d.recall = True
        elif key == "fold_steers":
            d.fold_steers = "silent" if value == "silent" else "yes"
        elif key == "commit":
            d.commit = value
        elif key == "score":
            d.score = value
        elif key == "score_reason":
            d.score_reason = value
        elif key == "result":
            d.result = True
        elif key == "tasks":
            d.tasks = value
        elif key == "verdict":
            d.verdict = True
        elif key == "require":
            d.require = value
        elif key == "cost":
            d.cost = None if value.lower() == "none" else float(value)
        elif key == "shell":
            d.shells.append(value)
        elif key == "quota":
            d.quota = parse_quota(value.replace(",", " ").split())
    return d


QUOTA_WINDOWS = {"5h": ("five_hour", 5 * 3600), "7d": ("seven_day", 7 * 86400)}
QUOTA_LANE = re.compile(r"^[a-z0-9_]{1,64}$")


def parse_quota(pairs: list[str]) -> dict[str, float]:
    """`WINDOW=LEFT` pairs (docstring, `quota:`) -> {WINDOW: LEFT}; ValueError naming the pair."""
    quota = {}
    for pair in pairs:
        name, _, left = pair.partition("=")
        lane, _, window = name.rpartition("/")
        try:
            value = float(left)
        except ValueError:
            value = -1.0
        if window not in QUOTA_WINDOWS or (lane and not QUOTA_LANE.match(lane)):
            raise ValueError(f"quota: {pair!r}: the window is 5h, 7d, LANE/5h or LANE/7d")
        if not 0.0 <= value <= 100.0:
            raise ValueError(f"quota: {pair!r}: the percent left is a number from 0 to 100")
        quota[name] = value
    return quota


def rate_limit_events(quota: dict[str, float], now: float, session_id: str) -> list[dict[str, Any]]:
    """Claude Code's `rate_limit_event` line for each window of `quota` (domain: `five_hour` is
    the account-wide 5h window, `seven_day_LANE` a model lane's 7d one)."""
    events = []
    for name, left in quota.items():
        lane, _, window = name.rpartition("/")
        kind, length = QUOTA_WINDOWS[window]
        info = {
            "status": "rejected" if left == 0 else "allowed",
            "rateLimitType": f"{kind}_{lane}" if lane else kind,
            "utilization": (100.0 - left) / 100.0,
            "resetsAt": (int(now) // length + 1) * length,
        }
        events.append(
            {"type": "rate_limit_event", "rate_limit_info": info, "session_id": session_id}
        )
    return events


class Interrupted(Exception):
    pass


def write_refusal(path: str, profile: str) -> str | None:
    """Why a Write to `path` is refused, or None: only the write profile writes, and only
    inside the working directory (after `..`, absolute paths and symlinks are resolved)."""
    if profile != "write":
        return f"Write refused: the {profile} profile does not allow writing {path}"
    root = os.path.realpath(os.getcwd())
    target = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, target]) != root:
        return f"Write refused: {path} is outside the working directory"
    return None


def write_inside(path: str, content: str) -> None:
    """Write `path` (checked by write_refusal), never through a symlink in its last component."""
    target = os.path.realpath(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(content + "\n")


def log_lines(size: int) -> None:
    """`size` bytes of numbered log lines on stderr, as a chatty engine writes its own log."""
    written = 0
    while written < size:
        line = f"demo engine log line {written:>12}: " + "." * 60 + "\n"
        sys.stderr.write(line)
        written += len(line)
    sys.stderr.flush()


def auto_score() -> float:
    """A stable score per reviewed change: derived from the working folder's HEAD commit."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return float(int(head[:6] or "0", 16) % 61 + 40)


def generated_tasks(task: str) -> str:
    match = re.search(r"exactly (\d+) tasks", task)
    count = int(match.group(1)) if match else 1
    return json.dumps(
        [
            {
                "title": f"task {n}",
                "prompt": f"write: task{n}.txt = task {n}\nanswer: task {n} done",
            }
            for n in range(1, count + 1)
        ]
    )


def validator_verdict(task: str) -> str:
    workers = [
        (int(n), path.strip()) for n, path in re.findall(r"^- worker (\d+): (.+)$", task, re.M)
    ]
    verdicts = [
        {"worker": n, "pass": os.path.isdir(path), "reason": f"checked {path}"}
        for n, path in workers
    ]
    winner = next((v["worker"] for v in verdicts if v["pass"]), None)
    return json.dumps({"workers": verdicts, "winner": winner})


class DemoEngine:
    def __init__(
        self,
        model: str,
        mcp_config: str | None = None,
        session_id: str | None = None,
        resume: str | None = None,
        profile: str = "write",
        quota: dict[str, float] | None = None,
    ) -> None:
        self.model = model
        self.profile = profile
        self.quota = quota  # the runtime's `quota` setting: reported unless a task says its own
        self.mcp_config = mcp_config
        self.session_id = resume or session_id or _uuid4()
        self.session_file = os.path.join(
            os.environ.get("HOME", "."), ".demo-sessions", f"{self.session_id}.jsonl"
        )
        self.history: list[dict[str, Any]] = []
        if resume is not None:
            if not os.path.exists(self.session_file):
                raise SystemExit(f"No conversation found with session ID: {resume}")
            with open(self.session_file) as fh:
                self.history = [json.loads(line) for line in fh if line.strip()]
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.interrupt = threading.Event()
        self.turns = 0
        self.write_lock = threading.Lock()
        self.reported = Directives()  # this turn's cost and tokens (its `result` line)
        self.step_usage = 0  # tokens each way the turn's steps reported so far (step_tokens)

    def emit(self, obj: dict[str, Any]) -> None:
        with self.write_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    def read_stdin(self) -> None:
        for line in sys.stdin:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if obj.get("type") == "control_request":
                request = obj.get("request") or {}
                if request.get("subtype") == "interrupt":
                    self.interrupt.set()
                self.emit(
                    {
                        "type": "control_response",
                        "response": {"subtype": "success", "request_id": obj.get("request_id")},
                    }
                )
            elif obj.get("type") == "user":
                self.inbox.put(obj)
        self.inbox.put(None)

    def wait(self, seconds: float) -> None:
        if self.interrupt.wait(seconds):
            raise Interrupted

    def assistant(self, blocks: list[dict[str, Any]], usage: int | None = None) -> None:
        message: dict[str, Any] = {"role": "assistant", "model": self.model, "content": blocks}
        if usage is not None:  # a model call of its own, with its usage
            message.update(
                id=f"msg_{os.urandom(6).hex()}",
                usage={"input_tokens": usage, "output_tokens": usage},
            )
        self.emit({"type": "assistant", "session_id": self.session_id, "message": message})

    def result(
        self,
        text: str,
        *,
        is_error: bool = False,
        subtype: str = "success",
        status: int | None = None,
        started: float,
    ) -> None:
        tokens = self.reported.tokens
        line: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "result": text,
            "api_error_status": status,
            "num_turns": self.turns,
            "session_id": self.session_id,
            "duration_ms": int((time.time() - started) * 1000),
            "usage": {
                "input_tokens": self.step_usage
                + (len(text.split()) + 10 if tokens is None else tokens),
                "output_tokens": self.step_usage
                + (len(text.split()) if tokens is None else tokens),
            },
        }
        if self.reported.cost is not None:
            line["total_cost_usd"] = self.reported.cost
        self.emit(line)

    def run_turn(self, task: str) -> None:
        started = time.time()
        self.turns += 1
        d = self.reported = parse_directives(task)
        self.step_usage = 0
        for event in rate_limit_events(d.quota or self.quota or {}, time.time(), self.session_id):
            self.emit(event)
        try:
            self.wait(d.sleep)
            if d.require is not None and not os.path.exists(d.require):
                self.fail("error_reply", started)
                return
            self.act(d, task)
            if d.fail:
                self.fail(d.fail, started)
                return
            answer = self.answer_of(d, task)
            self.assistant([{"type": "text", "text": answer}])
            self.result(answer, started=started)
        except Interrupted:
            self.interrupt.clear()
            self.result(
                "Interrupted by user",
                is_error=True,
                subtype="error_during_execution",
                started=started,
            )

    def act(self, d: Directives, task: str) -> None:
        """What the task's directives do before the answer: steps, tools, worker-tool calls."""
        if d.spawn is not None:
            subprocess.Popen(
                ["sleep", str(d.spawn)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        for i in range(1, d.steps + 1):
            if d.until is not None and os.path.exists(d.until):
                break
            self.wait(d.step_seconds)
            self.assistant([{"type": "text", "text": f"step {i}/{d.steps}"}], d.step_tokens)
            self.step_usage += d.step_tokens or 0
        log_lines(d.stderr)
        for command in d.shells:
            self.shell_tool(command)
        written = [path for path, content in d.writes if self.write_tool(path, content) is None]
        if d.commit is not None:
            self.tool("create_commit", {"message": d.commit, "files": written})
        if d.score is not None:
            score = auto_score() if d.score == "auto" else float(d.score)
            self.tool("submit_score", {"score": score, "reason": d.score_reason})
        if d.result:
            self.tool(
                "submit_result",
                {"files": [{"path": p, "explanation": f"wrote {p}"} for p in written]},
            )
        if d.verdict:
            self.finish(validator_verdict(task), "done")
        if d.finish is not None:
            self.finish(d.finish, d.finish_status)

    def answer_of(self, d: Directives, task: str) -> str:
        """The turn's answer (remembered for the session), with any echoed variables after it."""
        default = "Finished through the worker tools." if d.finish is not None else None
        if d.fold_steers:
            folded = self.take_waiting_messages()
            for text in folded if d.fold_steers == "yes" else []:
                self.emit({"type": "user", "isReplay": True, "message": _user(text)})
            d.answer = "; ".join([d.answer or "first turn", *folded])
        if d.tasks is not None:
            default = generated_tasks(task) if d.tasks == "auto" else "this is not JSON"
        answer = (
            d.answer
            or default
            or f"Demo answer to: {task.strip().splitlines()[0] if task.strip() else ''}"
        )
        if d.recall:
            earlier = "; ".join(turn["answer"] for turn in self.history) or "nothing"
            answer = f"Earlier in this session: {earlier}"
        self.remember(task, answer)  # before echo_env: the session file keeps no secret
        for name in d.echo_env:
            value = os.environ.get(name, "")
            answer += f"\n{name}={value}"
            half = len(value) // 2  # on stderr too, in two writes: engine.log is redacted
            for piece in (f"{name}={value[:half]}", value[half:] + "\n"):
                sys.stderr.write(piece)
                sys.stderr.flush()
        return answer

    def shell_tool(self, command: str) -> None:
        """One Bash tool call: the command runs as the model's shell would run it."""
        tool_id = f"toolu_{os.urandom(6).hex()}"
        self.assistant(
            [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}}]
        )
        done = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        self.tool_result(tool_id, f"exit {done.returncode}\n{done.stdout}{done.stderr}", False)

    def tool_result(self, tool_id: str, content: str, is_error: bool) -> None:
        block = {"type": "tool_result", "tool_use_id": tool_id, "is_error": is_error}
        self.emit(
            {
                "type": "user",
                "message": {"role": "user", "content": [{**block, "content": content}]},
            }
        )

    def write_tool(self, path: str, content: str) -> str | None:
        """One Write tool call, shown as Claude Code shows it; the refusal text, if refused."""
        tool_id = f"toolu_{os.urandom(6).hex()}"
        self.assistant(
            [
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": "Write",
                    "input": {"file_path": path, "content": content},
                }
            ]
        )
        refusal = write_refusal(path, self.profile)
        if refusal is None:
            write_inside(path, content)
        self.emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": tool_id,
                            "is_error": refusal is not None,
                            "content": refusal or f"File created successfully at: {path}",
                        }
                    ],
                },
            }
        )
        return refusal

    def take_waiting_messages(self) -> list[str]:
        """The texts of user messages that arrived during this turn (fold_steers)."""
        texts: list[str] = []
        while True:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return texts
            if message is None:  # end of input: leave it for the turn loop
                self.inbox.put(None)
                return texts
            texts.append(str((message.get("message") or {}).get("content", "")))

    def remember(self, task: str, answer: str) -> None:
        self.history.append({"task": task, "answer": answer})
        os.makedirs(os.path.dirname(self.session_file), exist_ok=True)
        with open(self.session_file, "a") as fh:
            fh.write(json.dumps({"task": task, "answer": answer}) + "\n")

    def finish(self, summary: str, status: str) -> None:
        self.tool("finish", {"summary": summary, "status": status})

    def tool(self, name: str, arguments: dict[str, Any]) -> None:
        """Call a worker tool through MCP, shown in the stream as Claude Code shows tool calls."""
        tool_id = f"toolu_{os.urandom(6).hex()}"
        self.assistant(
            [
                {
                    "type": "tool_use",
                    "id": tool_id,
                    "name": f"mcp__worker__{name}",
                    "input": arguments,
                }
            ]
        )
        if self.mcp_config is None:
            text, is_error = "no MCP server configured", True
        else:
            try:
                text, is_error = call_worker_tool(self.mcp_config, name, arguments)
            except (
                Exception
            ) as exc:  # the server died mid-call: a tool error, as real engines report it
                text, is_error = f"MCP error: {exc!r}", True
        self.emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": tool_id,
                            "content": text,
                            "is_error": is_error,
                        }
                    ],
                },
            }
        )

    def fail(self, kind: str, started: float) -> None:
        if kind in _FAILURES:
            status, text = _FAILURES[kind]
            self.assistant([{"type": "text", "text": text}])
            self.result(text, is_error=True, status=status, started=started)
        elif kind == "crash":
            self.assistant([{"type": "text", "text": "about to crash"}])
            os._exit(3)
        elif kind == "malformed":
            with self.write_lock:
                sys.stdout.write('{"type": "assistant", "message": {BROKEN\n')
                sys.stdout.flush()
            os._exit(1)
        elif kind == "error_reply":
            text = "[API Error: Connection error.]"
            self.assistant([{"type": "text", "text": text}])
            self.result(text, started=started)
        elif kind == "empty":
            self.result("", started=started)
        elif kind == "hang":
            self.wait(10**6)
        elif kind == "retry_forever":  # a provider that keeps answering 429, as Claude reports it
            attempt = 0
            while True:
                attempt += 1
                self.emit(
                    {
                        "type": "system",
                        "subtype": "api_retry",
                        "attempt": attempt,
                        "error_status": 429,
                        "error": "rate_limit_error",
                        "retry_delay_ms": 200,
                    }
                )
                self.wait(0.2)
        else:
            self.result(f"unknown failure {kind!r}", is_error=True, started=started)

    def serve(self) -> int:
        os.makedirs(os.path.dirname(self.session_file), exist_ok=True)
        open(self.session_file, "a").close()  # the session exists from its first event on
        self.emit(
            {
                "type": "system",
                "subtype": "init",
                "session_id": self.session_id,
                "model": self.model,
                "tools": ["Write"],
                "permissionMode": "default",
                "cwd": os.getcwd(),
            }
        )
        threading.Thread(target=self.read_stdin, daemon=True).start()
        while (message := self.inbox.get()) is not None:
            content = (message.get("message") or {}).get("content", "")
            if isinstance(content, list):
                content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
            self.run_turn(str(content))
        return 0


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="agent-run-demo-engine")
    parser.add_argument("--model", default="demo-1")
    parser.add_argument("--mcp-config", default=None)
    parser.add_argument("--session-id", default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--profile", choices=["read_only", "write"], default="write")
    parser.add_argument("--quota", default="", help="WINDOW=LEFT,... (the runtime's `quota`)")
    args = parser.parse_args()
    quota = parse_quota(args.quota.split(",")) if args.quota else None
    return DemoEngine(
        args.model, args.mcp_config, args.session_id, args.resume, args.profile, quota
    ).serve()


if __name__ == "__main__":
    sys.exit(main())
