"""The `echo` test engine's own sign-in command: `login --with-api-key` reads a key from stdin
and writes `$ECHO_HOME/echo-auth.json` (default `~/.echo`), as a real engine's login does."""

import json
import os
import sys
from pathlib import Path


def main() -> None:
    if sys.argv[1:] != ["login", "--with-api-key"]:
        sys.exit(f"usage: {sys.argv[0]} login --with-api-key (key on stdin)")
    folder = Path(os.environ.get("ECHO_HOME") or Path.home() / ".echo")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / "echo-auth.json"
    path.write_text(json.dumps({"token": sys.stdin.readline().strip(), "email": "dev@example.com"}))
    path.chmod(0o600)
    print(f"signed in: {path}")


if __name__ == "__main__":
    main()
