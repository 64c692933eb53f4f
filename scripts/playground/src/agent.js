// The AG-UI agent CopilotKit talks to: the official HttpAgent on POST /v1/agui, plus `connect`, which CopilotKit
// calls when a chat opens a thread (a fresh page, a reload, a second tab).
import { EventType, HttpAgent, randomUUID } from "@ag-ui/client";
import { Observable, tap } from "rxjs";
import { authHeaders, cancelRun, latestRun, storedMessages } from "./api.js";

const TERMINAL = new Set([EventType.RUN_FINISHED, EventType.RUN_ERROR]);
const RECONNECTS = 5;
// After Stop has cancelled the run, how long its stream has to end (with the cancelled outcome) before it is cut.
const STOP_GRACE_MS = 5_000;
export const RESTORED = "restored-";

export function newAgent(token, threadId) {
  return new PlaygroundAgent({ url: "/v1/agui", headers: authHeaders(token), threadId });
}

class PlaygroundAgent extends HttpAgent {
  run(input) {
    this.serverRunId = null;
    return super.run(input).pipe(
      tap((event) => {
        if (event.type === EventType.RUN_STARTED) this.serverRunId = event.runId;
      }),
    );
  }

  // CopilotChat's Stop button. Cutting the request alone would leave the run going (and billed): the server keeps
  // a run whose stream drops, so that a reload can resume it. So Stop cancels the run on the server, and its
  // stream ends with the cancelled outcome; the request is cut at once only when there is no run to cancel.
  abortRun() {
    const token = this.headers.Authorization.replace(/^Bearer /, "");
    const controller = this.abortController;
    cancelRunning(token, this.threadId, this.serverRunId).then(
      (cancelled) => (cancelled ? setTimeout(() => controller.abort(), STOP_GRACE_MS) : controller.abort()),
      () => controller.abort(),
    );
  }

  // The thread's latest run, replayed from its event log: its MESSAGES_SNAPSHOT is the thread before it, then
  // comes the run itself, live to its end when it still runs (a reload mid-run resumes the stream; an approval
  // the run waits for comes back with its RUN_FINISHED). Headers, not fields: CopilotKit clones agents.
  connect() {
    const token = this.headers.Authorization.replace(/^Bearer /, "");
    const threadId = this.threadId;
    return new Observable((subscriber) => {
      const controller = new AbortController();
      restore(token, threadId, controller.signal, (event) => subscriber.next(event)).then(
        () => subscriber.complete(),
        (error) => (controller.signal.aborted ? subscriber.complete() : subscriber.error(error)),
      );
      return () => controller.abort();
    });
  }
}

// Cancels the run this request started, or (when Stop came before its RUN_STARTED) the thread's running one.
async function cancelRunning(token, threadId, runId) {
  let target = runId ?? null;
  if (target === null) {
    const latest = await latestRun(token, threadId);
    target = latest?.status === "running" ? latest.id : null;
  }
  if (target === null) return false;
  await cancelRun(token, threadId, target);
  return true;
}

async function restore(token, threadId, signal, emit) {
  const run = await latestRun(token, threadId);
  if (run !== null) {
    const replayed = await followRun(token, threadId, run.id, signal, emit);
    if (replayed) return;
  }
  // No run yet, or its events are past retention (410): the stored messages are the thread.
  const messages = (await storedMessages(token, threadId)).map(toAguiMessage);
  // Not a run of the server's: the run panel leaves such ids out.
  const runId = `${RESTORED}${randomUUID()}`;
  emit({ type: EventType.RUN_STARTED, threadId, runId });
  emit({ type: EventType.MESSAGES_SNAPSHOT, messages });
  emit({ type: EventType.RUN_FINISHED, threadId, runId });
}

// GET .../events, and again with Last-Event-ID after the last frame seen whenever the connection drops before
// the terminal event: each event exactly once, in order. False when the log is gone (410).
async function followRun(token, threadId, runId, signal, emit) {
  const url = `/v1/sessions/${threadId}/runs/${runId}/events`;
  let lastEventId = null;
  for (let attempt = 0; attempt <= RECONNECTS; attempt += 1) {
    const headers = { ...authHeaders(token), accept: "text/event-stream" };
    if (lastEventId !== null) headers["Last-Event-ID"] = lastEventId;
    let response;
    try {
      response = await fetch(url, { headers, signal });
    } catch (error) {
      if (signal.aborted) throw error;
      await pause(500 * (attempt + 1));
      continue;
    }
    if (response.status === 410) return false;
    if (!response.ok) throw new Error(`GET ${url}: ${response.status} ${await response.text()}`);
    let ended = false;
    try {
      await readFrames(response.body, (id, data) => {
        lastEventId = id ?? lastEventId;
        const event = JSON.parse(data);
        emit(event);
        ended ||= TERMINAL.has(event.type);
      });
    } catch (error) {
      if (signal.aborted) throw error;
    }
    if (ended) return true;
    await pause(500 * (attempt + 1));
  }
  throw new Error(`the stream of run ${runId} kept dropping`);
}

async function readFrames(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let id = null;
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) onFrame(id, data.join("\n"));
    }
  }
}

function toAguiMessage(stored) {
  const calls = stored.metadata?.tool_calls ?? [];
  return {
    id: stored.message_id,
    role: stored.role,
    content: stored.content ?? "",
    ...(calls.length > 0 && {
      toolCalls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })),
    }),
    ...(stored.metadata?.tool_call_id && { toolCallId: stored.metadata.tool_call_id }),
  };
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
