"""`python -m agent_run.worker_tools`: serve the worker tools over stdio."""

import os

from agent_run.worker_tools.server import serve

os.umask(0o077)
serve()
