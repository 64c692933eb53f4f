-- Initial schema: profiles, chat sessions, chat messages (see README "Data model").
-- Every user-owned table carries user_id so that every statement can be scoped by its owner.

CREATE TABLE profiles (
    user_id     uuid PRIMARY KEY,
    username    text NOT NULL DEFAULT '' CHECK (char_length(username) <= 64),
    bio         text CHECK (bio IS NULL OR char_length(bio) <= 4000),
    settings    jsonb NOT NULL DEFAULT '{"version": 2}'::jsonb CHECK (jsonb_typeof(settings) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent_chat_sessions (
    id                       uuid PRIMARY KEY,
    user_id                  uuid NOT NULL,
    title                    text CHECK (title IS NULL OR char_length(title) BETWEEN 1 AND 200),
    status                   text NOT NULL DEFAULT 'pending',
    state_snapshot           jsonb NOT NULL DEFAULT '{"status": "pending"}'::jsonb,
    error_id                 text,
    billing_currency         varchar(3) NOT NULL DEFAULT 'CNY',
    billing_country_snapshot varchar(2) NOT NULL CHECK (billing_country_snapshot ~ '^[A-Z]{2}$'),
    model                    text,
    -- Sequence counters: visible messages count up from 1, audit rows down from -1. Allocated with
    -- UPDATE ... RETURNING on this row, which also serialises appends to one session in arrival order.
    next_seq                 bigint NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    next_audit_seq           bigint NOT NULL DEFAULT -1 CHECK (next_audit_seq <= -1),
    run_id                   uuid,
    run_started_at           timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chk_session_status CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    CONSTRAINT chk_billing_currency CHECK (billing_currency IN ('CNY')),
    CONSTRAINT chk_snapshot_status CHECK (state_snapshot ->> 'status' = status),
    CONSTRAINT chk_failed_has_error CHECK (status <> 'failed' OR error_id IS NOT NULL),
    CONSTRAINT chk_running_has_run CHECK (status <> 'running' OR (run_id IS NOT NULL AND run_started_at IS NOT NULL)),
    -- Target of the messages' composite foreign key: a message's owner is always its session's owner.
    CONSTRAINT uq_sessions_id_user UNIQUE (id, user_id)
);

CREATE INDEX idx_sessions_user_created ON agent_chat_sessions (user_id, created_at DESC, id DESC);

CREATE TABLE agent_chat_messages (
    id             uuid PRIMARY KEY,
    session_id     uuid NOT NULL,
    user_id        uuid NOT NULL,
    message_id     text NOT NULL CHECK (char_length(message_id) BETWEEN 1 AND 200),
    seq            bigint NOT NULL CHECK (seq <> 0),
    role           text NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content        text NOT NULL DEFAULT '',
    metadata       jsonb NOT NULL CHECK (jsonb_typeof(metadata) = 'object' AND metadata ? 'kind'),
    input_tokens   integer NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens  integer NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost           numeric(20, 10) NOT NULL DEFAULT 0 CHECK (cost >= 0),
    currency       varchar(3) NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT fk_messages_session FOREIGN KEY (session_id, user_id)
        REFERENCES agent_chat_sessions (id, user_id) ON DELETE CASCADE,
    -- Audit rows (raw stage outputs) are the only ones with a negative seq; tool rows are always visible.
    CONSTRAINT chk_audit_seq CHECK ((metadata ->> 'kind' = 'audit') = (seq < 0)),
    CONSTRAINT chk_tool_visible CHECK (role <> 'tool' OR seq > 0)
);

CREATE UNIQUE INDEX uq_messages_session_seq ON agent_chat_messages (session_id, seq);
CREATE UNIQUE INDEX uq_messages_session_message_id ON agent_chat_messages (session_id, message_id);
CREATE INDEX idx_messages_session_seq_display ON agent_chat_messages (session_id, seq) WHERE seq > 0;
CREATE INDEX idx_messages_session_seq_audit ON agent_chat_messages (session_id, seq) WHERE seq < 0;
CREATE INDEX idx_messages_user_created ON agent_chat_messages (user_id, created_at);

CREATE FUNCTION enforce_message_currency_match_session() RETURNS trigger AS $$
DECLARE
    sess_currency varchar(3);
BEGIN
    SELECT billing_currency INTO sess_currency FROM agent_chat_sessions WHERE id = NEW.session_id;
    IF NEW.currency IS DISTINCT FROM sess_currency THEN
        RAISE EXCEPTION 'message currency % does not match session currency %', NEW.currency, sess_currency
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_message_currency_match
    BEFORE INSERT OR UPDATE ON agent_chat_messages
    FOR EACH ROW EXECUTE FUNCTION enforce_message_currency_match_session();

-- Billing fields are frozen at creation, and the status machine is
-- pending -> running -> completed|failed, completed|failed -> running. Enforced here, not only in Python.
CREATE FUNCTION enforce_session_invariants() RETURNS trigger AS $$
BEGIN
    IF NEW.billing_currency IS DISTINCT FROM OLD.billing_currency
       OR NEW.billing_country_snapshot IS DISTINCT FROM OLD.billing_country_snapshot
       OR NEW.user_id IS DISTINCT FROM OLD.user_id THEN
        RAISE EXCEPTION 'billing fields and owner of a session are frozen' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
        (OLD.status = 'pending' AND NEW.status = 'running')
        OR (OLD.status = 'running' AND NEW.status IN ('completed', 'failed'))
        OR (OLD.status IN ('completed', 'failed') AND NEW.status = 'running')
    ) THEN
        RAISE EXCEPTION 'invalid session status transition % -> %', OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_session_invariants
    BEFORE UPDATE ON agent_chat_sessions
    FOR EACH ROW EXECUTE FUNCTION enforce_session_invariants();
