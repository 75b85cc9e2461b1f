"""Faulting in the pages of new memory before it is written: the kernel backs
(and zeroes) them in one call, ``madvise(MADV_POPULATE_WRITE)``, on the
thread that asks, so that other threads can then fill them without a page
fault of their own; and one thread's read into memory that was never
backed (:func:`fault_in_fresh`) makes no page fault per page either.
What size of page new memory is backed with (:func:`huge_page_size`,
:func:`keep_small_pages`), and where a copy into it runs slowly
(:func:`aliased`).

Only on Linux 5.14 and later; elsewhere :func:`fault_in` does nothing and
says so.
"""

import errno
import mmap
import sys

#: Linux's advice that faults a range's pages in as if each were written.
MADV_POPULATE_WRITE = 23

#: Views smaller than this are never looked at by :func:`fault_in_fresh`:
#: what a page fault costs on so few pages is less than the look.
FRESH_FROM = 256 << 10

#: A copy by the kernel out of the page cache (a ``pread``) into memory
#: that starts less than this many bytes after its source within a page
#: runs several times slower on CPUs whose kernel copies with ``rep movsb``
#: (AMD Zen 3): each load from the source seems to depend on a store just
#: made to the destination (4K aliasing). glibc
#: starts every large block 16 bytes into a page, and a file's large raw
#: sections start on a page.
ALIASED_WITHIN = 64

_madvise = None
_mincore = None
_huge_page = None
_LINUX = sys.platform.startswith("linux")
_usable = _LINUX


def _load_madvise():
    global _madvise, _usable
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, ImportError):
        _usable = False
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    _madvise = function, ctypes.c_char.from_buffer, ctypes.addressof, ctypes.get_errno
    return _madvise


def can_fault_in():
    """Whether :func:`fault_in` does anything on this platform (as far as is
    known before the kernel has been asked once)."""
    return _usable


def fault_in(view):
    """Back the whole pages of ``view`` (a writable memoryview of bytes) with
    memory now, on this thread; ctypes releases the GIL during the call.
    The bytes of ``view`` are left as they were.

    Returns whether it did: not where the platform cannot (not Linux, or a
    kernel older than 5.14, which refuses the advice and is then never
    asked again), nor when the kernel cannot back them now (the writes that
    follow then fault them in one at a time, as without this call).
    """
    global _usable
    if not _usable or not view.nbytes:
        return False
    madvise, char_at, address_of, get_errno = _madvise or _load_madvise() or (None,) * 4
    if madvise is None:
        return False
    first, length = _whole_pages(address_of(char_at(view)), view.nbytes)
    if length and madvise(first, length, MADV_POPULATE_WRITE) != 0:
        if get_errno() == errno.EINVAL:
            _usable = False
        return False
    return True


def fault_in_fresh(view, smallest=FRESH_FROM):
    """:func:`fault_in` ``view`` (a writable memoryview of bytes, about to
    be filled by one read) when it is at least ``smallest`` bytes and
    its last whole page is not backed yet (``mincore``): memory just taken
    from the kernel, every page of which the read would otherwise fault in
    one at a time (on a virtual machine, a large part of a load into new
    memory). Memory a program has used before (the allocator's, reused) is
    backed already and is left as it is: the advice walks every page even
    when there is nothing to do. Returns whether it faulted the pages in.
    """
    if not _usable or view.nbytes < smallest or view.readonly:
        return False
    mincore = _mincore or _load_mincore()
    if mincore is None:
        return False
    function, char_at, address_of, flag, flag_at = mincore
    last = (address_of(char_at(view)) + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    last -= mmap.PAGESIZE
    # One flag for every thread: two asking at once may get each other's
    # answer, which costs one of them a fault per page or an advice for
    # nothing, and changes no byte.
    if function(last, mmap.PAGESIZE, flag_at) != 0 or flag.raw[0] & 1:
        return False  # backed (or not a page the kernel says anything of)
    return fault_in(view)


def huge_page_size():
    """The size of the huge pages the kernel backs large anonymous memory
    with where it is asked to (transparent huge pages: 2 MiB on x86-64),
    or 0 where it never does.

    numpy asks for them for every array of 4 MiB or more. On a virtual
    machine the kernel faults memory in several times faster per byte in
    huge pages, but only in those whose whole range lies within the block
    malloc gave (see :func:`~cpersist.pickling.array_memory.allocate`).
    """
    global _huge_page
    if _huge_page is None:
        _huge_page = _read_huge_page_size() if _LINUX else 0
    return _huge_page


def _read_huge_page_size():
    sysfs = "/sys/kernel/mm/transparent_hugepage/"
    try:
        # Binary, as other sysfs reads here: a first text open sets up a decoder.
        with open(sysfs + "enabled", "rb") as file:
            if b"[never]" in file.read():
                return 0
        with open(sysfs + "hpage_pmd_size", "rb") as file:
            size = int(file.read())
    except (OSError, ValueError):
        return 0
    return size if size > mmap.PAGESIZE and not size & (size - 1) else 0


def keep_small_pages(view):
    """Ask the kernel to back the whole pages of ``view`` (writable bytes)
    with base pages only, not huge ones: memory that would be faulted in
    as part of a huge page mostly unused. A kernel that refuses changes
    nothing but how much memory that takes."""
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)  # its number differs by architecture
    if not _LINUX or advice is None or not view.nbytes:
        return
    madvise, char_at, address_of, _ = _madvise or _load_madvise() or (None,) * 4
    if madvise is not None:
        first, length = _whole_pages(address_of(char_at(view)), view.nbytes)
        if length:
            madvise(first, length, advice)


def _whole_pages(start, nbytes):
    """``(address, length)`` of the whole pages within ``nbytes`` from ``start``."""
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (start + nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    return first, max(0, end - first)


def aliased(view, phase):
    """Whether a copy by the kernel into ``view`` (writable bytes) of bytes
    that start ``phase`` bytes into a page of their file runs slowly: the
    destination starts less than :data:`ALIASED_WITHIN` bytes after the
    source within a page."""
    import ctypes  # after the first call, a lookup

    start = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return 0 < (start - phase) % mmap.PAGESIZE < ALIASED_WITHIN


def _load_mincore():
    global _mincore, _usable
    try:
        import ctypes

        # Without use_errno, which would save errno around every call: a
        # failure is only taken for "backed".
        function = ctypes.CDLL(None).mincore
    except (OSError, AttributeError, ImportError):
        _usable = False
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    function.restype = ctypes.c_int
    flag = ctypes.create_string_buffer(1)
    _mincore = (function, ctypes.c_char.from_buffer, ctypes.addressof, flag,
                ctypes.addressof(flag))
    return _mincore
