"""Read files of the hostile corpus as a stranger's files are read, and say
what happened: ``python -m tests.hostile.check JOBS_JSON``.

``JOBS_JSON`` is a list of ``[path, expectation, reader]`` (the expectations
of :mod:`tests.hostile.make`; readers: :data:`READERS`). The jobs run one
after the other in this interpreter, under a 2 GiB address-space limit, each
killed by ``SIGALRM`` (whose default action ends the process, even inside a
C call) after :data:`HARD_SECONDS`. One JSON line is printed when a job
starts and one when it ends, so that the caller knows which job a crash
or a kill belongs to and can start a new interpreter on the jobs after it.

A job's result: its outcome (``"ok"``, a cpersist error's class name, or
``"BARE ..."`` for any other exception), its time, its peak resident memory
beyond what the process held before it (``VmHWM``, reset before each job),
whether a loaded object holds a nonzero array or bytes (for expectation
``zeros``), whether it equals a trusted load (``same``), and what in the
process it changed: a change ends the interpreter after its line (the
process is no longer one a new file should be read in).
"""

import contextlib
import gc
import io
import json
import os
import resource
import signal
import sys
import time

#: Each job is killed after this many seconds (the bound the test asserts is lower).
HARD_SECONDS = 10
#: The address space the process may use, imports included.
ADDRESS_SPACE = 2 << 30
READERS = ("info", "verify", "load", "loads")


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


#: Globals a restricted load may name: a stream must not be able to change any.
_GLOBALS = [("builtins", n) for n in ("bool", "bytearray", "bytes", "complex", "dict", "float",
                                      "frozenset", "int", "list", "range", "set", "slice",
                                      "str", "tuple")] + [
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "deque"),
    ("collections", "Counter"), ("datetime", "date"), ("datetime", "datetime"),
    ("datetime", "timedelta"), ("datetime", "timezone"), ("decimal", "Decimal"),
    ("fractions", "Fraction"), ("uuid", "UUID"), ("copyreg", "_reconstructor"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy.ma.core", "MaskedArray"), ("numpy.ma.core", "_mareconstruct"),
    ("numpy.ma.core", "MaskedConstant"), ("numpy", "asfortranarray"), ("numpy", "matrix"),
    ("numpy", "recarray"), ("numpy", "record"), ("cpersist.pickler", "stored_array"),
    ("cpersist.pickler", "inline_array"), ("cpersist.pickler", "rebuild_view"),
    ("cpersist.pickler", "rebuild_masked"), ("cpersist.pickler", "rebuild_tensor")]


def snapshot():
    """What a hostile stream must not change: numpy's masked singleton and
    shared dtypes, and the settable state of every global a stream may name."""
    import copyreg
    import importlib
    import types

    import numpy as np

    masked = np.ma.masked
    state = {"masked": [type(masked).__name__, masked.dtype.str, list(masked.shape),
                        np.ndarray.tobytes(np.asarray(masked._mask)).hex(),
                        np.ndarray.tobytes(masked).hex(),
                        masked.__array_interface__["data"][0]],
             "nomask": [type(np.ma.nomask).__name__, bool(np.ma.nomask),
                        np.ma.nomask.dtype.str],
             "copyreg": [len(copyreg._extension_registry), len(copyreg.dispatch_table)]}
    for text in ("f8", "f4", "i8", "u1", "O", "V8", "U1", "M8", "b1"):
        d = np.dtype(text)
        state[f"dtype {text}"] = [d.str, d.flags, d.itemsize, d.byteorder, repr(d.fields),
                                  repr(d.names), repr(d.subdtype)]
    try:  # ml_dtypes' types: numpy hands out one dtype instance of each
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    for name in ("bfloat16", "float8_e4m3fn", "int4") if ml_dtypes is not None else ():
        d = np.dtype(getattr(ml_dtypes, name))
        state[f"dtype ml_dtypes.{name}"] = [d.str, d.flags, d.itemsize, d.byteorder]
    for module, name in _GLOBALS:
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(obj, type):
            if obj.__flags__ & (1 << 8):  # an immutable type: nothing to change
                continue
            state[f"{module}.{name}"] = sorted(f"{k}={id(v)}" for k, v in vars(obj).items())
        elif isinstance(obj, types.FunctionType):
            state[f"{module}.{name}"] = [sorted(vars(obj)), id(obj.__code__),
                                         repr(obj.__defaults__), repr(obj.__kwdefaults__)]
    return state


def _prime_heap():
    """Leave freed, nonzero memory where the next small allocations come
    from (malloc's bins and numpy's cache of data buffers), so that memory
    handed back unfilled shows as nonzero."""
    import numpy as np

    junk = [np.full(n, 0xA5, np.uint8) for n in (64, 512, 4096) for _ in range(32)]
    junk += [b"\xa5" * n for n in (512, 4096, 65536) for _ in range(32)]
    del junk


def holds_nonzero(obj, limit=1_000_000):
    """Whether ``obj`` holds (in containers, up to ``limit`` objects looked
    at) an array, tensor or bytes with a nonzero byte. Containers are walked
    by iterators, never copied: a loaded object may fill most of memory."""
    import numpy as np

    todo, seen = [iter((obj,))], set()
    for _ in range(limit):
        if not todo:
            break
        item = next(todo[-1], seen)
        if item is seen:  # that iterator is done
            todo.pop()
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (bytes, bytearray, memoryview)):
            if any(bytes(item)):
                return True
        elif isinstance(item, np.ndarray):
            if item.dtype.hasobject:
                todo.append(iter(item.flat))
            elif item.size and np.asarray(item).reshape(-1, order="A").view(np.uint8).any():
                return True  # (a view of an array in either order; a copy of any other)
        elif type(item).__module__.startswith("torch") and hasattr(item, "numpy"):
            if item.detach().contiguous().view(-1).numpy().view(np.uint8).any():
                return True
        elif isinstance(item, dict):
            todo.append(iter(item.items()))
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.append(iter(item))
    return False


def same(a, b):
    """``a`` and ``b`` equal in type, value, dtype and shape, all the way down."""
    import numpy as np

    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist())
    if type(a).__module__ == "torch" and hasattr(a, "numpy"):  # a tensor
        return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
                and bool((a == b).all()))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def read(reader, path):
    import cpersist
    import cpersist.cli

    if reader == "load":
        return cpersist.load(path, trusted=False)
    if reader == "loads":
        with open(path, "rb") as f:
            data = f.read()
        return cpersist.loads(data, trusted=False)
    if reader == "verify":
        return cpersist.verify(path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cpersist.cli.main(["info", path])
    if code:
        # What the command line says for a file it refuses; not an exception.
        return ("exit", code, err.getvalue()[-300:])
    return None


def main(jobs):
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the alarm ends the process
    import numpy as np  # noqa: F401  (imports before the limit)

    import cpersist
    import cpersist.cli  # noqa: F401
    try:
        import torch  # noqa: F401  (its files need it; its import maps much)
    except ImportError:
        pass
    before = snapshot()
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    for number, (path, expected, reader) in enumerate(jobs):
        print(json.dumps({"start": number}), flush=True)
        _prime_heap()
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        rss = _status("VmRSS")
        result = {"job": number, "path": path, "reader": reader}
        signal.alarm(HARD_SECONDS)
        start = time.perf_counter()
        try:
            value = read(reader, path)
            result["outcome"] = "ok"
        except cpersist.CpersistError as exc:
            value = None
            result["outcome"] = type(exc).__name__
            result["message"] = str(exc)[:300]
        except BaseException as exc:  # what the test reports as a failure
            value = None
            result["outcome"] = f"BARE {type(exc).__name__}: {str(exc)[:300]}"
        result["seconds"] = round(time.perf_counter() - start, 3)
        result["peak_mb"] = round((_status("VmHWM") - rss) / (1 << 20), 1)
        if reader in ("load", "loads") and result["outcome"] == "ok":
            result["type"] = type(value).__name__
            try:
                result["nonzero"] = holds_nonzero(value)
                if expected == "same":
                    result["same"] = same(value, cpersist.load(path))
            except MemoryError:  # what was loaded left no room to look at it
                result["unchecked"] = "no memory left to check what was loaded"
        elif reader == "info" and value is not None:
            result["info_exit"] = list(value[1:])
        signal.alarm(0)
        del value
        after = snapshot()
        result["changed"] = sorted(k for k in before if after.get(k) != before[k])
        print(json.dumps(result), flush=True)
        if result["changed"]:
            sys.exit(3)  # this process is altered: the caller goes on in a new one


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
