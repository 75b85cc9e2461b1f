"""Checking the arguments of the public functions: each raises an error naming
the argument and what it accepts, or returns the value to use."""

import pickle

from ._runtime.files import check_writable_file, display_name, is_path
from ._runtime.remote import WRITE_TIMEOUT, check_storage_options, is_remote
from .container import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE

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


def check_target(target, storage_options=None, background=False, what="target"):
    """Raise unless ``target`` is a path, a URL or a binary file object
    open for writing, ``storage_options`` go with a URL, and a
    ``background`` dump goes to a path."""
    remote = is_remote(target)
    local_path = is_path(target) and not remote
    if not local_path and not remote:
        if not hasattr(target, "write"):
            raise TypeError(
                f"{what} must be a path or a binary file object, got {type(target).__name__}"
            )
        check_writable_file(target)
    check_storage_options(storage_options, target)
    if background and not local_path:
        raise ValueError(f"background=True writes to a path only, got {display_name(target)}: "
                         f"a file object may be closed or written by its owner while the dump "
                         f"runs; dump to a path, or without background=True")


def check_timeout(timeout):
    """``timeout`` as seconds (a positive number; None: the default of
    :data:`cpersist._runtime.remote.WRITE_TIMEOUT`)."""
    if timeout is None:
        return WRITE_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)
