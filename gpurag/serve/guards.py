"""Bounds on how long a client may take to send a request, and auth before a body is read.

* :class:`HeaderTimeoutH11`: uvicorn's h11 protocol, closing a connection whose request
  headers are not complete within ``header_timeout_s`` (a client that drips its headers no
  longer holds a connection for as long as it likes).
* :class:`ReadGuard` (ASGI): a request that carries a body to an API route is refused with
  401 before any of the body is read when its key is missing or wrong; a body not complete
  within ``body_timeout_s`` is answered 408 and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

PROTECTED_PREFIXES = ("/v1/", "/metrics")


def header_timeout_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """An h11 protocol class closing connections whose headers take over the limit."""

    class HeaderTimeoutH11(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _headers_late(self) -> None:
            self._header_timer = None
            # IDLE: the request line and headers of this cycle have not all arrived
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_timer()  # the next request on this connection

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutH11


class ReadGuard:
    """401 before reading the body of an unauthorized API request; 408 on a slow body."""

    def __init__(self, app: Any, keys: Any, body_timeout_s: float) -> None:
        self.app = app
        self.keys = keys
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        has_body = (headers.get(b"content-length", b"0").strip() not in (b"", b"0")
                    or b"transfer-encoding" in headers)
        if (has_body and scope["path"].startswith(PROTECTED_PREFIXES)
                and not self.keys.allows(_text(headers.get(b"authorization")))):
            await _respond(send, 401, {"detail": "missing or invalid API key"},
                           [(b"www-authenticate", b"Bearer")])
            return
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        body_done = not has_body
        started = answered = False

        async def timed_receive() -> dict:
            # A late body is answered 408 here; the app is told the client went away.
            nonlocal deadline, body_done, answered
            if body_done:
                return await receive()
            if deadline is None:
                deadline = loop.time() + self.body_timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                body_done = True
                if not started:
                    answered = True
                    await _respond(send, 408, {"detail": f"request body not received within "
                                                         f"{self.body_timeout_s:g} s"},
                                   [(b"connection", b"close")])
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def tracked_send(message: dict) -> None:
            nonlocal started
            if answered:
                return  # the 408 went out instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, timed_receive, tracked_send)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


async def _respond(send: Any, status: int, body: dict, headers: list) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})
