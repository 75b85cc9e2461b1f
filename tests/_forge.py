"""Helpers to build valid, damaged, forged and malicious cpersist files.

Also home of :class:`Point`, a plain class importable as ``tests._forge.Point`` for
the restricted-load tests.
"""

import io
import json
import pickle
import struct

from cpersist.container import TRAILER, ContainerWriter, checksum
from cpersist.container.layout import HEADER, RECORD_SIZE
from cpersist.container.framing import END, parse_record, record_header
from cpersist.container.index import listed_sections


class Point:
    """A user class a restricted load refuses unless trusted."""

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


def container_bytes(pickled, arrays=(), codec=None):
    """A cpersist file whose pickle stream is ``pickled`` (bytes).

    ``arrays``: list of (bytes, meta) raw sections written before the
    pickle stream, numbered from 0.
    """
    buf = io.BytesIO()
    writer = ContainerWriter(buf)
    for data, meta in arrays:
        writer.add_section([memoryview(data)], codec=codec, meta=meta)
    root = writer.add_section([memoryview(pickled)], codec=codec, meta={"kind": "pickle"})
    writer.finish(root)
    return buf.getvalue()


def write_container(path, pickled, arrays=(), codec=None):
    path.write_bytes(container_bytes(pickled, arrays, codec))
    return path


def split(data, *, keep_totals=False):
    """(body before the index, index dict) of a valid file's bytes.

    Each section's chunk table (JSON text in the file) comes back decoded to
    a list, for tests to edit. Unless ``keep_totals``, the sections' size
    totals are dropped, and :func:`with_index` recomputes them from the
    (edited) tables: a consistent forgery.
    """
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    index = json.loads(data[offset:offset + length])
    if "packed_sections" in index:  # given back as a plain list, which readers take too
        index["sections"] = listed_sections(index, "")
        del index["packed_sections"], index["sections_size"]
    for section in index["sections"]:
        if "chunks" not in section:  # the stub that ends a list of buffer blocks
            continue
        section["chunks"] = json.loads(section["chunks"])
        if not keep_totals:
            del section["stored_size"], section["raw_size"]
    return data[:offset], index


def _major(data):
    return HEADER.unpack(data[:HEADER.size])[1]


def _records_end(body):
    """Where the records of a format-2 ``body`` end, before the header of its
    end record if that is the last thing in it; None if ``body`` is not
    whole records."""
    if len(body) < HEADER.size or _major(body) < 2:
        return None
    position = HEADER.size
    while position < len(body):
        try:
            kind, _, end = parse_record(body[position:position + RECORD_SIZE], position, "")
        except (ValueError, struct.error):
            return None
        if kind == END:
            return position if position + RECORD_SIZE == len(body) else None
        position = end
    return position if position == len(body) else None


def _encode_tables(index):
    """Put edited chunk tables back as JSON text, with totals that agree with
    them unless the section already has totals."""
    sections = index.get("sections") if isinstance(index, dict) else None
    for section in sections if isinstance(sections, list) else ():
        table = section.get("chunks") if isinstance(section, dict) else None
        if not isinstance(table, list):
            continue
        try:
            section.setdefault("stored_size", sum(entry[0] for entry in table))
            section.setdefault("raw_size", sum(entry[1] for entry in table))
        except (TypeError, IndexError):
            pass
        section["chunks"] = json.dumps(table)


def with_index(body, index, *, raw_index=None):
    """Reassemble ``body`` and a (modified) index with a correct trailer.

    ``body`` is format-2 records (as :func:`split` returns it, with the
    header of its end record): it gets a new end record.
    """
    if raw_index is None:
        _encode_tables(index)
    data = raw_index if raw_index is not None else json.dumps(index).encode()
    end = _records_end(body)
    if end is None:
        raise ValueError("not a body of format-2 records")
    body = body[:end] + record_header(END, len(data) + TRAILER.size, end)
    return body + data + TRAILER.pack(len(body), len(data), checksum(data), b"CPSEND\r\n")


def forge(data, edit, *, consistent=False):
    """Apply ``edit(index)`` (in place) to a valid file's index; fix its checksum.

    The sections keep their original size totals, so an edited chunk table
    disagrees with them, unless ``consistent`` (totals follow the tables).
    """
    body, index = split(data, keep_totals=not consistent)
    edit(index)
    return with_index(body, index)


def set_version(data, major, minor=0):
    magic, _, _, flags = HEADER.unpack(data[:HEADER.size])
    return HEADER.pack(magic, major, minor, flags) + data[HEADER.size:]


# -- pickle streams built opcode by opcode -----------------------------------

def s(text):
    """SHORT_BINUNICODE / BINUNICODE of ``text``."""
    raw = text.encode()
    if len(raw) < 256:
        return pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def stack_global(module, name):
    return s(module) + s(name) + pickle.STACK_GLOBAL


def call(func_ops, *arg_ops):
    """``func(*args)`` with REDUCE: func_ops pushes the callable."""
    return func_ops + pickle.MARK + b"".join(arg_ops) + pickle.TUPLE + pickle.REDUCE


def proto(n=4, body=b""):
    return pickle.PROTO + bytes([n]) + body + pickle.STOP
