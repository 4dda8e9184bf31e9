"""Database errors of memory_ext as Python exceptions: each carries the SQLSTATE, message, detail
and hint the server sent (docs/reference.md, "Errors")."""
from __future__ import annotations

import psycopg


class MemoryError(Exception):  # noqa: A001 (the public name the spec gives it)
    """An error memory_ext (or PostgreSQL) raised for a call."""

    sqlstate: str | None
    message: str
    detail: str | None
    hint: str | None

    def __init__(self, message: str, *, sqlstate: str | None = None, detail: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate, self.message, self.detail, self.hint = sqlstate, message, detail, hint

    def __str__(self) -> str:
        text = f"{self.sqlstate}: {self.message}" if self.sqlstate else self.message
        return text + (f" (hint: {self.hint})" if self.hint else "")


class InvalidTransition(MemoryError):
    """MX001: a lifecycle transition the state machine refuses."""


class AuditAppendOnly(MemoryError):
    """MX002: a write to the audit log other than append."""


class ConsentRequired(MemoryError):
    """MX003: the user's consent is not in force."""


class DowngradeRefused(MemoryError):
    """MX004: a classification downgrade outside memory.reclassify."""


class SupersessionRefused(MemoryError):
    """MX005: a supersession the rules refuse."""


class Held(MemoryError):
    """MX006: a legal hold blocks the write or deletion."""


class SensitiveInput(MemoryError):
    """MX007: a user context value a detector refused."""


class BadArgument(MemoryError):
    """22023: an argument memory_ext refuses (the hint says what it takes)."""


class NotFound(MemoryError):
    """23503 / P0002: a referenced memory, entity or claim does not exist."""


class NotAllowed(MemoryError):
    """42501: the role may not do this, or may not act for this org."""


BY_SQLSTATE: dict[str, type[MemoryError]] = {
    "MX001": InvalidTransition, "MX002": AuditAppendOnly, "MX003": ConsentRequired, "MX004": DowngradeRefused,
    "MX005": SupersessionRefused, "MX006": Held, "MX007": SensitiveInput, "22023": BadArgument,
    "23503": NotFound, "P0002": NotFound, "42501": NotAllowed,
}


def from_psycopg(e: psycopg.Error) -> MemoryError:
    """The MemoryError subclass for a psycopg error, with the server's fields."""
    diag = e.diag
    state = e.sqlstate
    cls = BY_SQLSTATE.get(state or "", MemoryError)
    return cls(diag.message_primary or str(e), sqlstate=state, detail=diag.message_detail, hint=diag.message_hint)
