// The path a user's own app takes: CopilotKit's runtime (Node) with an AG-UI HttpAgent pointed at our /v1/agui and
// the HydratingRunner, one request to the runtime's own HTTP endpoint (`run` or `connect`), as its frontend makes it.
// stdin: {"aguiUrl", "token", "threadId", "endpoint"?: "run" | "connect", "messages"?: [...] | "text", "resume"?}
// stdout: a line {"event": ...} per event as it arrives, then {"status", "contentType", "events"}
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { HttpAgent } from "@ag-ui/client";
import { CopilotRuntime } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";
import { HydratingRunner } from "./hydrating_runner.mjs";

const BASE_PATH = "/api/copilotkit";
const request = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk)).on("end", () => resolve(text));
}));

const agents = {
  default: new HttpAgent({ url: request.aguiUrl, headers: { Authorization: `Bearer ${request.token}` } }),
};
const runtime = new CopilotRuntime({ agents, runner: new HydratingRunner(agents) });
const server = createServer(createCopilotNodeListener({ runtime, basePath: BASE_PATH }));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const said = request.text === undefined ? [] : [{ id: `user-${randomUUID()}`, role: "user", content: request.text }];
const messages = request.messages ?? said;
const input = { threadId: request.threadId, runId: randomUUID(), messages, tools: [], context: [], state: {} };
try {
  const response = await fetch(`http://127.0.0.1:${server.address().port}${BASE_PATH}/agent/default/${request.endpoint ?? "run"}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({ ...input, forwardedProps: {}, ...(request.resume ? { resume: request.resume } : {}) }),
  });
  if (!response.headers.get("content-type")?.startsWith("text/event-stream")) {
    const result = { status: response.status, contentType: response.headers.get("content-type"), body: await response.text() };
    process.stdout.write(`\n${JSON.stringify(result)}\n`);
    process.exit(0);
  }
  const events = [];
  let pending = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body) {
    pending += decoder.decode(chunk, { stream: true });
    const lines = pending.split("\n");
    pending = lines.pop();
    for (const line of lines.filter((l) => l.startsWith("data:"))) {
      const event = JSON.parse(line.slice(5));
      events.push(event);
      process.stdout.write(`${JSON.stringify({ event })}\n`);
    }
  }
  const result = { status: response.status, contentType: response.headers.get("content-type"), events };
  process.stdout.write(`\n${JSON.stringify(result)}\n`);
} finally {
  server.close();
}
