"""The Changes tab's diff, one section per file: `git diff` text split on its `diff --git` lines,
each file with its path, its +/- counts and its lines (a very long file's cut with a note).

It only reads the text `batch_review` returned; a diff that was cut there (`diff_truncated`) may
end inside its last file, which is then marked `cut`."""

import codecs
import re
from dataclasses import dataclass, field

MAX_FILE_LINES = 1500  # lines shown of one file; the rest is counted, not shown
FOLDED_LINES = 400  # a file with more lines than this starts folded
_HEADER = re.compile(r"^(old|new|deleted|new file|similarity|dissimilarity|rename|copy) ")


@dataclass
class FileDiff:
    path: str
    lines: list[str] = field(default_factory=list)  # what is shown: meta lines, then hunks
    meta: list[str] = field(default_factory=list)  # mode changes, renames, binary
    added: int = 0
    removed: int = 0
    hidden: int = 0  # lines past MAX_FILE_LINES
    cut: bool = False  # the whole diff was truncated inside this file

    @property
    def folded(self) -> bool:
        return len(self.lines) + self.hidden > FOLDED_LINES


def _unquote(path: str) -> str:
    """Git's C-quoted path ("a/caf\\303\\251") as text."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    raw = codecs.escape_decode(path[1:-1].encode())[0]
    return bytes(raw).decode(errors="replace")


def _path_of(header: str) -> str:
    """The file's path from `diff --git a/P b/P` (the b side; a rename's new name)."""
    rest = header[len("diff --git ") :]
    if rest.startswith('"'):
        end = rest.index('"', 1) + 1 if '"' in rest[1:] else len(rest)
        second = rest[end:].strip()
        return _unquote(second)[2:] if second else _unquote(rest[:end])[2:]
    half = (len(rest) - 1) // 2
    if rest[half : half + 1] == " " and rest[2:half] == rest[half + 3 :]:
        return rest[half + 3 :]
    return rest.rsplit(" b/", 1)[-1]


def split_diff(text: str, truncated: bool = False) -> list[FileDiff]:
    files: list[FileDiff] = []
    in_hunks = False
    for line in text.splitlines():
        if line.startswith("diff --git "):
            files.append(FileDiff(_path_of(line)))
            in_hunks = False
            continue
        if not files:
            continue
        current = files[-1]
        if not in_hunks:
            if line.startswith("rename to "):
                current.path = _unquote(line[len("rename to ") :])
            if line.startswith("@@"):
                in_hunks = True
            elif line.startswith(("index ", "--- ", "+++ ")):
                continue
            elif _HEADER.match(line) or line.startswith("Binary files"):
                current.meta.append(line)
                continue
        if in_hunks and line.startswith("+"):
            current.added += 1
        elif in_hunks and line.startswith("-"):
            current.removed += 1
        if len(current.lines) < MAX_FILE_LINES:
            current.lines.append(line)
        else:
            current.hidden += 1
    if truncated and files:
        files[-1].cut = True
    return files
