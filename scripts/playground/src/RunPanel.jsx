// The current run beside the chat: its status and id, Cancel, the model's reasoning, and the run's cost
// (the CUSTOM `run_cost` event the server sends before RUN_FINISHED).
import { useAgent } from "@copilotkit/react-core/v2";
import { useEffect, useState } from "react";
import { RESTORED } from "./agent.js";
import { cancelRun } from "./api.js";

// How a run ended, from RUN_FINISHED: AG-UI 1.0's `outcome`, or `result` where the server answers a client from
// before 1.0 (as CopilotKit's bundled AG-UI client is), whose schemas reject the cancelled outcome and
// pendingToolCallIds.
function ending(event) {
  const pending = event.outcome?.pendingToolCallIds ?? event.result?.pendingToolCallIds ?? [];
  if (event.outcome?.type === "interrupt") return "interrupt";
  if (event.outcome?.type === "cancelled" || event.result?.cancelled === true) return "cancelled";
  return pending.length > 0 ? "awaiting-tools" : "completed";
}

const idle = { runId: null, status: "idle", reasoning: "", cost: null, error: null };

export function RunPanel({ token, sessionId }) {
  const { agent } = useAgent();
  const [run, setRun] = useState(idle);

  const update = (patch) => setRun((current) => ({ ...current, ...patch }));

  useEffect(() => {
    const subscription = agent.subscribe({
      onRunStartedEvent: ({ event }) =>
        !event.runId?.startsWith(RESTORED) && setRun({ ...idle, runId: event.runId, status: "running" }),
      onReasoningMessageContentEvent: ({ event }) =>
        setRun((current) => ({ ...current, reasoning: current.reasoning + event.delta })),
      onCustomEvent: ({ event }) => event.name === "run_cost" && update({ cost: event.value }),
      onRunFinishedEvent: ({ event }) =>
        !event.runId?.startsWith(RESTORED) && update({ status: ending(event) }),
      onRunErrorEvent: ({ event }) => update({ status: "failed", error: `${event.code}: ${event.message}` }),
    });
    return () => subscription.unsubscribe();
  }, [agent]);

  const cancel = () => cancelRun(token, sessionId, run.runId).catch((e) => update({ error: e.message }));

  return (
    <section className="run" data-testid="run-panel">
      <h2>Run</h2>
      <p>
        <span data-testid="run-status" data-status={run.status}>{run.status}</span>{" "}
        <small data-testid="run-id">{run.runId}</small>
      </p>
      <button data-testid="cancel" disabled={run.status !== "running"} onClick={cancel}>
        Cancel run
      </button>
      {run.error && <p className="error" data-testid="run-error">{run.error}</p>}
      {run.cost && (
        <dl data-testid="cost">
          <dt>Cost</dt>
          <dd data-testid="cost-value">
            {run.cost.cost} {run.cost.currency}
            {run.cost.demo ? " (demo model)" : ""}
          </dd>
          <dt>Tokens</dt>
          <dd data-testid="cost-tokens">
            {run.cost.inputTokens} in ({run.cost.cachedInputTokens} cached) / {run.cost.outputTokens} out,{" "}
            {run.cost.modelCalls} model calls
          </dd>
        </dl>
      )}
      {run.reasoning && (
        <details open>
          <summary>Reasoning</summary>
          <p className="reasoning" data-testid="reasoning">{run.reasoning}</p>
        </details>
      )}
    </section>
  );
}
