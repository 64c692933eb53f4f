"""LiteLLM builds a request on the event loop for the providers whose send is async, and on a thread otherwise;
its default tiktoken encoding is loaded only when read (engine/llm/inline_requests.py, engine/llm/litellm_import.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.llm.conftest import MakeClient
from tests.stubs.deepseek_stub import DeepSeekStub, StubReply

from agent_runtime.engine.llm import LLMClient, LLMRequest, WireMessage
from agent_runtime.engine.llm.inline_requests import builds_an_async_request
from agent_runtime.engine.llm.litellm_import import EncodingOnFirstUse, load_litellm
from agent_runtime.engine.loop_executor import InlineExecutor
from agent_runtime.settings import Settings

litellm = load_litellm()

HELLO = [{"role": "user", "content": "hello"}]


class Counting(InlineExecutor):
    """The service's executor, noting every job that still goes to a thread."""

    def __init__(self) -> None:
        super().__init__((builds_an_async_request,))
        self.on_threads: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        if not self.runs_inline(fn, *args, **kwargs):
            self.on_threads.append(repr(fn))
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("provider", ["deepseek", "openai"])
async def test_an_async_providers_completion_sends_nothing_until_its_coroutine_is_awaited(
    stub: DeepSeekStub, provider: str
) -> None:
    # What makes running it on the loop safe: the call only builds the request (a synchronous send to a stub on
    # this very loop would hang until its timeout).
    stub.enqueue(StubReply(content="Hi"))
    pending = litellm.completion(
        model=f"{provider}/deepseek-flash",
        messages=HELLO,
        api_base=stub.base_url,
        api_key=stub.api_key,
        acompletion=True,
        timeout=2,
    )
    assert asyncio.iscoroutine(pending)
    assert stub.requests == []
    answer = await pending
    assert answer.choices[0].message.content == "Hi"
    assert len(stub.requests) == 1


async def test_a_model_call_hands_no_job_to_a_thread(stub: DeepSeekStub, make_client: MakeClient) -> None:
    executor = Counting()
    asyncio.get_running_loop().set_default_executor(executor)
    client = make_client()
    stub.enqueue(StubReply(content="streamed"))
    stub.enqueue(StubReply(content="whole"))
    streamed = await client.complete(LLMRequest(messages=[WireMessage(role="user", content="a")], stream=True))
    whole = await client.complete(LLMRequest(messages=[WireMessage(role="user", content="b")]))
    assert (streamed.content, whole.content, executor.on_threads) == ("streamed", "whole", [])


async def test_the_demo_models_call_hands_no_job_to_a_thread(demo_settings: Settings) -> None:
    executor = Counting()
    asyncio.get_running_loop().set_default_executor(executor)
    answer = await LLMClient(demo_settings).complete(LLMRequest(messages=[WireMessage(role="user", content="hi")]))
    assert answer.is_demo and answer.content
    assert executor.on_threads == []


async def test_a_provider_outside_the_list_builds_its_request_on_a_thread() -> None:
    executor = Counting()
    asyncio.get_running_loop().set_default_executor(executor)
    answer = await litellm.acompletion(model="anthropic/claude-x", messages=HELLO, mock_response="ok")
    assert answer.choices[0].message.content == "ok"
    assert len(executor.on_threads) == 1


async def test_deepseek_calls_never_read_the_default_encoding(
    stub: DeepSeekStub, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Noting(EncodingOnFirstUse):
        def __getattr__(self, name: str) -> object:
            read.append(name)
            return super().__getattr__(name)

    read: list[str] = []
    monkeypatch.setattr(litellm.main, "encoding", Noting())
    monkeypatch.setattr(litellm.main, "_encoding_cache", None)
    client = make_client()
    stub.enqueue(StubReply(content="streamed"))
    stub.enqueue(StubReply(content="whole"))
    await client.complete(LLMRequest(messages=[WireMessage(role="user", content="a")], stream=True))
    await client.complete(LLMRequest(messages=[WireMessage(role="user", content="b")]))
    assert read == []
    assert EncodingOnFirstUse().encode("hello") == litellm.utils.encoding.encode("hello")
