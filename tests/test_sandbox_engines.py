"""The sandbox around each real engine CLI (Codex, Claude Code, GLM, Qwen Code against the mock
provider): the model's own shell tool cannot reach the home, the socket, the daemon's key, the
user's home, another worktree of the same repository, nor write the engine's program tree or
agent-run's virtualenv (places that are mounted, or would be by a bind too wide: not only the
private /tmp); the same run still writes its file and calls `finish` (its summary, distinct
from the engine's last text, is the answer and its status the verdict). Under
`sandbox = "none"` the same probes escape (each probe can fail); positive controls (python3,
reading a process's environ) hold in both."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.engine_harness import (
    KEY_VARIABLE,
    PLANTED_KEY,
    engine_daemon,
    node_bin,
    run_agent,
    runtime_block,
)
from tests.harness import short_tmpdir
from tests.support.mock_provider import MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines

MODELS = {
    "codex": "gpt-5.5",
    "claude": "claude-sonnet-4-5",
    "glm": "glm-4.6",
    "qwen": "qwen3-coder-plus",
}
SUFFIX = {"qwen": "/v1", "codex": "/v1"}
SUMMARY = "Probed and finished."  # the answer only `finish` can make: the engine ends "Probed."
FINISH = ToolCall("mcp__agent_run_worker__finish", {"summary": SUMMARY, "status": "done"})
# A PYTHON* variable makes the daemon a fresh exec (not a zygote fork): the key is then in its
# /proc/PID/environ, where a same-uid model would look for it.
FRESH_EXEC = {"PYTHONDONTWRITEBYTECODE": "1"}
# Qwen Code's CLI takes long to start on a loaded machine: the stall bound is generous.
STALL_SECONDS = 90.0
ALL_ESCAPES = {
    "ESCAPED-db",
    "ESCAPED-config",
    "ESCAPED-socket",
    "ESCAPED-environ",
    "ESCAPED-outside",
    "ESCAPED-other-worktree",
    "ESCAPED-user-home",
    "ESCAPED-program-tree",
    "ESCAPED-venv",
}


def shown(result: str) -> str:
    """What the command printed: Qwen Code's tool result starts with the command itself
    ("Command: ...", then "Output: ..."), which names every probe word."""
    return result.split("\nOutput:", 1)[1] if result.startswith("Command:") else result


def shell_call(engine: str, command: str) -> ToolCall:
    if engine == "codex":
        return ToolCall("exec_command", {"cmd": command})
    name = "run_shell_command" if engine == "qwen" else "Bash"
    return ToolCall(name, {"command": command, "description": "probe"})


def probe_command(home, places: dict) -> str:
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect('{home.socket_path}')"
    # Every process's environ but the probe shell's own; ENVIRONS-READ counts those it could
    # read, so "no key found" is never "could read nothing".
    environ = (
        'n=0; for f in /proc/[0-9]*/environ; do [ "$f" = /proc/$$/environ ] && continue;'
        ' head -c1 "$f" >/dev/null 2>&1 && n=$((n+1));'
        f' grep -a -q {PLANTED_KEY} "$f" 2>/dev/null && echo ESCAPED-environ; done;'
        ' echo "ENVIRONS-READ=$n"'
    )
    return "; ".join(
        [
            'PY=$(command -v python3) && "$PY" -c pass && echo PYTHON-OK',
            f"cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db",
            f'"$PY" -c "{connect}" 2>/dev/null && echo ESCAPED-socket',
            f"cat {home.root / 'config.toml'} >/dev/null 2>&1 && echo ESCAPED-config",
            environ,
            f"touch {places['outside']}/x 2>/dev/null && echo ESCAPED-outside",
            f"cat {places['other']}/secret.txt >/dev/null 2>&1 && echo ESCAPED-other-worktree",
            f"grep -q {places['token']} {places['user_secret']} 2>/dev/null"
            " && echo ESCAPED-user-home",
            f"touch {places['program_mark']} 2>/dev/null && echo ESCAPED-program-tree",
            f"touch {places['venv_mark']} 2>/dev/null && echo ESCAPED-venv",
            "echo mine > mine.txt && echo WROTE",
        ]
    )


@pytest.fixture
def places():
    """Where the probes aim: a folder outside, a real sibling worktree of the workdir's
    repository, a secret file in the user's real home directory, and marks to write in the
    engines' program tree and agent-run's virtualenv (all removed afterwards)."""
    root = short_tmpdir("aro-")
    outside, repo = root / "outside", root / "repo"
    outside.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "i"], check=True)
    for n in (0, 1):
        add = ["worktree", "add", "-q", "-b", f"agent-run/b1/work-{n}", str(root / f"tree{n}")]
        subprocess.run([*git, "-C", str(repo), *add], check=True)
    (root / "tree1" / "secret.txt").write_text("another agent's work\n")
    token = f"user-home-secret-{uuid.uuid4().hex}"
    user_secret = Path.home() / f".arun-sandbox-probe-{token}"
    user_secret.write_text(token + "\n")
    marks = f".arun-sandbox-probe-{uuid.uuid4().hex}"
    found = {
        "outside": outside,
        "workdir": root / "tree0",
        "other": root / "tree1",
        "token": token,
        "user_secret": user_secret,
        "program_mark": node_bin().parent / marks,  # node_modules: every engine's program tree
        "venv_mark": Path(sys.prefix) / marks,
    }
    yield found
    import shutil

    for mark in (user_secret, found["program_mark"], found["venv_mark"]):
        mark.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("engine", "sandbox"),
    [
        ("codex", "bubblewrap"),
        ("codex", "none"),
        ("claude", "bubblewrap"),
        ("claude", "none"),
        ("glm", "bubblewrap"),
        ("glm", "none"),
        ("qwen", "bubblewrap"),
        ("qwen", "none"),
    ],
)
def test_the_models_shell_probes_fail_and_the_run_still_finishes(engine, sandbox, places):
    workdir = places["workdir"]
    with MockProvider() as provider:
        url = provider.url + SUFFIX.get(engine, "")
        block = runtime_block("r", engine, url, MODELS[engine], stall_seconds=STALL_SECONDS)
        block += f'sandbox = "{sandbox}"\n'
        with engine_daemon(block, env=FRESH_EXEC) as (home, daemon):
            provider.add(shell_call(engine, probe_command(home, places)), FINISH, Text("Probed."))
            view = run_agent(daemon, "r", "Probe, then call finish.", workdir)
            assert view["state"] == "succeeded", view["execution"]["failure_message"]
            assert view["verdict"] == "done", view
            assert daemon.call("answer", {"agent_id": view["id"]})["text"] == SUMMARY
            output = shown(provider.main_requests()[1].tool_results()[0].output)
            finished = provider.main_requests()[2].tool_results()[-1].output
    assert "recorded (finish" in finished, finished  # the worker tools, through the gate
    found = {word for word in output.split() if word.startswith("ESCAPED-")}
    assert "PYTHON-OK" in output and "WROTE" in output, output
    assert (workdir / "mine.txt").read_text() == "mine\n", output
    environs = int(output.split("ENVIRONS-READ=", 1)[1].split()[0])
    assert environs >= 1, output  # the probe could read some other process's environ
    if sandbox == "bubblewrap":
        assert found == set(), output
        assert not (places["outside"] / "x").exists()
        assert not places["program_mark"].exists() and not places["venv_mark"].exists()
    else:
        assert found == ALL_ESCAPES, output
    assert json.dumps(output).count(PLANTED_KEY) == 0


NATIVE_KEY = "native-sandboxed-key-93e1c07b"
NATIVE_FILES = {
    "codex": ("auth.json", {"auth_mode": "apikey", "OPENAI_API_KEY": NATIVE_KEY}, "config.toml"),
    "claude": (
        ".credentials.json",
        {
            "claudeAiOauth": {
                "accessToken": NATIVE_KEY,
                "refreshToken": "native-sandboxed-refresh-61d2",
                "expiresAt": 4102444800000,  # 2100: no refresh in this run
                "scopes": ["user:inference", "user:profile"],
            }
        },
        "settings.json",
    ),
}


def native_folder(engine: str, parent) -> tuple:
    """The user's own engine folder: the credential, plus what an engine keeps there (settings
    or config that an unsandboxed run of the engine obeys, history, sessions)."""
    folder = parent / f"{engine}-config"
    (folder / "projects" / "p").mkdir(parents=True)
    credential, content, settings = NATIVE_FILES[engine]
    (folder / credential).write_text(json.dumps(content))
    (folder / credential).chmod(0o600)
    (folder / settings).write_text("USER-SETTINGS-4f0e\n")
    (folder / "history.jsonl").write_text("USER-HISTORY-77ab\n")
    (folder / "projects" / "p" / "session.jsonl").write_text("USER-SESSION-c3d9\n")
    return folder, credential, settings


def native_probes(folder, credential: str, settings: str) -> str:
    return "; ".join(
        [
            f"cat {folder}/{credential} >/dev/null && echo CREDENTIAL-READABLE",
            f"grep -q USER-SETTINGS {folder}/{settings} 2>/dev/null && echo ESCAPED-settings-read",
            f"echo 'planted' >> {folder}/{settings} 2>/dev/null",
            f"mv {folder}/{settings} {folder}/s.bak 2>/dev/null && echo ESCAPED-settings-moved",
            f"mv {folder}/history.jsonl {folder}/h.bak 2>/dev/null && echo ESCAPED-history-moved",
            f"grep -q USER-HISTORY {folder}/history.jsonl 2>/dev/null && echo ESCAPED-history",
            f"ls {folder}/projects | grep -q p && echo ESCAPED-projects",
            f"cat {folder}/projects/p/session.jsonl 2>/dev/null && echo ESCAPED-session",
            f"mkdir -p {folder}/projects/planted 2>/dev/null",
            f"touch {folder}/new-entry && echo NEW-ENTRY-WRITABLE",
        ]
    )


@pytest.mark.parametrize("engine", ["codex", "claude"])
def test_a_native_sign_ins_folder_shows_the_run_only_its_credential(engine, workdir, tmp_path):
    """`auth = { login = "native" }` on the user's own folder (`~/.codex`, `~/.claude`): the
    sandbox binds the folder read-write (a refresh renames a temp file over the credential) but
    hides every other entry it holds, unchangeable; only a new entry can be made (SECURITY.md)."""
    folder, credential, settings = native_folder(engine, tmp_path)
    with MockProvider() as provider:
        url = provider.url + SUFFIX.get(engine, "")
        block = runtime_block("r", engine, url, MODELS[engine], stall_seconds=STALL_SECONDS)
        block = block.replace(
            f'auth = {{ env = "{KEY_VARIABLE}" }}',
            f'auth = {{ login = "native", dir = "{folder}" }}',
        )
        with engine_daemon(block) as (_, daemon):
            provider.add(shell_call(engine, native_probes(folder, credential, settings)))
            provider.add(Text("Probed."))
            view = run_agent(daemon, "r", "Probe the sign-in folder.", workdir)
            assert view["state"] == "succeeded", view["execution"]["failure_message"]
            output = shown(provider.main_requests()[1].tool_results()[0].output)
            sent = provider.main_requests()[0].headers["authorization"]
    assert sent == f"Bearer {NATIVE_KEY}"  # the engine used the credential from that folder
    found = {word for word in output.split() if word.startswith("ESCAPED-")}
    assert found == set(), output
    assert "CREDENTIAL-READABLE" in output and "NEW-ENTRY-WRITABLE" in output, output
    assert (folder / settings).read_text() == "USER-SETTINGS-4f0e\n"
    assert (folder / "history.jsonl").read_text() == "USER-HISTORY-77ab\n"
    assert sorted(p.name for p in (folder / "projects").iterdir()) == ["p"]
