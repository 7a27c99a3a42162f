"""HTTP/1.1 to the server process over its Unix socket, for the front process (:mod:`.front`): keep-alive
connections kept in a pool, the request written as bytes, the answer parsed by httptools (uvicorn's own parser)
and handed on chunk by chunk as it arrives.

Why not an HTTP client library: the front's per-request CPU is what a 429 waits behind when a burst arrives (the
front answers the 429s of requests that come after the admitted ones). httpx spent ~1 ms of the front's CPU on
each request it passed on, and 200 /search at once then saw a 429 after 130 ms; this path is a write and a parse.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httptools

READ_BYTES = 1 << 16


class UpstreamGone(Exception):
    """The server process closed the connection, or refused it, before its answer was complete."""


class Answer:
    """One answer: its status and headers, :meth:`chunks` its body as it arrives; :meth:`release` gives the
    connection back to the pool when the body was read to its end (else closes it: the server sees the client go)."""

    def __init__(self, upstream: Upstream, reader, writer, parser, parsing: _Parsing, head_only: bool):
        self.status, self.headers = parser.get_status_code(), parsing.headers
        self._upstream, self._reader, self._writer = upstream, reader, writer
        self._parser, self._parsing, self._head_only = parser, parsing, head_only
        self._complete = False

    async def chunks(self) -> AsyncIterator[bytes]:
        parsing = self._parsing
        while True:
            while parsing.chunks:
                yield parsing.chunks.pop(0)
            if parsing.done or self._head_only:
                self._complete = True
                return
            data = await self._reader.read(READ_BYTES)
            if not data:
                raise UpstreamGone("closed in the middle of the answer")
            self._parser.feed_data(data)

    def release(self) -> None:
        if self._writer is None:
            return
        keep = self._complete and not self._head_only and self._parser.should_keep_alive()
        self._upstream.give_back(self._reader, self._writer, keep)
        self._writer = None


class _Parsing:
    """httptools' callbacks for one answer."""

    def __init__(self):
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = self.done = False
        self.chunks: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(bytes(body))

    def on_message_complete(self) -> None:
        self.done = True


class Upstream:
    """Connections to one server's Unix socket: at most ``keep`` idle ones kept for the next request."""

    def __init__(self, path: str, keep: int = 64):
        self.path, self.keep = path, keep
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connection(self, fresh: bool):
        while self._idle and not fresh:
            reader, writer = self._idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer, True
            writer.close()
        try:
            reader, writer = await asyncio.open_unix_connection(self.path)
        except OSError as e:
            raise UpstreamGone(f"cannot connect: {e}") from e
        return reader, writer, False

    async def request(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes):
        """Send one request; returns its :class:`Answer` once the status and headers came (the caller reads its
        chunks and releases it). A kept connection the server had closed meanwhile is replaced once, before any
        answer came (the server read nothing of the request)."""
        head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), b"host: server\r\n"]
        head += [k + b": " + v + b"\r\n" for k, v in headers]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        data = b"".join(head) + body
        for attempt in range(2):
            reader, writer, reused = await self._connection(fresh=attempt > 0)
            parsing = _Parsing()
            parser = httptools.HttpResponseParser(parsing)
            try:
                writer.write(data)
                await writer.drain()
                while not parsing.head_done:
                    chunk = await reader.read(READ_BYTES)
                    if not chunk:
                        raise UpstreamGone("closed before the answer")
                    parser.feed_data(chunk)
            except (UpstreamGone, OSError, httptools.HttpParserError) as e:
                writer.close()
                if reused and attempt == 0 and not parsing.headers:
                    continue  # an idle connection the server had let go: once more on a new one
                raise UpstreamGone(str(e)) from e
            except BaseException:  # cancelled (the client left): closing tells the server to drop the request
                writer.close()
                raise
            return Answer(self, reader, writer, parser, parsing, head_only=method == "HEAD")
        raise AssertionError("unreachable")

    async def warm(self, n: int) -> None:
        """Open ``n`` connections ahead (up to ``keep``): the first burst then connects nothing."""
        for _ in range(min(n, self.keep) - len(self._idle)):
            reader, writer, _ = await self._connection(fresh=True)
            self._idle.append((reader, writer))

    def give_back(self, reader, writer, keep: bool) -> None:
        if keep and len(self._idle) < self.keep and not writer.is_closing():
            self._idle.append((reader, writer))
        else:
            writer.close()

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
