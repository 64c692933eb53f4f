"""A LiteLLM embedding model, for engine/memories (LiteLLM is imported only in engine/llm)."""

from __future__ import annotations

from typing import Any

from agent_runtime.engine.llm.litellm_import import load_litellm

EMBEDDING_DIMENSIONS = 384


async def litellm_embed(model: str, texts: list[str]) -> tuple[list[list[float]], int]:
    """The vectors of `texts` (384 dimensions asked for) and the input tokens the provider counted."""
    litellm = load_litellm()
    response: Any = await litellm.aembedding(model=model, input=texts, dimensions=EMBEDDING_DIMENSIONS)
    vectors = [list(item["embedding"]) for item in response.data]
    usage = getattr(response, "usage", None)
    tokens = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
    return vectors, tokens
