"""The daemon's composition root: one per home (a lock), the store migrated, the services and
background loops (revision watcher, reconciler, answer scrub, batch scheduler, notice
dispatcher, retention) started, and the
tool table wired to the socket transport (`rpc/server.py`)."""

import asyncio
import fcntl
import os
import resource
import signal
import socket
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_run.domain.errors import Conflict, DomainError
from agent_run.rpc import protocol as p
from agent_run.rpc.server import Endpoint, RpcServer
from agent_run.services.agents import adopt_orphan
from agent_run.services.context import NUDGED_POLL_SECONDS, ServiceContext, as_storage_full
from agent_run.services.integrity import scrub_once
from agent_run.services.live_config import LiveConfig
from agent_run.services.reconcile import reconcile_once
from agent_run.store import wake
from agent_run.system.home import Home, clear_stop_mark, read_stop_mark
from agent_run.system.logs import bound_appended, daemon_logger
from agent_run.system.unix_sockets import check_home
from agent_run.tools.table import ALL_TOOLS, Tool

SCRUB_TICK_SECONDS = 10.0


class DaemonAlreadyRunning(Conflict):
    """Another daemon holds the home's lock (`api serve` exits 1 with its error line)."""


def acquire_lock(home: Home) -> int:
    """Hold the home's daemon lock for this process's life; the kernel drops it when we die."""
    fd = os.open(home.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode().strip() or "unknown"
        os.close(fd)
        raise DaemonAlreadyRunning(f"a daemon already serves {home.root} (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit and return it: every MCP host, long-poll
    client and spawn holds descriptors, and the usual soft default (1,024) is arbitrary."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel still caps a process at fs.nr_open
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


def endpoint(ctx: ServiceContext, tool: Tool) -> Endpoint:
    """A tool as a transport endpoint: params validated strictly into its model, the handler
    run, the result dumped to JSON; a full disk outside `store.db.write` is `StorageFull`."""
    handler = tool.resolve()

    async def call(params: Any) -> Any:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise p.RpcFailure(
                p.INVALID_PARAMS,
                "params must be an object",
                {"code": "InvalidParams", "message": "params must be an object", "field": "params"},
            )
        try:
            parsed = tool.params.model_validate(params)
        except ValidationError as exc:
            data = p.validation_error_data(exc)
            raise p.RpcFailure(
                p.INVALID_PARAMS, f"invalid params: {data['message']}", data
            ) from None
        try:
            result = await handler(ctx, parsed)
        except DomainError:
            raise
        except Exception as exc:
            if full := as_storage_full(exc, f"what `{tool.name}` needed to store"):
                raise full from exc
            raise
        return result.model_dump(mode="json")

    return Endpoint(read_only=tool.read_only, call=call)


class Daemon:
    def __init__(self, home: Home, autostarted: bool = False) -> None:
        live = LiveConfig(home)  # fail closed before anything is made in the home
        self.autostarted = autostarted  # by a client (`rpc.autostart.connect`), not by the user
        self.home = home.ensure()
        settings = live.config.daemon
        self.log = daemon_logger(home, settings.log_max_bytes, settings.log_keep)
        self.config = live.config
        self.ctx = ServiceContext(home, self.config, log=self.log)
        self.ctx.live = live
        endpoints = {name: endpoint(self.ctx, tool) for name, tool in ALL_TOOLS.items()}
        self.server = RpcServer(
            self.home.socket_path, endpoints, self.log, self.home.logs_dir / "daemon.log"
        )
        self.lock_fd = -1  # held from `prepare` on
        self.fd_limit = 0

    def prepare(self) -> None:
        """What comes before the event loop: the lock, the fork server (its zygote forked from
        this process while it is still single-threaded, where it can be) and the migrated store."""
        check_home(self.home)  # a home agents cannot run in is refused here, not mid-agent
        self.lock_fd = acquire_lock(self.home)
        self._honour_stop_mark(self.lock_fd)
        self.fd_limit = raise_fd_limit()
        self.ctx.start_fork_server()  # before any thread or database connection exists
        self.ctx.warm_up()  # migrates the store once, before serving

    async def serve(self) -> None:
        lock_fd, fd_limit = self.lock_fd, self.fd_limit
        server = await self.server.start()  # we hold the lock: a socket file left behind is stale
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.ctx.refresh_config)
        from agent_run.batches.service import scheduler
        from agent_run.services.capacity import collect_forever
        from agent_run.services.hosts import mirror_forever
        from agent_run.services.notices import NoticeDispatcher

        nudges = wake.listen(self.home.wake_path)
        if nudges is not None:  # else the revision is only polled (a path too long to bind)
            loop.add_reader(nudges.fileno(), self._nudged, nudges)
            self.ctx.watcher.poll_seconds = NUDGED_POLL_SECONDS
        background = [
            asyncio.create_task(self.ctx.watcher.run()),
            asyncio.create_task(self._reconcile_loop()),
            asyncio.create_task(self._scrub_loop()),
            asyncio.create_task(scheduler(self.ctx).run_forever(self.log)),
            asyncio.create_task(collect_forever(self.ctx, self.log)),
            asyncio.create_task(NoticeDispatcher(self.ctx, self.log).run_forever()),
            asyncio.create_task(self._prune_loop()),
            asyncio.create_task(mirror_forever(self.ctx)),
            asyncio.create_task(self._logs_loop()),
        ]  # capacity; notices; retention; agents on hosts; logs
        self.log.info(
            "daemon.started",
            pid=os.getpid(),
            socket=str(self.home.socket_path),
            fd_limit=fd_limit,
            config_revision=self.ctx.live.revision,
        )
        async with server:
            await stop.wait()
        self.log.info("daemon.stopping")
        for task in background:
            task.cancel()
        if self.ctx.hosts is not None:  # end the ssh links (their bridges end with them)
            await self.ctx.hosts.close_all()
        self.home.socket_path.unlink(missing_ok=True)
        if nudges is not None:
            loop.remove_reader(nudges.fileno())
            nudges.close()
            self.home.wake_path.unlink(missing_ok=True)
        self.ctx.shutdown()
        os.close(lock_fd)

    def _nudged(self, sock: socket.socket) -> None:
        if wake.drain(sock):
            self.ctx.watcher.nudge()

    def _honour_stop_mark(self, lock_fd: int) -> None:
        """With the lock held: an autostarted daemon does not serve a home the user stopped
        (`api stop` marks it before its SIGTERM, so a web UI or MCP retry racing the stop loses);
        a daemon the user started (`api serve`, a service manager) clears the mark."""
        from agent_run.rpc.autostart import stopped_error

        mark = read_stop_mark(self.home)
        if mark is None:
            return
        if self.autostarted:
            os.close(lock_fd)
            raise stopped_error(self.home, mark)
        clear_stop_mark(self.home)
        self.log.info("daemon.stop_mark_cleared", stopped_at=mark.get("at"))

    async def _reconcile_loop(self) -> None:
        # The first pass runs at boot: it spawns what a dead daemon admitted but never spawned.
        while True:
            try:
                await self._reconcile()
            except Exception as exc:  # keep reconciling; the next pass may succeed
                self.log.error("reconcile.error", error=repr(exc))
            await asyncio.sleep(self.config.daemon.reconcile_interval_seconds)

    async def _scrub_loop(self) -> None:
        """Re-hash every sealed answer once per `answer_scrub_seconds`, a few per pass."""
        period = self.config.daemon.answer_scrub_seconds
        while True:
            try:
                result = await self.ctx.db(scrub_once, self.ctx.home, period)
                for execution_id in result.failed:
                    self.log.warning(
                        "answer.integrity_failed", execution_id=execution_id, by="scrub"
                    )
            except Exception as exc:  # keep scrubbing; the next pass may succeed
                self.log.error("scrub.error", error=repr(exc))
            await asyncio.sleep(max(0.2, min(SCRUB_TICK_SECONDS, period / 20)))

    async def _prune_loop(self) -> None:
        """Apply `[retention]` at boot, then every `retention.interval_seconds` (a day)."""
        from agent_run.services.retention import prune_now

        while True:
            try:
                await prune_now(self.ctx, dry_run=False)
            except Exception as exc:  # keep the schedule; the next pass may succeed
                self.log.error("retention.error", error=repr(exc))
            await asyncio.sleep(self.ctx.config.retention.interval_seconds)

    async def _logs_loop(self) -> None:
        """Keep daemon.out and zygote.log (appended to by this process's own stdout/stderr and
        by the fork server) under `daemon.log_max_bytes`; daemon.log rotates as it is written."""
        settings = self.config.daemon
        while True:
            for name in ("daemon.out", "zygote.log"):
                path = self.home.logs_dir / name
                if await asyncio.to_thread(
                    bound_appended, path, settings.log_max_bytes, settings.log_keep
                ):
                    self.log.info("log.truncated", file=str(path), kept=f"{path.name}.1")
            await asyncio.sleep(settings.log_check_seconds)

    async def _reconcile(self) -> None:
        done = await self.ctx.db(reconcile_once, self.ctx.starting, self.home)
        for item in done.lost:
            self.log.warning("execution.lost", execution_id=item.execution_id, reason=item.reason)
        for orphan in done.orphans:
            if await adopt_orphan(self.ctx, orphan.agent_id, orphan.execution_id):
                self.log.warning(
                    "execution.adopted",
                    execution_id=orphan.execution_id,
                    reason="admitted but never spawned (its spawner died)",
                )


def serve_forever(home: Home, autostarted: bool = False) -> None:
    os.umask(0o077)
    daemon = Daemon(home, autostarted)
    daemon.prepare()
    asyncio.run(daemon.serve())
