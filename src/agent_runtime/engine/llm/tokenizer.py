"""LiteLLM's offline tokenizers: which one counts a model's tokens, and a count of chat-completions messages.

For DeepSeek models LiteLLM's `select_tokenizer` gives DeepSeek's own (a HuggingFace tokenizer file LiteLLM ships,
so offline), likewise for Claude, Llama and Command R; for OpenAI models tiktoken is theirs. Any other model falls
back to tiktoken, which only approximates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from agent_runtime.engine.llm.litellm_import import load_litellm


class TokenizerInfo(BaseModel):
    model: str
    tokenizer: str = Field(description="What counts the tokens, e.g. `deepseek (HuggingFace, bundled with LiteLLM)`.")
    exact: bool = Field(description="The model's own tokenizer; False: an approximation (tiktoken fallback).")


def tokenizer_info(model: str) -> TokenizerInfo:
    """Which tokenizer LiteLLM counts `model`'s tokens with, and whether it is the model's own."""
    litellm = load_litellm()
    from litellm.utils import select_tokenizer

    selected = select_tokenizer(model=model)
    if selected["type"] == "huggingface_tokenizer":
        kind = getattr(litellm.utils, "huggingface_tokenizer_kind", lambda _: None)(model) or "model"
        return TokenizerInfo(model=model, tokenizer=f"{kind} (HuggingFace, bundled with LiteLLM)", exact=True)
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # LiteLLM raises a plain exception for a provider it does not know (e.g. demo/)
        provider = None
    return TokenizerInfo(model=model, tokenizer="tiktoken", exact=provider in ("openai", "azure"))


def count_tokens(model: str, messages: Sequence[dict[str, Any]]) -> int:
    """`litellm.token_counter`: OpenAI's count of a message list, the reply's priming (3 tokens) included."""
    return int(load_litellm().token_counter(model=model, messages=list(messages)))
