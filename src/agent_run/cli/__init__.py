"""The `agent-run` command: click verbs from the tool table's frozen spec, text renderers, admin verbs."""
