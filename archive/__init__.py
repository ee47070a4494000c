"""The archive: one SQLite file holding every task, run, kernel, evaluation, LLM call and event."""
from .store import Archive

__all__ = ["Archive"]
