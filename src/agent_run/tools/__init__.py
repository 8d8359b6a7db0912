"""The tool table: every operation once (params, result, handler, doc), and docs/api.md's generator."""
