"""Stand-ins for the capacity sources' external programs, run as real processes by the tests:
`collector MODE` (an external `command` collector) and `appserver MODE` (a `codex app-server`
that answers `account/rateLimits/read`). A collector given a file after its mode appends a line
to it per run."""

import json
import os
import sys
import time


def _count_run() -> None:
    runs = sys.argv[3] if sys.argv[1] == "collector" and len(sys.argv) > 3 else None
    if runs:
        with open(runs, "a") as f:
            f.write(f"{sys.argv[1:]}\n")


def collector(mode: str) -> None:
    request = json.loads(sys.stdin.read())
    now = request["now"]
    assert "SECRET_OF_THE_DAEMON" not in os.environ  # the collector gets an allowlisted environment
    if mode == "ok":
        remaining = 80.0 if request["runtime"] == "alpha" else 30.0
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


def appserver(mode: str) -> None:
    assert sys.argv[-1] == "app-server"
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") == "initialize":
            print(json.dumps({"id": message["id"], "result": {"userAgent": "fake"}}), flush=True)
        elif message.get("method") == "account/rateLimits/read":
            if mode == "refuse":
                reply = {"id": message["id"], "error": {"code": -32600, "message": "API key auth"}}
            else:
                now = int(time.time())
                good = {"usedPercent": 40, "windowDurationMins": 300, "resetsAt": now + 3600}
                bad = {"usedPercent": "lots", "windowDurationMins": 10080}
                result = {
                    "rateLimits": {"primary": {"usedPercent": 99, "windowDurationMins": 300}},
                    "rateLimitsByLimitId": {
                        "codex": {"primary": good, "secondary": bad},
                        "codex_other": {"primary": {**good, "usedPercent": 10}},
                    },
                }
                reply = {"id": message["id"], "result": result}
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _count_run()
    kind, mode = sys.argv[1], sys.argv[2]
    (collector if kind == "collector" else appserver)(mode)
