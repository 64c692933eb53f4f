"""A plain 400 from the provider is a typed bad-request error and is never retried."""

import pytest
from tests.stubs.deepseek_stub import DeepSeekStub, StubFault

from agent_runtime.engine.llm import LLMClient, LLMRequest, WireMessage
from agent_runtime.engine.llm.errors import LLMBadRequestError
from agent_runtime.settings import Settings


async def test_plain_400_not_retried(tmp_path) -> None:
    async with DeepSeekStub() as stub:
        stub.enqueue(StubFault(kind="status", status=400, message="bad"))
        s = Settings(
            _env_file=None,
            llm_model="deepseek/deepseek-flash",
            llm_api_base=stub.base_url,
            deepseek_api_key=stub.api_key,
            llm_retry_base_seconds=0,
        )
        with pytest.raises(LLMBadRequestError):
            await LLMClient(s).complete(LLMRequest(messages=[WireMessage(role="user", content="hi")]))
        assert len(stub.requests) == 1
