#!/usr/bin/env python3
"""Coverage-guided fuzzing of what reads a stranger's file: the restricted
load and the tools that read without loading.

Run from the repository root, in the environment cpersist is installed in::

    python -m benchmarks.fuzz_restricted -max_total_time=1800

Each input is a whole cpersist file. It is loaded with
``cpersist.loads(data, trusted=False)``, then read by one of: a restricted
load from a file, ``cpersist info``, :func:`cpersist.verify` and
:func:`cpersist.inspect` (which one is decided by the input's bytes, so that
a finding reproduces). Its pickle stream is also run on the restricted
machine itself with out-of-band buffers (:func:`run_with_buffers`): the
bytes of its sections other than arrays, a buffer each. A cpersist error
(:class:`cpersist.CpersistError`) or a result is what a reader may give;
any other exception, a change to numpy's shared objects (the masked
singleton, the built-in dtypes), a crash, more than 5 s (``-timeout=5``) or
2 GiB of memory (``-rss_limit_mb=2048``) is a finding, saved in
``WORK/crashes/`` (``crash-*``, ``timeout-*``, ``oom-*``).

The mutator knows the format: most mutations take the pickle stream out of
the container, change it (libFuzzer's own mutations, or a piece of a known
attack spliced in) and put it back in a valid container with correct
checksums and the same stored arrays, so that mutants get past the checksums
to the pickle machine; the others change the file's raw bytes, an array
section's description in the index, or a buffer block's list of sizes
or its bytes (:func:`edit_block`).

Options of this script (the rest go to libFuzzer, whose flags have a single
dash): ``--work DIR`` (default ``fuzz-restricted``): the corpus is
``DIR/corpus`` (seeded on the first run, see :func:`write_seeds`), the
findings ``DIR/crashes/``. ``--leave-out PATTERN`` (repeatable; ``fnmatch``
on the seeds' names, such as ``hostile-03-*``) leaves seeds out of a new
corpus: against code that still crashes on a known file, that file would
end every fuzzing job that starts from it. ``--seeds-only`` writes the seeds
and stops.
libFuzzer runs in fork mode (``-fork=1``: each batch of inputs in a child
process, restarted after a crash, so that a run goes on past the defects it
meets); ``-fork=0`` fuzzes in this process and stops at the first finding.
To reproduce one finding: ``python -m benchmarks.fuzz_restricted -fork=0
WORK/crashes/crash-...``.
"""

import atexit
import io
import json
import os
import pickle
import random
import shutil
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a program (as libFuzzer's fork mode starts it)
    sys.path.insert(0, ROOT)

#: libFuzzer's flags this script gives unless the command line gives them.
DEFAULT_FLAGS = {"-rss_limit_mb": "2048", "-timeout": "5", "-max_len": "131072",
                 "-fork": "1", "-ignore_crashes": "1", "-ignore_timeouts": "1",
                 "-ignore_ooms": "1", "-print_final_stats": "1"}
#: Set in the environment of the process that prepared the run: its fork
#: children (started with the same command line) must not prepare it again.
_PREPARED = "CPERSIST_FUZZ_PREPARED"


# -- seeds ----------------------------------------------------------------------

def benign_objects():
    """Objects of the kinds real files hold: arrays of many dtypes and
    layouts, masked, record and object arrays, numpy scalars, containers,
    the standard library's data types, and tensors where torch is installed."""
    import datetime
    import decimal
    import fractions
    import uuid
    from collections import Counter, OrderedDict, deque

    import numpy as np

    arrays = {str(d): np.arange(12).astype(d).reshape(3, 4)
              for d in ("u1", "i2", "<i4", ">i8", "f2", "f4", ">f8", "c8", "?", "M8[s]",
                        "m8[ms]", "U3", "S2", "V4")}
    objects = [
        arrays,
        {"f": np.asfortranarray(np.arange(20.0).reshape(4, 5)),
         "view": np.arange(30)[::3], "empty": np.zeros((0, 3)), "scalar0d": np.array(5.0),
         "big": np.arange(5000, dtype=np.int32)},
        {"masked": np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0], fill_value=-1),
         "rec": np.rec.fromrecords([(1, 2.0, b"x")], names="a,b,c"),
         "struct": np.zeros(3, dtype=[("a", "<i4"), ("b", [("c", "f8", (2,))])]),
         "matrix": np.matrix([[1, 2], [3, 4]]), "const": np.ma.masked,
         "objects": np.array([1, "x", None, (2,)], dtype=object)},
        [np.float64(1.5), np.int8(-3), np.bool_(True), np.complex64(1j), np.str_("s"),
         np.datetime64("2020-01-01"), np.dtype("f8"), np.dtype([("x", "i4")])],
        {"list": [1, 2.5, "s", b"b", None, True, (1, 2), {3, 4}, frozenset({5})],
         "bytearray": bytearray(b"ab"), "complex": 1 + 2j, "slice": slice(1, 9, 2),
         "range": range(3, 10, 2), "big": 2**100, "neg": -(2**70)},
        {"od": OrderedDict(a=1, b=2), "counter": Counter("hello"), "deque": deque([1, 2]),
         "date": datetime.date(2020, 1, 2), "dt": datetime.datetime(2020, 1, 2, 3, 4, 5),
         "td": datetime.timedelta(days=1), "tz": datetime.timezone.utc,
         "dec": decimal.Decimal("1.25"), "frac": fractions.Fraction(3, 7),
         "uuid": uuid.UUID(int=12345)},
        [[i, str(i), {"k": i}] for i in range(50)],
    ]
    try:
        strings = np.array(["a", "bc"], dtype=np.dtypes.StringDType())
        objects.append({"strings": strings})
    except AttributeError:
        pass
    try:
        import torch
    except ImportError:
        return objects
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    objects.append({"w": base, "t": base.t(), "view": base[1:, ::2],
                    "bf16": torch.ones(5, dtype=torch.bfloat16),
                    "i8": torch.arange(6, dtype=torch.int8),
                    "p": torch.nn.Parameter(torch.zeros(3)),
                    "shape": torch.Size([2, 3]), "dtype": torch.float16,
                    "device": torch.device("cpu")})
    return objects


def wrap(stream, arrays=()):
    """A cpersist file (bytes) whose pickle stream is ``stream`` and whose
    stored arrays are ``arrays`` (``(raw bytes, meta)`` each, numbered from 0).
    If any of them is a buffer block (:func:`is_block`), the file is laid out
    as a dump with blocks: format 2.5, its section list ending with the
    stub, its header stating minor version 5."""
    from cpersist.container import ContainerWriter
    from cpersist.container.files import restate_minor
    from cpersist.container.layout import BLOCKS_MINOR

    buf = io.BytesIO()
    writer = ContainerWriter(buf)
    for data, meta in arrays:
        writer.add_section([memoryview(data)], meta=meta)
    root = writer.add_section([memoryview(stream)], meta={"kind": "pickle"})
    blocks = any(is_block(meta) for _, meta in arrays)
    writer.finish(root, blocks=blocks)
    if blocks:
        restate_minor(buf, 0, BLOCKS_MINOR)
    return buf.getvalue()


def is_block(meta):
    """Whether a section's ``meta`` is a buffer block's."""
    from cpersist.container.layout import BLOCK_KIND

    return isinstance(meta, dict) and meta.get("kind") == BLOCK_KIND


def with_blocks(obj):
    """A file (bytes) holding ``obj`` as a dump with buffer blocks holds it
    (format 2.5): its small arrays' buffers, out of band, in one block
    (:mod:`cpersist.pickling.buffer_blocks`'s layout). A raw dump holds
    blocks only once it is larger than libFuzzer's ``-max_len``."""
    from cpersist.container.layout import BLOCK_KIND
    from cpersist.pickling.buffer_blocks import block_offsets

    stream, raws = out_of_band(obj, "inline")
    sizes = [len(raw) for raw in raws]
    offsets, end = block_offsets(sizes)
    block = bytearray(end)
    for at, raw in zip(offsets, raws):
        block[at:at + len(raw)] = raw
    return wrap(stream, [(bytes(block), {"kind": BLOCK_KIND, "sizes": sizes})])


def small_arrays():
    """Arrays as a model's small ones come: of several dtypes and sizes, C
    and F order, read-only, one of them twice."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {f"w{k}": rng.integers(0, 255, 64 + 40 * k, dtype=np.uint8) for k in range(12)}
    arrays["f"] = np.asfortranarray(rng.random((16, 12)))
    arrays["i"] = np.arange(300, dtype=">i4").reshape(20, 15)
    arrays["ro"] = np.arange(200.0)
    arrays["ro"].flags.writeable = False
    arrays["again"] = arrays["w3"]
    return arrays


def out_of_band(obj, how):
    """``(stream, buffers' bytes)`` of ``obj`` pickled at protocol 5 with
    every buffer out of band: arrays as numpy pickles them (``"numpy"``),
    or as cpersist's pickler keeps its small ones (``"inline"``)."""
    import numpy as np

    from cpersist.pickler import inline_array

    class Pickler(pickle.Pickler):
        def reducer_override(self, arr):
            if how != "inline" or type(arr) is not np.ndarray or arr.dtype.hasobject:
                return NotImplemented
            fortran = arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous
            arr = arr if fortran or arr.flags.c_contiguous else np.ascontiguousarray(arr)
            return inline_array, (pickle.PickleBuffer(arr.T if fortran else arr), arr.dtype,
                                  arr.shape, "F" if fortran else "C")

    raws = []
    file = io.BytesIO()
    Pickler(file, protocol=5, buffer_callback=lambda b: raws.append(b.raw().tobytes())).dump(obj)
    return file.getvalue(), raws


def write_seeds(folder, leave_out=()):
    """The starting corpus: the hostile corpus of the tests, the record-log,
    growing-file and buffer-block fixtures (those that fit in an input), the
    known attacks of ``tests/_hostile.py`` (small sizes), small files with a
    buffer block (:func:`with_blocks`), dumps of :func:`benign_objects`
    (raw and compressed), numpy's own pickles of them at every protocol,
    each wrapped in a container, and their pickles with out-of-band buffers
    (:func:`out_of_band`), a section each. Seeds whose names match a pattern of
    ``leave_out`` (``fnmatch``) are left out. Returns the names written."""
    import fnmatch

    import cpersist
    from tests import _hostile

    os.makedirs(folder, exist_ok=True)
    seeds = {}
    corpus = os.path.join(ROOT, "tests", "hostile")
    for name in sorted(os.listdir(corpus)):
        if name.endswith(".cp"):
            with open(os.path.join(corpus, name), "rb") as f:
                seeds[f"hostile-{name}"] = f.read()
    # Record logs and growing files: their frames and commits are read too;
    # and dumps with buffer blocks, a compressed one among them (those that
    # fit in an input: libFuzzer cuts a longer one short).
    max_len = int(DEFAULT_FLAGS["-max_len"])
    for version in ("2.3", "2.4", "2.5"):
        fixtures = os.path.join(ROOT, "tests", "fixtures", f"format-{version}")
        for name in sorted(os.listdir(fixtures)):
            path = os.path.join(fixtures, name)
            if name.endswith((".cp", ".cpl")) and os.path.getsize(path) <= max_len:
                with open(path, "rb") as f:
                    seeds[f"fixture-{version}-{name}"] = f.read()
    for name, stream in _hostile.reproducers(scale=0.0001).items():
        seeds[f"attack-{name}.cp"] = wrap(stream)
    seeds["blocks-arrays.cp"] = with_blocks(small_arrays())
    # Of the dtypes numpy gives a buffer of (not datetime64, timedelta64).
    seeds["blocks-dtypes.cp"] = with_blocks({name: arr for name, arr in benign_objects()[0].items()
                                             if arr.dtype.kind not in "mM"})
    for number, obj in enumerate(benign_objects()):
        for compress in (0, 3):
            buf = io.BytesIO()
            cpersist.dump(obj, buf, compress=compress, n_threads=1)
            seeds[f"dump-{number}-{compress}.cp"] = buf.getvalue()
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            try:
                stream = pickle.dumps(obj, protocol=protocol)
            except Exception:  # tensors at protocol 0 and 1, for one
                continue
            seeds[f"pickle-{number}-p{protocol}.cp"] = wrap(stream)
        for how in ("numpy", "inline"):
            try:
                stream, raws = out_of_band(obj, how)
            except Exception:  # what protocol 5 cannot pickle
                continue
            seeds[f"buffers-{number}-{how}.cp"] = wrap(stream, [(raw, {"kind": "buffer"})
                                                                for raw in raws])
    written = []
    for name, data in seeds.items():
        if any(fnmatch.fnmatch(name, pattern) for pattern in leave_out):
            continue
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        written.append(name)
    return written


# -- one input --------------------------------------------------------------------

def _intact_state():
    """What no file may change in the process: numpy's masked singleton and
    built-in dtypes."""
    import numpy as np

    masked = np.ma.masked
    state = [type(masked).__name__, masked.dtype.str, masked.shape,
             np.ndarray.tobytes(np.asarray(masked._mask)), np.ndarray.tobytes(masked),
             type(np.ma.nomask).__name__, bool(np.ma.nomask)]
    for text in ("f8", "i8", "u1", "O", "V8"):
        d = np.dtype(text)
        state.append((d.str, d.flags, d.itemsize, d.byteorder, d.fields, d.names))
    return state


class Target:
    """The fuzz target: reads one input as a stranger's file."""

    def __init__(self):
        import cpersist
        import cpersist.cli

        self.cpersist = cpersist
        self.cli = cpersist.cli
        self.folder = tempfile.mkdtemp(prefix="cpersist-fuzz-")
        atexit.register(shutil.rmtree, self.folder, True)
        self.path = os.path.join(self.folder, "input.cp")
        self.intact = _intact_state()

    def __call__(self, data):
        cpersist = self.cpersist
        try:
            cpersist.loads(data, trusted=False)
        except cpersist.CpersistError:
            pass
        tool = zlib.crc32(data) & 3
        if tool in (0, 1):
            with open(self.path, "wb") as f:
                f.write(data)
        try:
            if tool == 0:
                cpersist.load(self.path, trusted=False)
            elif tool == 1:
                out, err = io.StringIO(), io.StringIO()
                from contextlib import redirect_stderr, redirect_stdout

                with redirect_stdout(out), redirect_stderr(err):
                    self.cli.main(["info", self.path])
            elif tool == 2:
                cpersist.verify(io.BytesIO(data))
            else:
                cpersist.inspect(io.BytesIO(data))
        except cpersist.CpersistError:
            pass
        parts = take_apart(data)
        if parts is not None:
            run_with_buffers(*parts, dry=bool(zlib.crc32(data) & 4))
        if _intact_state() != self.intact:
            raise AssertionError("the file changed numpy's shared objects (np.ma.masked, "
                                 "np.ma.nomask or a built-in dtype)")


def run_with_buffers(stream, sections, dry=False):
    """Run ``stream`` on the restricted machine, given as out-of-band
    buffers the bytes of ``sections`` (``(bytes, meta)`` each) whose meta
    is not an array's, and as ``stored_array(n)`` section ``n``'s bytes;
    its object, or None for a cpersist error or when there are no buffers."""
    import numpy as np

    import cpersist
    from cpersist.pickling import restricted
    from cpersist.pickling.unpickler import ArrayUnpickler

    def stored(index):
        if type(index) is not int or not 0 <= index < len(sections):
            raise cpersist.CorruptFileError("no such section")  # no repr: it may never end
        return np.frombuffer(sections[index][0], np.uint8)

    buffers = [memoryview(bytearray(raw)) for raw, meta in sections
               if not isinstance(meta, dict) or meta.get("kind") != "array"]
    if not buffers:  # the load of the file ran the machine on it alone
        return None
    unpickler = ArrayUnpickler(io.BytesIO(stream), stored, restricted=True, source="<fuzz>",
                               dry=dry)
    try:
        return restricted.run(stream, unpickler.resolve, unpickler.persistent_load,
                              unpickler._limits, "<fuzz>", on_protocol=unpickler._set_protocol,
                              dry=dry, buffers=buffers)
    except cpersist.CpersistError:
        return None
    finally:
        unpickler._restore_watched()


# -- the mutator --------------------------------------------------------------------

def _pieces():
    """Snippets of pickle streams the mutator splices in: the pieces of
    ``tests/_hostile.py``'s generator and the known attacks' streams."""
    from tests import _hostile

    pieces = list(_hostile._PIECES)
    for stream in _hostile.reproducers(scale=0.0001).values():
        pieces.append(stream[2:-1])  # without PROTO and STOP
    return pieces


def take_apart(data):
    """``(pickle stream, [(array bytes, meta), ...])`` of a cpersist file
    whose sections are arrays then the root; None for anything else."""
    from cpersist.container import ContainerReader

    try:
        reader = ContainerReader(data)
        sections = reader.sections
        if reader.root != len(sections) - 1:
            return None
        stream = bytes(reader.read_bytes(sections[reader.root]))
        arrays = [(bytes(reader.read_bytes(s)), dict(s.meta)) for s in sections[:-1]]
    except Exception:  # any damage: the raw bytes get mutated instead
        return None
    return stream, arrays


class Mutator:
    """``mutator(data, max_size, seed)``: libFuzzer's custom mutator."""

    def __init__(self):
        self.pieces = _pieces()

    @staticmethod
    def mutate(data, max_size):
        """libFuzzer's own mutations (looked up at each call: atheris binds
        ``atheris.Mutate`` once fuzzing has started)."""
        import atheris

        return atheris.Mutate(data, max_size)

    def __call__(self, data, max_size, seed):
        rng = random.Random(seed)
        parts = take_apart(data) if rng.random() < 0.8 else None
        if parts is None:
            return self.mutate(data, max_size)
        stream, arrays = parts
        how = rng.random()
        blocks = [k for k, (_, meta) in enumerate(arrays) if is_block(meta)]
        if blocks and how < 0.2:
            number = rng.choice(blocks)
            arrays[number] = edit_block(*arrays[number], rng)
        elif how < 0.1 and arrays:
            number = rng.randrange(len(arrays))
            raw, meta = arrays[number]
            text = self.mutate(json.dumps(meta).encode(), 4096)
            try:
                meta = json.loads(text)
            except ValueError:
                return self.mutate(data, max_size)
            arrays[number] = (raw, meta)
        elif how < 0.35:
            piece = rng.choice(self.pieces)
            at = rng.randrange(len(stream) + 1)
            cut = rng.choice((0, 0, 1, 2, 4, 8))
            stream = stream[:at] + piece + stream[at + cut:]
        else:
            stream = self.mutate(stream, max(64, min(max_size, 2 * len(stream) + 64)))
        try:
            out = wrap(stream, arrays)
        except Exception:  # a meta the writer refuses
            return self.mutate(data, max_size)
        return out if len(out) <= max_size else self.mutate(data, max_size)


def edit_block(raw, meta, rng):
    """``(raw, meta)`` of a buffer block with one edit a forger would make
    that its checksums do not catch: a size changed, dropped, repeated or
    added; the block's bytes cut or grown (its sizes then no longer fill
    it, or, grown by a buffer, do); its sizes made something else."""
    # An earlier edit may have left sizes that are no list, or not ints.
    sizes = meta.get("sizes")
    sizes = list(sizes) if type(sizes) is list and sizes else [1]
    meta = dict(meta)
    k = rng.randrange(len(sizes))
    edit = rng.randrange(9)
    if edit == 0:
        near = sizes[k] + rng.choice((-64, -1, 1, 64)) if type(sizes[k]) is int else 1
        sizes[k] = rng.choice((0, -1, 1, 63, 64, 65, 4 << 20, (4 << 20) + 1, 2**31, 2**63, near))
    elif edit == 1:
        del sizes[k]
    elif edit == 2:
        sizes.insert(k, sizes[k])
    elif edit == 3:  # a buffer more, its bytes there: a consistent forgery
        n = rng.choice((1, 64, 1000, 4096))
        raw = raw + bytes(-len(raw) % 64) + bytes(n)
        sizes.append(n)
    elif edit == 4:
        raw = raw[:rng.randrange(len(raw) + 1)]
    elif edit == 5:
        raw = raw + bytes(rng.choice((1, 63, 64, 4096)))
    elif edit == 6:
        sizes = rng.choice((None, "1024", [], [[1024]], [1024.0], [True], {"0": 1024},
                            [1] * rng.choice((2, 1000, 100000))))
    elif edit == 7:
        sizes = sizes[::-1]
    else:
        meta["kind"] = rng.choice(("array", "pickle", "buffer", "Buffers"))
    meta["sizes"] = sizes
    return raw, meta


# -- the run ------------------------------------------------------------------------

def _instrumented_imports():
    """Import every module of cpersist, instrumented for coverage (a module
    imported later, lazily, would not be)."""
    import importlib
    import pkgutil

    import atheris

    skip = ("cpersist.benchmarks", "cpersist.lazy", "cpersist.joblib_store")
    with atheris.instrument_imports(include=["cpersist"], exclude=list(skip)):
        import cpersist

        for module in pkgutil.walk_packages(cpersist.__path__, "cpersist."):
            if module.name.startswith(skip):
                continue  # no reader of a stranger's file
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional dependency missing
                pass


def _flags(argv, work):
    """``argv`` with the default flags it lacks, the corpus folder and the
    findings' folder."""
    given = {arg.split("=", 1)[0] for arg in argv[1:] if arg.startswith("-")}
    flags = [f"{k}={v}" for k, v in DEFAULT_FLAGS.items() if k not in given]
    if "-artifact_prefix" not in given:
        flags.append("-artifact_prefix=" + os.path.join(work, "crashes") + os.sep)
    inputs = [arg for arg in argv[1:] if not arg.startswith("-")]
    return argv[:1] + flags + argv[1:] + ([] if inputs else [os.path.join(work, "corpus")])


def main(argv):
    import atheris

    work, seeds_only, leave_out, rest = "fuzz-restricted", False, [], [argv[0]]
    args = iter(argv[1:])
    for arg in args:
        if arg == "--work":
            work = next(args)
        elif arg == "--leave-out":
            leave_out.append(next(args))
        elif arg == "--seeds-only":
            seeds_only = True
        else:
            rest.append(arg)
    if not os.environ.get(_PREPARED):
        work = os.path.abspath(work)
        os.makedirs(os.path.join(work, "crashes"), exist_ok=True)
        corpus = os.path.join(work, "corpus")
        given = any(not arg.startswith("-") for arg in rest[1:])  # inputs to run or a corpus
        if not given and (not os.path.isdir(corpus) or not os.listdir(corpus)):
            print(f"seeding {corpus}: {len(write_seeds(corpus, leave_out))} files",
                  file=sys.stderr)
        if seeds_only:
            return
        rest = _flags(rest, work)
        os.environ[_PREPARED] = "1"
    try:
        import torch  # noqa: F401  (imported once, not inside the first tensor's time)
    except ImportError:
        pass
    _instrumented_imports()
    # The quick path's exact scan from the first input: a process otherwise
    # leaves the streams that need it to the machine until compiling it pays,
    # and each of libFuzzer's jobs is a new process.
    from cpersist.pickling import quick_scan
    quick_scan.SCANS_BEFORE_COMPILING = 0
    target = Target()
    atheris.Setup(rest, target, custom_mutator=Mutator())
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
