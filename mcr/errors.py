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


class LibraryError(McrError):
    """A communication library failed a call (a peer gone, a connection reset, an MPI error);
    the message names the call, the library, the bytes and the group, the cause is chained."""


def library_error(e: BaseException, what: str) -> McrError:
    """e as mcr's error about `what` (`all_reduce of 4000 B on gloo, group [0, 1]`); mcr's own
    errors pass through."""
    if isinstance(e, McrError):
        return e
    return LibraryError(f"{what} failed in the library: {type(e).__name__}: "
                        f"{str(e).strip()[:600]}")
