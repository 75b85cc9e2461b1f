"""Temporary files next to a dump's target: named after the target and the
machine, locked while their writer lives, and removed by the next writer to
that target once their writer died.
"""

import os
import stat

from .locks import fcntl, try_lock

#: Suffix of the temporary files ``dump`` writes next to the target before
#: renaming them onto it; a killed process may leave one behind, which the
#: next dump to that target removes.
TMP_SUFFIX = ".cpersist-tmp"

_NEW_FILE = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_BINARY", 0))
_OLD_FILE = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0))
#: Temporary file numbers that every dump to a path checks for a dead
#: writer's file, whether or not the numbers before them are taken. A dump
#: takes the free number of the lowest: a dead writer's file of a higher
#: number after a free one is left only by more than this many dumps to one
#: path at once, and found once that many run again. Each number checked
#: costs a failed ``lstat`` (about a microsecond), on every dump.
CHECKED_SLOTS = 4


def _host():
    """8 hex digits naming this machine in temporary file names, so that
    a file's lock is only ever judged by processes of the machine that
    made it (locks of a network file system may not reach other machines)."""
    global _HOST
    if _HOST is None:
        import binascii

        node = os.uname().nodename if hasattr(os, "uname") else os.environ.get(
            "COMPUTERNAME", "")
        _HOST = "%08x" % binascii.crc32(node.encode("utf-8", "replace"))
    return _HOST


_HOST = None


def temporary_name(directory, base, slot):
    """The path of temporary file number ``slot`` of a dump to
    ``directory/base``: ``.<base>.<host>-<slot>.cpersist-tmp``."""
    return _numbered(directory, base) % slot


def _numbered(directory, base):
    """:func:`temporary_name` with ``%d`` for the number: joined once for
    the five or more names a dump looks at."""
    prefix = os.path.join(directory, f".{base}.{_host()}-")
    return prefix.replace("%", "%%") + "%d" + TMP_SUFFIX


def new_temporary(directory, base, mode):
    """``(fd, path)`` of a new temporary file for a dump to
    ``directory/base``, the free one of the lowest number, created with
    ``mode`` (less the umask) and locked (:func:`fcntl.flock`) for as long
    as ``fd``'s open file description is open: a writer that dies releases
    its lock, and the next one removes its file
    (:func:`remove_dead_temporaries`)."""
    numbered = _numbered(directory, base)
    for slot in range(1 << 16):
        tmp = numbered % slot
        try:
            fd = os.open(tmp, _NEW_FILE, mode)
        except FileExistsError:
            continue
        if not try_lock(fd):
            return fd, tmp  # a file system without locks
        # A writer removing dead writers' files that locked this one between
        # its creation and this lock took it for one, and removed it before
        # letting the lock go: then it has no name left, so look again.
        # (Only a lock holder removes a temporary file, and only its writer
        # renames one: a file still linked once locked is still at ``tmp``.)
        try:
            if os.fstat(fd).st_nlink:
                return fd, tmp
        except OSError:
            pass
        os.close(fd)
    raise FileExistsError(f"no free temporary name in {directory} for {base}")


def remove_dead_temporaries(directory, base):
    """Remove the temporary files that dumps to ``directory/base`` left
    when their process died (``SIGKILL``, a crash, a power loss), and no
    other file.

    A dump's temporary file stays locked until it is renamed onto its
    target or removed (:func:`new_temporary`): one whose lock is free was
    left by a dead process. Only this machine's files are judged (their
    names say which machine made them), and only on a system and file
    system with locks. Files number 0 to :data:`CHECKED_SLOTS` - 1 are
    looked at, then the next ones as long as they exist: no directory is
    listed, so that a dump costs the same in a directory of a million
    files. Errors are ignored: the clean-up is a courtesy of the next dump.
    """
    if fcntl is None:
        return
    numbered = _numbered(directory, base)
    for slot in range(1 << 16):
        if not _remove_if_dead(numbered % slot) and slot >= CHECKED_SLOTS - 1:
            return


def _remove_if_dead(path):
    """Remove the temporary file at ``path`` if its lock is free; whether
    there was one."""
    try:
        # Mostly there is none: a failed lstat tells so for less than a
        # failed open. Anything else is judged through the open below.
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        fd = os.open(path, _OLD_FILE)
    except FileNotFoundError:
        return False
    except OSError:  # someone else's, a symbolic link (not a dump's to judge), no directory
        return os.path.lexists(path)
    try:
        st = os.fstat(fd)
        # Free: no writer holds it. Removed only if the name is still that
        # file's (not renamed onto its target meanwhile).
        if (stat.S_ISREG(st.st_mode) and try_lock(fd, timeout=0)
                and os.path.samestat(os.stat(path), st)):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)
    return True
