// Runs AG-UI runs with the official TypeScript client (`@ag-ui/client`) and prints a JSON summary.
//
// Input (JSON, first argument or stdin):
//   {"url": "...", "headers": {"Authorization": "Bearer ..."}, "threadId": "<uuid>", "runId"?: "...",
//    "messages": [{"id": "...", "role": "user", "content": "..."}], "state"?: {...}, "timeoutMs"?: 30000,
//    "steps"?: [step, ...], "legacyClient"?: true}   legacyClient: declare no protocolVersion, as pre-1.0 clients
// Without `steps`, one run. Each step is one `runAgent()` on the same HttpAgent (so the client's own
// bookkeeping, e.g. its pending interrupts, carries over), after preparing it:
//   {"tools"?: [...frontend tools],                       passed to runAgent
//    "resume"?: {"status": "resolved"|"cancelled", "payload"?: ...},  one entry per pending interrupt
//    "answerPendingTools"?: "<content>",                   a tool message per pending tool call of the last run
//    "addMessages"?: [{"id", "role", "content"}],          appended to the agent's messages
//    "newAgent"?: true}                                    a second HttpAgent (another device) with this agent's
//                                                          messages and state but none of its pending interrupts
//
// Output (stdout, one JSON object): the first run's summary, plus `runs` (one summary per step), each:
//   timedOut     - the run did not end within timeoutMs (the harness aborted it).
//   clientError  - an error the client raised (its verifier/schema check rejecting the stream, an HTTP
//                  error, a parse error): the stream was NOT accepted. null when the run completed.
//   runErrors    - RUN_ERROR events the client delivered (legitimate: a run that failed on the server).
//   events       - every event the client accepted and applied, in order (full objects).
//   eventTypes   - their types.
//   raw          - the wire, read from a tee of the response body independently of the client: events
//                  (every `data:` frame parsed as JSON), eventTypes, parseErrors, nonDataFrames, trailing
//                  (bytes after the last blank line), complete, readError.
//   http         - status, content type, and the RunAgentInput the client sent (requestBody).
//   runFinished  - RUN_FINISHED as the client interpreted it (outcome, pendingToolCallIds, interrupts).
//   messages     - agent.messages after the run (what the client rebuilt); newMessages from runAgent().
//   state        - agent.state after the run (STATE_SNAPSHOT and every STATE_DELTA applied by the client).
//   pendingInterrupts - agent.pendingInterrupts after the run (what the client will require a resume for).
//   warnings     - console.warn / console.error output of the client (e.g. "[ag-ui][enforce] Removed
//                  unrecognised material ...", "Subscriber error", "TOOL_CALL_ARGS: No message found").
// Exit code 0 when the summary was printed (whatever the client thought); 2 on a harness failure.

import { readFileSync } from "node:fs";
import { HttpAgent } from "@ag-ui/client";

const CLIENT_VERSION = JSON.parse(
  readFileSync(new URL("./node_modules/@ag-ui/client/package.json", import.meta.url), "utf8"),
).version;

// Sends no `protocolVersion` in its RunAgentInput (the client declares one only for a ceiling of 1.0 or more).
class LegacyAgent extends HttpAgent {
  get maxProtocolVersion() {
    return "0.0.59";
  }
}

async function readInput() {
  if (process.argv[2]) return JSON.parse(process.argv[2]);
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function describeError(error) {
  if (error === null || error === undefined) return null;
  if (!(error instanceof Error)) return { name: typeof error, message: String(error), stack: null };
  return {
    name: error.name,
    constructor: error.constructor?.name ?? null,
    message: error.message,
    status: error.status ?? null,
    payload: error.payload ?? null,
    stack: error.stack ?? null,
  };
}

// The wire as it was: an independent SSE reader on a tee of the response body.
async function readRawStream(body, raw) {
  const decoder = new TextDecoder("utf-8");
  let buffer = "";
  const flushFrame = (frame) => {
    const data = frame
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""))
      .join("\n");
    if (!data) {
      if (frame.trim()) raw.nonDataFrames.push(frame);
      return;
    }
    try {
      raw.events.push(JSON.parse(data));
    } catch (error) {
      raw.parseErrors.push({ frame: data.slice(0, 500), error: String(error) });
    }
  };
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const frames = buffer.split("\n\n");
    buffer = frames.pop() ?? "";
    frames.forEach(flushFrame);
  }
  buffer += decoder.decode();
  if (buffer.trim()) {
    raw.trailing = buffer;
    flushFrame(buffer);
  }
  raw.complete = true;
}

function captureWarnings() {
  const warnings = [];
  for (const level of ["warn", "error"]) {
    const original = console[level].bind(console);
    console[level] = (...args) => {
      warnings.push({
        level,
        text: args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}` : typeof a === "string" ? a : JSON.stringify(a))).join(" "),
      });
      original(...args); // keep it visible on stderr
    };
  }
  return warnings;
}

// A fetch that tees every response body into an independent reader (the wire as it was).
function makeTee() {
  const tee = { raw: null, http: null, done: Promise.resolve() };
  tee.reset = () => {
    tee.raw = { events: [], parseErrors: [], nonDataFrames: [], trailing: null, complete: false, readError: null };
    tee.http = { status: null, contentType: null, requestBody: null };
    tee.done = Promise.resolve();
  };
  tee.fetch = async (url, init) => {
    tee.http.requestBody = typeof init?.body === "string" ? JSON.parse(init.body) : null;
    const response = await fetch(url, init);
    tee.http.status = response.status;
    tee.http.contentType = response.headers.get("content-type");
    if (!response.ok || !response.body) return response;
    const [forClient, forUs] = response.body.tee();
    const raw = tee.raw;
    tee.done = readRawStream(forUs, raw).catch((error) => {
      raw.readError = String(error);
    });
    return new Response(forClient, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  tee.reset();
  return tee;
}

function prepare(agent, step, previous) {
  // Results first, then new messages: the order CopilotKit sends a tool's result and the next user message in.
  if (step.answerPendingTools !== undefined) {
    for (const toolCallId of previous?.pendingToolCallIds ?? []) {
      agent.addMessage({ id: `tool-result-${toolCallId}`, role: "tool", toolCallId, content: step.answerPendingTools });
    }
  }
  for (const message of step.addMessages ?? []) agent.addMessage(message);
  const parameters = {};
  if (step.tools) parameters.tools = step.tools;
  if (step.resume) {
    parameters.resume = agent.pendingInterrupts.map((interrupt) => ({ interruptId: interrupt.id, ...step.resume }));
  }
  return parameters;
}

async function runOnce(agent, parameters, tee, warnings, timeoutMs) {
  tee.reset();
  warnings.length = 0;
  const events = [];
  const runErrors = [];
  const runFinished = [];
  const failures = [];
  const subscriber = {
    onEvent: ({ event }) => {
      events.push(structuredClone(event));
    },
    onRunErrorEvent: ({ event }) => {
      runErrors.push(structuredClone(event));
    },
    onRunFinishedEvent: ({ event, outcome, pendingToolCallIds, interrupts }) => {
      runFinished.push({
        event: structuredClone(event),
        outcome,
        pendingToolCallIds: pendingToolCallIds ?? null,
        interrupts: interrupts ?? null,
      });
    },
    onRunFailed: ({ error }) => {
      failures.push(describeError(error));
    },
  };
  let clientError = null;
  let result = null;
  let timedOut = false;
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => {
        timedOut = true;
        agent.abortRun();
        reject(new Error(`harness timeout: the run did not end within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    result = await Promise.race([agent.runAgent(parameters, subscriber), timeout]);
  } catch (error) {
    clientError = describeError(error);
  } finally {
    clearTimeout(timer);
  }
  // The raw branch ends when the server closes the response; bounded so a hanging server cannot hang us.
  await Promise.race([tee.done, new Promise((resolve) => setTimeout(resolve, 5_000))]);
  return {
    clientVersion: CLIENT_VERSION,
    clientError,
    timedOut,
    runFailed: failures,
    runErrors,
    runFinished,
    eventTypes: events.map((e) => e.type),
    events,
    messages: structuredClone(agent.messages),
    state: structuredClone(agent.state ?? null),
    pendingInterrupts: structuredClone(agent.pendingInterrupts ?? []),
    newMessages: result ? result.newMessages : null,
    warnings: [...warnings],
    http: tee.http,
    raw: { ...tee.raw, eventTypes: tee.raw.events.map((e) => e?.type ?? null) },
  };
}

async function main() {
  const input = await readInput();
  const timeoutMs = input.timeoutMs ?? 30_000;
  const warnings = captureWarnings();
  const tee = makeTee();
  // A client from before protocol versions (CopilotKit's bundled 0.0.59): the same client, declaring none.
  const Agent = input.legacyClient ? LegacyAgent : HttpAgent;
  const newAgent = (messages, state) =>
    new Agent({
      url: input.url,
      headers: input.headers ?? {},
      threadId: input.threadId,
      initialMessages: messages,
      initialState: state,
      fetch: tee.fetch,
    });
  let agent = newAgent(input.messages ?? [], input.state ?? {});
  const runs = [];
  const steps = input.steps ?? [{ runId: input.runId }];
  for (const step of steps) {
    if (step.newAgent) agent = newAgent(structuredClone(agent.messages), structuredClone(agent.state));
    const parameters = { runId: step.runId, ...prepare(agent, step, runs.at(-1)?.runFinished.at(-1)) };
    runs.push(await runOnce(agent, parameters, tee, warnings, timeoutMs));
  }
  const summary = { ...runs[0], runs };
  // Exit at once: fetch keeps idle keep-alive sockets that would hold the process open for seconds.
  process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(0));
}

main().catch((error) => {
  process.stderr.write(`agui_client.mjs harness failure: ${error?.stack ?? error}\n`);
  process.exit(2);
});
