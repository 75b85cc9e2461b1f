"""cpersist: persist Python objects holding numpy arrays, fast and compressed.

>>> import cpersist
>>> cpersist.dump(obj, "model.cp", compress=3)       # doctest: +SKIP
>>> obj = cpersist.load("model.cp", mmap_mode="r")   # doctest: +SKIP
"""

__version__ = "0.1.0"

from .api import dump, load  # noqa: E402
from .codecs import available_codecs  # noqa: E402
from .convert import convert  # noqa: E402
from .exceptions import (CorruptFileError, CpersistError,  # noqa: E402
                         UnsupportedVersionError, UntrustedObjectError)
from .inspection import inspect, verify  # noqa: E402
from .joblib_store import register_joblib_backend  # noqa: E402

__all__ = [
    "CorruptFileError",
    "CpersistError",
    "UnsupportedVersionError",
    "UntrustedObjectError",
    "available_codecs",
    "convert",
    "dump",
    "inspect",
    "load",
    "register_joblib_backend",
    "verify",
]
