"""The `echo` test engine's program: each stdin line (a JSON string) is a turn, answered at once.
Signed in (`$ECHO_HOME/echo-auth.json`), each answer ends with the token it read there. A turn
`raw:LINES` prints LINES as they are (hostile output: JSON a provider's text made of)."""

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--greeting", required=True)
    parser.add_argument("--session", required=True)
    args = parser.parse_args()
    print(json.dumps({"t": "session", "id": args.session}), flush=True)
    folder = os.environ.get("ECHO_HOME")
    for line in sys.stdin:
        turn = json.loads(line)
        if turn.startswith("raw:"):  # a hostile engine: the turn's lines are its output as is
            print(turn[4:], flush=True)
            continue
        text = f"{args.greeting}: {turn}"
        if folder:  # read at each turn: through the link to the user's real file
            token = json.loads((Path(folder) / "echo-auth.json").read_text())["token"]
            text += f" (signed in with {token})"
        print(json.dumps({"t": "say", "text": text}), flush=True)
        print(json.dumps({"t": "done", "text": text}), flush=True)


if __name__ == "__main__":
    main()
