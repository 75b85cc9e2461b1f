"""Exception classes raised by cpersist.

Every error cpersist raises on purpose derives from :class:`CpersistError`, so
``except cpersist.CpersistError`` catches all of them.
"""


class CpersistError(Exception):
    """Base class of every error raised by cpersist."""


class CorruptFileError(CpersistError, ValueError):
    """The input is not a cpersist file, or it is truncated or damaged.

    The message names the file and what is wrong with it.
    """


class UnsupportedVersionError(CorruptFileError):
    """The file was written by a newer, incompatible major format version."""


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
