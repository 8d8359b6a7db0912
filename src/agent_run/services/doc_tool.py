"""The `doc` tool's handler."""

from agent_run.domain.errors import InvalidRequest
from agent_run.domain.requests import DocParams
from agent_run.domain.views import DocResult
from agent_run.services.context import ServiceContext
from agent_run.services.docs import topics


async def doc(_ctx: ServiceContext, p: DocParams) -> DocResult:
    found = topics()
    topic = p.topic or "overview"
    if topic not in found:
        raise InvalidRequest(f"no topic {topic!r}; topics: {', '.join(found)}", field="topic")
    return DocResult(topic=topic, text=found[topic], topics=list(found))
