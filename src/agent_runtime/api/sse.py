"""SSE keepalive: a comment line (`: keepalive`) while a run's stream is silent.

A run can be quiet for long stretches (a model thinking before its first token, a tool, a follower waiting
for another replica's events), and proxies and load balancers close connections idle for 30-60 s. A comment
line is ignored by every SSE parser (the spec's lines starting with a colon), so clients see nothing; it is
written here, at the HTTP edge, and never reaches the run's event log, so a resumed stream replays events only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

KEEPALIVE = ": keepalive\n\n"


async def with_keepalive(frames: AsyncIterator[str], seconds: float) -> AsyncIterator[str]:
    """`frames` as they come, and KEEPALIVE after every `seconds` without one. The pending read is awaited
    across keepalives, never cancelled by the timeout (cancelling it would close the run's event follower)."""
    iterator = aiter(frames)
    pending: asyncio.Task[str] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                yield KEEPALIVE
                continue
            try:
                frame = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield frame
    finally:
        # The client went away (or the stream ended): stop the read in flight, then close the source.
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
