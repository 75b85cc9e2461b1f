"""cpersist: persist Python objects holding numpy arrays, fast and compressed.

>>> import cpersist
>>> cpersist.dump(obj, "model.cp", compress=3)       # doctest: +SKIP
>>> obj = cpersist.load("model.cp", mmap_mode="r")   # doctest: +SKIP
"""

__version__ = "0.1.0"

from .codecs import available_codecs  # noqa: E402
# Eager, unlike dump and load below: cpersist.convert is also a submodule, and
# importing a submodule binds its name on the package, so a lazily bound
# function would be shadowed by the module.
from .convert import convert  # noqa: E402
from .exceptions import (CorruptFileError, CpersistError,  # noqa: E402
                         UnsupportedVersionError, UntrustedObjectError,
                         UntrustedPickleError)

# These need numpy; imported on first access (PEP 562) so that the command
# line and `import cpersist` stay light.
_LAZY = {"dump": "api", "load": "api", "dumps": "inmemory", "loads": "inmemory",
         "inspect": "inspection", "verify": "inspection",
         "reseal": "inspection",
         "register_joblib_backend": "joblib_store"}


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


__all__ = [
    "CorruptFileError",
    "CpersistError",
    "UnsupportedVersionError",
    "UntrustedObjectError",
    "UntrustedPickleError",
    "available_codecs",
    "convert",
    "dump",
    "dumps",
    "inspect",
    "load",
    "loads",
    "register_joblib_backend",
    "reseal",
    "verify",
]
