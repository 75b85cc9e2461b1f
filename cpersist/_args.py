"""Checking the arguments of the public functions: each raises an error naming
the argument and what it accepts, or returns the value to use.

The public faces (:mod:`cpersist.api`, :mod:`cpersist.handle`,
:mod:`cpersist.inmemory`, ``append`` and ``repair`` of
:mod:`cpersist.recordlog.writer`, the tools) check their arguments here, once, and
hand the values returned downwards, where nothing checks them again. Three
checks return a value of the layer whose knowledge they need:
:func:`check_compress` is :func:`cpersist.codecs.parse_compress` (parsing a
codec spec needs the registry of codecs), :func:`check_target` returns the
:class:`cpersist.storage.targets.DumpTarget` a dump opens, and
:func:`check_trusted` calls
:func:`cpersist.pickling.unpickler.normalize_trusted` (the globals a
restricted load allows are the unpickler's), imported on first use so that
a dump does not import the reading side.
"""

import pickle

from .container.files import check_writable_file, display_name, is_path
from .storage.fsspec.urls import is_remote, is_url
from .storage.fsspec.write import WRITE_TIMEOUT
from .storage.targets import DumpTarget
from ._runtime.threads import default_n_threads
from .codecs import parse_compress as check_compress
from .container import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE
from .exceptions import UnwritableTargetError
from .format.limits import DEFAULT as DEFAULT_LIMITS, Limits

__all__ = ["MMAP_MODES", "check_chunk_size", "check_compress", "check_limits", "check_mmap_mode",
           "check_log_path", "check_n_threads", "check_open_mode", "check_protocol",
           "check_storage_options", "check_target", "check_timeout", "check_trusted"]

MMAP_MODES = (None, "r", "r+", "c")


def check_protocol(protocol):
    if protocol is None:
        return pickle.HIGHEST_PROTOCOL
    if isinstance(protocol, bool) or not isinstance(protocol, int) or not (
        2 <= protocol <= pickle.HIGHEST_PROTOCOL
    ):
        raise ValueError(
            f"protocol must be None or an int from 2 to {pickle.HIGHEST_PROTOCOL}, "
            f"got {protocol!r}"
        )
    return protocol


def check_chunk_size(chunk_size):
    if chunk_size is None:
        return DEFAULT_CHUNK_SIZE
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not (
        1 <= chunk_size <= MAX_CHUNK_SIZE
    ):
        raise ValueError(
            f"chunk_size must be None or an int from 1 to {MAX_CHUNK_SIZE}, got {chunk_size!r}"
        )
    return chunk_size


def check_mmap_mode(mmap_mode):
    if mmap_mode not in MMAP_MODES:
        raise ValueError(
            f"mmap_mode must be one of None, 'r', 'r+', 'c'; got {mmap_mode!r}"
        )
    return mmap_mode


def check_n_threads(n_threads):
    """``n_threads`` as an int >= 1 (None: the CPUs this process may run on)."""
    if n_threads is None:
        return default_n_threads()
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise ValueError(f"n_threads must be None or an int >= 1, got {n_threads!r}")
    return n_threads


def check_storage_options(storage_options, target):
    """Raise unless ``storage_options`` is None, or a dict given with a URL."""
    if storage_options is None:
        return
    if not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if storage_options and not is_url(target):
        raise ValueError(f"storage_options apply to URLs only, not to {display_name(target)}")


def check_limits(limits):
    """``limits`` (None, a :class:`cpersist.Limits` or a dict of its fields)
    as a :class:`cpersist.Limits`."""
    if limits is None:
        return DEFAULT_LIMITS
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, dict):
        try:
            return Limits(**limits)
        except TypeError:
            known = ", ".join(Limits.__slots__)
            raise ValueError(f"limits: unknown field in {sorted(limits)}; the fields are "
                             f"{known}") from None
    raise TypeError(f"limits must be None, a cpersist.Limits or a dict, got "
                    f"{type(limits).__name__}")


def check_trusted(trusted):
    """``load``'s ``trusted`` as ``(restricted, allowed globals, trusted
    prefixes)``: see :func:`cpersist.pickling.unpickler.normalize_trusted`."""
    global _normalize_trusted
    if _normalize_trusted is None:  # the first load: a call-time import costs every call
        from .pickling.unpickler import normalize_trusted as _normalize_trusted
    return _normalize_trusted(trusted)


_normalize_trusted = None


def check_target(target, storage_options=None, fsync=False, timeout=None, *, background=False,
                 growing=False, codec=None):
    """The :class:`~cpersist.storage.targets.DumpTarget` of ``dump``'s
    ``target``, written with ``fsync``, ``storage_options`` and
    ``timeout``. Raise unless ``storage_options`` go with a URL,
    ``target`` is a path, a URL or a binary file object open for writing, a
    ``background`` dump goes to a path, and a ``growing`` one to a local
    path, in the foreground, with a codec it can grow by (``codec``)."""
    check_storage_options(storage_options, target)
    remote = is_remote(target)
    told = DumpTarget(target, remote, fsync, storage_options, timeout)
    local_path = is_path(target) and not remote
    if growing:
        if remote:
            raise UnwritableTargetError(
                f"{display_name(target)}: object stores cannot change an object in place, so "
                f"a growing file is written to a local path; upload it (or dump the loaded "
                f"object to the URL) when it is done growing")
        if not local_path:
            raise UnwritableTargetError(
                f"growing=True writes to a local path, which later commits append to, not "
                f"to {type(target).__name__}")
        if background:
            raise ValueError("growing=True writes in the foreground (background=False)")
        if codec is not None and codec.codec_id == "max":
            raise ValueError("compress='max' is for files written once; a growing file's "
                             "arrays take another codec (compress=3, 'zstd', 'lz4', ...)")
    if not local_path and not remote:
        if not hasattr(target, "write"):
            raise TypeError(
                f"target must be a path or a binary file object, got {type(target).__name__}"
            )
        check_writable_file(target)
    if background and not local_path:
        raise ValueError(f"background=True writes to a path only, got {display_name(target)}: "
                         f"a file object may be closed or written by its owner while the dump "
                         f"runs; dump to a path, or without background=True")
    return told


def check_log_path(path):
    """Raise unless ``path`` is a local path, which a record log is
    appended to (or repaired) through."""
    if is_remote(path):
        raise UnwritableTargetError(
            f"{display_name(path)}: object stores cannot append to an object in place; "
            f"append to a local record log (or growing file) and upload it when done "
            f"(cpersist.load it and cpersist.dump what it holds to the URL), or write one "
            f"object per record")
    if not is_path(path):
        raise UnwritableTargetError(
            f"cpersist.append takes a local path, not {type(path).__name__}: to write "
            f"several dumps to a stream, cpersist.dump each to a file opened 'ab'")


def check_open_mode(mode, compress=0, protocol=None, fsync=False, timeout=None):
    """Raise unless ``cpersist.open``'s ``mode`` is ``'r'`` or ``'a'``, and
    the options of appending come with ``'a'``."""
    if mode not in ("r", "a"):
        raise ValueError(f"mode must be 'r' (read) or 'a' (append records), not {mode!r}")
    if mode == "r" and (compress or protocol is not None or fsync or timeout is not None):
        raise TypeError("compress, protocol, fsync and timeout are for mode 'a' (appending)")


def check_timeout(timeout):
    """``timeout`` as seconds (a positive number; None: the default of
    :data:`cpersist.storage.fsspec.write.WRITE_TIMEOUT`)."""
    if timeout is None:
        return WRITE_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)
