// The path a user's own app takes: CopilotKit's runtime (Node) with an AG-UI HttpAgent pointed at our /v1/agui,
// one run through the runtime's own HTTP endpoint, as its frontend would make it.
// stdin: {"aguiUrl", "token", "threadId", "text"}; stdout: {"status", "contentType", "events"}
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime, InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";

const BASE_PATH = "/api/copilotkit";
const request = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk)).on("end", () => resolve(text));
}));

const agent = new HttpAgent({ url: request.aguiUrl, headers: { Authorization: `Bearer ${request.token}` } });
const runtime = new CopilotRuntime({ agents: { default: agent }, runner: new InMemoryAgentRunner() });
const server = createServer(createCopilotNodeListener({ runtime, basePath: BASE_PATH }));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
try {
  const response = await fetch(`http://127.0.0.1:${server.address().port}${BASE_PATH}/agent/default/run`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({
      threadId: request.threadId,
      runId: randomUUID(),
      messages: [{ id: `user-${randomUUID()}`, role: "user", content: request.text }],
      tools: [],
      context: [],
      state: {},
      forwardedProps: {},
    }),
  });
  const body = await response.text();
  const events = body
    .split("\n")
    .filter((line) => line.startsWith("data:"))
    .map((line) => JSON.parse(line.slice(5)));
  const result = { status: response.status, contentType: response.headers.get("content-type"), events };
  process.stdout.write(`\n${JSON.stringify(result)}\n`);
} finally {
  server.close();
}
