"""A :class:`joblib.Memory` store backend that keeps each cached output as a
cpersist file.

joblib is optional: it is imported by :func:`register_joblib_backend` (and
by the first access to :class:`CpersistStoreBackend`), never by
``import cpersist``. The backend class is therefore built on first use, as a
subclass of joblib's ``FileSystemStoreBackend``, and this module's
``__getattr__`` hands out that one class, so that pickle finds it by name
when joblib sends a ``Memory`` or a cached function to another process.
"""

import functools
import os
import time
import warnings

from ._args import MMAP_MODES
from .api import dump, load
from .codecs import parse_compress
from .container import MAGIC
from .container.tiny import TINY_MAGIC
from .exceptions import CorruptFileError

#: Name registered with :func:`joblib.register_store_backend`.
BACKEND_NAME = "cpersist"
#: The output keeps joblib's file name although it holds a cpersist file:
#: joblib's ``contains_item`` and ``get_items`` (the access time that orders
#: ``reduce_size``'s deletions) look for this exact name, so the rest of
#: joblib's layout, listing and size accounting work unchanged. The magic
#: bytes, not the extension, say what the file is (``cpersist info`` reads it).
OUTPUT_NAME = "output.pkl"


def register_joblib_backend():
    """Register the ``"cpersist"`` store backend of :class:`joblib.Memory`.

    After this call, ``joblib.Memory(location, backend="cpersist")`` caches
    function outputs as cpersist files, one per call, in joblib's usual
    directory layout (so ``clear``, ``reduce_size`` and the cache listing
    work as with the default store). ``compress`` takes cpersist's values:
    ``True`` or an int 1–9 is ``"zstd-auto"`` at that level, a codec name or
    a ``(name, level)`` tuple picks the codec; ``0``/``False`` (the default)
    writes raw files, whose arrays ``mmap_mode`` maps instead of reading.
    Compressed arrays cannot be mapped: loading them with ``mmap_mode``
    reads them into memory with one ``UserWarning`` per load.

    Calling it again is harmless. A ``Memory`` or cached function pickled to
    another process keeps working there without a new registration; a
    ``Memory`` built in another process needs the registration there too.

    Returns
    -------
    type
        The registered backend class, :class:`CpersistStoreBackend`.

    Raises
    ------
    ImportError
        If joblib is not installed.

    Examples
    --------
    >>> import joblib, cpersist
    >>> backend = cpersist.register_joblib_backend()
    >>> backend.__name__
    'CpersistStoreBackend'
    """
    joblib = _import_joblib()
    backend = _backend_class()
    joblib.register_store_backend(BACKEND_NAME, backend)
    return backend


def __getattr__(name):
    if name == "CpersistStoreBackend":
        return _backend_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _import_joblib():
    try:
        import joblib
    except ImportError as exc:
        raise ImportError(
            "the cpersist store backend of joblib.Memory needs joblib, which is "
            "not installed: pip install joblib"
        ) from exc
    return joblib


def _is_cpersist_file(path):
    with open(path, "rb") as file:
        head = file.read(len(MAGIC))
        return head == MAGIC or head.startswith(TINY_MAGIC)


@functools.lru_cache(maxsize=None)
def _backend_class():
    _import_joblib()
    from joblib import numpy_pickle
    from joblib._store_backends import CacheWarning, FileSystemStoreBackend
    from joblib.logger import format_time

    class CpersistStoreBackend(FileSystemStoreBackend):
        """joblib's file system store, writing each output with :func:`cpersist.dump`.

        Only how an item is written and read differs from joblib's default
        store; ``configure`` also checks ``compress`` and ``mmap_mode`` up
        front, because joblib turns any error of ``dump_item`` into a
        warning and would then silently cache nothing.
        """

        def configure(self, location, verbose=1, backend_options=None):
            options = dict(backend_options or {})
            parse_compress(options.get("compress", False))  # ValueError on a bad value
            if options.get("mmap_mode") not in MMAP_MODES:
                raise ValueError(
                    f"the cpersist store backend takes mmap_mode None, 'r', 'r+' or "
                    f"'c'; got {options['mmap_mode']!r}"
                )
            super().configure(location, verbose=verbose, backend_options=options)

        def load_item(self, call_id, verbose=1, timestamp=None, metadata=None):
            """Load the output stored at ``call_id`` (a list of str)."""
            full_path = os.path.join(self.location, *call_id)
            if verbose > 1:
                _print_loading(full_path, call_id, verbose, timestamp, metadata)
            filename = os.path.join(full_path, OUTPUT_NAME)
            if not self._item_exists(filename):
                raise KeyError(
                    f"Non-existing item (may have been cleared).\nFile {filename} "
                    f"does not exist"
                )
            try:
                # Opened once: a cache hit on a small result costs little
                # more than opening the file.
                return load(filename, mmap_mode=self.mmap_mode)
            except CorruptFileError:
                if _is_cpersist_file(filename):
                    raise
            # Written by joblib's default store at the same location.
            return numpy_pickle.load(filename, mmap_mode=self.mmap_mode)

        def dump_item(self, call_id, item, verbose=1):
            """Store ``item`` at ``call_id`` (a list of str) as a cpersist file."""
            item_path = os.path.join(self.location, *call_id)
            filename = os.path.join(item_path, OUTPUT_NAME)
            try:
                if not self._item_exists(item_path):
                    self.create_location(item_path)
                if verbose > 10:
                    print(f"Persisting in {item_path}")
                # joblib's write-then-rename under a unique temporary name
                # (its rename retries Windows' transient access-denied
                # errors); cpersist.dump writes that name atomically too, so a
                # failed dump leaves no partial file behind.
                self._concurrency_safe_write(item, filename, self._write_output)
            except Exception as exc:
                # As joblib's default store: the result is still returned,
                # only not cached.
                warnings.warn(
                    f"Unable to cache to disk: cpersist could not write {filename}: "
                    f"{type(exc).__name__}: {exc}",
                    CacheWarning,
                    stacklevel=2,
                )

        def _write_output(self, item, path):
            dump(item, path, compress=self.compress)

    def _print_loading(full_path, call_id, verbose, timestamp, metadata):
        # The message of joblib's default store.
        ts_string = ("{: <16}".format(format_time(time.time() - timestamp))
                     if timestamp is not None else "")
        signature = os.path.basename(call_id[0])
        if metadata is not None and "input_args" in metadata:
            signature += "({})".format(", ".join(
                "{}={}".format(*item) for item in metadata["input_args"].items()))
        msg = f"[Memory]{ts_string}: Loading {signature}"
        print(f"{msg}..." if verbose < 10 else f"{msg} from {full_path}")

    # Pickle finds the class by this name, through __getattr__ above.
    CpersistStoreBackend.__module__ = __name__
    CpersistStoreBackend.__qualname__ = "CpersistStoreBackend"
    return CpersistStoreBackend
