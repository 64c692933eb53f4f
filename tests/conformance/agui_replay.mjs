// Feeds a list of AG-UI events (e.g. a stream put back together from a first connection and a resumed one)
// through the official TypeScript client (`@ag-ui/client`): the same verifier and event application as an
// HttpAgent run, without the HTTP part. Prints a JSON summary.
//
// Input (stdin): {"threadId": "...", "runId": "...", "events": [ ...AG-UI events... ]}
// Output (stdout): {clientError, eventTypes, messages, warnings}
//   clientError - what the client raised (its verifier rejecting the sequence), or null.
//   eventTypes  - the events its subscribers received, in order.
//   messages    - agent.messages after the run (what the client rebuilt).
//   warnings    - console.warn / console.error output of the client.
// Exit code 0 when the summary was printed; 2 on a harness failure.

import { AbstractAgent } from "@ag-ui/client";
import { from } from "rxjs";

async function readInput() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

class ReplayAgent extends AbstractAgent {
  constructor(config, events) {
    super(config);
    this.replayed = events;
  }

  run() {
    return from(this.replayed);
  }
}

async function main() {
  const input = await readInput();
  const warnings = [];
  for (const level of ["warn", "error"]) {
    const original = console[level].bind(console);
    console[level] = (...args) => {
      warnings.push(args.map((a) => (typeof a === "string" ? a : String(a?.message ?? JSON.stringify(a)))).join(" "));
      original(...args);
    };
  }
  const agent = new ReplayAgent({ threadId: input.threadId }, input.events);
  const eventTypes = [];
  let clientError = null;
  try {
    await agent.runAgent({ runId: input.runId }, { onEvent: ({ event }) => eventTypes.push(event.type) });
  } catch (error) {
    clientError = { name: error?.name ?? null, message: String(error?.message ?? error) };
  }
  const summary = { clientError, eventTypes, messages: structuredClone(agent.messages), warnings };
  process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(0));
}

main().catch((error) => {
  process.stderr.write(`agui_replay.mjs harness failure: ${error?.stack ?? error}\n`);
  process.exit(2);
});
