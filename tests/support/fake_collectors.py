"""Stand-ins for the capacity sources' external programs, run as real processes by the tests:
`collector MODE` (an external `command` collector) and `appserver MODE` (a `codex app-server`
that answers `account/rateLimits/read` and `model/list` after a moment, and exits at end of
input as the real one does). A collector given a file after its mode appends a line
to it per run."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def _count_run() -> None:
    runs = sys.argv[3] if sys.argv[1] == "collector" and len(sys.argv) > 3 else None
    if runs:
        with open(runs, "a") as f:
            f.write(f"{sys.argv[1:]}\n")


def leave_a_detached_child(folder: Path) -> None:
    """Start a child in a session of its own that keeps this process's stdout open for ten
    minutes, and return once it has written its identity to `folder`/detached.json."""
    record = folder / "detached.json"
    code = (
        "import json, os, time\n"
        "from agent_run.system.processes import ProcessIdentity\n"
        "me = ProcessIdentity.current()\n"
        f"tmp = {str(record)!r} + '.tmp'\n"
        "open(tmp, 'w').write(json.dumps([me.pid, me.start_ticks, me.boot_id]))\n"
        f"os.rename(tmp, {str(record)!r})\n"
        "time.sleep(600)\n"
    )
    subprocess.Popen([sys.executable, "-c", code], start_new_session=True)  # stdout inherited
    deadline = time.monotonic() + 120
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def collector(mode: str) -> None:
    request = json.loads(sys.stdin.read())
    now = request["now"]
    assert "SECRET_OF_THE_DAEMON" not in os.environ  # the collector gets an allowlisted environment
    folder = Path(sys.argv[3]).parent if len(sys.argv) > 3 else Path(".")
    detach = mode == "detached" and request["runtime"] == "alpha"
    if mode == "detached":  # alpha: a valid answer, then a detached child holding stdout, exit
        mode = "ok"
    elif mode == "alpha_waits":  # alpha answers only once the test releases it
        while request["runtime"] == "alpha" and not (folder / "release").exists():
            time.sleep(0.05)
        mode = "ok"
    if mode == "ok":
        remaining = 80.0 if request["runtime"] == "alpha" else 30.0
        if request["account"] is not None:  # an account of its own: 10 points per label letter
            remaining = 10.0 * len(request["account"])
        windows = [
            {
                "lane": "default",
                "window": "5h",
                "remaining_percent": remaining,
                "reset_at": now + 3600,
                "observed_at": now,
                "valid_until": now + 600,
            },
            {
                "lane": "default",
                "window": "7d",
                "remaining_percent": 90.0,
                "observed_at": now,
                "reset_at": now + 86400,
            },
        ]
        print(json.dumps({"version": 1, "runtime_seen": request["runtime"], "windows": windows}))
    elif mode == "html":  # a lane name with markup: pages must escape it
        window = {
            "lane": "<i>lane</i>",
            "window": "5h",
            "remaining_percent": 50.0,
            "reset_at": now + 3600,
            "observed_at": now,
        }
        print(json.dumps({"version": 1, "windows": [window]}))
    elif mode in ("exhausted", "beta_stale"):
        stale = mode == "beta_stale" and request["runtime"] == "beta"
        seen = now - 2000 if stale else now
        window = {
            "lane": "default",
            "window": "5h",
            "remaining_percent": 0.0 if mode == "exhausted" else 95.0 if stale else 40.0,
            "reset_at": now + 3600,
            "observed_at": seen,
            "valid_until": seen + 600,
        }
        print(json.dumps({"version": 1, "windows": [window]}))
    elif mode == "lanes":  # alpha: account-wide 5h exhausted, its sonnet lane half left

        def window(lane: str, name: str, remaining: float) -> dict:
            reset = now + (3600 if name == "5h" else 4 * 86400)
            return {
                "lane": lane,
                "window": name,
                "remaining_percent": remaining,
                "reset_at": reset,
                "observed_at": now,
            }

        windows = (
            [window("default", "5h", 0.0), window("sonnet", "7d", 50.0)]
            if request["runtime"] == "alpha"
            else [window("default", "5h", 10.0)]
        )
        print(json.dumps({"version": 1, "windows": windows}))
    elif mode == "explained":  # every kind of explanation capacity_order gives
        print(json.dumps({"version": 1, "windows": _explained(request["runtime"], now)}))
    elif mode == "slow":
        time.sleep(60)
    elif mode == "huge":
        sys.stdout.write("x" * (3 * 1024 * 1024))
    elif mode == "garbage":
        print("this is not json")
    elif mode == "wrong":
        print(
            json.dumps(
                {
                    "version": 1,
                    "windows": [
                        {
                            "lane": "default",
                            "window": "5h",
                            "remaining_percent": 150,
                            "observed_at": now,
                        }
                    ],
                }
            )
        )
    if detach:
        sys.stdout.flush()
        leave_a_detached_child(folder)


def _explained(runtime: str, now: float) -> list[dict]:
    """alpha and its alias gamma (one key): 5h read twice, burning 10 %/h toward 50 % at its
    reset, 2 reset credits; 7d one reading. beta: exhausted. delta: stale. broken: as alpha
    (its binary is missing: never ranked)."""

    def window(name: str, left: float, reset: float, seen: float, **more: object) -> dict:
        return {
            "lane": "default",
            "window": name,
            "remaining_percent": left,
            "reset_at": reset,
            "observed_at": seen,
            "valid_until": seen + 600,
            **more,
        }

    if runtime == "beta":
        return [window("5h", 0.0, now + 3600, now)]
    if runtime == "delta":
        return [window("5h", 95.0, now + 3600, now - 2000)]
    return [
        window("5h", 100.0, now + 3 * 3600, now - 7200),
        window("5h", 80.0, now + 3 * 3600, now, reset_credits=2),
        window("7d", 90.0, now + 2 * 86400, now, reset_credits=2),
    ]


def _limits_reply(message_id: int, mode: str) -> dict:
    if mode == "refuse":
        return {"id": message_id, "error": {"code": -32600, "message": "API key auth"}}
    # the used percent of lane `codex`: from $CODEX_HOME/used.txt when there is one, so a test
    # tells the account homes apart
    used_file = os.path.join(os.environ.get("CODEX_HOME", ""), "used.txt")
    used = int(open(used_file).read()) if os.path.exists(used_file) else 40
    now = int(time.time())
    good = {"usedPercent": used, "windowDurationMins": 300, "resetsAt": now + 3600}
    bad = {"usedPercent": "lots", "windowDurationMins": 10080}
    result = {
        "rateLimits": {"primary": {"usedPercent": 99, "windowDurationMins": 300}},
        "rateLimitsByLimitId": {
            "codex": {"primary": good, "secondary": bad},
            "codex_other": {"primary": {**good, "usedPercent": 10}},
        },
        "rateLimitResetCredits": {"availableCount": 2, "credits": None},  # Codex 0.171.0's shape
    }
    return {"id": message_id, "result": result}


def _models_reply(message_id: int) -> dict:  # Codex 0.171.0's ModelListResponse shape
    models = [
        {"id": "gpt-test", "model": "gpt-test", "displayName": "GPT test"},
        {"id": "gpt-other", "model": "gpt-other", "hidden": True},
        {"id": 7},
    ]
    return {"id": message_id, "result": {"data": models}}


def appserver(mode: str) -> None:
    """As the real `codex app-server` 0.171.0 does: `initialize` answered at once, the other
    requests a moment later (the real one calls the network for rate limits), and at end of
    input it exits at once, leaving what is still in flight unanswered."""
    assert sys.argv[-1] == "app-server"
    lock = threading.Lock()
    if mode == "detached":  # answers as `ok` does, with a detached child holding its stdout
        leave_a_detached_child(Path(os.environ["CODEX_HOME"]))
        mode = "ok"

    def send(reply: dict) -> None:
        with lock:
            print(json.dumps(reply), flush=True)

    for line in sys.stdin:
        message = json.loads(line)
        method, message_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"id": message_id, "result": {"userAgent": "fake"}})
        elif method == "account/rateLimits/read":
            threading.Timer(0.3, send, [_limits_reply(message_id, mode)]).start()
        elif method == "model/list":
            threading.Timer(0.3, send, [_models_reply(message_id)]).start()
    os._exit(0)  # end of input: gone before the timers fire, as the real one


if __name__ == "__main__":
    _count_run()
    kind, mode = sys.argv[1], sys.argv[2]
    (collector if kind == "collector" else appserver)(mode)
