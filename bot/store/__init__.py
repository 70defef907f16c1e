"""The state store: session index, inbound journal, outbox, previews, pairing, approvals, scheduled jobs, the files
messages brought and the answers between sessions, each behind a small role interface (`SessionStore`,
`JournalStore`, `OutboxStore` …); SQLite by default (`SqliteStore`)."""

from bot.store.answers import AnswerStore
from bot.store.approvals import ApprovalDecision, ApprovalRecord, ApprovalStatus, ApprovalStore
from bot.store.base import DEDUPE_SECONDS, Clock, StoreError
from bot.store.database import BUSY_TIMEOUT_MS, DB_FILE, KEY_FILE
from bot.store.inbox import InboxFileRecord, InboxStore
from bot.store.interface import DeliveryStore, IntakeStore, RetentionStore, Store
from bot.store.jobs import JobRecord, JobRunRecord, JobStore, RunStatus
from bot.store.journal import InboundRecord, InboundStatus, JournalStore
from bot.store.outbox import OutboxEntry, OutboxRecord, OutboxStatus, OutboxStore
from bot.store.pairing import PAIRING_ALPHABET, PairingRecord, PairingStore
from bot.store.previews import PreviewRecord, PreviewStore
from bot.store.schema import SCHEMA_VERSION
from bot.store.sessions import SessionRecord, SessionStore, SessionTouch, new_session_id
from bot.store.sqlite import SqliteStore
from bot.store.subagents import SubagentRecord, SubagentStatus, SubagentStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DB_FILE",
    "DEDUPE_SECONDS",
    "KEY_FILE",
    "PAIRING_ALPHABET",
    "SCHEMA_VERSION",
    "AnswerStore",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalStatus",
    "ApprovalStore",
    "Clock",
    "DeliveryStore",
    "InboundRecord",
    "InboundStatus",
    "InboxFileRecord",
    "InboxStore",
    "IntakeStore",
    "JobRecord",
    "JobRunRecord",
    "JobStore",
    "JournalStore",
    "OutboxEntry",
    "OutboxRecord",
    "OutboxStatus",
    "OutboxStore",
    "PairingRecord",
    "PairingStore",
    "PreviewRecord",
    "PreviewStore",
    "RetentionStore",
    "RunStatus",
    "SessionRecord",
    "SessionStore",
    "SessionTouch",
    "SqliteStore",
    "Store",
    "StoreError",
    "SubagentRecord",
    "SubagentStatus",
    "SubagentStore",
    "new_session_id",
]
