"""Exceptions raised by mcr; each message names what was wrong."""


class McrError(RuntimeError):
    """Base class of every error mcr raises on purpose."""


class NotInitializedError(McrError):
    """A communication call came before init_distributed()."""


class TableError(McrError):
    """A tuning table is malformed or violates the schema (message names file and line)."""


class BackendUnavailable(McrError):
    """A backend was named that is unknown or cannot serve the call."""


class CallError(McrError, ValueError):
    """The arguments of one call are inconsistent (sizes, dtypes, ranks)."""


class McrTimeoutError(McrError, TimeoutError):
    """A blocking wait ran past MCR_TIMEOUT_S."""


class MismatchError(McrError):
    """Ranks of one group disagree (tables, call sizes or dtypes)."""
