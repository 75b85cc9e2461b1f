"""Where a dump is written, told once: a path (whole or not at all,
:class:`cpersist.container.atomic.AtomicFile`), a file object (from its
position, what a failed dump wrote taken back,
:class:`cpersist.container.targets.FileTarget`) or a URL (through the
backend, :mod:`.fsspec.write`), each behind one target object.
"""

from ..container.atomic import AtomicFile
from ..container.files import is_path
from ..container.targets import FileTarget
from .fsspec.urls import is_remote
from .fsspec.write import remote_target


def open_target(target, fsync=False, storage_options=None, timeout=None):
    """The target of a path, a file object or a URL (checked by
    :func:`cpersist._args.check_target`)."""
    if is_remote(target):  # before is_path: a URL is a string
        return remote_target(target, storage_options, timeout)
    if is_path(target):
        return AtomicFile(target, fsync)
    return FileTarget(target)
