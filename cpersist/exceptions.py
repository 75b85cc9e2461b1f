"""Exception classes raised by cpersist.

Every error cpersist raises on purpose derives from :class:`CpersistError`, so
``except cpersist.CpersistError`` catches all of them.
"""

import pickle


class CpersistError(Exception):
    """Base class of every error raised by cpersist."""


class CorruptFileError(CpersistError, ValueError):
    """The input is not a cpersist file, or it is truncated or damaged.

    The message names the file and what is wrong with it.
    """


class UnsupportedVersionError(CorruptFileError):
    """The file was written by a newer, incompatible major format version."""


class RemoteStorageError(CpersistError, OSError):
    """A request to remote storage failed: it timed out, the connection
    broke, the server refused it or the transfer was cut short.

    The message names the URL. A missing object raises
    :class:`FileNotFoundError` and a denied request :class:`PermissionError`
    instead, both naming the URL.
    """


class UntrustedObjectError(CpersistError):
    """A restricted load met a global that is not in its allowlist.

    Raised before the global is imported or called.
    """

    def __init__(self, module, name, source=None, reason=None):
        self.module = module
        self.name = name
        where = f" in {source}" if source else ""
        if reason is None:
            reason = "it is not in the allowlist of the restricted load"
        super().__init__(
            f"refused to load global {module}.{name}{where}: {reason}; pass "
            f"trusted=[({module!r}, {name!r})] (or a module prefix) if you trust "
            f"this file, after checking it with cpersist.inspect()"
        )


class UntrustedPickleError(CpersistError):
    """:func:`cpersist.convert` was given a joblib file or a pickle without
    being told to trust it: converting one means loading it, which runs the
    code it names. Raised before anything is read beyond the file's kind or
    written."""


class FileChangedError(CpersistError):
    """A file a :class:`~cpersist.LazyArray` reads no longer holds its array.

    The file was replaced or rewritten after the array was opened (or
    pickled); the message names the file and the array. Open the file again.
    """


class UnwritableTargetError(CpersistError, TypeError):
    """:func:`cpersist.dump` was given a file object that cannot take its
    bytes: one open in text mode, or one open for reading only. Raised
    before anything is written; open the file with ``"wb"``."""


class UnpicklableError(CpersistError, pickle.PicklingError, TypeError):
    """Something inside the object to dump cannot be pickled (a lambda, a
    local function, an open file, a lock...). The message names where it
    sits in the object, as :func:`cpersist.inspect` names arrays
    (``obj['callbacks'][2]``), and the pickle module's own reason. Also a
    :class:`TypeError`, which the pickle module raises for most such
    objects.

    Attributes
    ----------
    path : str
        Where the object sits, from ``obj``.
    """

    def __init__(self, message, path):
        super().__init__(message)
        self.path = path
