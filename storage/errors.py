"""Our own storage exceptions: database errors are translated into these at one boundary."""


class StorageError(Exception):
    """A database operation failed; the message says what and what to do."""


class NotFound(StorageError):
    """A run, candidate or other row does not exist."""


class Conflict(StorageError):
    """The write conflicts with existing data (duplicate id, lost lease, …)."""


class Unavailable(StorageError):
    """The database cannot be reached or is locked for too long."""


class TimedOut(StorageError):
    """A statement ran longer than the time limit of its read and was stopped."""


class ReadOnly(StorageError):
    """A write was attempted through the read-only reader (a programming error)."""


class InvalidTransition(StorageError):
    """A status change that makes no sense (e.g. a stopped run "completing")."""
