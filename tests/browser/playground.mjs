// Drives /playground in Chromium with playwright-core (no downloaded browser: the system's chromium).
// stdin: {"baseUrl", "chromium", "artifacts", "screenshot"?: path, "cases": [{"name", "token"}]}
// stdout: {"results": {name: {"ok", "error"?, "screenshot"?, "ms", ...what the case saw}}}
// Each case opens its own thread; a failure screenshots the page into `artifacts` and the next case goes on.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const STEP_MS = 30_000;
const request = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk)).on("end", () => resolve(text));
}));

// Without the background-networking flags Chromium keeps calling home, which floods a closed network.
const ARGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync",
];

const runId = async (page) => (await page.getByTestId("run-id").textContent()).trim();
const runsSeen = (page) => page.locator("[data-testid=runs] li").count();

async function openThread(context, token) {
  const page = await context.newPage();
  await page.goto(`${request.baseUrl}/playground/`);
  await page.getByTestId("token").fill(token);
  await page.getByTestId("new-session").click();
  await page.waitForFunction(() => window.location.hash.length > 1);
  await page.locator("textarea").first().waitFor();
  return page;
}

async function send(page, text) {
  const box = page.locator("textarea").first();
  await box.fill(text);
  await box.press("Enter");
}

// Waits until the page has seen `after` + outcomes.length runs, the last ones ended as `outcomes` say; their ids.
async function runsEnded(page, after, outcomes) {
  const handle = await page.waitForFunction(
    ([after, outcomes]) => {
      const runs = [...document.querySelectorAll("[data-testid=runs] li")].slice(after);
      const ok = runs.length === outcomes.length && runs.every((r, i) => r.dataset.status === outcomes[i]);
      return ok ? runs.map((r) => r.dataset.runId) : null;
    },
    [after, outcomes],
  );
  return await handle.jsonValue();
}

// Sends `text`; the ids of the runs it takes, once they ended with `outcomes`.
async function turn(page, text, outcomes = ["completed"]) {
  const after = await runsSeen(page);
  await send(page, text);
  return await runsEnded(page, after, outcomes);
}

async function running(page) {
  await page.locator('[data-testid=run-status][data-status="running"]').waitFor();
  return await runId(page);
}

const chatText = (page) => page.locator("main").innerText();

async function waitForText(page, text) {
  await page.getByText(text, { exact: false }).first().waitFor();
}

const cases = {
  async plain(context, token) {
    const page = await openThread(context, token);
    const [run] = await turn(page, "hello there");
    await waitForText(page, "You said");
    await page.getByTestId("cost").waitFor();
    const seen = {
      threadId: await page.evaluate(() => window.location.hash.slice(1)),
      runId: run,
      cost: await page.getByTestId("cost-value").innerText(),
      tokens: await page.getByTestId("cost-tokens").innerText(),
      reasoning: await page.getByTestId("reasoning").innerText(),
    };
    // A second tab on the same thread: the thread comes back from the server alone.
    const second = await context.newPage();
    await second.goto(page.url());
    await second.getByText("hello there").first().waitFor();
    await second.getByText("You said").first().waitFor();
    seen.secondTab = await chatText(second);
    await second.close();
    return { page, seen };
  },

  async calculator(context, token) {
    const page = await openThread(context, token);
    await turn(page, "what is 12*7?");
    const card = page.locator('[data-testid=tool-call][data-tool=calculator][data-status=complete]');
    await card.waitFor();
    await page.getByTestId("cost").waitFor();
    if (request.screenshot) await page.screenshot({ path: request.screenshot });
    return { page, seen: { tool: await card.innerText(), chat: await chatText(page) } };
  },

  async approve(context, token) {
    return await approval(context, token, "approve", "Kayaker from Lofoten");
  },

  async deny(context, token) {
    return await approval(context, token, "deny", "Sailor from Bergen");
  },

  async frontend_tool(context, token) {
    const page = await openThread(context, token);
    // CopilotKit runs the tool and sends its result: the turn goes on in a second run.
    const runs = await turn(page, "use the show_confetti tool", ["awaiting-tools", "completed"]);
    const confetti = await page.getByTestId("confetti").innerText();
    return { page, seen: { runs, confetti, threadId: await page.evaluate(() => window.location.hash.slice(1)) } };
  },

  async reload(context, token) {
    const page = await openThread(context, token);
    await send(page, "slow: tell me a story");
    const run = await running(page);
    await waitForText(page, "Once upon");
    await page.reload();
    const [resumed] = await runsEnded(page, 0, ["completed"]);
    await waitForText(page, "The end.");
    return { page, seen: { runId: run, resumedRunId: resumed, chat: await chatText(page) } };
  },

  async cancel(context, token) {
    const page = await openThread(context, token);
    await send(page, "slow: tell me a story");
    const run = await running(page);
    await waitForText(page, "Once upon");
    await page.getByTestId("cancel").click();
    await runsEnded(page, 0, ["cancelled"]);
    return { page, seen: { runId: run, threadId: await page.evaluate(() => window.location.hash.slice(1)) } };
  },

  // The chat's own Stop button (the send button while a run streams), not the run panel's Cancel.
  async stop(context, token) {
    const page = await openThread(context, token);
    await send(page, "slow: tell me a story");
    const run = await running(page);
    await waitForText(page, "Once upon");
    await page.getByTestId("copilot-send-button").click();
    await runsEnded(page, 0, ["cancelled"]);
    return { page, seen: { runId: run, threadId: await page.evaluate(() => window.location.hash.slice(1)) } };
  },

  async expired(context, token) {
    const page = await context.newPage();
    await page.goto(`${request.baseUrl}/playground/`);
    await page.getByTestId("token").fill(token);
    await page.locator('[data-testid=token-status][data-expired="true"]').waitFor();
    await page.getByTestId("new-session").click();
    await page.getByTestId("error").waitFor();
    return {
      page,
      seen: { status: await page.getByTestId("token-status").innerText(), error: await page.getByTestId("error").innerText() },
    };
  },
};

async function approval(context, token, button, bio) {
  const page = await openThread(context, token);
  await turn(page, `set my bio to: ${bio}`, ["interrupt"]);
  await page.getByTestId("approval").waitFor();
  const asked = await page.getByTestId("approval").innerText();
  await page.getByTestId(button).click();
  await runsEnded(page, 1, ["completed"]);
  const card = page.locator('[data-testid=tool-call][data-tool=update_bio][data-status=complete]');
  await card.waitFor();
  return { page, seen: { asked, tool: await card.innerText() } };
}

const userDataDir = mkdtempSync(join(tmpdir(), "playground-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: request.chromium,
  headless: true,
  args: ARGS,
});
context.setDefaultTimeout(STEP_MS);
const results = {};
try {
  for (const { name, token } of request.cases) {
    const started = Date.now();
    const pages = context.pages().length;
    try {
      const { page, seen } = await cases[name](context, token);
      results[name] = { ok: true, ms: Date.now() - started, ...seen };
      await page.close();
    } catch (error) {
      const page = context.pages().at(-1);
      const screenshot = join(request.artifacts, `${name}.png`);
      let shot = null;
      try {
        await page.screenshot({ path: screenshot, fullPage: true });
        shot = screenshot;
      } catch {}
      results[name] = { ok: false, ms: Date.now() - started, error: String(error.stack ?? error), screenshot: shot };
      for (const extra of context.pages().slice(pages)) await extra.close().catch(() => {});
    }
  }
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
process.stdout.write(`\n${JSON.stringify({ results })}\n`);
