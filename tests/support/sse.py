"""Reading SSE bodies in tests: whole frames from a streamed response, and frames back into a body."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def frames_of(lines: AsyncIterator[str], count: int | None = None) -> list[str]:
    """Whole SSE frames (`id:` and `data:` lines) from a streamed body's lines: `count` of them, or all."""
    frames: list[str] = []
    current: list[str] = []
    async for line in lines:
        if line:
            current.append(line)
            continue
        frames.append("\n".join(current))
        current = []
        if count is not None and len(frames) == count:
            break
    return frames


def sse_body(frames: list[str]) -> str:
    return "".join(f"{frame}\n\n" for frame in frames)
