"""A restricted load of a stream whose small arrays' bytes are out-of-band
buffers (pickle protocol 5's NEXT_BUFFER and READONLY_BUFFER), given to the
machine as a sectioned dump's reader gives them: writable memoryviews, in
stream order."""

import io
import pickle
import struct

import numpy as np
import pytest

import cpersist
from cpersist.format.limits import DEFAULT
from cpersist.pickler import inline_array
from cpersist.pickling import restricted
from cpersist.pickling.unpickler import ArrayUnpickler
from cpersist.stream.opcodes import walk
from cpersist.stream.paths import scan_arrays

from .conftest import assert_same


class _OutOfBand(pickle.Pickler):
    """Reduces arrays as the ArrayPickler does its small ones, at protocol 5."""

    def reducer_override(self, obj):
        if type(obj) is not np.ndarray:
            return NotImplemented
        fortran = obj.ndim > 1 and obj.flags.f_contiguous and not obj.flags.c_contiguous
        return inline_array, (pickle.PickleBuffer(obj.T if fortran else obj), obj.dtype,
                              obj.shape, "F" if fortran else "C")


def dump(obj, out_of_band=True):
    """``(stream, buffers)`` of ``obj``: every buffer out of band, each
    copied into memory of its own, as a reader gives them."""
    collected = []
    file = io.BytesIO()
    _OutOfBand(file, protocol=5, buffer_callback=(
        (lambda b: collected.append(b) or False) if out_of_band else None)).dump(obj)
    return file.getvalue(), [memoryview(bytearray(b.raw())) for b in collected]


def load(stream, buffers=None, limits=DEFAULT, dry=False):
    unpickler = ArrayUnpickler(io.BytesIO(stream), None, True, source="<s>")
    return restricted.run(stream, unpickler.resolve, unpickler.persistent_load, limits, "<s>",
                          on_protocol=unpickler._set_protocol, dry=dry, buffers=buffers)


def _read_only(arr):
    arr.flags.writeable = False
    return arr


OBJ = {"c": np.arange(12, dtype="<i8").reshape(3, 4),
       "f": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
       "big_endian": np.arange(5, dtype=">u2"),
       "struct": np.zeros(3, [("a", "<i4"), ("b", "f8")]),
       "read_only": _read_only(np.linspace(0, 1, 7))}
#: Opcodes of a stream by hand: ``inline_array`` and a dtype.
INLINE = pickle.GLOBAL + b"cpersist.pickler\ninline_array\n"
F8 = pickle.GLOBAL + b"numpy\ndtype\n" + pickle.SHORT_BINUNICODE + b"\x02f8" + pickle.TUPLE1 \
    + pickle.REDUCE


def call_inline(data, count, order=b"C", dtype=F8):
    """``inline_array(data, dtype (float64), (count,), order)``."""
    return (INLINE + pickle.MARK + data + dtype + pickle.BININT2 + struct.pack("<H", count)
            + pickle.TUPLE1
            + pickle.SHORT_BINUNICODE + b"\x01" + order + pickle.TUPLE + pickle.REDUCE)


def v5(body):
    return pickle.PROTO + b"\x05" + body + pickle.STOP


def test_arrays_over_buffers_load_as_in_band_and_view_the_buffers():
    stream, buffers = dump(OBJ)
    assert pickle.NEXT_BUFFER in stream and pickle.READONLY_BUFFER in stream
    loaded = load(stream, buffers)
    in_band = load(dump(OBJ, out_of_band=False)[0])
    for name, arr in OBJ.items():
        assert_same(arr, loaded[name], name)
        assert loaded[name].flags.writeable == in_band[name].flags.writeable is True, name
    # A writable buffer is viewed, costing nothing; a read-only one copied.
    viewed = [name for name in OBJ if any(np.shares_memory(loaded[name], b) for b in buffers)]
    assert viewed == ["c", "f", "big_endian", "struct"]


def test_the_stream_must_take_every_buffer_and_no_more():
    stream, buffers = dump([np.arange(3.0), np.arange(4.0)])
    with pytest.raises(cpersist.CorruptFileError, match="more out-of-band buffers than the "
                                                        r"file holds \(1\)"):
        load(stream, buffers[:1])
    with pytest.raises(cpersist.CorruptFileError, match="more out-of-band buffers"):
        load(stream)
    # The C unpickler leaves a buffer it does not take unread: the machine refuses.
    extra = buffers + [memoryview(bytearray(8))]
    assert pickle.loads(v5(pickle.NEXT_BUFFER), buffers=buffers) is buffers[0]
    with pytest.raises(cpersist.CorruptFileError, match="holds 1 out-of-band buffer its"):
        load(stream, extra)
    with pytest.raises(cpersist.CorruptFileError, match="holds 2 out-of-band buffers its"):
        load(v5(pickle.NONE), buffers)


def test_out_of_band_data_needs_protocol_5():
    body = pickle.NEXT_BUFFER + pickle.STOP
    buffers = [memoryview(bytearray(b"ab"))]
    assert pickle.loads(pickle.PROTO + b"\x04" + body, buffers=buffers) is buffers[0]  # C takes it
    for stream in (pickle.PROTO + b"\x04" + body, body):
        with pytest.raises(cpersist.CorruptFileError, match="out-of-band data in a stream of "
                                                            "protocol"):
            load(stream, buffers)
    assert load(pickle.PROTO + b"\x05" + body, buffers) is buffers[0]


def test_a_bare_buffer_never_writes_into_what_an_array_views():
    """A buffer put in a list, as the C unpickler gives it (a memoryview),
    and also an array's data: one of them is a copy, whichever comes first."""
    bare_first = v5(pickle.EMPTY_LIST + pickle.NEXT_BUFFER + pickle.BINPUT + b"\x00"
                    + pickle.APPEND + call_inline(pickle.BINGET + b"\x00", 2) + pickle.APPEND)
    array_first = v5(pickle.EMPTY_LIST + call_inline(pickle.NEXT_BUFFER + pickle.BINPUT + b"\x00",
                                                     2) + pickle.APPEND + pickle.BINGET + b"\x00"
                     + pickle.APPEND)
    for stream, (bare, arr) in ((bare_first, (0, 1)), (array_first, (1, 0))):
        buffers = [memoryview(bytearray(np.arange(2.0).tobytes()))]
        made = load(stream, buffers)
        assert type(made[bare]) is memoryview and not made[bare].readonly
        made[bare][:8] = bytes(8) + b""  # writes into its own memory only
        assert made[arr].tolist() == [0.0, 1.0]
        assert not np.shares_memory(made[arr], np.asarray(made[bare]))
    # Read-only, given as the C unpickler gives it.
    buffers = [memoryview(bytearray(b"xy"))]
    made = load(v5(pickle.NEXT_BUFFER + pickle.READONLY_BUFFER), buffers)
    assert (type(made), made.readonly, bytes(made)) == (memoryview, True, b"xy")


def test_a_buffer_of_the_wrong_size_or_kind_is_refused():
    buffers = [memoryview(bytearray(24))]
    assert load(v5(call_inline(pickle.NEXT_BUFFER, 3)), buffers).tolist() == [0.0] * 3
    for count in (2, 4):  # fewer or more bytes than 3 floats
        with pytest.raises(cpersist.CorruptFileError, match="over a buffer of 24"):
            load(v5(call_inline(pickle.NEXT_BUFFER, count)), [memoryview(bytearray(24))])
    refused = (  # Python objects; a buffer as a key; READONLY_BUFFER of a bytearray, a list
        call_inline(pickle.NEXT_BUFFER, 3, dtype=F8.replace(b"\x02f8", b"\x01O")),
        pickle.EMPTY_SET + pickle.MARK + pickle.NEXT_BUFFER + pickle.READONLY_BUFFER
        + pickle.ADDITEMS,
        pickle.BYTEARRAY8 + struct.pack("<Q", 1) + b"a" + pickle.READONLY_BUFFER,
        pickle.EMPTY_LIST + pickle.READONLY_BUFFER)
    for body in refused:
        with pytest.raises(cpersist.CorruptFileError, match="restricted load refuses"):
            load(v5(body), [memoryview(bytearray(24))] if pickle.NEXT_BUFFER in body else None)


def test_copies_of_buffers_are_charged_and_views_are_not():
    """A buffer used again (from the memo) is copied for each array, against
    max_alloc_bytes; arrays viewing the file's buffers cost nothing of it."""
    limits = cpersist.Limits(max_alloc_bytes=1 << 16)
    many = [np.full(1024, float(i)) for i in range(16)]  # 128 KiB of buffers, all viewed
    stream, buffers = dump(many)
    assert [a[0] for a in load(stream, buffers, limits)] == list(range(16))
    again = v5(call_inline(pickle.NEXT_BUFFER + pickle.BINPUT + b"\x00", 1024) + pickle.POP
               + (call_inline(pickle.BINGET + b"\x00", 1024) + pickle.POP) * 16 + pickle.NONE)
    assert load(again, [memoryview(bytearray(8192))]) is None
    with pytest.raises(cpersist.LimitExceededError, match="max_alloc_bytes"):
        load(again, [memoryview(bytearray(8192))], limits)


def test_a_dry_run_takes_buffers_as_a_load_does():
    stream, buffers = dump(OBJ)
    assert set(load(stream, buffers, dry=True)) == set(OBJ)
    with pytest.raises(cpersist.CorruptFileError, match="more out-of-band buffers"):
        load(stream, buffers[:-1], dry=True)


def test_the_walk_lists_arrays_over_buffers_with_their_buffer():
    stream, buffers = dump(OBJ)
    assert walk(stream).buffers == len(buffers) == len(OBJ)
    inline = {entry["path"]: entry for entry in scan_arrays(stream)["inline"]}
    for number, (name, arr) in enumerate(OBJ.items()):
        entry = inline[f"obj[{name!r}]"]
        assert (entry["shape"], entry["order"], entry["buffer"]) == (
            list(arr.shape), "F" if name == "f" else "C", number)
        if arr.dtype.names is None:
            assert (entry["dtype"], entry["raw_bytes"]) == (arr.dtype.str, arr.nbytes)
