"""Batches: workflows of many agents, each in its own git worktree of one project."""
