"""Exec policy: decide from the command text alone whether an agent's shell command may run without asking a human.

settings.py holds the config models, tables.py the shell's words and wrappers, classify.py and arguments.py read the
command line, evaluate.py decides."""

from tools.exec_policy.classify import Analysis, Segment, analyze
from tools.exec_policy.evaluate import Verdict, evaluate
from tools.exec_policy.settings import DEFAULT_SAFE_BINS, AllowEntry, AllowRule, ExecSettings

__all__ = [
    "DEFAULT_SAFE_BINS",
    "AllowEntry",
    "AllowRule",
    "Analysis",
    "ExecSettings",
    "Segment",
    "Verdict",
    "analyze",
    "evaluate",
]
