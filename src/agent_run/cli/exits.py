"""The CLI's exit statuses: one table every verb's `--help` is generated from.

0, 1 and 64 hold for every verb; a verb that waits (`wait`, `start --wait`, `batch show
--follow`) adds its tool's `cli.exit_codes` (`tools.AGENT_EXIT`, `tools.BATCH_EXIT`).
"""

EXIT_OK = 0
EXIT_ERROR = 1  # any error the daemon or the CLI reports (one JSON error line, or a stderr line)
EXIT_USAGE = 64  # EX_USAGE (sysexits.h): a bad option, a missing argument; never a wait's status

COMMON = (
    (EXIT_OK, "done"),
    (EXIT_ERROR, "an error (JSON error line)"),
    (EXIT_USAGE, "usage error"),
)

# What a `cli.exit_codes` key that is no state means in the help (a state says itself).
_MEANING = {"timed_out": "timed out (still running)"}


def epilog(
    exit_codes: dict[str, int],
    when: str = "",
    ok: str = "done",
    error: str = "an error",
    usage: str = "usage error",
    shown: str = "a JSON error line",
) -> str:
    """The `Exit status:` paragraph of a verb's help: the common codes, and the status of each
    end state of a verb that waits (`when` it waits only with a flag: "with --wait")."""
    by_code: dict[int, list[str]] = {}
    for state, code in exit_codes.items():
        by_code.setdefault(code, []).append(_MEANING.get(state, state))
    common = {EXIT_OK: ok, EXIT_ERROR: f"{error} ({shown})", EXIT_USAGE: usage}
    if exit_codes and not when:
        del common[EXIT_OK]  # a wait's 0 is its end state's
    lines = ["\b", "Exit status:"]
    for code in sorted({*common, *by_code}):
        meanings = [common[code]] if code in common else []
        if code in by_code:
            meanings.append((f"{when}: " if when else "") + ", ".join(by_code[code]))
        lines.append(f"  {code:<3} {'; '.join(meanings)}")
    return "\n".join(lines)
