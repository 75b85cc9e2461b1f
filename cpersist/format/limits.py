"""How much a pickle stream may cost to read when it is not trusted."""

import os
import sys

from ..exceptions import LimitExceededError

#: Whether a stream's author can know the hash of a str or bytes: the process
#: hashes them with a fixed seed (``PYTHONHASHSEED`` set to a number, or
#: hash randomization off), so that colliding keys can be computed ahead.
#: Restricted loads then count str and bytes keys against collision floods
#: as they count numbers and tuples.
STR_HASH_PREDICTABLE = (sys.flags.hash_randomization == 0
                        or os.environ.get("PYTHONHASHSEED", "random") not in ("random", ""))


class Limits:
    """Bounds on the work a pickle stream may ask for.

    A restricted load (``trusted=False`` or an allowlist) and the tools that
    read a file without loading it (:func:`cpersist.inspect`,
    :func:`cpersist.verify`, :attr:`cpersist.FileHandle.arrays`, ``cpersist
    info``) stop with :class:`~cpersist.LimitExceededError` before a stream
    costs more than these; the arrays stored in their own sections, and
    those viewing the file's out-of-band buffers, are not counted (their
    sizes are in the index, which ``inspect`` shows). The
    defaults leave room for any object a model or dataset holds besides its
    arrays; raise one for a file you trust more.

    Parameters
    ----------
    max_opcodes : int, default 10_000_000
        Opcodes executed (or walked): bounds the time.
    max_objects : int, default 2_000_000
        Containers and objects built (dicts, lists, sets, tuples, calls,
        memo entries; the walk of ``inspect`` counts its nodes), and the
        length of a ``range``: bounds the memory, a few hundred bytes each.
    max_digits : int, default 4300
        Digits of an integer built from the stream, and the exponent of a
        number written as text that ``int`` or ``Fraction`` would expand
        (``Fraction("1e10000000")`` has ten million digits): arithmetic on
        larger ones takes quadratic time.
    max_alloc_bytes : int, default 256 MiB
        Memory a whole load may allocate beyond 16 bytes per byte of its
        stream: what every call builds (``bytes(n)``, an array of a given
        shape, a numpy scalar of a given dtype, a copy), and the slots of
        every container, counted as the stream runs.
    max_depth : int, default 100
        How deeply tuples and frozensets may nest (hashing one recurses in
        C as deep as it nests).
    max_seconds : float, default 60
        Time a restricted load may take.

    Examples
    --------
    >>> import cpersist
    >>> cpersist.Limits(max_objects=50_000_000).max_objects
    50000000
    """

    __slots__ = ("max_opcodes", "max_objects", "max_digits", "max_alloc_bytes", "max_depth",
                 "max_seconds")

    def __init__(self, max_opcodes=10_000_000, max_objects=2_000_000, max_digits=4300,
                 max_alloc_bytes=256 << 20, max_depth=100, max_seconds=60):
        for name, value in zip(self.__slots__, (max_opcodes, max_objects, max_digits,
                                                max_alloc_bytes, max_depth, max_seconds)):
            if name == "max_seconds" and type(value) is float and value >= 0:
                pass
            elif type(value) is not int or value < 0:
                raise ValueError(f"Limits.{name} must be a non-negative int, got {value!r}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError("Limits are immutable: make a new one")

    def __eq__(self, other):
        return type(other) is Limits and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self):
        return "Limits(" + ", ".join(f"{n}={getattr(self, n)}" for n in self.__slots__) + ")"


DEFAULT = Limits()


def exceeded(limit, value, limits, source=None, what="needs {}"):
    return LimitExceededError(limit, value, getattr(limits, limit), source, what)
