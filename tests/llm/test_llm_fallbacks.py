"""When DeepSeek says no: retries on the call's model, then its fallback chain on LiteLLM's Router; the answer is
priced by the model that gave it; calls cut by a fault or a cancel are reported with an estimated usage."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from tests.llm.conftest import stub_settings
from tests.stubs.deepseek_stub import DeepSeekStub, StubFault, StubReply

from agent_runtime.engine.llm import LLMClient, LLMRequest, LLMServerError, WireMessage
from agent_runtime.engine.llm.catalog import FallbackTarget, ModelCatalog, ModelsFile
from agent_runtime.engine.llm.errors import LLMStreamInterruptedError, LLMUnavailableError
from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.llm.models import FunctionSpec, ToolSchema, UnfinishedCall
from agent_runtime.observability.metrics import MODEL_FALLBACKS

HELLO = LLMRequest(
    messages=[WireMessage(role="user", content="hello")], model="deepseek/deepseek-flash", thinking=False
)
HELLO_WIRE = {"role": "user", "content": "hello"}
# A Tuesday, 10:30 in Beijing: peak prices.
PEAK = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
CHAIN = ModelCatalog(
    ModelsFile(fallbacks={"deepseek/deepseek-flash": [FallbackTarget(model="deepseek/deepseek-v4-pro")]})
)


def busy(status: int = 429) -> StubFault:
    return StubFault(kind="status", status=status)


def client(stub: DeepSeekStub, *, catalog: ModelCatalog = CHAIN, retries: int = 1) -> LLMClient:
    # A 429 goes to the chain at once here: how long a call waits for a busy model is tests/llm/test_llm_overload.py's.
    settings = stub_settings(stub, llm_max_retries=retries, llm_overload_wait_seconds=0.0)
    return LLMClient(settings, catalog=catalog, clock=lambda: PEAK)


def fallbacks(model: str, fallback: str) -> float:
    return MODEL_FALLBACKS.labels(model, fallback)._value.get()


async def test_a_model_that_keeps_refusing_falls_back_and_the_answer_is_priced_by_its_own_model(
    stub: DeepSeekStub,
) -> None:
    stub.enqueue(busy(503), busy(503), StubReply(content="from pro", reasoning_content=None))
    before = fallbacks("deepseek/deepseek-flash", "deepseek/deepseek-v4-pro")
    response = await client(stub).complete(HELLO)
    assert [r.body["model"] for r in stub.requests] == ["deepseek-flash", "deepseek-flash", "deepseek-v4-pro"]
    assert (response.model, response.fallback_from, response.content) == (
        "deepseek/deepseek-v4-pro",
        "deepseek/deepseek-flash",
        "from pro",
    )
    usage = response.usage
    assert usage is not None
    # deepseek-v4-pro at peak: 9 CNY per million missed prompt tokens, 27 per million output tokens.
    expected = (Decimal(usage.prompt_tokens) * 9 + Decimal(usage.completion_tokens) * 27) / 1_000_000
    assert response.cost.cost == expected.quantize(Decimal("1E-10"))
    assert response.cost.price_tier == "peak"
    assert fallbacks("deepseek/deepseek-flash", "deepseek/deepseek-v4-pro") == before + 1


async def test_a_streamed_call_falls_back_too(stub: DeepSeekStub) -> None:
    stub.enqueue(busy(503), busy(503), StubReply(content="streamed by pro"))
    pieces: list[str] = []

    async def on_delta(text: str) -> bool:
        pieces.append(text)
        return True

    response = await client(stub).complete_streaming(HELLO, on_delta)
    assert ("".join(pieces), response.model) == ("streamed by pro", "deepseek/deepseek-v4-pro")


async def test_when_the_whole_chain_refuses_the_call_is_unavailable(stub: DeepSeekStub) -> None:
    stub.enqueue(busy(429), busy(500), busy(500))
    with pytest.raises(LLMUnavailableError) as caught:
        await client(stub, retries=0).complete(HELLO)
    assert (caught.value.code, caught.value.status_code) == ("llm_unavailable", 503)
    assert caught.value.provider_message.startswith(
        "deepseek/deepseek-flash: llm_rate_limited; fallbacks (deepseek/deepseek-v4-pro): llm_server_error"
    )
    assert [r.body["model"] for r in stub.requests] == ["deepseek-flash", "deepseek-v4-pro"]


PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(16)).decode()
LOOK = LLMRequest(
    messages=[WireMessage(role="user", content="what is this?", images=[PNG])],
    model="deepseek/deepseek-flash",
    thinking=False,
)


async def test_a_call_with_an_image_falls_back_only_to_a_model_that_sees_images(stub: DeepSeekStub) -> None:
    stub.enqueue(busy(503), busy(503))
    with pytest.raises(LLMServerError):
        await client(stub).complete(LOOK)
    assert [r.body["model"] for r in stub.requests] == ["deepseek-flash", "deepseek-flash"]

    seeing = ModelCatalog(
        ModelsFile(
            fallbacks={
                "deepseek/deepseek-flash": [
                    FallbackTarget(model="deepseek/deepseek-v4-pro"),
                    FallbackTarget(model="deepseek/deepseek-v4-flash"),
                ]
            }
        )
    )
    stub.enqueue(busy(503), busy(503), StubReply(content="a tiny PNG", reasoning_content=None))
    response = await client(stub, catalog=seeing).complete(LOOK)
    assert (response.model, response.content) == ("deepseek/deepseek-v4-flash", "a tiny PNG")
    assert [r.body["model"] for r in stub.requests[2:]] == ["deepseek-flash", "deepseek-flash", "deepseek-v4-flash"]
    # Without the image the same chain starts with deepseek-v4-pro.
    stub.enqueue(busy(503), busy(503), StubReply(content="text", reasoning_content=None))
    assert (await client(stub, catalog=seeing).complete(HELLO)).model == "deepseek/deepseek-v4-pro"


async def test_without_a_chain_the_last_error_is_raised_as_it_is(stub: DeepSeekStub) -> None:
    stub.enqueue(busy(500), busy(500))
    with pytest.raises(LLMServerError):
        await client(stub, catalog=ModelCatalog(ModelsFile())).complete(HELLO)
    assert len(stub.requests) == 2


async def test_a_refusal_is_not_billed_but_a_stream_cut_midway_is_estimated(stub: DeepSeekStub) -> None:
    cut = StubFault(kind="disconnect", after_chunks=4, content="one two three four five six seven", chunk_chars=4)
    stub.enqueue(busy(503), cut, StubReply(content="whole answer"))
    reports: list[UnfinishedCall] = []
    streamed: list[str] = []

    async def on_delta(text: str) -> bool:
        streamed.append(text)
        return False  # kept to ourselves (like the JSON around an answer): the call may be retried

    response = await client(stub, retries=3).complete_streaming(HELLO, on_delta, on_unfinished=reports.append)
    assert response.content == "whole answer"
    (report,) = reports
    assert (report.model, report.reason) == ("deepseek/deepseek-flash", "llm_stream_interrupted")
    # Prompt and output counted with the model's tokenizer: the output as far as it streamed before the cut.
    cut_text = "".join(streamed).removesuffix("whole answer")
    litellm = load_litellm()
    assert report.cost.input_tokens == litellm.token_counter(model="deepseek/deepseek-flash", messages=[HELLO_WIRE])
    assert report.cost.output_tokens == litellm.token_counter(model="deepseek/deepseek-flash", text=cut_text) > 0
    # Priced as if no prompt token had hit the cache: an estimate errs on the side of the budget.
    expected = (Decimal(report.cost.input_tokens) * 2 + Decimal(report.cost.output_tokens) * 8) / 1_000_000
    assert (report.cost.cost, report.cost.price_tier) == (expected.quantize(Decimal("1E-10")), "peak")


async def test_the_estimate_of_a_cut_call_counts_its_tools(stub: DeepSeekStub) -> None:
    """The provider bills the tools array as prompt (rendered into its system turn): an estimate without it was
    under the provider's count, though the docs call it an upper bound."""
    calculator = ToolSchema(
        function=FunctionSpec(
            name="calculator",
            description="Evaluate an arithmetic expression exactly.",
            parameters={"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
        )
    )
    with_tools = HELLO.model_copy(update={"tools": [calculator], "tool_choice": "none"})
    stub.enqueue(StubFault(kind="disconnect", after_chunks=2, content="one two three", chunk_chars=4))
    reports: list[UnfinishedCall] = []

    async def on_delta(text: str) -> bool:
        return False

    with pytest.raises(LLMStreamInterruptedError):
        await client(stub, retries=0, catalog=ModelCatalog(ModelsFile())).complete_streaming(
            with_tools, on_delta, on_unfinished=reports.append
        )
    (report,) = reports
    litellm = load_litellm()
    tools = [calculator.model_dump(exclude_none=True)]
    counted = litellm.token_counter(model="deepseek/deepseek-flash", messages=[HELLO_WIRE], tools=tools)
    assert report.cost.input_tokens == counted
    assert counted > litellm.token_counter(model="deepseek/deepseek-flash", messages=[HELLO_WIRE]) + 20


async def test_a_call_cancelled_while_streaming_is_estimated(stub: DeepSeekStub) -> None:
    hold = stub.hold_replies()
    stub.enqueue(StubReply(content="a long answer that will not finish", chunk_chars=2))
    reports: list[UnfinishedCall] = []
    streaming = asyncio.Event()

    async def on_delta(text: str) -> bool:
        streaming.set()
        return True

    call = asyncio.create_task(client(stub).complete_streaming(HELLO, on_delta, on_unfinished=reports.append))
    await hold.allow(3)
    async with asyncio.timeout(10):
        await streaming.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    (report,) = reports
    assert report.reason == "cancelled" and report.cost.input_tokens > 0 and report.cost.output_tokens > 0


async def test_half_a_json_body_is_retried_and_estimated(stub: DeepSeekStub) -> None:
    stub.enqueue(StubFault(kind="invalid_json"), StubReply(content="fine"))
    reports: list[UnfinishedCall] = []
    response = await client(stub).complete(HELLO, on_unfinished=reports.append)
    assert (response.content, len(stub.requests)) == ("fine", 2)
    assert [r.reason for r in reports] == ["llm_invalid_response"]
