"""Where a raw array read from a file into new memory starts: never just
after its bytes' place within a page of the file, where the kernel's copy
out of the page cache runs at a fraction of its speed
(:func:`cpersist._runtime.pages.aliased`); and a large one on a huge page,
which the kernel faults in faster than small ones."""

import mmap

import numpy as np
import pytest

import cpersist
from cpersist import CorruptFileError
from cpersist._runtime import pages
from cpersist.container import ContainerReader
from cpersist.container.sources import MemorySource, source_for
from cpersist.container.sources.local import PHASED_FROM
from cpersist.pickling.array_memory import allocate

from .conftest import assert_same

PAGE = mmap.PAGESIZE
#: More than glibc's largest threshold for giving a block a map of its own
#: (32 MiB), which then starts 16 bytes into a page: the array a plain
#: ``np.empty`` gives, copied into from a section that starts on a page.
BIG = 40 << 20


def _address(view):
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def _array_section(path):
    """``(offset in the file, bytes)`` of the one array section of ``path``."""
    with open(path, "rb") as file:
        reader = ContainerReader(file)
        section, = (s for s in reader.sections if s.meta.get("kind") == "array")
        return reader.base + section.offset, section.raw_size


def _ahead(arr, offset):
    """How far the array's memory starts after its bytes in the file, within a page."""
    return (arr.ctypes.data - offset) % PAGE


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_large_raw_array_is_read_into_memory_a_copy_fills_at_full_speed(tmp_path, order,
                                                                          n_threads):
    arr = np.arange(BIG // 8, dtype=np.float64).reshape(-1, 512)
    arr = np.asfortranarray(arr) if order == "F" else arr
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)
    offset, _ = _array_section(path)
    out = cpersist.load(path, n_threads=n_threads)
    assert_same(arr, out)
    assert not 0 < _ahead(out, offset) < pages.ALIASED_WITHIN
    if pages.huge_page_size():
        assert (out.ctypes.data - offset % PAGE) % pages.huge_page_size() == 0
    out[0, 0] = -1.0  # its own memory, writable
    assert cpersist.load(path)[0, 0] == 0.0


def test_a_placed_array_with_damaged_bytes_is_refused(tmp_path):
    arr = np.arange(BIG // 8, dtype=np.float64)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)
    offset, size = _array_section(path)
    with open(path, "r+b") as file:
        file.seek(offset + size // 2)
        byte = file.read(1)
        file.seek(offset + size // 2)
        file.write(bytes([byte[0] ^ 1]))
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        cpersist.load(path)


@pytest.mark.parametrize("phase", [0, 16, 128, PAGE - 64])
@pytest.mark.parametrize("align", [0, 16])
def test_memory_a_copy_would_fill_slowly_is_given_up_for_a_placed_block(phase, align):
    dtype, shape = np.dtype("<f8"), (BIG // 8,)
    arr, view = allocate(dtype, shape, "C", align, phase)
    assert arr.shape == shape and arr.dtype == dtype and arr.flags.writeable
    assert view.nbytes == arr.nbytes and _address(view) == arr.ctypes.data
    assert not pages.aliased(view, phase)
    if align:
        assert arr.ctypes.data % align == 0


def _may_be_huge(start, end):
    """Whether the memory from ``start`` to ``end`` lies within one map the
    kernel may back with huge pages (``/proc/self/smaps``)."""
    with open("/proc/self/smaps") as file:
        lines = file.read().splitlines()
    within = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(x, 16) for x in head.split("-"))
            within = low <= start and end <= high
        elif within and head == "THPeligible:":
            return line.split()[1] == "1"
    return False


@pytest.mark.skipif(not pages.huge_page_size(), reason="the kernel backs no memory with huge pages")
@pytest.mark.parametrize("nbytes, last_huge", [(10_000_000, True), (5_000_000, False)])
@pytest.mark.parametrize("phase", [0, 128])
def test_a_large_array_starts_on_a_huge_page_and_ends_on_one_only_if_it_fills_most_of_it(
        nbytes, last_huge, phase):
    # 10 MB leaves 0.46 MiB of its last huge page unused, a twentieth of the
    # array; 5 MB leaves 1.23 MiB, a quarter: that one stays in small pages.
    huge = pages.huge_page_size()
    arr, view = allocate(np.dtype("u1"), (nbytes,), "C", 0, phase)
    assert arr.nbytes == view.nbytes == nbytes and arr.flags.writeable
    start = arr.ctypes.data - phase
    assert start % huge == 0
    whole = start + (phase + nbytes) // huge * huge
    assert _may_be_huge(start, whole)
    assert _may_be_huge(whole, whole + huge) is last_huge
    view[-1:] = b"\x01"  # the last byte is the array's own, writable


def test_a_copy_just_after_its_source_within_a_page_is_aliased():
    block = mmap.mmap(-1, 4 * PAGE)
    try:
        whole = memoryview(block)
        assert not pages.aliased(whole, 0)  # the same place in a page
        assert pages.aliased(whole[16:], 0)  # glibc's large blocks, a section on a page
        assert not pages.aliased(whole[16:], 128)  # behind its source
        assert not pages.aliased(whole[16 + pages.ALIASED_WITHIN:], 16)
        del whole
    finally:
        block.close()


def test_only_reads_long_enough_from_a_file_say_where_to_place_their_memory(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(3 * PHASED_FROM))
    with open(path, "rb") as file, source_for(file, "a.bin") as source:
        assert source.page_phase(PAGE + 128, PHASED_FROM) == 128
        assert source.page_phase(128, PHASED_FROM - 1) is None
    assert MemorySource(bytes(PHASED_FROM)).page_phase(0, PHASED_FROM) is None


def test_a_small_array_read_from_a_file_owns_its_memory(tmp_path):
    arr = np.arange(PHASED_FROM // 8 - 1, dtype=np.float64)
    path = tmp_path / "a.cp"
    cpersist.dump(arr, path)
    out = cpersist.load(path)
    assert_same(arr, out)
    assert out.flags.owndata
