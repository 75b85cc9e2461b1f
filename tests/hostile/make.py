"""Rebuild the forged files of the hostile corpus: ``python -m tests.hostile.make``.

Each file is a genuine cpersist container (correct checksums) around a pickle
stream made opcode by opcode; the attack is the stream. :data:`FORGED` gives,
per file, the stream and what a restricted load of it must do (see
``README.md`` beside this script). The files are written deterministically:
running this again gives the same bytes. Files named ``found-*.cp`` hold what
the fuzzer (``benchmarks/fuzz_restricted.py``) found: those listed in
:func:`found` cut down to their stream and written here; any other one is an
input kept as the fuzzer wrote it, which this script leaves alone. The files
of :data:`BENIGN` are dumps that a restricted load must give back as a
trusted load does (writing two of them needs torch).
"""

import io
import os
import pickle
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):  # run as a script: import the checkout's packages
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tests._forge import call, proto, s  # noqa: E402
from tests._hostile import binbytes, dtype, glob, integer, tup  # noqa: E402

MiB = 1 << 20

#: What a restricted load of a file must do: "refused" (a cpersist error),
#: "limit" (:class:`cpersist.LimitExceededError`), "any" (a cpersist error or
#: data), "zeros" (a cpersist error, or data whose
#: arrays and bytes are all zero: no uninitialised memory), "same" (load, equal
#: to a trusted load of the file).
REFUSED, LIMIT, ANY, ZEROS, SAME = "refused", "limit", "any", "zeros", "same"


def put(n):
    return pickle.BINPUT + bytes([n])


def get(n):
    return pickle.BINGET + bytes([n])


def none_slice():
    """``slice(0, None)``: ``[0:]``."""
    return call(glob("builtins", "slice"), integer(0), pickle.NONE)


def freed_array(size=16 * MiB, maker=None):
    """Defect 1: ``ba = bytearray(size)``; an array over ``ba``; then
    ``ba[0:] = b''`` frees the memory the array still points at. Leaves the
    array on the stack (memo 1)."""
    array = maker or call(glob("numpy", "ndarray"), tup(integer(size)), s("u1"), get(0))
    return (call(glob("builtins", "bytearray"), integer(size)) + put(0) + pickle.POP
            + array + put(1) + pickle.POP
            + get(0) + none_slice() + binbytes(b"") + pickle.SETITEM + pickle.POP
            + get(1))


def use_after_free():
    streams = {
        "01-freed-buffer-bytes": proto(2, call(glob("builtins", "bytes"), freed_array())),
        # The array given back: the load hands over freed heap memory.
        "01-freed-buffer-returned": proto(2, freed_array()),
        "01-freed-buffer-recarray": proto(2, call(glob("builtins", "bytes"), freed_array(
            maker=call(glob("numpy", "recarray"), tup(integer(16 * MiB)), s("u1"),
                       get(0))))),
        "01-freed-buffer-asfortranarray": proto(2, call(glob("numpy", "asfortranarray"),
                                                         freed_array())),
        # As the storage of a tensor: a writable tensor over freed memory.
        "01-freed-buffer-tensor": proto(2, call(
            glob("cpersist.pickler", "rebuild_tensor"), freed_array(), s("uint8"), integer(0),
            tup(integer(16 * MiB)), tup(integer(1)), pickle.NEWFALSE, s("tensor"),
            pickle.NONE, pickle.NONE)),
    }
    return {name: (stream, ZEROS) for name, stream in streams.items()}


def offset_past_buffer():
    array = call(glob("numpy", "ndarray"), tup(integer(16)), s("u1"), binbytes(b"x" * 8),
                 integer(2**63 - 1))
    return {"02-offset-max-int64-bytes": (proto(2, call(glob("builtins", "bytes"), array)),
                                      REFUSED),
            "02-offset-max-int64-returned": (proto(2, array), REFUSED)}


def deep_tuple(depth=1_000_000):
    return pickle.EMPTY_TUPLE + pickle.TUPLE1 * depth


def deep_tuples():
    return {
        "03-deep-tuple-in-set": (proto(4, pickle.EMPTY_SET + pickle.MARK + deep_tuple()
                                       + pickle.ADDITEMS), ANY),
        "03-deep-tuple-in-frozenset": (proto(4, pickle.MARK + deep_tuple() + pickle.FROZENSET),
                                       ANY),
        "03-deep-tuple-dict-key": (proto(4, pickle.EMPTY_DICT + deep_tuple() + pickle.NONE
                                         + pickle.SETITEM), ANY),
    }


def masked_singleton():
    """Defect 4: ``copyreg._reconstructor`` gives back ``np.ma.masked``; BUILD
    then runs ``MaskedArray.__setstate__`` on the singleton."""
    singleton = call(glob("copyreg", "_reconstructor"), glob("numpy.ma.core", "MaskedConstant"),
                     glob("numpy.ma.core", "MaskedArray"), pickle.NONE)
    state = tup(integer(1), tup(integer(2)), dtype("i8"), pickle.NEWFALSE, binbytes(bytes(16)),
                binbytes(bytes(2)), pickle.NONE)
    return {"04-build-on-masked-via-reconstructor": (proto(2, singleton + state + pickle.BUILD),
                                                     ANY)}


def colliding(count):
    """``count`` distinct ints whose hashes are all 0: ``k * (2**61 - 1)``."""
    return b"".join(integer(k * (2**61 - 1)) for k in range(1, count + 1))


def hash_collisions(count=40_000):
    keys = b"".join(integer(k * (2**61 - 1)) + pickle.NONE for k in range(1, count + 1))
    return {
        "05-colliding-dict-keys": (proto(4, pickle.EMPTY_DICT + pickle.MARK + keys
                                         + pickle.SETITEMS), ANY),
        "05-colliding-set-items": (proto(4, pickle.EMPTY_SET + pickle.MARK + colliding(count)
                                         + pickle.ADDITEMS), ANY),
    }


def shared_lists(levels=4, width=2048):
    """Defect 6: ``levels`` nested lists, each ``width`` references to the one
    below (DUP): a few KB standing for ``width ** levels`` items."""
    stream = pickle.BININT1 + b"\x00"
    for _ in range(levels):
        stream = (pickle.EMPTY_LIST + pickle.MARK + stream + pickle.DUP * (width - 1)
                  + pickle.APPENDS)
    return stream


def nested_lists_to_numpy():
    return {
        "06-shared-lists-asfortranarray": (proto(2, call(glob("numpy", "asfortranarray"),
                                                         shared_lists())), ANY),
        "06-shared-lists-matrix": (proto(2, call(glob("numpy", "matrix"), shared_lists())), ANY),
    }


def allocation():
    """Defect 7: ``max_alloc_bytes`` is per call, and some constructors skip it.
    Each asks for more than the default budget of a load: refused
    by a limit."""
    # 1 GiB items: what they cost shows whatever the machine's speed.
    subarray = tup(s("u1"), tup(integer(32768), integer(32768)))
    bytearrays = pickle.MARK + call(glob("builtins", "bytearray"), integer(250 * MiB)) * 12 \
        + pickle.TUPLE
    return {
        "07-asfortranarray-subarray-dtype": (proto(2, call(glob("numpy", "asfortranarray"),
                                                           integer(0), subarray)), LIMIT),
        "07-matrix-subarray-dtype": (proto(2, call(glob("numpy", "matrix"), integer(0),
                                                   subarray)), LIMIT),
        # A restricted load takes MaskedArray as a value only (numpy's own
        # pickles rebuild masked arrays through _mareconstruct): refused by name.
        "07-maskedarray-subarray-dtype": (proto(2, call(glob("numpy.ma.core", "MaskedArray"),
                                                        integer(0), pickle.NEWFALSE, subarray)),
                                          REFUSED),
        # 1.2 GB of list: it fits under the test's limit of 2 GiB, to show its cost.
        "07-list-of-130MiB-bytes": (proto(2, call(glob("builtins", "list"), call(
            glob("builtins", "bytes"), integer(130 * MiB)))), LIMIT),
        "07-twelve-250MiB-bytearrays": (proto(2, bytearrays), LIMIT),
    }


def uninitialised():
    """Defect 8: arrays allocated without being filled (``np.empty``)."""
    return {
        "08-ndarray-no-buffer": (proto(2, call(glob("numpy", "ndarray"), tup(integer(4096)),
                                               s("u1"))), ZEROS),
        "08-ndarray-no-buffer-many": (proto(2, pickle.MARK + call(
            glob("numpy", "ndarray"), tup(integer(512)), s("u1")) * 64 + pickle.TUPLE), ZEROS),
        "08-recarray-no-buffer": (proto(2, call(glob("numpy", "recarray"), tup(integer(4096)),
                                                s("u1"))), ZEROS),
        "08-reconstruct-no-state": (proto(2, call(
            glob("numpy._core.multiarray", "_reconstruct"), glob("numpy", "ndarray"),
            tup(integer(4096)), binbytes(b"b"))), ZEROS),
    }


def long_int():
    return {"09-int-of-8000-hex-digits": (proto(2, call(glob("builtins", "int"), s("f" * 8000),
                                                        integer(16))), LIMIT)}


def storage(count=4, shape=None, dtype="'<f4'"):
    """One stored array (section 0) of ``count`` float32 zeros, its index
    saying ``shape`` (default ``[count]``): a tensor's storage."""
    return [(bytes(4 * count), {"kind": "array", "dtype": dtype,
                                "shape": [count] if shape is None else shape, "order": "C"})]


def stored(section_ops=None):
    return call(glob("cpersist.pickler", "stored_array"), section_ops or integer(0))


def tensor(shape=(4,), stride=(1,), offset=None, dtype="float32", kind="tensor",
           state=pickle.NONE):
    """``rebuild_tensor`` of a view of section 0."""
    return call(glob("cpersist.pickler", "rebuild_tensor"), stored(), s(dtype),
                offset or integer(0), tup(*map(integer, shape)), tup(*map(integer, stride)),
                pickle.NEWFALSE, s(kind), state, pickle.NONE)


def torch_advisories():
    """The published ways around ``torch.load(weights_only=True)`` (torch's
    security advisories and the fixes of its restricted unpickler), each as
    it would meet cpersist's restricted load."""
    changes_numpy = call(glob("builtins", "setattr"), glob("numpy", "ma"), s("masked"),
                         pickle.NONE)
    shadowing = {"__class__": glob("numpy", "ndarray"), "numpy": glob("numpy", "asfortranarray")}
    return {
        # CVE-2025-32434: weights_only handed TorchScript archives to the
        # unrestricted torch.jit.load. A compact dump (no index) is the one
        # other way into a load: its stream sets numpy.ma.masked.
        "11-cve-2025-32434-compact-dump-changing-numpy": (proto(2, changes_numpy), REFUSED),
        # CVE-2026-24747: SETITEM on a tensor wrote its memory; a storage
        # shorter than its tensors was read past its end.
        "11-cve-2026-24747-setitem-on-tensor": (proto(2, tensor() + integer(0) + pickle.BINFLOAT
                                                     + struct.pack(">d", 1e308)
                                                     + pickle.SETITEM), REFUSED),
        "11-cve-2026-24747-setitems-on-stored-array": (proto(2, stored() + pickle.MARK + call(
            glob("builtins", "slice"), pickle.NONE, pickle.NONE) + integer(7)
            + pickle.SETITEMS), REFUSED),
        "11-cve-2026-24747-tensor-view-past-storage": (proto(2, tensor(shape=(1 << 20,))),
                                                       REFUSED),
        "11-cve-2026-24747-section-shorter-than-its-array": (proto(2, stored()), REFUSED),
        # torch's BUILD of a tensor calls Tensor.set_(storage, offset, size, stride).
        "11-build-set-on-tensor": (proto(2, tensor() + tup(stored(), integer(0), tup(
            integer(1 << 20)), tup(integer(1))) + pickle.BUILD), REFUSED),
        # GHSA-jg6j-8w4h-2pg2: a quantized tensor's strides went unchecked.
        "11-ghsa-jg6j-quantized-tensor-huge-stride": (proto(2, tensor(dtype="qint8",
                                                                     stride=(1 << 40,))),
                                                      REFUSED),
        "11-ghsa-jg6j-rebuild-qtensor-by-name": (proto(2, call(
            glob("torch._utils", "_rebuild_qtensor"), stored(), integer(0),
            tup(integer(4)), tup(integer(1)))), REFUSED),
        # torch's storage size (elements times item size) overflowed 64 bits.
        "11-numel-overflow-tensor": (proto(2, tensor(shape=(1 << 62, 1 << 62), stride=(0, 0))),
                                     REFUSED),
        "11-numel-overflow-section": (proto(2, stored()), REFUSED),
        # A tensor's attributes were set from stream-chosen names: __class__,
        # a method's name.
        **{f"11-tensor-attribute-{key.strip('_')}": (proto(2, tensor(
            kind="parameter", state=pickle.EMPTY_DICT + s(key) + value + pickle.SETITEM)),
            REFUSED) for key, value in shadowing.items()},
        # NEWOBJ without BUILD left an object missing its state.
        "11-newobj-uuid-without-build": (proto(2, glob("uuid", "UUID") + pickle.EMPTY_TUPLE
                                               + pickle.NEWOBJ), ANY),
        # An error message printed what the stream gave (a persistent id):
        # the repr of lists holding each other 2,048 times, four deep.
        "11-persistent-id-of-shared-lists": (proto(2, shared_lists() + pickle.BINPERSID),
                                             REFUSED),
        "11-stored-array-of-shared-lists": (proto(2, stored(shared_lists())), REFUSED),
        "11-tensor-offset-of-shared-lists": (proto(2, tensor(offset=shared_lists())), REFUSED),
        # Malformed streams raised IndexError, KeyError, struct.error.
        "11-tuple3-on-empty-stack": (proto(2, pickle.TUPLE3), REFUSED),
        "11-get-of-missing-memo": (proto(2, get(9)), REFUSED),
    }


def shared_dtypes():
    """numpy's pickle of a big-endian bfloat16 array: ``numpy.dtype(ml_dtypes.bfloat16,
    False, True)`` gives numpy's one bfloat16 dtype, which the ``BUILD`` after
    it would turn big-endian for the whole process."""
    bfloat16 = call(glob("numpy", "dtype"), glob("ml_dtypes", "bfloat16"), pickle.NEWFALSE,
                    pickle.NEWTRUE)
    state = tup(integer(3), s(">"), pickle.NONE, pickle.NONE, pickle.NONE, integer(2),
                integer(2), integer(64))
    return {"12-ml-dtypes-build-on-numpys-own-bfloat16": (proto(2, bfloat16 + state
                                                                 + pickle.BUILD), REFUSED)}


#: Stored arrays of the forged files that have some: ``{name: [(bytes, meta)]}``.
STORAGES = {
    **{name: storage() for name in torch_advisories() if "tensor" in name or "stored" in name},
    "11-cve-2026-24747-section-shorter-than-its-array": storage(4, shape=[1 << 20]),
    "11-numel-overflow-section": storage(4, shape=[1 << 32, 1 << 32], dtype="'|u1'"),
}
#: Forged files written as compact dumps (no index), not as containers.
COMPACT = {"11-cve-2025-32434-compact-dump-changing-numpy"}


def found():
    """What ``benchmarks/fuzz_restricted.py`` found, cut down by hand to the
    opcodes that matter."""
    return {
        # A dtype's state of 6 items is read by numpy as (version, byte order,
        # subarray, fields, size, alignment): fields -1, an int where numpy
        # keeps a dict, crashes numpy when it next reads the dtype.
        "found-dtype-state-fields-not-a-dict": (proto(2, dtype("f8") + tup(
            integer(3), s("<"), pickle.NONE, integer(-1), integer(-1), integer(0))
            + pickle.BUILD), ANY),
        # BUILD of a dict with itself as its state: the stream walker of
        # info, verify and inspect copied the state's children into the
        # object while iterating them, for ever (8 GB from 995 bytes).
        "found-walker-build-with-itself-as-state": (proto(2, pickle.EMPTY_DICT + s("a")
            + pickle.EMPTY_LIST + pickle.SETITEM + pickle.DUP + pickle.BUILD), ANY),
    }


def quick_path():
    """Small streams naming no global, which a restricted load may hand to
    the C unpickler (``cpersist.pickling.quick``): what it must leave to the
    machine."""
    same_hash = b"".join(pickle.BINFLOAT + struct.pack(">d", 2.0 ** (61 * k))
                         for k in range(-8, 9))  # 17 floats, each hashing to 1
    return {
        # The C unpickler zeroes a memo of twice the index: 4 GiB here.
        "11-quick-memo-bomb-long-binput": (proto(4, pickle.NONE + pickle.LONG_BINPUT
                                                 + struct.pack("<I", 1 << 28)), ANY),
        "11-quick-memo-bomb-put": (pickle.NONE + b"p268435456\n" + pickle.STOP, ANY),
        "11-quick-deep-tuple-in-set": (proto(4, pickle.EMPTY_SET + pickle.MARK
                                             + pickle.EMPTY_TUPLE + pickle.TUPLE1 * 101
                                             + pickle.ADDITEMS), LIMIT),
        "11-quick-same-hash-floats": (proto(4, pickle.EMPTY_SET + pickle.MARK + same_hash
                                            + pickle.ADDITEMS), REFUSED),
        "11-quick-bytearray-setitem": (proto(5, pickle.BYTEARRAY8 + struct.pack("<Q", 4)
                                             + b"abcd" + pickle.DUP + integer(0) + integer(0)
                                             + pickle.SETITEM + pickle.POP), REFUSED),
        # An "r" in a key sends the stream to the exact scan, which must find
        # the LONG_BINPUT of index 2**31 - 1 among the opcodes (16 GiB of memo).
        "11-quick-memo-bomb-after-english-key": (proto(5, pickle.EMPTY_DICT + pickle.MARK
                                                       + s("learning_rate") + pickle.NONE
                                                       + pickle.LONG_BINPUT
                                                       + struct.pack("<I", 2 ** 31 - 1)
                                                       + pickle.SETITEMS), ANY),
        # The same after 200 floats, whose bytes hold "r" and EXT bytes: the
        # scan's path for a stream filling no dict.
        "11-quick-memo-bomb-after-floats": (proto(5, pickle.EMPTY_LIST + pickle.MARK + b"".join(
            pickle.BINFLOAT + struct.pack(">d", 1 / (k + 3)) for k in range(200))
            + pickle.APPENDS + pickle.LONG_BINPUT + struct.pack("<I", 1 << 28)), ANY),
    }


#: Where each out-of-band buffer starts in its block: a multiple of this.
BUFFER_ALIGN = 64


def buffer_block(*sizes, fill=b"\x01"):
    """A buffer block (``(bytes, meta)``) of buffers of ``sizes`` bytes, each
    at the next multiple of :data:`BUFFER_ALIGN`, filled with ``fill``."""
    block = bytearray()
    for size in sizes:
        block += bytes(-len(block) % BUFFER_ALIGN) + fill * size
    return [(bytes(block), {"kind": "buffers", "sizes": list(sizes)})]


def inline_f8(data_ops, count):
    """``inline_array(data, float64, (count,), "C")``."""
    return call(glob("cpersist.pickler", "inline_array"), data_ops, dtype("f8"),
                tup(integer(count)), s("C"))


def out_of_band():
    """Streams over out-of-band buffers (protocol 5's NEXT_BUFFER), each
    with a block of the buffers it names (:data:`BLOCKS`)."""
    nxt = pickle.NEXT_BUFFER
    return {
        "13-buffers-more-than-the-file-holds": (proto(5, tup(inline_f8(nxt, 128),
                                                             inline_f8(nxt, 128))), REFUSED),
        "13-buffers-fewer-than-the-file-holds": (proto(5, inline_f8(nxt, 128)), REFUSED),
        "13-buffers-at-protocol-4": (proto(4, inline_f8(nxt, 128)), REFUSED),
        "13-buffers-wrong-size": (proto(5, inline_f8(nxt, 129)), REFUSED),
        "13-buffers-as-a-set-key": (proto(5, pickle.EMPTY_SET + pickle.MARK + nxt
                                         + pickle.READONLY_BUFFER + pickle.ADDITEMS), REFUSED),
        # One buffer of 64 KiB the data of 8,192 arrays: each a copy, 512 MiB.
        "13-buffers-one-for-many-arrays": (proto(5, nxt + put(0) + pickle.POP + pickle.MARK
                                                 + inline_f8(get(0), 8192) * 8192
                                                 + pickle.TUPLE), LIMIT),
        # A buffer handed back bare, and the data of an array: never the same memory.
        "13-buffers-bare-and-an-array": (proto(5, pickle.EMPTY_LIST + nxt + put(0)
                                               + pickle.APPEND + inline_f8(get(0), 128)
                                               + pickle.APPEND), ANY),
    }


#: The buffer blocks of the files of :func:`out_of_band`.
BLOCKS = {"13-buffers-more-than-the-file-holds": buffer_block(1024),
          "13-buffers-fewer-than-the-file-holds": buffer_block(1024, 1024),
          "13-buffers-at-protocol-4": buffer_block(1024),
          "13-buffers-wrong-size": buffer_block(1024),
          "13-buffers-as-a-set-key": buffer_block(1024),
          "13-buffers-one-for-many-arrays": buffer_block(65536),
          "13-buffers-bare-and-an-array": buffer_block(1024)}


#: The forged files: ``{name: (pickle stream, expectation)}``.
FORGED = {**use_after_free(), **offset_past_buffer(), **deep_tuples(), **masked_singleton(),
          **hash_collisions(), **nested_lists_to_numpy(), **allocation(), **uninitialised(),
          **long_int(), **quick_path(), **torch_advisories(), **shared_dtypes(),
          **out_of_band(), **found()}


#: Defect 10: files of what ``torch.load(weights_only=True)`` and numpy's own
#: pickles load, that a restricted load must load too: ``{name: (object's
#: name in :func:`benign_object`, compress)}``.
BENIGN = {**{f"10-stringdtype-compress-{c}": ("strings", c) for c in (0, 3, "max")},
          "10-torch-size-dtype-device": ("checkpoint", 0),
          "10-torch-size-dtype-device-compressed": ("checkpoint", 3)}


def benign_object(kind):
    """A numpy 2 ``StringDType`` array (``"strings"``), or a checkpoint of
    torch's values (``"checkpoint"``: needs torch)."""
    import numpy as np

    if kind == "strings":
        return {"s": np.array(["a", "", "long " * 20, "\u00e9\U0001f600"],
                              dtype=np.dtypes.StringDType())}
    import torch

    return {"shape": torch.Size([3, 4]),
            "dtypes": [torch.float32, torch.bfloat16, torch.int8],
            "device": torch.device("cpu"), "meta": torch.device("meta"),
            "w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}


def container(stream, arrays=()):
    """A cpersist file holding ``stream`` as its root, after the stored
    ``arrays`` (``(bytes, meta)`` each); compressed (zstd) when it is large,
    which keeps a file of a megabyte of opcodes small on disk."""
    from cpersist.codecs import get_codec
    from cpersist.container import ContainerWriter

    buf = io.BytesIO()
    writer = ContainerWriter(buf)
    for data, meta in arrays:
        writer.add_section([memoryview(data)], meta=meta)
    codec = get_codec("zstd", 9) if len(stream) > 64 * 1024 else None
    view = memoryview(stream)
    chunks = [view[i:i + MiB] for i in range(0, len(view), MiB)]
    root = writer.add_section(chunks, codec=codec, meta={"kind": "pickle"})
    writer.finish(root)
    return buf.getvalue()


def expectations():
    """``{file name: expectation}`` of every file this script writes."""
    names = {f"{name}.cp": expected for name, (_, expected) in FORGED.items()}
    names.update({f"{name}.cp": SAME for name in BENIGN})
    return names


def write_forged(folder):
    from cpersist.container.compact import compact_dump

    for name, (stream, _) in FORGED.items():
        with open(os.path.join(folder, f"{name}.cp"), "wb") as f:
            f.write(compact_dump(stream) if name in COMPACT
                    else container(stream, STORAGES.get(name, BLOCKS.get(name, ()))))


def main(folder=HERE):
    import cpersist

    write_forged(folder)
    for name, (kind, compress) in BENIGN.items():
        cpersist.dump(benign_object(kind), os.path.join(folder, f"{name}.cp"),
                      compress=compress, n_threads=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
