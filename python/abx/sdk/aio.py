"""The asynchronous host SDK: the same calls as :class:`abx.sdk.Sandbox`, awaitable.

Each call runs the synchronous client in a worker thread (``asyncio.to_thread``), so the event
loop never blocks on the network and concurrent calls run on separate pooled connections.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Dict, List, Optional, Sequence

from .config import ConnectionConfig
from .sandbox import CommandResult, Sandbox, SandboxInfo


def _to_thread(fn, *args, **kwargs):
    return asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))


class AsyncCommands:
    def __init__(self, sync):
        self._c = sync

    async def run(self, cmd: str, **opts: Any) -> CommandResult:
        return await _to_thread(self._c.run, cmd, **opts)

    async def run_argv(self, argv: Sequence[str], **opts: Any) -> CommandResult:
        return await _to_thread(self._c.run_argv, argv, **opts)


class AsyncFiles:
    def __init__(self, sync):
        self._f = sync

    async def read(self, path: str, *, format: str = "text") -> Any:
        return await _to_thread(self._f.read, path, format=format)

    async def write(self, path: str, data: Any) -> Dict[str, Any]:
        return await _to_thread(self._f.write, path, data)


class AsyncCommandServer:
    def __init__(self, sync):
        self._s = sync

    async def call(self, name: str, /, **kwargs: Any) -> Any:
        return (await _to_thread(self._s.call_raw, name, kwargs))["result"]

    async def call_raw(self, name: str, kwargs: Optional[Dict[str, Any]] = None, *,
                       timeout: Optional[float] = None) -> Dict[str, Any]:
        return await _to_thread(self._s.call_raw, name, kwargs, timeout=timeout)

    async def list(self):
        return await _to_thread(self._s.list)


class AsyncSandbox:
    """``sbx = await AsyncSandbox.create("demo")``; ``await sbx.server.call("demo", x=42)``.

    ``capabilities`` is resolved while creating or connecting, so reading it never blocks."""

    def __init__(self, sync: Sandbox):
        self.sync = sync
        self.commands = AsyncCommands(sync.commands)
        self.files = AsyncFiles(sync.files)
        self.server = AsyncCommandServer(sync.server)

    @classmethod
    async def _wrap(cls, sbx: Sandbox) -> "AsyncSandbox":
        try:
            await _to_thread(lambda: sbx.capabilities)
        except BaseException:
            await _to_thread(sbx.kill)
            raise
        return cls(sbx)

    @classmethod
    async def create(cls, template: str = "base", **kw: Any) -> "AsyncSandbox":
        return await cls._wrap(await _to_thread(Sandbox.create, template, **kw))

    @classmethod
    async def connect(cls, sandbox_id: str, **kw: Any) -> "AsyncSandbox":
        sbx = await _to_thread(Sandbox.connect, sandbox_id, **kw)
        await _to_thread(lambda: sbx.capabilities)
        return cls(sbx)

    @staticmethod
    async def list(*, config: Optional[ConnectionConfig] = None) -> List[SandboxInfo]:
        return await _to_thread(Sandbox.list, config=config)

    async def kill(self) -> bool:
        return await _to_thread(self.sync.kill)

    async def set_timeout(self, timeout: int) -> None:
        await _to_thread(self.sync.set_timeout, timeout)

    async def get_info(self) -> SandboxInfo:
        return await _to_thread(self.sync.get_info)

    async def scoped_token(self, commands: Sequence[str], ttl: int = 600) -> str:
        return await _to_thread(self.sync.scoped_token, commands, ttl)

    def with_access_token(self, token: str) -> "AsyncSandbox":
        return AsyncSandbox(self.sync.with_access_token(token))

    async def list_commands(self, **kw: Any) -> List[Dict[str, Any]]:
        return await _to_thread(self.sync.list_commands, **kw)

    async def run(self, name: str, /, **kwargs: Any) -> CommandResult:
        return await _to_thread(self.sync.run, name, **kwargs)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.kill()

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def sandbox_id(self) -> str:
        return self.sync.id

    @property
    def template_id(self) -> str:
        return self.sync.template_id

    @property
    def info(self) -> SandboxInfo:
        return self.sync.info

    @property
    def capabilities(self) -> frozenset:
        return self.sync.capabilities

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, template={self.template_id!r})"
