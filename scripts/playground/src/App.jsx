import { CopilotChat, CopilotKit } from "@copilotkit/react-core/v2";
import { useCallback, useEffect, useMemo, useState } from "react";
import { newAgent } from "./agent.js";
import { createSession, EXPIRED, listSessions, tokenClaims } from "./api.js";
import { RunPanel } from "./RunPanel.jsx";
import { Tools } from "./Tools.jsx";

const TOKEN_KEY = "agent-runtime.playground.token";

// The session is the URL's hash: a reload or a second tab opens the same thread.
const sessionFromHash = () => decodeURIComponent(window.location.hash.slice(1)) || null;

export function App() {
  const [token, setToken] = useState(() => localStorage.getItem(TOKEN_KEY) ?? "");
  const [sessionId, setSessionId] = useState(sessionFromHash);
  const [sessions, setSessions] = useState([]);
  const [error, setError] = useState(null);

  useEffect(() => {
    const onHash = () => setSessionId(sessionFromHash());
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);

  const refresh = useCallback(async () => {
    if (!token) return;
    try {
      setSessions(await listSessions(token));
      setError(null);
    } catch (e) {
      setError(e.message);
    }
  }, [token]);
  useEffect(() => void refresh(), [refresh]);

  const saveToken = (value) => {
    const trimmed = value.trim();
    localStorage.setItem(TOKEN_KEY, trimmed);
    setToken(trimmed);
  };
  const open = (id) => {
    window.location.hash = id;
    setSessionId(id);
  };
  const create = async () => {
    try {
      const session = await createSession(token);
      await refresh();
      open(session.id);
    } catch (e) {
      setError(e.message);
    }
  };

  return (
    <div className="layout">
      <aside className="sidebar">
        <h1>agent-runtime playground</h1>
        <label>
          Bearer token
          <input
            data-testid="token"
            type="password"
            placeholder="agent-runtime token --user <uuid>"
            defaultValue={token}
            onChange={(e) => saveToken(e.target.value)}
          />
        </label>
        {token && <TokenStatus token={token} />}
        <button data-testid="new-session" disabled={!token} onClick={create}>
          New session
        </button>
        {error && <p className="error" data-testid="error">{error}</p>}
        <ul className="sessions" data-testid="sessions">
          {sessions.map((s) => (
            <li key={s.id}>
              <button className={s.id === sessionId ? "current" : ""} onClick={() => open(s.id)} title={s.id}>
                {s.title || s.id.slice(0, 8)}
              </button>
            </li>
          ))}
        </ul>
      </aside>
      <main>
        {token && sessionId ? (
          <Thread key={`${token}/${sessionId}`} token={token} sessionId={sessionId} />
        ) : (
          <p className="hint">Paste a token, then create or pick a session.</p>
        )}
      </main>
    </div>
  );
}

// When the pasted token expires (read from its payload, checked every few seconds): an expired token is said so
// here before any request gets its 401.
function TokenStatus({ token }) {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 5_000);
    return () => clearInterval(timer);
  }, []);
  const claims = tokenClaims(token);
  if (claims === null) return <p className="hint" data-testid="token-status">Not a token this page can read.</p>;
  const expired = claims.expiresAt <= now;
  const at = new Date(claims.expiresAt).toLocaleTimeString();
  return (
    <p className={expired ? "error" : "hint"} data-testid="token-status" data-expired={expired}>
      {expired
        ? `${EXPIRED} (It expired at ${at}: agent-runtime token --user ${claims.user})`
        : `Expires at ${at} (in ${Math.ceil((claims.expiresAt - now) / 60_000)} min).`}
    </p>
  );
}

function Thread({ token, sessionId }) {
  const agents = useMemo(() => ({ default: newAgent(token, sessionId) }), [token, sessionId]);
  return (
    <CopilotKit agents__unsafe_dev_only={agents} enableInspector={false}>
      <Tools />
      <div className="thread">
        <CopilotChat threadId={sessionId} className="chat" />
        <RunPanel token={token} sessionId={sessionId} />
      </div>
    </CopilotKit>
  );
}
