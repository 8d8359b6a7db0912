"""The daemon's notice dispatcher (`services.notices.NoticeDispatcher`, the real class) run alone
in its own process on a home's database: the lease tests' second sender. Two daemons can never
share a home (each holds the home's flock for its life), so the lease is tested against this.

`python -m tests.support.lone_dispatcher HOME`; it runs until killed."""

import asyncio
import sys
from pathlib import Path

from agent_run.config.model import load_config
from agent_run.services.context import ServiceContext
from agent_run.services.notices import NoticeDispatcher
from agent_run.system.home import Home


async def main(root: str) -> None:
    home = Home(Path(root))
    ctx = ServiceContext(home, load_config(home), threads=4)
    await NoticeDispatcher(ctx, None).run_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
