"""Every call names its stage's contract, the intent call too (issue 31): against a model that answers the schema the
request's last instruction names, and otherwise the one nearest to the end of the system prompt, the shipped prompts
need no repair turn on a direct answer, a tool turn or a short-circuit after it."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

from tests.conftest import User
from tests.runs.conftest import Harness, stage_of, types
from tests.stubs.nearest_contract import answered_contract, nearest_contract_responder, repair_requests


async def test_the_shipped_prompts_need_no_repair_from_a_model_that_answers_the_named_contract(
    h: Harness, make_user: Callable[[], User]
) -> None:
    h.stub.responder = nearest_contract_responder
    user = make_user()
    sid = await h.new_session(user)

    answers = []
    for message in ("hello there", "what is 17 + 25?", "thanks!"):
        result = await h.run(user, sid, message)
        assert types(result.events)[-1] == "RUN_FINISHED", result.body
        answers.append("".join(e["delta"] for e in result.of_type("TEXT_MESSAGE_CONTENT")))

    assert repair_requests(h.stub.requests) == []
    stages = [stage_of(r) for r in h.stub.requests]
    assert stages == ["intent", "intent", "execution", "execution", "organization", "intent"]
    assert [answered_contract(r) for r in h.stub.requests] == [
        "IntentResult",
        "IntentResult",
        "ExecutionResult",
        "ExecutionResult",
        "OrganizationResult",
        "IntentResult",
    ]
    # Each turn's first call repeats the previous turn's first call as it was sent, its contract line included: the
    # provider's cached prefix survives the line.
    intents = [r.messages for r, stage in zip(h.stub.requests, stages, strict=True) if stage == "intent"]
    for before, after in pairwise(intents):
        assert after[: len(before)] == before
    # The arithmetic went through the calculator, and the reply reports its result.
    tool_turns = [m for m in h.stub.requests[3].messages if m.get("role") == "tool"]
    assert [m["name"] for m in tool_turns] == ["calculator"] and '"result":"42"' in tool_turns[0]["content"]
    assert "42" in answers[1]
    assert 'You said: "hello there"' in answers[0] and 'You said: "thanks!"' in answers[2]
