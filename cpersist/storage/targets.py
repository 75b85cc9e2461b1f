"""Where a dump is written, told once: a path (whole or not at all,
:class:`cpersist.container.atomic.AtomicFile`), a file object (from its
position, what a failed dump wrote taken back,
:class:`cpersist.container.targets.FileTarget`) or a URL (through the
backend, :mod:`.fsspec.write`), each behind one target object.

:func:`cpersist._args.check_target` checks what a dump is given and returns
its :class:`DumpTarget`: the target told, not opened yet. The dump writer
opens it with :func:`open_dump_target`
(:func:`cpersist.pickling.dump.write_to`) on the thread that writes, a
background dump's own.
"""

from ..container.atomic import AtomicFile
from ..container.files import display_name, is_path
from ..container.targets import FileTarget
from .fsspec.write import remote_target


class DumpTarget:
    """A checked dump target (a path, a file object or a URL; ``remote``:
    a URL or a file system's path) and how to write it, not opened yet.
    ``direct``: a path's file is written around the page cache (see
    :class:`cpersist.container.atomic.AtomicFile`), memory that ``kept``
    (None, or as for :class:`cpersist.container.direct_io.DirectFile`)
    finds written straight from it."""

    __slots__ = ("target", "remote", "fsync", "storage_options", "timeout", "direct", "kept")

    def __init__(self, target, remote, fsync=False, storage_options=None, timeout=None):
        self.target = target
        self.remote = remote
        self.fsync = fsync
        self.storage_options = storage_options
        self.timeout = timeout
        self.direct = False
        self.kept = None

    @property
    def name(self):
        """The target's name, for messages."""
        return display_name(self.target)


def open_dump_target(told):
    """The target object the dump to ``told`` (a :class:`DumpTarget`) is
    written into (see :mod:`cpersist.container.targets`)."""
    target = told.target
    if told.remote:  # told before is_path: a URL is a string
        return remote_target(target, told.storage_options, told.timeout)
    if is_path(target):
        return AtomicFile(target, told.fsync, told.direct, free_old=True, kept=told.kept)
    return FileTarget(target)
