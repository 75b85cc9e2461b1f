"""New memory for an array about to be loaded: placed where the kernel's
copy out of the page cache runs at full speed, and, for a large one,
where the kernel backs it in huge pages, which it faults in several times
faster per byte than small ones on a virtual machine.
"""

import mmap

import numpy as np

from .._runtime.pages import aliased, huge_page_size, keep_small_pages
from .arrays import byte_view


#: numpy asks the kernel for huge pages for arrays of at least this many bytes.
HUGE_FROM = 4 << 20


def allocate(dtype, shape, order, align=0, phase=None):
    """An uninitialised array to load into, and a byte view of its memory.

    With ``align``, the array's first byte is at a multiple of ``align``
    bytes (it then views a block a little larger, its ``base``). ``phase``:
    the array is filled by a copy by the kernel of bytes that start
    ``phase`` bytes into a page of their file; memory that such a copy
    fills slowly (:func:`~cpersist._runtime.pages.aliased`: any large
    block of glibc's, for a section that starts on a page) is given up for
    a block in which the array starts ``phase`` bytes into a page.

    An array of :data:`HUGE_FROM` bytes or more starts (``phase`` bytes
    after) a huge page boundary (:func:`~cpersist._runtime.pages.huge_page_size`),
    so that all of it is faulted in as huge pages, not just the whole huge
    pages within a block malloc placed anywhere: its last, partly used one
    too when that wastes at most a sixteenth of the array, else the tail
    is kept in small pages.
    """
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    huge = huge_page_size() if nbytes >= HUGE_FROM else 0
    if not align and not huge:
        arr = np.empty(shape, dtype=dtype, order=order)
        if arr.size == 0 or dtype.itemsize == 0:
            return arr, memoryview(b"")
        view = memoryview(byte_view(arr))
        if phase is None or not aliased(view, phase):
            return arr, view
        del arr, view
    at = 0
    if phase is not None and phase % (align or 1) == 0:  # aligned too where asked
        align, at = mmap.PAGESIZE, phase
    if not nbytes:
        return np.empty(shape, dtype=dtype, order=order), memoryview(b"")
    if huge:  # a multiple of any smaller alignment
        return _on_huge_pages(dtype, shape, order, nbytes, at, huge)
    block = np.empty(nbytes + align, dtype=np.uint8)
    start = (at - block.ctypes.data) % align
    arr = np.ndarray(shape, dtype=dtype, buffer=block, offset=start, order=order)
    return arr, memoryview(byte_view(arr))


def _on_huge_pages(dtype, shape, order, nbytes, at, huge):
    """:func:`allocate`'s array starting ``at`` bytes after a huge page boundary."""
    # Room for the array after the boundary and for its last huge page:
    # room malloc maps but nothing touches costs no memory.
    block = np.empty(at + nbytes + 2 * huge, dtype=np.uint8)
    first = (at - block.ctypes.data) % huge  # the array's first byte
    if first < at:  # its huge page would start before the block
        first += huge
    tail = (at + nbytes) % huge
    if tail and huge - tail > nbytes // 16:
        keep_small_pages(memoryview(block)[first + nbytes - tail:])  # from its last huge page
    arr = np.ndarray(shape, dtype=dtype, buffer=block, offset=first, order=order)
    return arr, memoryview(byte_view(arr))
