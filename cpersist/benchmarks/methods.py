"""cpersist's own storage methods and the registry of every method
(cpersist's, then the peers of :mod:`cpersist.benchmarks.peers_classic` and
:mod:`cpersist.benchmarks.peers`); the interface is :class:`.method.Method`.
"""

import cpersist

from .method import Method
from .peers import peer_methods
from .peers_classic import classic_methods

__all__ = ["all_methods", "select_methods", "cpersist_codecs", "DEFAULT_LEVELS", "FULL_LEVELS"]

#: The level grid of the default run: raw, a fast level and a strong one
#: (level 9 of the Blosc-based peers alone would take longer than the rest).
DEFAULT_LEVELS = (0, 3, 6)
#: The level grid of ``--full``.
FULL_LEVELS = (0, 1, 3, 6, 9)

#: cpersist's best-ratio preset (``compress="max"``): a method of its own.
MAX_PRESET = "max"


def cpersist_codecs():
    """Codec (and preset) names the installed cpersist offers."""
    return list(cpersist.available_codecs())


class Cpersist(Method):
    """``cpersist.dump(obj, path, compress=level)``: default codec, 0 = raw."""

    name = "cpersist"
    family = "cpersist"
    codec = "default"
    suffix = ".cp"
    supported = tuple(range(10))
    note = "compress=<int level>: the default codec; level 0 = raw"

    def __init__(self, threads=None):
        self.threads = threads

    def _compress(self, level):
        return level

    def write(self, obj, path, level):
        cpersist.dump(obj, path, compress=self._compress(level), n_threads=self.threads)

    def read(self, path):
        return cpersist.load(path, n_threads=self.threads)

    def limit(self, obj, level):
        """The codec-alone work of this setting on ``obj``
        (:class:`.limits.Limit`), on the threads a dump would use."""
        from .._runtime.threads import default_n_threads
        from .limits import Limit
        return Limit(obj, self._compress(level), self.threads or default_n_threads())

    @staticmethod
    def kept_raw(path):
        """The fraction of a cpersist file's array bytes stored verbatim
        (a chunk the codec would save too little on), or None for a file with
        no compressed array section."""
        from cpersist.container import ContainerReader
        from cpersist.container.layout import VERBATIM
        from cpersist.container.sources import source_for
        with open(path, "rb") as file:
            try:
                reader = ContainerReader(source_for(file, path, owned=False), whole=True)
            except Exception:  # a file of another layout (a tiny file): nothing to say
                return None
            chunks = [chunk for section in reader.sections
                      if section.index != reader.root and section.codec is not None
                      for chunk in section.chunks]
        total = sum(chunk.raw_length for chunk in chunks)
        kept = sum(chunk.raw_length for chunk in chunks if chunk.flag == VERBATIM)
        return kept / total if total else None


class CpersistCodec(Cpersist):
    """``cpersist.dump(obj, path, compress=(codec, level))``."""

    supported = tuple(range(1, 10))
    note = ""

    def __init__(self, codec, threads=None):
        super().__init__(threads)
        self.codec = codec
        self.name = f"cpersist:{codec}"

    def _compress(self, level):
        return (self.codec, level)


class CpersistMax(Cpersist):
    """``cpersist.dump(obj, path, compress="max")``: the smallest file cpersist makes."""

    name = "cpersist max"
    codec = MAX_PRESET
    supported = (9,)
    fixed_level = 9
    note = 'compress="max" (a preset, no level: reported as 9)'

    def _compress(self, level):
        return MAX_PRESET

    def limit(self, obj, level):
        """None: the preset tries several codecs per chunk, no one of them
        bounds it."""
        return None


class CpersistMmap(Cpersist):
    """Raw cpersist file read with ``mmap_mode='r'`` (every byte touched)."""

    name = "cpersist-mmap"
    codec = "none"
    mmap = True
    fixed_level = 0
    note = "compress=0, load(mmap_mode='r'); read time includes touching every byte"

    def read(self, path):
        return cpersist.load(path, mmap_mode="r")


def all_methods(threads=None):
    """Every method, in display order (including ones not installed here);
    ``threads`` goes to cpersist as ``n_threads``: with several counts, every
    cpersist method comes once per count, named with the suffix ``@<N>t``."""
    counts = list(threads) if isinstance(threads, (list, tuple)) else [threads]
    codecs = cpersist_codecs()
    ms = []
    for count in counts:
        group = [Cpersist(count), CpersistMmap(count)]
        if MAX_PRESET in codecs:
            group.append(CpersistMax(count))
        group += [CpersistCodec(c, count) for c in codecs if c != MAX_PRESET]
        if len(counts) > 1:
            for m in group:
                m.name += f"@{count}t"
        ms += group
    ms += classic_methods()
    ms += peer_methods()
    return ms


def select_methods(patterns, available):
    """Methods by names or shell patterns (``cpersist*``, ``tables:*``) or family."""
    from .datasets import select
    return select(patterns, available, "family", "method")
