"""The per-run `call_model` port the agent's stages call (engine/flow/turn.py): one LLM call, streamed events, recorded
rows.

Built once per run, so everything it touches (events queue, recorder, text extractors) belongs to that
run: concurrent runs share only the process-wide `LLMClient`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from uuid import uuid4

from agent_runtime.engine.conversation.chat_messages import ChatMessage, UserMessage
from agent_runtime.engine.conversation.metadata import ToolCallSpec
from agent_runtime.engine.flow.model_call import (
    ModelCall,
    ModelReply,
    StageToolResult,
    ToolCallsPending,
)
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.engine.llm.models import BeforeSend, CallOptions, LLMRequest, ToolSchema, UnfinishedCall, WireMessage
from agent_runtime.engine.llm.vision import with_images
from agent_runtime.engine.runs.events.emitter import RunEvents
from agent_runtime.engine.runs.events.state import RunStateTracker
from agent_runtime.engine.runs.gateway.partial_text import AssistantTextExtractor
from agent_runtime.engine.runs.gateway.recorder import RunRecorder, StageOutput, ToolResultRecord
from agent_runtime.observability.runs import current_run


class _AnswerMessage:
    """The answer's AG-UI text message: what was streamed under its id is always a prefix of the answer.

    Text is streamed before its stage output is validated, so a rejected attempt (or an intent stage that
    is retried onto the other route) may have streamed text that the final answer does not continue. AG-UI
    cannot retract text, so that message is ended as it is and the answer continues in a new message (new
    id): the message whose id the stored reply carries holds exactly the stored reply.
    """

    def __init__(self, events: RunEvents, message_id: str) -> None:
        self._events = events
        self.message_id = message_id
        self._streamed = ""
        self._ended = False

    def show(self, text: str) -> None:
        """Make the message read `text`: extend it, or end it and start a new one with all of `text`."""
        if text == self._streamed:
            return
        if text.startswith(self._streamed) and not (self._ended and self._streamed):
            delta = text[len(self._streamed) :]
        else:
            self._events.text_end()
            self.message_id = str(uuid4())
            delta = text
        self._ended = False
        self._streamed = text
        self._events.text_content(self.message_id, delta)

    def ended(self) -> None:
        """The events closed the open text message (e.g. before a tool call)."""
        self._ended = True

    @property
    def streamed(self) -> str:
        return self._streamed


class RunGateway:
    """`options`: each stage's model, thinking and effort (tasks.yaml). `tools`: the run's tools (the execution
    stage's server tools, then the client's frontend tools), sent with every call of every stage, in the same order:
    DeepSeek caches prompt prefixes and renders tools near the start of the prompt, so a call without them (or
    with others) would share no more than the system prompt with the calls around it. Only the execution stage may
    call them (`tool_choice` "none" elsewhere, and in its repair calls). `stops_at`: tool names the run never runs
    on the model's word alone (approval and frontend tools); a reply calling one ends the run waiting
    (`ToolCallsPending`). `end_user`: the opaque user id every call carries (engine/llm/end_user.py). `hold`: awaited
    before each call is sent, it grows the run's budget hold (engine/runs/ledger/reservation.py), bounds the call's
    `max_tokens` or raises, and hears what each call cost."""

    def __init__(
        self,
        llm: LLMClient,
        events: RunEvents,
        recorder: RunRecorder,
        *,
        answer_message_id: str,
        options: Mapping[str, CallOptions],
        tools: Sequence[ToolSchema] = (),
        end_user: str | None = None,
        stops_at: Collection[str] = (),
        state: RunStateTracker | None = None,
        hold: BeforeSend | None = None,
    ) -> None:
        self._llm = llm
        self._events = events
        self._recorder = recorder
        self._options = options
        self._tools = list(tools)
        self._end_user = end_user
        self._stops_at = frozenset(stops_at)
        self._state = state
        self.hold = hold
        self._answer = _AnswerMessage(events, answer_message_id)
        # Built in the run's task: the observation that times its first token.
        self._run = current_run()
        self._stage: str | None = None
        # The tasks of the model calls in flight: a stopped run waits for them to record what they were billed.
        self._calls: set[asyncio.Task[object]] = set()
        # The run's images by id, and the models that take them (show_images, once the window is read).
        self.images: dict[str, str] = {}
        self.image_models: frozenset[str] = frozenset()

    @property
    def tools(self) -> list[ToolSchema]:
        """The run's tools, as every call of the run carries them (the memory summary's too)."""
        return self._tools

    @property
    def end_user(self) -> str | None:
        return self._end_user

    @property
    def streamed_answer(self) -> str:
        """The answer's text as streamed so far (what the client saw under `answer_message_id`)."""
        return self._answer.streamed

    @property
    def answer_message_id(self) -> str:
        """The id of the message that holds the answer (read it once the answer is streamed)."""
        return self._answer.message_id

    def finish_stage(self) -> None:
        if self._stage is not None:
            self._events.step_finished(self._stage)
            self._stage = None

    def enter_stage(self, stage: str, route: str | None = None) -> None:
        """Open `stage` before its first model call (a resumed turn's tool results belong to its stage); `route`: the
        turn's route, when the stage implies one."""
        if stage != self._stage:
            self.finish_stage()
            self._stage = stage
            self._events.step_started(stage)
            if self._state is not None:
                self._state.update(stage=stage, **({"route": route} if route is not None else {}))

    def show_images(self, window: Sequence[ChatMessage], accepted: frozenset[str]) -> None:
        """The images the run's calls may carry: those of the window's user messages (the run's own session, read
        owner-scoped), by id, and the models that take them."""
        self.images = {i.id: i.wire_url() for m in window if isinstance(m, UserMessage) for i in m.images}
        self.image_models = accepted

    def request(self, call: ModelCall) -> LLMRequest:
        """The LLM request for one of the stages' model calls (public for the tests of the prompt layout)."""
        options = self._options[call.stage]
        # Only the execution stage offers tools; a repair call of that stage may not use them either.
        may_call_tools = bool(call.tools) and call.allow_tools
        tools = self._tools or None
        return LLMRequest(
            model=options.model,
            messages=with_images(
                [WireMessage.model_validate(m) for m in call.messages],
                self.images,
                model=options.model,
                accepted=self.image_models,
            ),
            tools=tools,
            tool_choice=None if tools is None else "auto" if may_call_tools else "none",
            # Not next to tools the model may call: DeepSeek does not document the pair, and JSON mode can keep the
            # model from calling a tool. With tool_choice "none" it cannot call one anyway.
            json_mode=call.json_mode and not may_call_tools,
            max_tokens=call.max_tokens,
            stream=call.streams_answer,
            thinking=options.thinking,
            reasoning_effort=options.reasoning_effort,
            end_user=self._end_user,
        )

    async def settled(self, seconds: float) -> None:
        """Until the model calls in flight have ended (a stopped run cancels them, and each cut call records its
        estimated usage as it ends), at most `seconds`: the run's end writes what they recorded."""
        calls = [task for task in self._calls if task is not asyncio.current_task()]
        if calls:
            await asyncio.wait(calls, timeout=seconds)

    async def __call__(self, call: ModelCall) -> ModelReply:
        task = asyncio.current_task()
        if task is not None:
            self._calls.add(task)
        try:
            return await self._call(call)
        finally:
            self._calls.discard(task)

    def _streamed(self, request: LLMRequest, text: str) -> None:
        if self.hold is not None:
            self.hold.streamed(request, text)

    async def _call(self, call: ModelCall) -> ModelReply:
        await self._recorder.flush_tool_results()
        self.enter_stage(call.stage, call.route)
        request = self.request(call)
        if self.hold is not None:
            request = await self.hold(request)

        def unfinished(cut: UnfinishedCall) -> None:
            self._recorder.unfinished(call.stage, cut)

        reasoning_id = str(uuid4())
        if request.stream:
            # One extractor per attempt (a retried call starts a new one): its text is this attempt's
            # assistant_text so far.
            route = call.answer_route
            extractor = AssistantTextExtractor(required_route=route)

            def on_reasoning(text: str) -> None:
                self._streamed(request, text)
                self._events.reasoning_content(reasoning_id, text)

            async def on_delta(text: str) -> bool:
                self._streamed(request, text)
                # Delivered only once answer text went out as an event: the JSON around it never does.
                if not extractor.feed(text):
                    return False
                self._answer.show(extractor.emitted)
                if self._run is not None:
                    self._run.first_token()
                return True

            def on_retry() -> None:
                nonlocal extractor, reasoning_id
                extractor = AssistantTextExtractor(required_route=route)
                self._events.reasoning_end()
                reasoning_id = str(uuid4())

            response = await self._llm.complete_streaming(
                request, on_delta, on_retry, on_reasoning, on_unfinished=unfinished
            )
        else:
            response = await self._llm.complete(request, on_unfinished=unfinished)
            if response.reasoning:
                self._events.reasoning_content(reasoning_id, response.reasoning)
        if self.hold is not None:
            self.hold.ended(request, response.cost.cost)
        self._events.reasoning_end()
        self._recorder.reasoning(call.stage, response, reasoning_id)
        calls = [ToolCallSpec(id=c.id, name=c.name, arguments=c.arguments) for c in response.tool_calls]
        if calls and request.tool_choice == "auto":
            row = await self._recorder.tool_calls(call.stage, response, calls)
            self._answer.ended()
            for spec in calls:
                self._events.tool_call(
                    tool_call_id=spec.id, name=spec.name, arguments=spec.arguments, parent_message_id=row.message_id
                )
            if any(spec.name in self._stops_at for spec in calls):
                raise ToolCallsPending(call.stage, calls)
            return ModelReply(
                content=response.content or None,
                tool_calls=calls,
                reasoning=response.reasoning,
                finish_reason=response.finish_reason,
            )
        # Tool calls where none were allowed are not run, stored or shown: the adapter asks for the contract again.
        self._recorder.stage_output(StageOutput(stage=call.stage, attempt=call.attempt, response=response))
        return ModelReply(
            content=response.content,
            tool_calls=calls,
            reasoning=response.reasoning,
            finish_reason=response.finish_reason,
        )

    def sink(self, event: StageToolResult) -> None:
        """Tool results the flow hands over (on the loop thread, in the model's call order) become events and queued
        rows (the tool calls are emitted above, right after the row that holds them is stored)."""
        record = ToolResultRecord(
            message_id=str(uuid4()),
            tool_call_id=event.call_id,
            name=event.name,
            content=event.content,
            is_error=event.is_error,
            cancelled=event.cancelled,
        )
        self._events.tool_result(message_id=record.message_id, tool_call_id=record.tool_call_id, content=record.content)
        self._recorder.tool_result(record)

    def stream_rest_of_answer(self, text: str) -> None:
        """Emit whatever of the final answer was not streamed (e.g. a provider that did not stream)."""
        self._answer.show(text)
        self._events.text_end()
        if self._run is not None:
            self._run.first_token()
