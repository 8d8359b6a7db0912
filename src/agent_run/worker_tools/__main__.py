"""`python -m agent_run.worker_tools`: serve the worker tools over stdio."""

import asyncio
import os

from agent_run.worker_tools.server import serve

os.umask(0o077)
asyncio.run(serve())
