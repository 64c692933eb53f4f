"""A LiteLLM embedding model, for engine/user_memories (LiteLLM is imported only in engine/llm)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.llm.litellm_import import load_litellm

EMBEDDING_DIMENSIONS = 384


class ProviderEmbeddings(BaseModel):
    model_config = ConfigDict(frozen=True)

    vectors: list[list[float]]
    input_tokens: int = Field(ge=0, description="What the provider counted (and bills).")


async def embed_with_provider(model: str, texts: list[str]) -> ProviderEmbeddings:
    """The vectors of `texts`, 384 dimensions asked for."""
    litellm = load_litellm()
    response: Any = await litellm.aembedding(model=model, input=texts, dimensions=EMBEDDING_DIMENSIONS)
    vectors = [list(item["embedding"]) for item in response.data]
    usage = getattr(response, "usage", None)
    tokens = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
    return ProviderEmbeddings(vectors=vectors, input_tokens=tokens)
