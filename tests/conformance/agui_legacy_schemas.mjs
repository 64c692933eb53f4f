// Validates recorded AG-UI events against @ag-ui/core 0.0.59's EventSchemas: the schemas CopilotKit 1.74
// bundles (installed under the alias `ag-ui-core-0.0.59`, beside the 1.0 client's own @ag-ui/core).
//
// Input (stdin, JSON): [event, ...]. Output (stdout, JSON): {"version": "0.0.59", "rejected": [{"index",
// "type", "issues"}]}: every event the old schemas refuse (an old client fails its whole run on the first).

import { readFileSync } from "node:fs";
import { EventSchemas } from "ag-ui-core-0.0.59";

const VERSION = JSON.parse(
  readFileSync(new URL("./node_modules/ag-ui-core-0.0.59/package.json", import.meta.url), "utf8"),
).version;

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const events = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const rejected = [];
events.forEach((event, index) => {
  const parsed = EventSchemas.safeParse(event);
  if (!parsed.success) rejected.push({ index, type: event?.type ?? null, issues: parsed.error.issues });
});
process.stdout.write(`${JSON.stringify({ version: VERSION, rejected })}\n`);
