"""The `echo` test engine's program: each stdin line (a JSON string) is a turn, answered at once."""

import argparse
import json
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--greeting", required=True)
    parser.add_argument("--session", required=True)
    args = parser.parse_args()
    print(json.dumps({"t": "session", "id": args.session}), flush=True)
    for line in sys.stdin:
        text = f"{args.greeting}: {json.loads(line)}"
        print(json.dumps({"t": "say", "text": text}), flush=True)
        print(json.dumps({"t": "done", "text": text}), flush=True)


if __name__ == "__main__":
    main()
