"""Errors users see. Each one says what went wrong *and* what to do next."""

from __future__ import annotations


class MaragError(Exception):
    """Base class. `hint` is the next step for the user, printed after the message."""

    def __init__(self, message: str, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(f"{message}\n  hint: {hint}" if hint else message)


class CorpusError(MaragError):
    """Malformed, empty or unreadable input documents."""


class IndexFormatError(MaragError):
    """An index directory is missing, incomplete or from an incompatible version."""


class LLMError(MaragError):
    """A backend failed to answer (connection, model file, server error)."""


class StructuredOutputError(LLMError):
    """The model's output did not validate against the requested schema, even after repair.

    Agents catch this and fall back to their documented default; it never aborts a run.
    """

    def __init__(self, message: str, raw: str = "", hint: str | None = None):
        super().__init__(message, hint)
        self.raw = raw


class ContextOverflowError(StructuredOutputError):
    """The prompt does not fit the model's context. A structured-output failure, so the
    agent falls back (recorded) instead of failing the whole question."""


class UnknownNameError(MaragError, KeyError):
    """A name (strategy, backend, metric, dataset, ...) that no registry knows."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return Exception.__str__(self)


class MaragWarning(UserWarning):
    """Something the user should know that does not stop the work (the CLI prints it
    as one `warning:` line)."""
