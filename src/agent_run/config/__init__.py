"""config.toml: the settings model, fail-closed loading and `init`'s file; `[hosts.NAME]`."""
