"""The CLI's exit statuses: one table every verb's `--help` is generated from.

0, 1 and 64 hold for every verb; a verb that waits (`wait`, `start --wait`, `batch show
--follow`) adds its tool's `cli.exit_codes` (`tools.AGENT_EXIT`, `tools.BATCH_EXIT`), and a
verb that does not adds the status of an outcome its result says (`run merge`: a conflict,
`tools.MERGE_EXIT`).
"""

from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1  # any error the daemon or the CLI reports (one JSON error line, or a stderr line)
EXIT_USAGE = 64  # EX_USAGE (sysexits.h): a bad option, a missing argument; never a wait's status

COMMON = (
    (EXIT_OK, "done"),
    (EXIT_ERROR, "an error (JSON error line)"),
    (EXIT_USAGE, "usage error"),
)

# What a `cli.exit_codes` key that is no state means in the help (a state says itself).
_MEANING = {
    "timed_out": "timed out (still running)",
    "would_conflict": "the merge would conflict; nothing was changed (a dry run too)",
}


def outcome_status(result: Any, exit_codes: dict[str, int]) -> int:
    """A verb that neither waits nor follows: the status of the first of its `exit_codes` whose
    field is true in its result (the daemon's JSON), else 0."""
    if not isinstance(result, dict):
        return EXIT_OK
    return next((code for key, code in exit_codes.items() if result.get(key) is True), EXIT_OK)


def epilog(
    exit_codes: dict[str, int],
    when: str = "",
    ok: str = "done",
    error: str = "an error",
    usage: str = "usage error",
    shown: str = "a JSON error line",
    outcomes: bool = False,
) -> str:
    """The `Exit status:` paragraph of a verb's help: the common codes, and the status of each
    end state of a verb that waits (`when` it waits only with a flag: "with --wait"), or of
    each outcome of one that does not (`outcomes`: 0 is still "done")."""
    by_code: dict[int, list[str]] = {}
    for state, code in exit_codes.items():
        by_code.setdefault(code, []).append(_MEANING.get(state, state))
    common = {EXIT_OK: ok, EXIT_ERROR: f"{error} ({shown})", EXIT_USAGE: usage}
    if exit_codes and not when and not outcomes:
        del common[EXIT_OK]  # a wait's 0 is its end state's
    lines = ["\b", "Exit status:"]
    for code in sorted({*common, *by_code}):
        meanings = [common[code]] if code in common else []
        if code in by_code:
            meanings.append((f"{when}: " if when else "") + ", ".join(by_code[code]))
        lines.append(f"  {code:<3} {'; '.join(meanings)}")
    return "\n".join(lines)
