"""Each reach into LiteLLM's private API (src/agent_runtime/engine/llm/PATCHES.md) is still where we reach.

What we replace or filter must still be what LiteLLM calls or logs: a rename upstream would make the patch a
silent no-op. Behaviour is pinned by the tests the table names.
"""

from __future__ import annotations

import inspect

from agent_runtime.engine.llm import litellm_import
from agent_runtime.engine.llm.litellm_import import load_litellm

litellm = load_litellm()

from litellm._logging import verbose_logger  # noqa: E402
from litellm.litellm_core_utils import litellm_logging  # noqa: E402
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper  # noqa: E402
from litellm.llms.deepseek.chat import transformation as deepseek_chat  # noqa: E402


def test_litellms_own_pricing_is_replaced_where_its_logging_calls_it() -> None:
    assert litellm_logging.Logging.response_cost_calculator is litellm_import._no_response_cost
    assert "self.response_cost_calculator(" in inspect.getsource(litellm_logging.Logging)


def test_the_reasoning_placeholder_warning_is_filtered_on_the_logger_that_writes_it() -> None:
    assert litellm_import._PLACEHOLDER_FILTER in verbose_logger.filters
    source = inspect.getsource(deepseek_chat)
    assert "is missing `reasoning_content`" in source
    assert "verbose_logger" in source


def test_the_stream_wrapper_keeps_the_provider_iterator_we_read() -> None:
    assert "self.completion_stream = completion_stream" in inspect.getsource(CustomStreamWrapper.__init__)


def test_the_tokenizer_kind_we_name_is_litellms() -> None:
    assert "huggingface_tokenizer_kind" in vars(litellm.utils)
    assert litellm.utils.huggingface_tokenizer_kind("deepseek/deepseek-flash") is not None


def test_acompletion_builds_the_request_with_completion_on_the_loops_default_executor() -> None:
    # Row 8: engine/llm/inline_requests.py recognises this job by name and its `acompletion=True` keyword.
    source = inspect.getsource(litellm.main.acompletion)
    assert "partial(completion, **completion_kwargs, **kwargs)" in source
    assert "await loop.run_in_executor(None, func_with_context)" in source
    assert (litellm.main.completion.__module__, litellm.main.completion.__qualname__) == ("litellm.main", "completion")


def test_every_provider_gets_its_encoding_from_the_attribute_we_set() -> None:
    # Row 9: `_get_encoding` reads `litellm.main.encoding`, which is ours.
    assert "litellm_main.encoding" in inspect.getsource(litellm.main._load_module_encoding)
    assert "_load_module_encoding()" in inspect.getsource(litellm.main._get_encoding)
    assert isinstance(vars(litellm.main)["encoding"], litellm_import.EncodingOnFirstUse)
