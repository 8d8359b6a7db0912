"""Numbered SQL migrations, applied in order by agent_run.store.db.migrate."""
