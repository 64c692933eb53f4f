"""The floor under a 429 in the load benchmark's burst: servers that refuse every request and do nothing else.

    python scripts/bench/refusal_floor.py --port P --kind raw      # an asyncio protocol on uvloop, no HTTP library
    python scripts/bench/refusal_floor.py --port P --kind uvicorn  # uvicorn (h11, as `serve`) + a bare ASGI app

`load.py` sends the same burst to these as to ours, through the same client, so the burst's 429 latency can be
split into what the load generator, the kernel and the HTTP server cost on this machine (the floors) and what
our app adds. Both answer ours's refusal: 429, `Retry-After`, the JSON error body, and close the connection.
`GET /health` answers 200 (for the benchmark's readiness wait).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

BODY = json.dumps({"error": {"code": "server_busy", "message": "the server is at capacity", "details": {}}}).encode()
REFUSAL = (
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    + f"content-length: {len(BODY)}\r\nconnection: close\r\n\r\n".encode()
    + BODY
)
HEALTH = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"


class _Refuse(asyncio.Protocol):
    """Reads one request head (and its body, by Content-Length), answers, closes."""

    def __init__(self) -> None:
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        head, sep, body = self._buffer.partition(b"\r\n\r\n")
        if not sep or self._transport is None:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(body) < length:
            return
        self._transport.write(HEALTH if head.startswith(b"GET /health") else REFUSAL)
        self._transport.close()


async def serve_raw(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Refuse, "127.0.0.1", port, backlog=2048)
    print("floor ready", flush=True)
    async with server:
        await server.serve_forever()


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def refusing_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    health = scope["path"] == "/health"
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    await send({"type": "http.response.start", "status": 200 if health else 429, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}" if health else BODY})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=["raw", "uvicorn"], required=True)
    args = parser.parse_args()
    if args.kind == "raw":
        import uvloop  # the loop `serve` gets too (uvicorn's "auto")

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_raw(args.port))
        return
    import uvicorn

    print("floor ready", flush=True)
    uvicorn.run(refusing_app, host="127.0.0.1", port=args.port, http="h11", access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
