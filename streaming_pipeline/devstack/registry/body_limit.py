"""ASGI middleware refusing request bodies over a size limit with 413."""

from __future__ import annotations

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streaming_pipeline.devstack.registry.exceptions import request_too_large
from streaming_pipeline.devstack.registry.responses import respond


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, so one request cannot exhaust the server's memory.

    A declared Content-Length over the limit is refused before any of the body is read; a body sent
    without one (chunked) is refused as soon as the bytes received pass the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            response = respond(request, request_too_large(self.limit).to_body(), 413)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, self._limited(receive), send)

    def _limited(self, receive: Receive) -> Receive:
        """`receive`, raising 413 once the request's body bytes pass the limit."""
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise request_too_large(self.limit)
            return message

        return limited_receive
