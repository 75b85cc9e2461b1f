"""cpersist: persist Python objects holding numpy arrays, fast and compressed.

>>> import cpersist
>>> cpersist.dump(obj, "model.cp", compress=3)       # doctest: +SKIP
>>> obj = cpersist.load("model.cp", mmap_mode="r")   # doctest: +SKIP
"""

__version__ = "0.1.0"

from .codecs import available_codecs  # noqa: E402
from .exceptions import (ArrayNotFoundError, CodecLibraryError,  # noqa: E402
                         CorruptFileError, CpersistError, DaskArrayError, DtypeLibraryError,
                         FileChangedError, FileLockedError, LimitExceededError, RemoteStorageError,
                         RowBatchesError,
                         UnpicklableError, UnsupportedVersionError, UntrustedObjectError,
                         UntrustedPickleError, UnwritableTargetError)

# Imported on first access (PEP 562), so that `import cpersist` and the
# command line load neither numpy nor the container until they need them.
_LAZY = {"dump": "api", "load": "api", "dumps": "inmemory", "loads": "inmemory",
         "convert": "tools.convert", "inspect": "tools.inspection",
         "verify": "tools.inspection", "reseal": "tools.inspection",
         "register_joblib_backend": "joblib_store",
         "open": "handle", "FileHandle": "handle",
         "append": "recordlog.writer", "compact": "growfile.compact",
         "GrowingFile": "growfile.handle", "repair": "recordlog.writer", "RecordLog": "recordlog.reader", "LazyArray": "lazy.array",
         "Limits": "format.limits", "RowBatches": "pickling.row_batches",
         "LazyTensor": "lazy.tensor"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


# Not "open": ``from cpersist import *`` would shadow the builtin.
__all__ = [
    "ArrayNotFoundError",
    "CodecLibraryError",
    "CorruptFileError",
    "CpersistError",
    "DaskArrayError",
    "DtypeLibraryError",
    "FileChangedError",
    "FileLockedError",
    "FileHandle",
    "GrowingFile",
    "LazyArray",
    "LimitExceededError",
    "Limits",
    "RecordLog",
    "LazyTensor",
    "RemoteStorageError",
    "RowBatches",
    "RowBatchesError",
    "UnsupportedVersionError",
    "UntrustedObjectError",
    "UntrustedPickleError",
    "UnpicklableError",
    "UnwritableTargetError",
    "append",
    "available_codecs",
    "compact",
    "convert",
    "dump",
    "dumps",
    "inspect",
    "load",
    "loads",
    "register_joblib_backend",
    "repair",
    "reseal",
    "verify",
]
