"""`agent-run init`: the commented config.toml it writes, and the engine CLIs it finds to put in it."""

import glob
import os
import re
import shutil
from pathlib import Path
from typing import Any

import tomli_w

from agent_run.config.model import SCHEMA_VERSION, parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.registry import all_engine_specs
from agent_run.system.home import Home, write_private_file


def _engine_block(spec: Any, binary: str, enable: bool) -> list[str]:
    """The commented `[runtimes.NAME]` block of an engine found at `binary` (live with `enable`)."""
    name = spec.name
    block = tomli_w.dumps({"runtimes": {name: {**spec.config_example, "binary": binary}}})
    lines = ["", f"# {name}: found {binary}" + ("." if enable else "; uncomment to enable.")]
    key_variable = spec.sign_in.key_variable if spec.sign_in else None
    if key_variable:  # a native-login example: the variable an API key would come from
        lines += [
            f"# It runs on your own sign-in (`agent-run login {name}`; SECURITY.md); for an",
            f'# API key instead: auth = {{ env = "{key_variable}" }}',
        ]
    body = block.strip().splitlines()
    return lines + (body if enable else [f"# {line}" if line else "#" for line in body])


def render_init_config(found_binaries: dict[str, str], *, enable: bool = False) -> str:
    """A commented config.toml: demo enabled, a block per engine found on PATH (commented out,
    or with `enable` (`init --detect`) live)."""
    lines = [
        "# agent-run configuration. Loading is fail-closed: unknown keys are refused.",
        "# Secrets never go here: `auth` names a variable (env), a file, or the engine's own",
        '# sign-in (login = "native"), never a value.',
        f"schema_version = {SCHEMA_VERSION}",
        'default_runtime = "demo"',
        "",
        "[supervisor]",
        "# Fail an execution whose engine is silent this long.",
        "stall_seconds = 600.0",
        "# Seconds to wait after an interrupt before TERM, then KILL, of the engine group.",
        "cancel_grace_seconds = 5.0",
        "# While the disk is full, hold up to this many bytes of a run's events in memory.",
        "# storage_buffer_bytes = 4194304",
        "",
        "# `agent-run prune` and the daemon (daily): terminal agents' rows and logs after",
        "# agent_days, their engine homes after engine_home_days; sealed answers stay.",
        "# [retention]",
        "# agent_days = 30.0",
        "# engine_home_days = 7.0",
        "# prune_answers = false",
        "",
        "# `agent-run web`: the folder picker shows only folders under these roots (default: $HOME).",
        "# [web]",
        '# roots = ["~/src"]',
        "",
        "# The offline demo engine: pure Python, no network. The quick start uses it.",
        "[runtimes.demo]",
        'engine = "demo"',
        'models = ["demo-1"]',
        'default_model = "demo-1"',
    ]
    for spec in all_engine_specs():
        binary = found_binaries.get(spec.default_binary or "")
        if binary is not None and spec.config_example:
            lines += _engine_block(spec, binary, enable)
    return "\n".join(lines) + "\n"


# Where npm (and nvm, Volta, Homebrew) put global CLIs besides PATH: a daemon started by
# launchd/systemd often has a PATH without them. `doctor` (in the daemon) and `init --detect`
# (in the CLI) search the same places.
NPM_PREFIXES = (
    "~/.npm-global/bin",
    "~/.local/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
    "~/.volta/bin",
    "~/.nvm/versions/node/*/bin",
)


def _newest_first(folders: list[str]) -> list[str]:
    """nvm's `v20.11.1` before `v9.0.0`: by the numbers in the path, highest first."""
    return sorted(folders, key=lambda f: [int(n) for n in re.findall(r"\d+", f)], reverse=True)


def find_installed(binary: str) -> str | None:
    """A CLI on this process's PATH, else under a common npm prefix (NPM_PREFIXES)."""
    found = shutil.which(binary)
    if found:
        return found
    for prefix in NPM_PREFIXES:
        for folder in _newest_first(glob.glob(os.path.expanduser(prefix))):
            candidate = Path(folder) / binary
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def find_engine_binaries() -> dict[str, str]:
    found = {}
    for binary in sorted(
        {spec.default_binary for spec in all_engine_specs() if spec.default_binary}
    ):
        path = find_installed(binary)
        if path:
            found[binary] = path
    return found


def init_config(
    home: Home, *, force: bool = False, detect: bool = False
) -> tuple[Path, dict[str, str | None], dict[str, str]]:
    """Write the commented config (`detect`: the engines found enabled); refuse to overwrite
    unless forced (`detect_into_config` adds to an existing one). Validates before writing.
    Returns the file, its enabled runtimes (name -> binary, None for one that needs none) and
    the engine CLIs found but left commented out (name -> binary)."""
    home.ensure()
    if home.config_path.exists() and not force:
        raise ConfigInvalid(
            f"{home.config_path} exists; `agent-run init --detect` adds the engines found to it, "
            "--force overwrites it",
            field="config",
        )
    found = find_engine_binaries()
    text = render_init_config(found, enable=detect)
    config = parse_config(text)
    write_private_file(home.config_path, text.encode())
    enabled = {n: r.binary for n, r in config.runtimes.items() if r.enabled}
    commented = {
        spec.name: found[spec.default_binary]
        for spec in all_engine_specs()
        if spec.default_binary in found and spec.name not in enabled and spec.config_example
    }
    return home.config_path, enabled, commented


def detect_into_config(home: Home) -> list[str]:
    """`init --detect` on an existing config.toml: append an enabled block for each engine CLI
    found (PATH and NPM_PREFIXES) that no runtime uses and whose name is free. What the user
    wrote (text, comments, runtimes) stays byte for byte; the result is validated before it
    replaces the file. Returns the runtimes added."""
    text = home.config_path.read_text()
    config = parse_config(text, str(home.config_path))  # an invalid file is for the user to fix
    used = {runtime.engine for runtime in config.runtimes.values()}
    found = find_engine_binaries()
    added, lines = [], []
    for spec in all_engine_specs():
        binary = found.get(spec.default_binary or "")
        if binary is None or not spec.config_example:
            continue
        if spec.name in used or spec.name in config.runtimes:
            continue
        added.append(spec.name)
        lines += _engine_block(spec, binary, enable=True)
    if not added:
        return []
    lines[0] = "# Added by `agent-run init --detect`."
    new_text = text + ("" if text.endswith("\n") or not text else "\n") + "\n"
    new_text += "\n".join(lines) + "\n"
    parse_config(new_text, str(home.config_path))
    write_private_file(home.config_path, new_text.encode())
    return added
