"""Exec approvals: the gate a risky command waits at, the card that asks an approver, and how the command is shown
on it (every invisible character escaped)."""
