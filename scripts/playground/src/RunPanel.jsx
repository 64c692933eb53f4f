// The current run beside the chat: its status and id, Cancel, the model's reasoning, and the run's cost
// (the CUSTOM `run_cost` event the server sends before RUN_FINISHED); below, the runs this page saw (a turn can
// take several: an approval, a frontend tool's result).
import { useAgent } from "@copilotkit/react-core/v2";
import { useEffect, useRef, useState } from "react";
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
  const [runs, setRuns] = useState([]);
  // RUN_ERROR carries no run id: the one it ends is the last started.
  const lastRunId = useRef(null);

  const update = (patch) => setRun((current) => ({ ...current, ...patch }));
  const record = (runId, status) =>
    setRuns((seen) => [...seen.filter((r) => r.runId !== runId), { runId, status }]);

  useEffect(() => {
    const subscription = agent.subscribe({
      onRunStartedEvent: ({ event }) => {
        if (event.runId?.startsWith(RESTORED)) return;
        lastRunId.current = event.runId;
        setRun({ ...idle, runId: event.runId, status: "running" });
        record(event.runId, "running");
      },
      onReasoningMessageContentEvent: ({ event }) =>
        setRun((current) => ({ ...current, reasoning: current.reasoning + event.delta })),
      onCustomEvent: ({ event }) => event.name === "run_cost" && update({ cost: event.value }),
      onRunFinishedEvent: ({ event }) => {
        if (event.runId?.startsWith(RESTORED)) return;
        update({ status: ending(event) });
        record(event.runId, ending(event));
      },
      onRunErrorEvent: ({ event }) => {
        update({ status: "failed", error: `${event.code}: ${event.message}` });
        record(lastRunId.current, "failed");
      },
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
      <ol className="runs" data-testid="runs">
        {runs.map((r) => (
          <li key={r.runId} data-run-id={r.runId} data-status={r.status}>
            {r.runId.slice(0, 8)} {r.status}
          </li>
        ))}
      </ol>
    </section>
  );
}
