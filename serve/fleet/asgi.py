"""The single-process server's handshake and session code, run over ASGI (what Ray Serve's HTTP proxy speaks).

`PolicyServer` is written against the `websockets` library: its handshake (`_http`) reads a request's path and headers
and answers with `connection.respond(...)`; its session (`_handler`) calls `recv`, `send`, `close`, `wait_closed` and
`remote_address` on the connection. `AsgiWebsocket` and `HandshakeRequest`/`HandshakeConnection` give it exactly that
surface over one ASGI websocket, so the key, Host and Origin checks, the 503, the limits, the idle and invalid-message
closes and the replies are the same code in both servers. Refusals go out as ASGI websocket denial responses (the
`websocket.http.response` extension, which uvicorn and Ray's proxy carry), so a refused robot sees the same HTTP
status (401, 403, 503 with Retry-After) as from the single server.
"""
from __future__ import annotations

import asyncio
import http

import websockets
from websockets.datastructures import Headers
from websockets.frames import Close
from websockets.http11 import Response

CLOSE_TOO_BIG = 1009  # RFC 6455 "message too big", as the websockets library closes for --max-message-mb
DENIAL_EXTENSION = "websocket.http.response"


class HandshakeRequest:
    """What `PolicyServer._http` reads of a request: its path and headers (websockets' `Headers`, with get_all)."""

    def __init__(self, scope: dict) -> None:
        self.path = scope_path(scope)
        if scope.get("query_string"):
            self.path += "?" + scope["query_string"].decode("latin-1")
        self.headers = Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])])


class HandshakeConnection:
    """What `PolicyServer._http`/`_refusal` call on a connection: `respond` and `remote_address`."""

    def __init__(self, scope: dict) -> None:
        self.remote_address = tuple(scope.get("client") or ("unknown", 0))

    @staticmethod
    def respond(status: http.HTTPStatus, text: str) -> Response:
        body = text.encode()
        headers = Headers([("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return Response(status.value, status.phrase, headers, body)


def scope_path(scope: dict) -> str:
    """The request path below the application's route prefix (Serve passes the prefix as root_path)."""
    path, root = scope.get("path", "/"), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"


def _asgi_headers(response: Response) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.raw_items()]


async def send_http(send, response: Response) -> None:
    """A plain HTTP answer (`/healthz`, `/stats`, a refusal)."""
    await send({"type": "http.response.start", "status": response.status_code, "headers": _asgi_headers(response)})
    await send({"type": "http.response.body", "body": bytes(response.body)})


async def deny_websocket(scope: dict, send, response: Response) -> None:
    """Refuse a websocket handshake with `response`'s HTTP status and body; without the denial extension (an ASGI
    server that lacks it) the only refusal ASGI has is a close before accept, which servers answer with 403."""
    if DENIAL_EXTENSION in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": response.status_code,
                    "headers": _asgi_headers(response)})
        await send({"type": "websocket.http.response.body", "body": bytes(response.body)})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": response.reason_phrase})


class AsgiWebsocket:
    """The part of websockets' `ServerConnection` that `PolicyServer._handler` uses, over one accepted ASGI websocket.

    A reader task moves incoming messages into a queue of `max_queue` (the single server's --max-buffered-frames); it
    stops reading while the queue is full, as the websockets library does. A message over `max_size` closes the
    connection with 1009, as the websockets library does. Once the peer is gone, `recv` and `send` raise
    `websockets.ConnectionClosed` and `wait_closed` returns: what `_handler` expects.
    """

    def __init__(self, scope: dict, receive, send, *, max_size: int, max_queue: int) -> None:
        self.remote_address = tuple(scope.get("client") or ("unknown", 0))
        self._receive, self._send = receive, send
        self.max_size = max_size
        self._inbox: asyncio.Queue = asyncio.Queue(maxsize=max(1, max_queue))
        self._closed = asyncio.Event()
        self.close_code: int | None = None
        self.close_reason = ""
        self._reader: asyncio.Task | None = None

    async def accept(self) -> None:
        await self._send({"type": "websocket.accept"})
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    self._mark_closed(int(message.get("code") or 1005), message.get("reason") or "")
                    return
                if message["type"] != "websocket.receive":
                    continue
                data = message.get("bytes")
                if data is None:
                    data = message.get("text") or ""
                if len(data) > self.max_size:
                    await self.close(CLOSE_TOO_BIG, "message too big")
                    return
                await self._inbox.put(data)
        except Exception:  # noqa: BLE001 - the transport went away: the connection is closed either way
            self._mark_closed(1006, "")

    def _mark_closed(self, code: int, reason: str) -> None:
        if not self._closed.is_set():
            self.close_code, self.close_reason = code, reason
            self._closed.set()

    def _connection_closed(self) -> websockets.ConnectionClosed:
        return websockets.ConnectionClosed(Close(self.close_code or 1006, self.close_reason), None)

    async def recv(self) -> bytes | str:
        if not self._inbox.empty():
            return self._inbox.get_nowait()
        if self._closed.is_set():
            raise self._connection_closed()
        get = asyncio.ensure_future(self._inbox.get())
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({get, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            return get.result()
        raise self._connection_closed()

    async def send(self, data: bytes | str) -> None:
        if self._closed.is_set():
            raise self._connection_closed()
        message = {"type": "websocket.send", "bytes": data} if isinstance(data, bytes | bytearray) else \
            {"type": "websocket.send", "text": data}
        try:
            await self._send(message)
        except Exception as e:  # noqa: BLE001 - the peer left while we answered
            self._mark_closed(1006, "")
            raise self._connection_closed() from e

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self._closed.is_set():
            return
        self._mark_closed(code, reason)
        try:
            await self._send({"type": "websocket.close", "code": code, "reason": reason})
        except Exception:  # noqa: BLE001 - already gone
            pass

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def finish(self) -> None:
        """After the session: close if still open, stop the reader."""
        await self.close(1000, "")
        if self._reader is not None:
            self._reader.cancel()
