"""Budgets as reservations (migrations/0009): a run holds, against the user's daily and monthly budgets, at least
what the model calls it made cost (as billed; a call in flight, or cut, at its worst case) plus the worst case of
the call it is about to make, so that concurrent runs (on any number of replicas) cannot together spend past a
budget.

A call's worst case is its input (the request's messages and tools, counted with the offline tokenizer) at the
cache-miss price plus its `max_tokens` of output, at the dearest price of its model's fallback chain, at the
dearer of the prices in force now and at the run's deadline (a run may cross into peak hours).

Admission reserves what the run is expected to need, in the statement that admits it (START_SQL): twice the
mean cost of the user's last 10 completed runs, or the dearest of them when it cost more; at least `floor` (one
call's least useful output) and at most one `chunk` (a call with a whole memory window, MEMORY_MAX_TOKENS, at
the dearest task's price and largest `max_tokens`), which is also what a user with no completed run reserves.
So the budget refuses a run once less than about two typical runs' cost is left, not once less than a chunk is.
Before each call, the hold grows by exactly what it misses, in one statement that the same trigger checks. When
the budget has less room than that, the hold takes the room and the call's `max_tokens` is bounded to fit in
it, if at least `_LEAST_OUTPUT` tokens (or the call's own `max_tokens`, when smaller) still fit; else, while the
user's other runs in progress hold money, it waits for them to give room back (up to `_ROOM_WAIT_SECONDS`), and
then the run ends with `budget_exceeded` before the call is sent. The hold never shrinks while the run runs (another run
could take the room back); it is settled when the run ends.

Why not the whole run's worst case up front: with the default tasks (18 calls with repairs, inputs growing to
60,000 tokens) it is 6.6 CNY at peak, more than the default daily budget, so every run would be refused.

What the estimate leaves out is the overspend that can remain: a transient failure's retried attempts (billed
for what they generated before the fault), and the tokenizer's error against the provider's count.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal

from agent_runtime.engine.billing.pricing import ModelPrice, PricingTable
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.tokens import token_counter_for
from agent_runtime.engine.errors import BudgetExceededError
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.engine.llm.models import LLMRequest
from agent_runtime.engine.runs.ledger.store import RunStore, StartedRun
from agent_runtime.settings import Settings

_PER_MILLION = Decimal(1_000_000)
# The fewest output tokens a call bounded by the budget's headroom is still sent with: about a short reply or a
# tool call. A call that cannot get that many is refused instead (the run ends `budget_exceeded`).
_LEAST_OUTPUT = 256
_GROW_ATTEMPTS = 3
# How long a run at the budget's edge waits for the user's other runs to give room back, and how often it looks.
_ROOM_WAIT_SECONDS = 10.0
_ROOM_POLL_SECONDS = 0.25


class RunReservation:
    """The prices and sizes a run's holds are computed from, for the whole process."""

    def __init__(
        self, settings: Settings, templates: FlowTemplates, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        """`clock`: when calls are priced (None: the wall clock; tests pin it)."""
        self._catalog = ModelCatalog.load(settings.models_file)
        self._pricing = PricingTable.load(settings.pricing_file, fallback_per_million=settings.unpriced_model_price_cny)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._run_seconds = settings.run_timeout_seconds
        tasks = templates.tasks()
        self._largest_output = max(task.max_tokens for task in tasks.values())
        self._models = sorted({templates.call_options(name, settings).model for name in tasks})
        self._window_tokens = settings.memory_max_tokens
        self._default_model = settings.effective_llm_model
        # Both budgets off (0: no limit): the trigger refuses nothing, so a call's worst case is not worth counting.
        self.budgeted = bool(settings.user_daily_budget_cny or settings.user_monthly_budget_cny)

    def chunk(self) -> Decimal:
        """The most a run is admitted holding (what a user with no completed run holds)."""
        at = self._clock()
        return max(self._worst(model, self._window_tokens, self._largest_output, at) for model in self._models)

    def floor(self) -> Decimal:
        """The least a run is admitted holding: room for one call's least useful output at the dearest price."""
        at = self._clock()
        return max(self._worst(model, 0, _LEAST_OUTPUT, at) for model in self._models)

    def call(self, request: LLMRequest) -> Decimal:
        """The most `request` can cost if sent now."""
        return self._call(request, self._clock())

    def least(self, request: LLMRequest) -> LLMRequest:
        """`request` with the fewest output tokens it is still sent with when the budget is short."""
        return request.model_copy(update={"max_tokens": min(request.max_tokens or self._largest_output, _LEAST_OUTPUT)})

    def bounded(self, request: LLMRequest, room: Decimal) -> LLMRequest:
        """`request` with its `max_tokens` lowered so that it cannot cost more than `room`, but not below `least`."""
        at = self._clock()
        wanted = request.max_tokens or self._largest_output
        silent = self._call(request.model_copy(update={"max_tokens": 1}), at)
        per_token = self._call(request.model_copy(update={"max_tokens": 2}), at) - silent
        if per_token <= 0:
            return request
        fits = int(((room - silent) / per_token).to_integral_value(rounding=ROUND_FLOOR)) + 1
        return request.model_copy(update={"max_tokens": max(min(wanted, fits), min(wanted, _LEAST_OUTPUT))})

    def sent(self, request: LLMRequest) -> Decimal:
        """What sending `request` costs at least: its prompt at its own model's cache-miss price now (what a lost
        run is charged for a call that never came back)."""
        model = request.model or self._default_model
        quote = self._pricing.quote(model, self._clock())
        if quote is None:
            return Decimal(0)
        return _input_tokens(model, request) * quote.price.input_cache_miss / _PER_MILLION

    def streamed(self, request: LLMRequest, text: str) -> Decimal:
        """What `text` streamed as `request`'s answer costs: its tokens at its model's output price now."""
        model = request.model or self._default_model
        quote = self._pricing.quote(model, self._clock())
        if quote is None or not text:
            return Decimal(0)
        tokens = token_counter_for(model).count_wire({"role": "assistant", "content": text})
        return tokens * quote.price.output / _PER_MILLION

    def _call(self, request: LLMRequest, at: datetime) -> Decimal:
        model = request.model or self._default_model
        return self._worst(model, _input_tokens(model, request), request.max_tokens or self._largest_output, at)

    def _worst(self, model: str, input_tokens: int, output_tokens: int, at: datetime) -> Decimal:
        price = self._dearest((model, *(target.model for target in self._catalog.chain(model))), at)
        if price is None:
            return Decimal(0)  # an unpriced model's calls are recorded unpriced, never guessed
        return (input_tokens * price.input_cache_miss + output_tokens * price.output) / _PER_MILLION

    def _dearest(self, models: tuple[str, ...], at: datetime) -> ModelPrice | None:
        until = at + timedelta(seconds=self._run_seconds)
        quotes = [q for m in models for moment in (at, until) if (q := self._pricing.quote(m, moment)) is not None]
        if not quotes:
            return None
        return ModelPrice(
            input_cache_hit=max(q.price.input_cache_hit for q in quotes),
            input_cache_miss=max(q.price.input_cache_miss for q in quotes),
            output=max(q.price.output for q in quotes),
        )


def _input_tokens(model: str, request: LLMRequest) -> int:
    """The request's messages and tools, counted with the offline tokenizer of `model`."""
    counter = token_counter_for(model)
    wire = [m.model_dump(exclude_none=True) for m in request.messages]
    if request.tools:
        wire.append({"role": "system", "content": json.dumps([t.model_dump() for t in request.tools])})
    return sum(counter.count_wire(m) for m in wire)


class RunHold:
    """One run's hold: what its calls cost or may cost, and what the database holds for it."""

    def __init__(self, store: RunStore, reservation: RunReservation, ctx: RequestContext, run: StartedRun) -> None:
        self._store = store
        self._reservation = reservation
        self._ctx = ctx
        self._session_id = run.session.id
        self._run_id = run.run_id
        self.held = run.reserved_cny
        self.spent = Decimal(0)
        # The worst cases of the calls sent and not come back, by the request's identity (the caller keeps it).
        self._open: dict[int, Decimal] = {}
        # Their prompts at their model's cache-miss price, and what their answers streamed so far: what they cost
        # the run at least.
        self._open_sent: dict[int, Decimal] = {}
        self._open_streamed: dict[int, tuple[LLMRequest, list[str]]] = {}

    @property
    def sent(self) -> Decimal:
        """The estimate of what the run's calls cost so far: those that came back as billed, the others' prompts
        and the output they streamed. The lease renewal stores it; a lost run is charged it (at most its hold, less
        what it stored)."""
        streamed = (
            self._reservation.streamed(request, "".join(texts)) for request, texts in self._open_streamed.values()
        )
        return self.spent + sum(self._open_sent.values(), Decimal(0)) + sum(streamed, Decimal(0))

    @property
    def needed(self) -> Decimal:
        """What the calls that came back cost and the calls in flight may cost."""
        return self.spent + sum(self._open.values(), Decimal(0))

    async def __call__(self, request: LLMRequest) -> LLMRequest:
        """Before `request` is sent: grow the hold by what it misses for the call, and return the request to send,
        its `max_tokens` bounded when the budget has room for less (raises BudgetExceededError when it has no room
        for a useful call; the call is then not made). Without budgets nothing is held, but the estimate of what
        was sent is kept all the same: a run whose process dies is charged it once (engine/runs/takeover/)."""
        worst = self._reservation.call(request)
        missing = self.needed + worst - self.held
        if missing > 0 and self._reservation.budgeted:
            # The least the hold must grow by: what it misses for the call with its fewest output tokens.
            at_least = max(missing - worst + self._reservation.call(self._reservation.least(request)), Decimal(0))
            self.held = await self._grow(missing, at_least)
            room = self.held - self.needed
            if room < worst:
                request = self._reservation.bounded(request, room)
                worst = self._reservation.call(request)
        self._open[id(request)] = worst
        self._open_sent[id(request)] = self._reservation.sent(request)
        self._open_streamed[id(request)] = (request, [])
        return request

    def streamed(self, request: LLMRequest, text: str) -> None:
        open_call = self._open_streamed.get(id(request))
        if open_call is not None:
            open_call[1].append(text)

    def ended(self, request: LLMRequest, cost: Decimal) -> None:
        """`request` came back, billed `cost`: the run needs that from here on, not its worst case."""
        self._open_sent.pop(id(request), None)
        self._open_streamed.pop(id(request), None)
        if self._open.pop(id(request), None) is not None:
            self.spent += cost

    async def _grow(self, missing: Decimal, at_least: Decimal) -> Decimal:
        # The room is read before the trigger takes the user's gate, and the trigger decides: under concurrent runs of
        # the user's, another run can take it meanwhile. Then again, against the room as it is now; and a call
        # that fits in the hold as it is with fewer output tokens (`at_least` 0) goes out with them.
        for attempt in range(_GROW_ATTEMPTS):
            try:
                return await self._store.grow_hold(
                    self._ctx, self._session_id, self._run_id, missing, at_least=at_least
                )
            except BudgetExceededError as exc:
                if at_least >= missing or (at_least > 0 and attempt == _GROW_ATTEMPTS - 1):
                    return await self._grow_once_room_frees(missing, at_least, exc)
        return self.held

    async def _grow_once_room_frees(self, missing: Decimal, at_least: Decimal, refused: BudgetExceededError) -> Decimal:
        """The budget has no room now, but the user's other runs in progress may: each one that ends gives back the
        part of its hold it did not spend (at a budget's edge, most of it). Wait for that, up to
        _ROOM_WAIT_SECONDS, before the run ends `budget_exceeded` (it used to at once: of runs started together at
        the edge, some failed while their budget ended with room to spare, tests/test_budget_edge.py)."""
        deadline = time.monotonic() + _ROOM_WAIT_SECONDS
        while time.monotonic() < deadline and await self._store.others_hold(self._ctx, self._session_id) > 0:
            await asyncio.sleep(_ROOM_POLL_SECONDS)
            try:
                return await self._store.grow_hold(
                    self._ctx, self._session_id, self._run_id, missing, at_least=at_least
                )
            except BudgetExceededError as exc:
                refused = exc
        raise refused
