"""How a worker-tools server is bound to its execution: variable names and the token hash.

Dependency-free on purpose: the supervisor imports it, and a supervisor must stay light.
"""

import hashlib

SERVER_NAME = "agent_run_worker"
HOME_ENV = "AGENT_RUN_HOME"
EXECUTION_ENV = "AGENT_RUN_EXECUTION_ID"
TOKEN_ENV = "AGENT_RUN_WORKER_TOKEN"
TOOLS_ENV = "AGENT_RUN_WORKER_TOOLS"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
