// What the chat shows for tool calls: the server's tools as cards, approvals (interrupts) with Approve / Deny,
// and one frontend tool the page itself runs.
import { useFrontendTool, useInterrupt, useRenderTool } from "@copilotkit/react-core/v2";
import { useState } from "react";
import { z } from "zod";

export function Tools() {
  const [confetti, setConfetti] = useState(null);

  useRenderTool({
    name: "*",
    render: ({ name, args, status, result }) => (
      <div className="tool" data-testid="tool-call" data-tool={name} data-status={status}>
        <strong>{name}</strong>
        <code>{JSON.stringify(args)}</code>
        {status === "complete" && <code data-testid="tool-result">→ {result}</code>}
      </div>
    ),
  });

  useFrontendTool({
    name: "show_confetti",
    description: "Shows confetti on the user's screen with a short message.",
    parameters: z.object({ message: z.string().describe("what the confetti celebrates") }),
    handler: async ({ message }) => {
      setConfetti(message);
      return JSON.stringify({ shown: true });
    },
    render: ({ args, status }) => (
      <div className="tool" data-testid="frontend-tool" data-status={status}>
        🎉 show_confetti <code>{args.message ?? ""}</code>
      </div>
    ),
  });

  useInterrupt({
    render: ({ interrupt, resolve, cancel }) => (
      <div className="approval" data-testid="approval">
        <p>{interrupt?.message}</p>
        <code>{JSON.stringify(interrupt?.metadata?.arguments)}</code>
        <div>
          <button data-testid="approve" onClick={() => resolve(undefined, interrupt.id)}>
            Approve
          </button>
          <button data-testid="deny" onClick={() => cancel(interrupt.id)}>
            Deny
          </button>
        </div>
      </div>
    ),
  });

  return confetti === null ? null : (
    <div className="confetti" data-testid="confetti" onClick={() => setConfetti(null)}>
      🎉 {confetti}
    </div>
  );
}
