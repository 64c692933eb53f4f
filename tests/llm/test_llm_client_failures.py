"""LLMClient failure handling against the stub: retries, timeouts, typed errors, no leaked keys."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from tests.llm.conftest import MakeClient
from tests.stubs.deepseek_stub import DeepSeekStub, StubFault, StubReply

from agent_runtime.engine.llm import (
    LLMAuthError,
    LLMBadRequestError,
    LLMClient,
    LLMConnectionError,
    LLMInvalidResponseError,
    LLMRateLimitError,
    LLMRequest,
    LLMServerError,
    LLMStreamInterruptedError,
    LLMTimeoutError,
    WireMessage,
)
from agent_runtime.settings import Settings

# Thinking off, as every stage ships (DeepSeek thinks unless told not to).
HELLO = LLMRequest(messages=[WireMessage(role="user", content="hello")], thinking=False)


def busy(status: int, retry_after: str | None = None) -> StubFault:
    return StubFault(kind="status", status=status, retry_after=retry_after)


async def test_retries_429_500_503_then_succeeds(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(busy(429), busy(500), busy(503))
    response = await make_client(llm_max_retries=3).complete(HELLO)
    assert response.content == "stub answer to: hello"
    # One request per attempt: LiteLLM's and the OpenAI SDK's own retries are off.
    assert len(stub.requests) == 4


async def test_gives_up_after_max_retries_with_a_typed_error(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(busy(500), busy(500), busy(500), busy(500))
    with pytest.raises(LLMServerError) as caught:
        await make_client(llm_max_retries=2).complete(HELLO)
    assert caught.value.provider_status == 500
    assert "Service is too busy" in caught.value.provider_message
    assert (caught.value.status_code, caught.value.code) == (502, "llm_server_error")
    assert len(stub.requests) == 3


async def test_no_retry_at_all_when_max_retries_is_zero(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(busy(503))
    with pytest.raises(LLMServerError):
        await make_client(llm_max_retries=0).complete(HELLO)
    assert len(stub.requests) == 1


async def test_bad_request_is_not_retried(stub: DeepSeekStub, make_client: MakeClient) -> None:
    with pytest.raises(LLMBadRequestError) as caught:
        await make_client().complete(HELLO.model_copy(update={"model": "deepseek/deepseek-3.2"}))
    assert (caught.value.provider_status, len(stub.requests)) == (400, 1)
    assert "Model Not Exist" in caught.value.provider_message


async def test_honours_retry_after_capped_by_the_setting(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(busy(503, retry_after="0.3"))
    start = time.perf_counter()
    await make_client(llm_retry_max_seconds=5.0).complete(HELLO)
    assert time.perf_counter() - start >= 0.3

    stub.enqueue(busy(503, retry_after="30"))
    start = time.perf_counter()
    await make_client(llm_retry_max_seconds=0.1).complete(HELLO)
    assert time.perf_counter() - start < 2.0
    assert len(stub.requests) == 4


async def test_a_429s_retry_after_is_honoured_within_the_wait_budget(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    stub.enqueue(busy(429, retry_after="0.3"))
    start = time.perf_counter()
    await make_client(llm_retry_max_seconds=0.0).complete(HELLO)
    assert time.perf_counter() - start >= 0.3

    stub.enqueue(busy(429, retry_after="30"), busy(429, retry_after="30"))
    start = time.perf_counter()
    with pytest.raises(LLMRateLimitError):
        await make_client(llm_overload_wait_seconds=0.4).complete(HELLO)
    assert 0.4 <= time.perf_counter() - start < 2.0
    assert len(stub.requests) == 4


async def test_rate_limit_error_carries_retry_after(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(busy(429, retry_after="12"))
    with pytest.raises(LLMRateLimitError) as caught:
        await make_client(llm_max_retries=0, llm_overload_wait_seconds=0.0).complete(HELLO)
    assert (caught.value.provider_status, caught.value.retry_after) == (429, 12.0)


async def test_slow_provider_times_out_with_a_typed_error(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.hold_replies()  # never released: the provider does not answer
    start = time.perf_counter()
    with pytest.raises(LLMTimeoutError) as caught:
        await make_client(llm_timeout_seconds=0.2, llm_max_retries=1).complete(HELLO)
    assert time.perf_counter() - start < 1.2
    assert (caught.value.status_code, len(stub.requests)) == (504, 2)


async def test_stream_first_chunk_timeout_is_typed(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.hold_replies()  # never released: no first chunk
    with pytest.raises(LLMTimeoutError):
        await make_client(llm_timeout_seconds=0.2, llm_max_retries=0).complete_streaming(HELLO)
    assert len(stub.requests) == 1


async def test_stream_stalling_between_chunks_times_out_and_is_not_retried(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    await make_client().complete_streaming(HELLO)  # LiteLLM's first stream in a process is slow (lazy imports)
    client = make_client(llm_timeout_seconds=0.5, llm_max_retries=2)
    stub.enqueue(StubReply(content="abcdefgh", chunk_chars=4, chunk_delay_seconds=0.1))
    assert (await client.complete_streaming(HELLO)).content == "abcdefgh"  # 0.1 s between chunks is fine
    stub.enqueue(StubReply(content="abcdefgh", chunk_chars=4))
    hold = stub.hold_replies()
    await hold.allow(2)  # the head and role chunk, then "abcd"; the rest never comes
    received: list[str] = []

    async def on_delta(text: str) -> bool:
        received.append(text)
        return True

    start = time.perf_counter()
    with pytest.raises(LLMTimeoutError):
        await client.complete_streaming(HELLO, on_delta)
    assert time.perf_counter() - start < 1.8
    assert (received, len(stub.requests)) == (["abcd"], 3)


async def test_mid_stream_disconnect_is_typed_and_not_retried(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(StubFault(kind="disconnect", after_chunks=3))
    received: list[str] = []

    async def on_delta(text: str) -> bool:
        received.append(text)
        return True

    with pytest.raises(LLMStreamInterruptedError):
        await make_client(llm_max_retries=3).complete_streaming(HELLO, on_delta)
    assert received == ["this", " ans"]
    assert len(stub.requests) == 1


async def test_mid_stream_disconnect_is_retried_while_nothing_reached_the_client(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    stub.enqueue(StubFault(kind="disconnect", after_chunks=3), StubReply(content="whole answer"))
    received: list[str] = []

    async def on_delta(text: str) -> bool:
        # The caller holds these pieces back (e.g. JSON before the answer text): nothing was delivered yet.
        received.append(text)
        return False

    response = await make_client(llm_max_retries=3).complete_streaming(HELLO, on_delta)
    assert response.content == "whole answer"
    assert "".join(received) == "this answer will be cut off "[:8] + "whole answer"
    assert len(stub.requests) == 2


async def test_disconnect_before_any_chunk_is_retried(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(StubFault(kind="disconnect", after_chunks=0))
    response = await make_client(llm_max_retries=1).complete_streaming(HELLO)
    assert (response.content, len(stub.requests)) == ("stub answer to: hello", 2)


async def test_half_a_json_body_is_typed_and_retried(stub: DeepSeekStub, make_client: MakeClient) -> None:
    stub.enqueue(StubFault(kind="invalid_json"), StubFault(kind="invalid_json"))
    with pytest.raises(LLMInvalidResponseError):
        await make_client(llm_max_retries=1).complete(HELLO)
    assert len(stub.requests) == 2


async def test_wrong_key_is_an_auth_error_and_the_key_is_never_shown(
    stub: DeepSeekStub, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-very-secret-key-123456"
    caplog.set_level(logging.DEBUG)
    stub.api_key = secret
    client = make_client(deepseek_api_key=secret, llm_max_retries=1)
    stub.enqueue(busy(500))
    await client.complete(HELLO)  # one retry, logged
    stub.api_key = "sk-the-key-the-provider-expects"
    with pytest.raises(LLMAuthError) as caught:
        await client.complete(HELLO)
    assert (caught.value.provider_status, len(stub.requests)) == (401, 3)
    assert "model call failed, retrying" in caplog.text
    shown = " ".join([str(caught.value), caught.value.provider_message, repr(caught.value.extra), caplog.text])
    assert secret not in shown
    assert stub.requests[-1].headers["Authorization"] == f"Bearer {secret}"


async def test_unreachable_provider_is_a_connection_error(stub: DeepSeekStub, make_client: MakeClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = make_client(llm_api_base=f"http://127.0.0.1:{closed_port}", llm_max_retries=1)
    with pytest.raises(LLMConnectionError) as caught:
        await client.complete(HELLO)
    assert caught.value.retryable and caught.value.code == "llm_connection_error"


async def test_missing_provider_key_fails_before_any_request(stub: DeepSeekStub) -> None:
    settings = Settings(_env_file=None, llm_model="deepseek/deepseek-flash", deepseek_api_key=None)  # type: ignore[call-arg]
    with pytest.raises(LLMAuthError, match="No API key is configured"):
        await LLMClient(settings).complete(HELLO)
    assert stub.requests == []


class ConsumerGone(Exception):
    pass


async def test_on_delta_errors_propagate_unchanged_and_stop_the_call(
    stub: DeepSeekStub, make_client: MakeClient
) -> None:
    async def on_delta(text: str) -> bool:
        raise ConsumerGone(text)

    with pytest.raises(ConsumerGone, match=r"^stub$"):
        await make_client(llm_max_retries=3).complete_streaming(HELLO, on_delta)
    assert len(stub.requests) == 1
