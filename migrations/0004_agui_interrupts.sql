-- AG-UI: what a suspended run waits for, and the client's AG-UI state, kept on the session so that the
-- next request may be served by any process.
-- pending_turn: the tool calls of a run that ended waiting for approvals (interrupts) or for the client's
--   own tool results, with what the execution stage needs to go on (engine/runs/request/pending.py).
-- client_state: RunAgentInput.state as the client last sent it; data only, never shown to the model.
ALTER TABLE agent_chat_sessions
    ADD COLUMN pending_turn jsonb CHECK (pending_turn IS NULL OR jsonb_typeof(pending_turn) = 'object'),
    ADD COLUMN client_state jsonb CHECK (client_state IS NULL OR jsonb_typeof(client_state) = 'object');
