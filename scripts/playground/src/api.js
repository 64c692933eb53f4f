// The service's REST API, as the page uses it: same origin, bearer token pasted by the user.

export function authHeaders(token) {
  return { Authorization: `Bearer ${token}` };
}

async function call(token, path, init = {}) {
  const response = await fetch(path, {
    ...init,
    headers: { ...authHeaders(token), "content-type": "application/json", ...init.headers },
  });
  if (!response.ok) {
    const error = new Error(`${init.method ?? "GET"} ${path}: ${response.status} ${await response.text()}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

export const listSessions = (token) => call(token, "/v1/sessions?limit=50").then((page) => page.items);
export const createSession = (token) => call(token, "/v1/sessions", { method: "POST", body: "{}" });
export const latestRun = (token, sessionId) =>
  call(token, `/v1/sessions/${sessionId}/runs?limit=1`).then((page) => page.items[0] ?? null);
export const storedMessages = (token, sessionId) =>
  call(token, `/v1/sessions/${sessionId}/messages?limit=100`).then((page) => page.items);
export const cancelRun = (token, sessionId, runId) =>
  call(token, `/v1/sessions/${sessionId}/runs/${runId}/cancel`, { method: "POST" });
