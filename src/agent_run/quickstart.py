"""`agent-run demo`: a few demo agents in parallel in a temp git repo, shown live, then verified."""

import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEMO_TASKS = [
    ("survey", "Survey the repository.\nsteps: 4\nstep_seconds: 0.5\n"
               "answer: The repository holds a README and a tiny Python module."),
    ("notes", "Write release notes.\nsteps: 2\nstep_seconds: 0.5\n"
              "write: NOTES.md = Release notes drafted by a demo agent\nanswer: Wrote NOTES.md."),
    ("count", "Count slowly to six.\nsteps: 6\nstep_seconds: 0.4\nanswer: 1 2 3 4 5 6"),
    ("review", "Review hello.py.\nsteps: 3\nstep_seconds: 0.6\n"
               "answer: hello.py prints a greeting; no issues found."),
]


def make_demo_repo() -> Path:
    repo = Path(tempfile.mkdtemp(prefix="agent-run-demo-"))
    (repo / "README.md").write_text("# demo project\n")
    (repo / "hello.py").write_text('print("hello")\n')
    git = ["git", "-c", "user.name=agent-run demo", "-c", "user.email=demo@agent-run.invalid"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "initial commit"], check=True)
    return repo


def _line(name: str, view: dict[str, Any]) -> str:
    last = (view.get("last_message") or "").splitlines()
    return f"  {name:<7} {view['id']}  {view['state']:<10} events {view['event_count']:>3}  {last[0][:40] if last else ''}"


def run_quickstart(session: Any, count: int) -> int:
    out = sys.stdout
    tty = out.isatty()
    repo = make_demo_repo()
    print(f"demo repository: {repo}")
    tasks = [DEMO_TASKS[i % len(DEMO_TASKS)] for i in range(count)]
    agents: list[tuple[str, str]] = []
    for i, (name, task) in enumerate(tasks):
        label = name if count <= len(DEMO_TASKS) else f"{name}{i + 1}"
        view = session.call("start", {"task": task, "workdir": str(repo), "runtime": "demo",
                                      "request_id": f"demo-{repo.name}-{i}"})
        agents.append((label, view["id"]))
    print(f"started {len(agents)} demo agents through the daemon; each runs under its own supervisor\n")

    shown: dict[str, str] = {}
    drawn = 0
    while True:
        views = {agent_id: session.call("agent", {"agent_id": agent_id}) for _, agent_id in agents}
        lines = [_line(label, views[agent_id]) for label, agent_id in agents]
        if tty:
            if drawn:
                out.write(f"\x1b[{drawn}F")
            out.write("".join(f"\x1b[2K{line}\n" for line in lines))
            drawn = len(lines)
        else:
            for (label, agent_id), line in zip(agents, lines, strict=True):
                key = f"{views[agent_id]['state']}/{views[agent_id]['event_count']}"
                if shown.get(agent_id) != key:
                    shown[agent_id] = key
                    out.write(line + "\n")
        out.flush()
        if all(v["state"] in ("succeeded", "failed", "cancelled", "lost") for v in views.values()):
            break
        time.sleep(0.2)

    print("\nverified answers:")
    ok = True
    for label, agent_id in agents:
        view = views[agent_id]
        if view["state"] != "succeeded":
            ok = False
            print(f"  {label}: {view['state']} ({view['failure_kind']})")
            continue
        answer = session.call("answer", {"agent_id": agent_id})
        # Check the proof ourselves too: the file on disk hashes to what the daemon reports.
        on_disk = hashlib.sha256(Path(answer["path"]).read_bytes()).hexdigest()
        mark = "verified" if on_disk == answer["sha256"] else "MISMATCH"
        print(f"  {label}: {answer['text']}")
        print(f"         sha256 {answer['sha256']} ({answer['bytes']} bytes, {mark})")
    first = agents[0][1]
    home = f" --home {session.home.root}" if session.home.root != type(session.home).resolve().root else ""
    print("\nlook further:")
    print(f"  agent-run{home} agents --format text")
    print(f"  agent-run{home} answer {first} --format text")
    print(f"  agent-run{home} transcript {first} --format text")
    print(f"  agent-run{home} agent {first} --format text")
    return 0 if ok else 1
