"""The detached per-execution supervisor: runs one engine session and writes its own rows."""
