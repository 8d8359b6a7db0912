"""Engines: one module per coding-agent CLI behind the interface in `base`, found through `registry`."""
