"""Budgets as reservations (migrations/0009): a run holds, against the user's daily and monthly budgets, at least
the worst-case cost of every model call it has made or is about to make, so that concurrent runs (on any number
of replicas) cannot together spend past a budget.

A call's worst case is its input (the request's messages and tools, counted with the offline tokenizer) at the
cache-miss price plus its `max_tokens` of output, at the dearest price of its model's fallback chain, at the
dearer of the prices in force now and at the run's deadline (a run may cross into peak hours). The run is
admitted holding one `chunk` (a call with a whole memory window, MEMORY_MAX_TOKENS, at the dearest task's price
and largest `max_tokens`), in the statement that admits it; before a call its hold does not cover, the hold
grows by what is missing, at least a chunk, in one statement that the same trigger checks; a hold that does not
fit ends the run with `budget_exceeded` before the call is sent. The hold is settled when the run ends.

Why not the whole run's worst case up front: with the default tasks (18 calls with repairs, inputs growing to
60,000 tokens) it is 6.6 CNY at peak, more than the default daily budget, so every run would be refused.

What the estimate leaves out is the overspend that can remain: a transient failure's retried attempts (billed
for what they generated before the fault), and the tokenizer's error against the provider's count.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agent_runtime.engine.billing.pricing import ModelPrice, PricingTable
from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.tokens import token_counter_for
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.llm.catalog import ModelCatalog
from agent_runtime.engine.llm.models import LLMRequest
from agent_runtime.engine.runs.ledger.store import RunStore, StartedRun
from agent_runtime.settings import Settings

_PER_MILLION = Decimal(1_000_000)


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
        """What a run is admitted holding, and the least a hold grows by."""
        at = self._clock()
        return max(self._worst(model, self._window_tokens, self._largest_output, at) for model in self._models)

    def call(self, request: LLMRequest) -> Decimal:
        """The most `request` can cost if sent now."""
        model = request.model or self._default_model
        counter = token_counter_for(model)
        wire = [m.model_dump(exclude_none=True) for m in request.messages]
        if request.tools:
            wire.append({"role": "system", "content": json.dumps([t.model_dump() for t in request.tools])})
        input_tokens = sum(counter.count_wire(m) for m in wire)
        return self._worst(model, input_tokens, request.max_tokens or self._largest_output, self._clock())

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


class RunHold:
    """One run's hold: the worst cases of its calls so far, and what the database holds for it."""

    def __init__(self, store: RunStore, reservation: RunReservation, ctx: RequestContext, run: StartedRun) -> None:
        self._store = store
        self._reservation = reservation
        self._ctx = ctx
        self._session_id = run.session.id
        self._run_id = run.run_id
        self.held = run.reserved_cny
        self.needed = Decimal(0)

    async def __call__(self, request: LLMRequest) -> None:
        """Before `request` is sent: grow the hold if it does not cover the call (raises BudgetExceededError when
        the budget has no room for it; the call is then not made)."""
        if not self._reservation.budgeted:
            return
        self.needed += self._reservation.call(request)
        if self.needed <= self.held:
            return
        grow = max(self.needed - self.held, self._reservation.chunk())
        await self._store.grow_hold(self._ctx, self._session_id, self._run_id, grow)
        self.held += grow
