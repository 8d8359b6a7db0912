"""A machine like stock Debian 12: the system /usr/bin/python3 (externally managed, PEP 668), no
uv or pyenv on PATH, a fresh HOME. scripts/find-uv ends with a working uv in a private venv, or
says in one line why not; scripts/quickstart, from a copy of the checkout, ends with a ranked
batch on a .venv of the system Python (tests marked `fresh` download from PyPI), and every
command it prints works in the shell that ran it."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import short_tmpdir

REPO = Path(__file__).resolve().parent.parent
FIND_UV = REPO / "scripts" / "find-uv"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _run(path: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FIND_UV)],
        env={"PATH": path, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


@pytest.fixture
def fresh_home():
    home = short_tmpdir("arb-")
    yield home
    shutil.rmtree(home, ignore_errors=True)


LIKE_DEBIAN = pytest.mark.skipif(
    not SYSTEM_PYTHON.exists() or shutil.which("uv", path="/usr/bin:/bin"),
    reason="needs /usr/bin/python3 and no uv in /usr/bin:/bin",
)


def _fresh_env(home: Path, path: str = "/usr/bin:/bin") -> dict[str, str]:
    """A login on a fresh machine: a new HOME, the system PATH (no pyenv, no uv), no locale or
    Python variables. Only SSL_CERT_FILE is passed on when set: this machine reaches PyPI
    through a proxy whose CA is in the system store (uv trusts its own roots otherwise); a
    stock Debian needs none."""
    env = {"HOME": str(home), "PATH": path, "TERM": "dumb"}
    if os.environ.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = os.environ["SSL_CERT_FILE"]
    return env


@pytest.mark.fresh  # downloads uv from PyPI
@LIKE_DEBIAN
def test_find_uv_installs_a_private_uv_with_the_system_python(fresh_home: Path) -> None:
    done = _run("/usr/bin:/bin", fresh_home)
    assert done.returncode == 0, done.stderr
    uv = Path(done.stdout.strip())
    private = fresh_home / ".cache" / "agent-run" / "bootstrap"
    assert uv == private / "bin" / "uv"
    assert done.stderr.splitlines() == [
        f"bootstrap: installing uv into {private} (a private venv; the system Python is untouched)"
    ]
    version = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("uv ")
    # the second run finds it without installing anything or saying a word
    again = _run("/usr/bin:/bin", fresh_home)
    assert (again.returncode, again.stdout.strip(), again.stderr) == (0, str(uv), "")


def _python_without_venv(folder: Path) -> Path:
    """A `python3` like Debian's without python3-venv: the system interpreter, with ensurepip
    gone (what `python3 -m venv` needs to put pip in a venv)."""
    missing = folder / "no-ensurepip"
    (missing / "ensurepip").mkdir(parents=True)
    (missing / "ensurepip" / "__init__.py").write_text(
        'raise ImportError("ensurepip is not available (python3-venv is not installed)")\n'
    )
    shims = folder / "shims"
    shims.mkdir()
    shim = shims / "python3"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={missing} exec /usr/bin/python3 "$@"\n')
    shim.chmod(0o755)
    return shims


def test_find_uv_without_a_venv_module_says_what_to_install_in_one_line(fresh_home: Path) -> None:
    shims = _python_without_venv(fresh_home)
    done = _run(f"{shims}:/usr/bin:/bin", fresh_home)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("bootstrap: cannot install uv: python3 has no venv module")
    assert "sudo apt install python3-venv" in lines[0]
    assert not (fresh_home / ".cache").exists()


@LIKE_DEBIAN
def test_the_quick_start_without_a_way_to_get_uv_fails_in_one_line(fresh_home: Path) -> None:
    shims = _python_without_venv(fresh_home)
    before = sorted(os.listdir(REPO))
    done = subprocess.run(
        [str(REPO / "scripts" / "quickstart")],
        env=_fresh_env(fresh_home, f"{shims}:/usr/bin:/bin"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "sudo apt install python3-venv" in done.stderr
    assert sorted(os.listdir(REPO)) == before and not (fresh_home / ".agent-run").exists()


def _host_uv() -> Path:
    found = subprocess.run(
        [str(REPO / "scripts" / "find-uv")], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(found).resolve()


def _checkout_copy(into: Path) -> Path:
    """The checkout's tracked files as they are now (uncommitted edits included), as a clone
    would have them: no .venv, no caches, no node_modules."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    copy = into / "agent-run"
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = copy / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return copy


def _host_uv_cache() -> str:
    return subprocess.run(
        [str(_host_uv()), "cache", "dir"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _printed_commands(stdout: str) -> list[str]:
    """The commands the quick start tells the user to type next, comments cut, in order."""
    tail = stdout[stdout.index("\nlook further:") :]
    commands = [
        line.split("#", 1)[0].strip()
        for line in tail.splitlines()
        if line.startswith("  ") and not line.startswith("  http")
    ]
    commands += [line for line in tail.splitlines() if line.startswith("just `agent-run`")]
    return commands


def _run_typed(command: str, user: Path) -> subprocess.CompletedProcess[str]:
    """`command` as the user types it into the shell that ran the quick start: bash with that
    shell's PATH and HOME, in their home folder (not the checkout)."""
    return subprocess.run(
        ["/bin/bash", "-c", command],
        env=_fresh_env(user),
        cwd=user,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _check_printed_commands(stdout: str, user: Path) -> None:
    """Every command the quick start printed works in the shell that ran it (PATH=/usr/bin:/bin,
    no uv, no agent-run on it): each verb exits 0, the web UI prints its URL, and the PATH line
    it offers makes a plain `agent-run` work."""
    commands = _printed_commands(stdout)
    verbs = [c for c in commands if " web " not in f"{c} " and not c.startswith("just ")]
    assert len(verbs) == 5, stdout
    for command in verbs:
        done = _run_typed(command, user)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert done.stdout.strip(), command
    web = next(c for c in commands if c.endswith(" web --open"))
    # any free port (a test owns no fixed one); BROWSER: no browser opens in a test
    _web_prints_its_url(f"export BROWSER=/bin/true; exec {web} --port 0", user)
    export = next(c for c in commands if c.startswith("just `agent-run`")).split(": ", 1)[1]
    batch_show = verbs[0].split(" batch show ", 1)[1]
    plain = _run_typed(f"{export}; agent-run batch show {batch_show}", user)
    assert plain.returncode == 0 and "ranked  completed" in plain.stdout, plain


def _web_prints_its_url(command: str, user: Path) -> None:
    web = subprocess.Popen(
        ["/bin/bash", "-c", command],
        env=_fresh_env(user),
        cwd=user,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert web.stdout is not None
        line = web.stdout.readline()  # the URL, printed once it listens; EOF if it failed
        assert line.startswith("agent-run web: http://127.0.0.1:"), (line, web.stderr.read())
    finally:
        web.terminate()
        web.wait(timeout=30)


def _stop_daemon(checkout: Path, user: Path) -> None:
    if (checkout / ".venv" / "bin" / "python").exists():
        subprocess.run(
            [str(checkout / ".venv" / "bin" / "python"), "-m", "agent_run", "--home"]
            + [str(user / ".agent-run"), "api", "stop"],
            env=_fresh_env(user),
            capture_output=True,
            timeout=60,
            check=False,
        )


@LIKE_DEBIAN
def test_the_quick_start_prints_commands_that_work_in_the_shell_that_ran_it(
    fresh_home: Path,
) -> None:
    """A fresh machine's user (new HOME, PATH=/usr/bin:/bin, no uv on it) runs the quick start
    from a clone, then types what it printed. Without downloading: the clone's .venv comes from
    this machine's uv cache (UV_CACHE_DIR, UV_OFFLINE), the only variables added for the run;
    the commands typed after it get the plain fresh environment."""
    checkout = _checkout_copy(short_tmpdir("arq-"))
    user = fresh_home
    private = user / ".cache" / "agent-run" / "bootstrap"
    (private / "bin").mkdir(parents=True)
    shutil.copy2(_host_uv(), private / "bin" / "uv")
    cache = {"UV_CACHE_DIR": _host_uv_cache(), "UV_OFFLINE": "1"}
    try:
        done = subprocess.run(
            [str(checkout / "scripts" / "quickstart"), "--candidates", "2"],
            env={**_fresh_env(user), **cache},
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        agent_run = checkout / ".venv" / "bin" / "agent-run"
        assert f"\n  {agent_run} batch show bt_" in done.stdout, done.stdout
        assert "--home" not in done.stdout  # the default home, as the user's shell has it
        _check_printed_commands(done.stdout, user)
    finally:
        _stop_daemon(checkout, user)


@pytest.mark.fresh  # downloads the locked wheels into a new HOME: about a minute
@LIKE_DEBIAN
def test_the_quick_start_on_a_fresh_machine_with_the_system_python(fresh_home: Path) -> None:
    """The bootstrap's second step onwards, on a fresh machine: uv is the one find-uv put in the
    private venv (the test above installs it from PyPI: here this machine's uv binary is copied
    there, so each test stays under two minutes); the rest comes from PyPI into the new HOME."""
    checkout = _checkout_copy(short_tmpdir("arq-"))
    user = fresh_home
    private = user / ".cache" / "agent-run" / "bootstrap"
    (private / "bin").mkdir(parents=True)
    shutil.copy2(_host_uv(), private / "bin" / "uv")
    try:
        done = subprocess.run(
            [str(checkout / "scripts" / "quickstart"), "--candidates", "2"],
            env=_fresh_env(user),
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=115,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        lines = done.stderr.splitlines()
        # what it does, said first, before anything slow; the uv found says nothing
        assert (
            lines[0] == f"bootstrap: syncing the Python environment (.venv) with {private}/bin/uv"
        )
        venv = dict(
            line.split(" = ", 1)
            for line in (checkout / ".venv" / "pyvenv.cfg").read_text().splitlines()
        )
        system = subprocess.run(
            [str(SYSTEM_PYTHON), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert (venv["home"], venv["version_info"]) == ("/usr/bin", system), venv
        assert "ranking:" in done.stdout and "verified answers:" in done.stdout, done.stdout
        assert "#1  candidate " in done.stdout
        demos = user / ".agent-run" / "demos"
        assert [p.name for p in demos.iterdir()][0].startswith("demo-")
        _check_printed_commands(done.stdout, user)
    finally:
        _stop_daemon(checkout, user)


def test_find_uv_uses_the_uv_on_path(fresh_home: Path) -> None:
    bindir = fresh_home / "bin"
    bindir.mkdir()
    fake = bindir / "uv"
    fake.write_text("#!/bin/sh\necho uv 0.0.0\n")
    fake.chmod(0o755)
    done = _run(f"{bindir}:/usr/bin:/bin", fresh_home)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(fake), "")
    assert os.listdir(fresh_home) == ["bin"]


def test_agents_md_links_nothing_outside_the_repository() -> None:
    import re

    text = (REPO / "AGENTS.md").read_text()
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert "://" not in target, target
        assert (REPO / target.split("#")[0]).resolve().is_relative_to(REPO), target
    assert "../shared" not in text and "/work/" not in text


def test_the_readme_starts_with_the_two_commands_and_its_links_resolve() -> None:
    import re

    text = (REPO / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["scripts/quickstart", "scripts/test"]
    assert all("# " in line for line in block)  # each with its short comment
    assert text.index("agent-run is a local-first supervisor") < 1000
    assert len(text.encode()) < 8_000, "keep README short: details go to docs/"
    for page in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)]+)\)", page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            assert (page.parent / target.split("#")[0]).exists(), (page.name, target)
    assert "uv run agent-run" not in text  # no uv on a fresh machine's PATH


def test_the_suite_runs_without_a_git_identity_and_sets_none_on_the_machine() -> None:
    """A contributor's git config is theirs: scripts set nothing global, and the tests see no
    global or system config (each test repository that commits names its own identity)."""
    for script in (REPO / "scripts").iterdir():
        assert "--global" not in script.read_text(), script.name
    name = subprocess.run(["git", "config", "--get", "user.name"], capture_output=True, cwd="/")
    assert name.returncode == 1, name.stdout  # no identity: none set, none inherited
