"""What the engine is given in place of the provider key: the broker's URL and its token.

An engine that talks HTTP to a provider names its default upstream (`EngineSpec.broker_upstream`);
when its runtime has a credential, the supervisor starts a `CredentialBroker` for the execution
and launches the engine with `base_url` = the broker and the token as the value of its key
variable. The real key stays in the supervisor. Engines without one (the demo) get the secret.
"""

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agent_run.domain.failures import FailureKind
from agent_run.engines.environment import single_secret
from agent_run.engines.options import HttpRuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.quota import header_windows
from agent_run.supervisor.eventlog import ExecutionLog
from agent_run.supervisor.outcome import Outcome

if TYPE_CHECKING:  # imported when a broker is started: http.server/http.client are not cheap
    from agent_run.supervisor.broker import CredentialBroker

# What an engine makes of a dropped connection; with the broker's proof it is a network error.
_UNREACHABLE_AS = {
    FailureKind.STREAM_ERROR,
    FailureKind.ERROR_REPLY,
    FailureKind.ENGINE_CRASHED,
    FailureKind.NETWORK_ERROR,
}


def signal_kind(status: int) -> str:
    """What a provider response with rate-limit headers (or a 429) is evidence of: a 429 is a
    rate limit; a server error (503 with Retry-After, 529) says "later", as an engine's own
    retry events do; any other response's headers are usage."""
    if status == 429:
        return "rate_limited"
    return "retry" if status >= 500 else "usage"


@dataclass
class EngineCredentials:
    plan: ExecutionPlan  # the plan the engine is launched with
    secrets: dict[str, str]  # what its key variable holds
    broker: "CredentialBroker | None"

    def record_signals(self, log: ExecutionLog) -> None:
        """Rate-limit headers and upstream failures the broker saw since the last call."""
        if self.broker is None:
            return
        while not self.broker.signals.empty():
            status, retry_after, detail = self.broker.signals.get_nowait()
            log.signal(signal_kind(status), status, retry_after, detail)
            windows = header_windows(json.loads(detail))  # capacity samples (docs/capacity.md)
            if windows:
                log.quota(windows)
        while not self.broker.upstream_failures.empty():
            log.event(
                "upstream_unreachable", {"error": self.broker.upstream_failures.get_nowait()[:500]}
            )

    def reclassify(self, outcome: Outcome) -> Outcome:
        """An engine sees the broker drop its connection when the provider is unreachable and
        reports a stream error; the broker knows better: it is a network error."""
        reason = self.broker.unreachable if self.broker else None
        if reason is None or outcome.failure not in _UNREACHABLE_AS:
            return outcome
        return replace(
            outcome,
            failure=FailureKind.NETWORK_ERROR,
            message=f"cannot reach {self.broker.upstream.host_header}: {reason}"[:500],
        )

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()


def engine_credentials(
    upstream: str | None, plan: ExecutionPlan, secrets: dict[str, str]
) -> EngineCredentials:
    """`upstream`: the engine's default provider URL (`EngineSpec.broker_upstream`)."""
    secret = single_secret(secrets)
    options = plan.runtime_config
    if upstream is None or secret is None or not isinstance(options, HttpRuntimeOptions):
        return EngineCredentials(plan, secrets, None)
    from agent_run.supervisor.broker import CredentialBroker

    broker = CredentialBroker(options.base_url or upstream, secret).start()
    brokered = plan.model_copy(
        update={"runtime_config": options.model_copy(update={"base_url": broker.base_url})}
    )
    return EngineCredentials(brokered, {name: broker.token for name in secrets}, broker)
