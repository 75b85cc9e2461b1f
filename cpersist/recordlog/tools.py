"""What :func:`cpersist.load`, :func:`cpersist.open`, :func:`cpersist.inspect`,
:func:`cpersist.verify` and ``cpersist info`` do with a record log: each
record is read as the dump it would be alone, and the results gathered.

The dump-level function is passed in by its caller (``load_dump``,
``inspect_dump``, ``verify_dump``), which keeps this package below the
modules that call it.
"""

import io

from ..container.files import display_name, is_path
from ..storage.fsspec.urls import is_remote
from ..container.compact import compact_dump
from ..container.frames import ENTRY, entry_stream
from ..container.layout import HEADER, RECORD_SIZE
from ..container.tiny import TINY_MAGIC
from ..exceptions import CorruptFileError
from .reader import RecordLog


def _local_path(source, error):
    """Raise ``error`` (the dump reader's, naming the log) for a source
    other than a local path: a record log is read through its path."""
    if not is_path(source) or is_remote(source):
        raise error


def load_records(source, load_dump, *, mmap_mode=None, trusted=True, verify=True,
                 limits=None):
    """Every record of the log at the local path ``source``, in order, as a list."""
    with RecordLog(source, load_dump, trusted=trusted, verify=verify, limits=limits) as log:
        if mmap_mode is None:
            return list(log)
        return [log.load(i, mmap_mode) for i in range(len(log))]


def open_log(source, mode, load_dump, make_writer, *, trusted=True, verify=True, limits=None,
             compress=0, protocol=None, fsync=False, timeout=None):
    """The :class:`RecordLog` for ``cpersist.open(source, mode)``;
    ``make_writer``: :class:`.writer.LogWriter`, for mode ``'a'``. The
    arguments are checked (``compress`` as a codec) by :mod:`cpersist._args`."""
    writer = None
    if mode == "a":
        writer = make_writer(source, compress, protocol=protocol, fsync=fsync, timeout=timeout)
    elif not is_path(source) or is_remote(source):
        raise ValueError(f"{display_name(source)}: a record log is read through its path")
    try:
        return RecordLog(source, load_dump, trusted=trusted, verify=verify, limits=limits,
                         writer=writer)
    except BaseException:
        if writer is not None:
            writer.close()
        raise


def _each_dump(log):
    """``(record number, file object at the record's dump)`` for every
    record: a light record's stream as the compact dump it would be alone."""
    for i in range(len(log)):
        start, end = log._extent(i)
        at = log.dump_at(i)
        if at is None:
            frame = log._read(start, end - start)
            if frame[RECORD_SIZE - 1] != ENTRY:  # changed since the walk
                raise CorruptFileError(f"{log.name}: the record at offset {start} "
                                       f"changed while it was read")
            yield i, io.BytesIO(compact_dump(bytes(entry_stream(frame, start, log.name))))
        else:
            log._file.seek(at)
            yield i, log._file


def _summary(log):
    if log.dumps:
        # Each dump states its own version: the report gives the first's.
        head = log._read(0, HEADER.size)
        version = ("2.0" if head[:len(TINY_MAGIC)] == TINY_MAGIC
                   else "{1}.{2}".format(*HEADER.unpack(head)))
        layout = "dumps"
    else:
        version, layout = "2.3", "record log"
    return {"format": version, "layout": layout, "file_bytes": log._frames().size,
            "committed_bytes": log.committed_bytes, "torn_bytes": log.torn_bytes,
            "records": len(log)}


def _restricted(verdicts):
    """One verdict for the log: accepted if every record is; else the first
    record refused, named."""
    for i, verdict in verdicts:
        if verdict is not None and not verdict["accepted"]:
            return {"accepted": False, "refusal": f"record {i}: {verdict['refusal']}"}
    return {"accepted": True, "refusal": None}


def inspect_log(source, inspect_dump, error, *, limits=None):
    """:func:`cpersist.inspect` of a record log: its size, its records, and
    what loading them needs (the globals of all records together, every
    record's arrays with the record's number)."""
    _local_path(source, error)
    with RecordLog(source, None) as log:
        report = _summary(log)
        globals_, codes, arrays, verdicts = set(), set(), [], []
        unresolved = with_arrays = 0
        for i, dump in _each_dump(log):
            found = inspect_dump(dump, limits=limits)
            globals_.update(found["globals"])
            codes.update(found["extension_codes"])
            unresolved += found["unresolved_globals"]
            with_arrays += bool(found["arrays"] or found["tensors"])
            arrays += [{"record": i, **entry} for entry in found["arrays"]]
            verdicts.append((i, found["restricted_load"]))
    report.update({"records_with_arrays": with_arrays, "arrays": arrays,
                   "globals": sorted(globals_), "unresolved_globals": unresolved,
                   "extension_codes": sorted(codes), "restricted_load": _restricted(verdicts)})
    return report


def verify_log(source, verify_dump, error, *, limits=None):
    """:func:`cpersist.verify` of a record log: every record checked as a
    dump alone, the totals summed; a torn tail is reported, not an error."""
    _local_path(source, error)
    with RecordLog(source, None) as log:
        report = _summary(log)
        totals = {"sections": 0, "chunks": 0, "stored_bytes": 0, "raw_bytes": 0}
        unchecked, verdicts = [], []
        for i, dump in _each_dump(log):
            found = verify_dump(dump, limits=limits)
            for key in totals:
                totals[key] += found[key]
            unchecked += [(i, section) for section in found["unchecked"]]
            verdicts.append((i, found["restricted_load"]))
    report.update(totals)
    report.update({"unchecked": unchecked, "restricted_load": _restricted(verdicts)})
    return report


def format_log_info(info):
    """The text of ``cpersist info`` for a record log, or a file of dumps."""
    n = info["records"]
    if info["layout"] == "dumps":
        what, ends = f"{n} dumps one after another, read as records", _DUMPS_TORN
    else:
        what, ends = f"record log of {n} records", _LOG_TORN
    lines = [f"{info['file']}: cpersist format {info['format']}, {what} "
             f"({info['records_with_arrays']} with arrays), "
             f"{info['committed_bytes']:,} bytes"]
    if info["torn_bytes"]:
        lines.append(f"torn tail: {info['torn_bytes']:,} bytes after the last complete "
                     f"record ({ends})")
    lines.append("globals a load imports: " + (", ".join(info["globals"]) or "none"))
    verdict = info["restricted_load"]
    lines.append("restricted load (trusted=False): " + (
        "accepted" if verdict["accepted"] else f"refused: {verdict['refusal']}"))
    return "\n".join(lines)


#: What a torn tail is, and what removes it, in ``cpersist info``.
_LOG_TORN = "an append cut short, or in progress; `cpersist repair` cuts it off"
_DUMPS_TORN = ("a dump cut short, or in progress; `cpersist repair` cuts it off, "
               "which dumping to the file again needs first")


def torn_note(result):
    """What ``cpersist verify`` adds for a torn tail."""
    if not result.get("torn_bytes"):
        return ""
    ends = _DUMPS_TORN if result.get("layout") == "dumps" else _LOG_TORN
    return (f"; {result['torn_bytes']:,} bytes of torn tail after record "
            f"{result['records'] - 1} are ignored ({ends})")
