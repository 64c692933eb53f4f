// CopilotKit's runtime answers a page's `connect` (a reload, a second device) from its own memory of the runs it
// relayed: a restarted runtime, or another instance behind a load balancer, has none and connects the page to
// nothing. This runner asks agent-runtime instead: a run with nothing new is our hydrate (docs/api.md,
// "Reconnecting to a thread"), which answers the stored thread, joins its live run on any replica, or re-sends the
// interrupt it waits for. Runs go through InMemoryAgentRunner as before. Copy it into your runtime as it is.
import { randomUUID } from "node:crypto";
import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";

export class HydratingRunner extends InMemoryAgentRunner {
  constructor(agents) {
    super();
    this.agents = agents;
  }

  connect(request) {
    const agent = this.agents[request.agentId ?? "default"].clone();
    const input = { threadId: request.threadId, runId: randomUUID(), messages: [], tools: [], context: [] };
    return agent.run({ ...input, state: {}, forwardedProps: {} });
  }
}
