"""Helpers to build valid, damaged, forged and malicious cpersist files.

Also home of :class:`Point`, a plain class importable as ``tests._forge.Point`` for
the restricted-load tests.
"""

import io
import json
import pickle
import struct

from cpersist.container import (ALIGN, HEADER, TRAILER, ContainerWriter, checksum)


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


def split(data):
    """(body before the index, index dict) of a valid file's bytes."""
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size:])
    return data[:offset], json.loads(data[offset:offset + length])


def with_index(body, index, *, raw_index=None):
    """Reassemble ``body`` and a (modified) index with a correct trailer."""
    pad = -len(body) % ALIGN
    body = body + bytes(pad)
    data = raw_index if raw_index is not None else json.dumps(index).encode()
    return body + data + TRAILER.pack(len(body), len(data), checksum(data), b"CPSEND\r\n")


def forge(data, edit):
    """Apply ``edit(index)`` (in place) to a valid file's index; fix the CRC."""
    body, index = split(data)
    edit(index)
    return with_index(body, index)


def set_version(data, major, minor=0):
    magic, _, _ = HEADER.unpack(data[:HEADER.size])
    return HEADER.pack(magic, major, minor) + data[HEADER.size:]


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
