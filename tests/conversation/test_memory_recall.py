"""What the model is shown of a long conversation with the shipped memory settings, through the run's own window
(`run_history`: the session's rows in PostgreSQL, the summary call through LLMClient to the DeepSeek stub, which
summarises extractively like the demo model): past the window's limit every call still has the last 3 exchanges
verbatim after the conversation's opening (pinned by the first cut), and a fact the user stated after the opening
still reaches the model at turn 60, carried from cut to cut."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from itertools import pairwise
from uuid import UUID, uuid4

import pytest
from pydantic import SecretStr
from tests.conftest import User
from tests.stubs.deepseek_stub import DeepSeekStub, echo_responder
from tests.stubs.summaries import summarising

from agent_runtime.engine.conversation import AssistantMessage, ChatMessage, UserMessage
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.conversation.run_memory import run_history
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.conversation.summarizer import SUMMARY_STAGE, SummaryCall
from agent_runtime.engine.conversation.summary import SUMMARY_ID_PREFIX
from agent_runtime.engine.flow.template_files import load_flow_templates
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.runtime import RuntimeEngine
from agent_runtime.engine.sessions.models import SessionCreate
from agent_runtime.resources import default_config_dir
from agent_runtime.settings import Settings

API_KEY = "sk-recall"
SYSTEM = "You are a helpful assistant."
# ~420 characters a question, as in issue 31's report, and a long answer: the shipped 8,000-token window is full
# after about 20 turns, so 60 turns cut it more than once.
ANSWER = (
    "Here is a careful answer with several practical steps. Start small, keep notes of what happened each time, "
    "and change one thing at a time so you can tell what helped. Ask someone with experience when you get stuck, "
    "and do not buy expensive gear before you know you will keep going. Most people improve quickly at first and "
    "then reach a plateau; steady practice is what gets you past it, so plan regular short sessions. "
) * 3


# Stated after the opening (the first cut pins turns 1-7 of this conversation within MEMORY_HEAD_TOKENS).
FACT_TURN = 12


def question(turn: int) -> str:
    if turn == FACT_TURN:
        return f"Turn {turn}: my sister is called Alma and she lives in Tromsø. What should I pack for a visit?"
    return (
        f"Turn {turn}: I am curious about a new hobby this week. Could you explain the first steps, the most common "
        "mistakes beginners make, what it usually costs to start, and how long it takes to see progress? "
        "And give me two practical tips for staying motivated over the first months."
    )


@pytest.fixture
async def stub() -> AsyncIterator[DeepSeekStub]:
    async with DeepSeekStub(api_key=API_KEY, responder=summarising(echo_responder)) as server:
        yield server


class Conversation:
    """One session, turn by turn as a run reads it: the user's message stored, the window read, the answer stored."""

    def __init__(self, engine: RuntimeEngine, settings: Settings, user: User, session_id: UUID) -> None:
        self._settings = settings
        self._engine = engine
        self._user = user
        self._session_id = session_id
        self._repository = PostgresChatMemoryRepository(engine.pool, user.ctx)
        self._llm = LLMClient(settings)
        self._templates: FlowTemplates = load_flow_templates(default_config_dir() / "crewai")
        self.summary_rows: list[NewMessage] = []

    async def turn(self, text: str) -> list[ChatMessage]:
        """The history the run's stages get for this turn (after their system prompt); then the answer is stored."""
        await self._repository.append(str(self._session_id), [UserMessage(content=text)])
        window = await run_history(
            settings=self._settings,
            pool=self._engine.pool,
            ctx=self._user.ctx,
            session_id=self._session_id,
            run_id=str(uuid4()),
            current_message_id=None,
            system_prompt=SYSTEM,
            llm=self._llm,
            task=self._templates,
            record=self.summary_rows.append,
            call=SummaryCall(options=self._templates.call_options(SUMMARY_STAGE, self._settings)),
        )
        await self._repository.append(str(self._session_id), [AssistantMessage(content=f"{ANSWER}({len(text)})")])
        return window


async def conversation(engine: RuntimeEngine, settings: Settings, stub: DeepSeekStub, user: User) -> Conversation:
    shipped = settings.model_copy(
        update={
            "llm_model": "deepseek/deepseek-flash",
            "llm_api_base": stub.base_url,
            "deepseek_api_key": SecretStr(API_KEY),
            "llm_max_retries": 0,
        }
    )
    session = await engine.sessions.create(user.ctx, SessionCreate(title="recall"))
    return Conversation(engine, shipped, user, session.id)


def exchanges(window: list[ChatMessage]) -> list[tuple[str, str]]:
    """The (user, assistant) exchanges of a window, oldest first; the summary is not one."""
    pairs = []
    for message, answer in pairwise(window):
        if isinstance(message, UserMessage) and isinstance(answer, AssistantMessage):
            pairs.append((message.content.rsplit("\n\n", 1)[-1], answer.content))
    return pairs


async def test_every_call_past_the_limit_has_the_last_three_exchanges_verbatim(
    engine: RuntimeEngine, settings: Settings, stub: DeepSeekStub, user: User
) -> None:
    chat = await conversation(engine, settings, stub, user)
    said: list[tuple[str, str]] = []
    shown_counts = []
    for turn in range(1, 46):
        text = question(turn)
        window = await chat.turn(text)
        assert window[-1].content.endswith(text), "the turn being answered comes last"
        shown = exchanges(window[:-1])
        assert shown[-3:] == said[-3:], f"turn {turn}: the last 3 exchanges verbatim"
        assert shown[:1] == said[:1], f"turn {turn}: the opening verbatim"
        shown_counts.append(len(shown))
        said.append((text, f"{ANSWER}({len(text)})"))
    # The window was full and cut (not merely long enough): it shrank back to the opening and the 3 exchanges.
    assert max(shown_counts) > 10 and any(later < earlier for earlier, later in pairwise(shown_counts))


async def test_a_fact_from_turn_twelve_reaches_the_model_at_turn_sixty_through_the_carried_summary(
    engine: RuntimeEngine, settings: Settings, stub: DeepSeekStub, user: User
) -> None:
    chat = await conversation(engine, settings, stub, user)
    for turn in range(1, 60):
        await chat.turn(question(turn))
    window = await chat.turn(question(60))
    opening = exchanges(window)[0][0]
    assert opening == question(1), "the opening pinned verbatim"
    summaries_shown = [m for m in window if m.id.startswith(SUMMARY_ID_PREFIX)]
    assert len(summaries_shown) == 1
    assert "my sister is called Alma and she lives in Tromsø." in summaries_shown[0].content
    assert [m for m in window if "Alma" in m.content] == summaries_shown, "turn 12 is no longer shown verbatim"
    # Cut more than once, each summary built on the one before: the second call was given the first summary.
    summaries = [json.loads(row.content)["summary"] for row in chat.summary_rows]
    assert len(summaries) >= 2 and all("Alma" in s for s in summaries)
    assert any(summaries[0] in str(m["content"]) for m in stub.requests[1].messages)
