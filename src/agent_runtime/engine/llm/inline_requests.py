"""LiteLLM builds each request on the event loop, not on a thread, for the providers whose send is async.

`litellm.acompletion` runs the synchronous `litellm.completion(..., acompletion=True)` on the loop's default
executor; for a provider with an async client that call only builds the request (messages, parameters, headers,
the client from LiteLLM's cache) and returns the coroutine that sends it, which `acompletion` then awaits on the
loop. The thread hop is one hand-off per model call, four per full run, for ~1-2 ms of CPU that holds the GIL
anyway. This rule of the app loop's executor (engine/loop_executor.py) runs that call inline for the providers
listed below, whose path LiteLLM dispatches to an async client; any other provider's `completion` may send the
request itself, synchronously, so it keeps its thread. PATCHES.md row 8; tests/llm/test_llm_inline_requests.py
pins that these providers' `completion` sends nothing before its coroutine is awaited.
"""

from __future__ import annotations

from typing import Final

from agent_runtime.engine.loop_executor import Job

ASYNC_PROVIDERS: Final = frozenset({"deepseek", "openai", "demo"})
_COMPLETION: Final = ("litellm.main", "completion")


def provider_of(model: object, custom_llm_provider: object = None) -> str | None:
    if isinstance(custom_llm_provider, str) and custom_llm_provider:
        return custom_llm_provider
    if isinstance(model, str) and "/" in model:
        return model.split("/", 1)[0]
    return None


def builds_an_async_request(job: Job) -> bool:
    return (
        job.name == _COMPLETION
        and job.keywords.get("acompletion") is True
        and provider_of(job.keywords.get("model"), job.keywords.get("custom_llm_provider")) in ASYNC_PROVIDERS
    )
