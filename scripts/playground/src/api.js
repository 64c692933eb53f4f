// The service's REST API, as the page uses it: same origin, bearer token pasted by the user.

export const EXPIRED =
  "Your token has expired (tokens from `agent-runtime token` last 1 hour unless --ttl says otherwise): " +
  "mint a new one and paste it above.";

export function authHeaders(token) {
  return { Authorization: `Bearer ${token}` };
}

async function call(token, path, init = {}) {
  const response = await fetch(path, {
    ...init,
    headers: { ...authHeaders(token), "content-type": "application/json", ...init.headers },
  });
  if (!response.ok) {
    const body = await response.text();
    const expired = response.status === 401 && body.includes('"token expired"');
    const error = new Error(expired ? EXPIRED : `${init.method ?? "GET"} ${path}: ${response.status} ${body}`);
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

// The token's expiry and user, read from its payload (not verified: the server does that); null if unreadable.
export function tokenClaims(token) {
  try {
    const payload = JSON.parse(atob(token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/")));
    return typeof payload.exp === "number" ? { expiresAt: payload.exp * 1000, user: payload.sub } : null;
  } catch {
    return null;
  }
}
