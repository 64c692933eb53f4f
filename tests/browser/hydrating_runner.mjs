// CopilotKit's runtime answers a page's `connect` (a reload, a second device) from its own memory of the runs it
// relayed: a restarted runtime, or another instance behind a load balancer, has none and connects the page to
// nothing. This runner asks agent-runtime instead: a run with nothing new is our hydrate (docs/api.md,
// "Reconnecting to a thread"), which answers the stored thread, joins its live run on any replica, or re-sends the
// interrupt it waits for. A thread we do not know (404) connects to nothing, as InMemoryAgentRunner's would; any
// other refusal (an expired token, say) reaches the page as RUN_ERROR with our error's code and message, since the
// runtime's connect endpoint drops errors silently. Runs go through InMemoryAgentRunner as before. Copy it as it is.
import { randomUUID } from "node:crypto";
import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { EMPTY, catchError, of } from "rxjs";

export class HydratingRunner extends InMemoryAgentRunner {
  constructor(agents) {
    super();
    this.agents = agents;
  }

  connect(request) {
    const agent = this.agents[request.agentId ?? "default"].clone();
    const input = { threadId: request.threadId, runId: randomUUID(), messages: [], tools: [], context: [] };
    return agent
      .run({ ...input, state: {}, forwardedProps: {} })
      .pipe(catchError((error) => (error.status === 404 ? EMPTY : of(refused(error)))));
  }
}

function refused(error) {
  const ours = error.payload?.error;
  return { type: "RUN_ERROR", code: ours?.code ?? "connect_failed", message: ours?.message ?? String(error.message) };
}
