"""The SQLite schema's history: one migration per version, applied in order; PRAGMA user_version counts them."""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

# Each migration is a list of statements, applied in one transaction. Never edit or reorder one that has shipped:
# existing databases are at its version already. Append a new one instead.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE sessions (
            session_key TEXT PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            agent TEXT NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            model TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            last_channel TEXT,
            last_account TEXT,
            last_target TEXT
        ) WITHOUT ROWID""",
        # AUTOINCREMENT: ids are never reused after pruning, so an old outbox row cannot point at a new message.
        """CREATE TABLE inbound (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            chat TEXT NOT NULL,
            message_id TEXT NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
            error TEXT,
            session_key TEXT,
            received REAL NOT NULL,
            updated REAL NOT NULL,
            UNIQUE (channel, account, chat, message_id)
        )""",
        "CREATE INDEX inbound_unfinished ON inbound (id) WHERE status IN ('pending', 'running')",
        "CREATE INDEX inbound_finished ON inbound (updated) WHERE status IN ('done', 'failed')",
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            inbound_id INTEGER REFERENCES inbound (id) ON DELETE SET NULL,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            target TEXT NOT NULL,
            payload TEXT NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'dead')),
            attempts INTEGER NOT NULL DEFAULT 0,
            retry_at REAL NOT NULL,
            error TEXT,
            platform_message_id TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL
        )""",
        "CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'pending'",
        "CREATE INDEX outbox_finished ON outbox (updated) WHERE status IN ('sent', 'dead')",
        "CREATE INDEX outbox_inbound ON outbox (inbound_id)",
    ),
    (
        """CREATE TABLE pairing (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            code TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT,
            created REAL NOT NULL,
            expires REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'approved')),
            PRIMARY KEY (channel, account, code)
        ) WITHOUT ROWID""",
        """CREATE TABLE allowed_senders (
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            approved_by TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (channel, account, sender_id)
        ) WITHOUT ROWID""",
    ),
    (
        """CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            session_key TEXT NOT NULL,
            command TEXT NOT NULL,
            cwd TEXT NOT NULL,
            requester TEXT,
            approvers TEXT NOT NULL,
            offer_always INTEGER NOT NULL,
            created REAL NOT NULL,
            expires REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
            decided_by TEXT,
            decision TEXT CHECK (decision IN ('allow-once', 'allow-always', 'deny')),
            messages TEXT NOT NULL DEFAULT '[]'
        ) WITHOUT ROWID""",
        "CREATE INDEX approvals_pending ON approvals (created) WHERE status = 'pending'",
        """CREATE TABLE exec_allowed (
            agent TEXT NOT NULL,
            executable TEXT NOT NULL,
            args TEXT NOT NULL,
            approved_by TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (agent, executable, args)
        ) WITHOUT ROWID""",
    ),
    (
        """CREATE TABLE previews (
            inbound_id INTEGER PRIMARY KEY REFERENCES inbound (id) ON DELETE CASCADE,
            channel TEXT NOT NULL,
            account TEXT NOT NULL,
            target TEXT NOT NULL,
            message_id TEXT NOT NULL,
            created REAL NOT NULL
        )""",
    ),
    # "Allow always" on a script (`python3 build.py`) pins the script's content: NULL for any other command.
    ("ALTER TABLE exec_allowed ADD COLUMN sha256 TEXT",),
    # A decision carries a seal made with the state directory's key: a row changed behind the store's back has none.
    ("ALTER TABLE approvals ADD COLUMN seal TEXT",),
    # A send someone awaits (the message tool's, an approval card) carries a key: the same send made again after a
    # restart finds its row instead of sending twice.
    (
        "ALTER TABLE outbox ADD COLUMN dedupe_key TEXT",
        "CREATE UNIQUE INDEX outbox_key ON outbox (dedupe_key) WHERE dedupe_key IS NOT NULL",
    ),
    # A request made in a turn names the turn: after a restart the turn, run again, finds its request (still shown,
    # still answerable) instead of asking twice.
    ("ALTER TABLE approvals ADD COLUMN turn TEXT",),
    # What the provider's prompt cache served and stored, beside the session's token totals (`/status`).
    (
        "ALTER TABLE sessions ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
    ),
    # Scheduled jobs made by the `cron` tool and `bot cron add` (config jobs live in the file), and one row per tick
    # of any job: UNIQUE (job_id, tick) is what keeps a tick from running twice, across restarts too.
    (
        """CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            payload TEXT NOT NULL,
            created_by TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE job_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL,
            tick REAL NOT NULL,
            started REAL NOT NULL,
            ended REAL,
            status TEXT NOT NULL
                CHECK (status IN ('requested', 'running', 'ok', 'error', 'skipped', 'undeliverable')),
            manual INTEGER NOT NULL DEFAULT 0,
            detail TEXT,
            message_ids TEXT NOT NULL DEFAULT '[]',
            inbound_id INTEGER,
            UNIQUE (job_id, tick)
        )""",
        "CREATE INDEX job_runs_running ON job_runs (job_id) WHERE status = 'running'",
        "CREATE INDEX job_runs_finished ON job_runs (ended) WHERE status != 'running'",
    ),
    # Settings a chat changed for its own session (/model, /think, /queue, as JSON), one row per run's tokens (what
    # /usage adds up for a day), and the children `sessions_spawn` started: a child's row moves from running to its
    # end in the same transaction that journals its announcement to the parent, so it is announced exactly once.
    (
        "ALTER TABLE sessions ADD COLUMN overrides TEXT",
        """CREATE TABLE usage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            session_key TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL
        )""",
        "CREATE INDEX usage_at ON usage (at)",
        """CREATE TABLE subagent_runs (
            id TEXT PRIMARY KEY,
            parent_key TEXT NOT NULL,
            child_key TEXT NOT NULL,
            agent TEXT NOT NULL,
            label TEXT,
            task TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'timed_out', 'killed')),
            result TEXT,
            payload TEXT NOT NULL,
            inbound_id INTEGER,
            created REAL NOT NULL,
            ended REAL
        ) WITHOUT ROWID""",
        "CREATE INDEX subagent_runs_parent ON subagent_runs (parent_key, created)",
        "CREATE INDEX subagent_runs_running ON subagent_runs (created) WHERE status = 'running'",
    ),
    # Who a job's maker was (bot.runs.principal): 1 an owner's run, 0 anyone else's, NULL a job made before this was
    # kept; and whom each session's turns have acted for (a JSON list of principal keys): a non-owner's session
    # tools reach only sessions that are theirs alone, and a turn one session starts in another gets the lesser trust.
    (
        "ALTER TABLE jobs ADD COLUMN creator_owner INTEGER",
        "ALTER TABLE sessions ADD COLUMN people TEXT",
        """UPDATE sessions SET people = '["earlier"]'""",  # bot.runs.principal.EARLIER: whose turns, unknown
    ),
    # The journal row whose outbox entries hold the answer a message got: its own, or the newest of the batch it was
    # answered in (a cron tick folded into a person's turn), so a run's record tells what was really delivered.
    ("ALTER TABLE inbound ADD COLUMN answered_in INTEGER",),
    # Where each file that came with a message went in the workspace (recorded before it is fetched, `complete` once
    # it is all there), so that a turn run again after a crash takes it from there; and the answer to a
    # sessions_send whose sender waits, recorded once (its sender gets it, or its session as a message: never both).
    (
        """CREATE TABLE inbox_files (
            inbound_id INTEGER NOT NULL REFERENCES inbound (id) ON DELETE CASCADE,
            ref TEXT NOT NULL,
            path TEXT NOT NULL,
            complete INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (inbound_id, ref)
        ) WITHOUT ROWID""",
        """CREATE TABLE session_answers (
            job TEXT PRIMARY KEY,
            answer TEXT,
            created REAL NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX session_answers_created ON session_answers (created)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
