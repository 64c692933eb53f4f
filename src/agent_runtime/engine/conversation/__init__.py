"""A conversation: its stored message rows, and the chat memory over them (what the agent remembers of it, and
how much of it reaches the model).

The rows: `stored_messages` (`NewMessage` in, `StoredMessage` out) with typed `metadata`, their SQL
(`repository`) and `store` (`MessageStore`, appends numbered from the session's counters).

Three layers, as in Spring AI, each replaceable on its own:
- storage: `ChatMemoryRepository` (in memory here; PostgreSQL over `agent_chat_messages`), append-only;
- policy: `WindowPolicy` + `apply_window`, a pure function from a conversation to the window;
- injection: `build_model_input`, history as typed messages between the system message and the prompt.
`MessageWindowChatMemory` ties storage and policy together behind the `ChatMemory` protocol. Messages are
our own Pydantic models (`ChatMessage`, discriminated on `role`); `convert` is the one place that maps them
to and from the LLM wire format and AG-UI.

What we do better than Spring AI:
- The window is budgeted in tokens (LiteLLM's offline tokenizer for the model) and in messages, whichever
  binds first; Spring AI counts messages only.
- An assistant tool call and its results are kept or evicted together, and a window never starts with an
  orphan tool result or reply; Spring AI only aligns the cut to a user message.
- Writes append; nothing is read, trimmed and rewritten. Spring AI rewrites the whole conversation on every
  add, which loses concurrent writers' messages and amplifies writes; here concurrent adds lose nothing.
- The window is read from a bounded tail (newest N messages, the newest system message, and the newest
  user message), so reading cost does not grow with the conversation.
- Tool calls and results are stored and converted exactly (ids, names, arguments); Spring AI's JDBC store
  silently drops them. Anything a converter cannot represent raises `UnrepresentableMessageError`.
- When the newest turn alone exceeds the budget, its user message and the newest whole parts of the turn
  are kept rather than returning nothing.
- An identical system message re-added is not stored twice; a different one replaces the old one in the
  window, and stored rows keep their own `created_at` (never rewritten, so no timestamp tricks).
- The window is cache-aware (`plan_window`): cut in large steps to low-water marks (never below the newest
  `keep_turns` turns, so the last exchanges are always there verbatim) and then kept, so the
  model's input prefix stays byte-identical (and cached by the provider) for many turns; the start is stored
  at each cut (`WindowMark`), so every process computes the same window. With a `Summarizer`, what a cut
  drops is summarised and shown after the system message as data (`summary.py`).
"""

from agent_runtime.engine.conversation.advisor import build_model_input, with_memory
from agent_runtime.engine.conversation.chat_memory import ChatMemory, MemoryWindow, MessageWindowChatMemory, Summarizer
from agent_runtime.engine.conversation.chat_messages import (
    CHAT_MESSAGE_ADAPTER,
    AssistantMessage,
    ChatMessage,
    ChatMetadata,
    SystemMessage,
    ToolCallSpec,
    ToolMessage,
    UserMessage,
)
from agent_runtime.engine.conversation.convert import AguiMessage, from_agui, from_wire, to_agui, to_wire
from agent_runtime.engine.conversation.errors import (
    DuplicateMessageError,
    InvalidConversationIdError,
    UnrepresentableMessageError,
)
from agent_runtime.engine.conversation.memory_repository import (
    ChatMemoryRepository,
    InMemoryChatMemoryRepository,
    WindowMark,
    WindowRead,
    bounded_tail,
    validate_conversation_id,
)
from agent_runtime.engine.conversation.summary import SummaryRequest
from agent_runtime.engine.conversation.tokens import LiteLLMTokenCounter, TokenCounter, token_counter_for
from agent_runtime.engine.conversation.window import WindowPlan, WindowPolicy, WindowResult, apply_window, plan_window

__all__ = [
    "CHAT_MESSAGE_ADAPTER",
    "AguiMessage",
    "AssistantMessage",
    "ChatMemory",
    "ChatMemoryRepository",
    "ChatMessage",
    "ChatMetadata",
    "DuplicateMessageError",
    "InMemoryChatMemoryRepository",
    "InvalidConversationIdError",
    "LiteLLMTokenCounter",
    "MemoryWindow",
    "MessageWindowChatMemory",
    "Summarizer",
    "SummaryRequest",
    "SystemMessage",
    "TokenCounter",
    "ToolCallSpec",
    "ToolMessage",
    "UnrepresentableMessageError",
    "UserMessage",
    "WindowMark",
    "WindowPlan",
    "WindowPolicy",
    "WindowRead",
    "WindowResult",
    "apply_window",
    "bounded_tail",
    "build_model_input",
    "from_agui",
    "from_wire",
    "plan_window",
    "to_agui",
    "to_wire",
    "token_counter_for",
    "validate_conversation_id",
    "with_memory",
]
