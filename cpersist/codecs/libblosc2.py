"""The C-Blosc2 library the ``blosc2`` wheel ships, reached through ctypes.

cpersist uses Blosc2's chunk format and filters (shuffle, bit shuffle, byte
delta), not python-blosc2's arrays: importing that package pulls in an HTTP
client, a terminal formatter, numexpr and more, a cost every process writing or
reading a Blosc chunk would pay once. So the wheel's ``libblosc2`` is found
without importing it (:func:`importlib.util.find_spec`), loaded, and its
version checked against the C structures declared here; ctypes releases the
GIL during each call, so chunks compress and decode on all threads at once.

:func:`library` returns the loaded library; :func:`compress` makes one
Blosc2 chunk, byte for byte what ``blosc2.compress2`` makes with the same
parameters. Decoding is in :mod:`.blosc_blocks`.
"""

import ctypes
import importlib.util
import os
import sys
import threading

import numpy as np

from .._runtime.fork import renew_after_fork
from ..exceptions import CodecLibraryError

#: C-Blosc2 versions whose ``blosc2_cparams`` and ``blosc2_dparams`` start
#: as declared here: (first, last) major.minor, both included. The layout
#: below has held since 2.7 (the tuner fields); a later major version must
#: be checked against its ``blosc2.h`` before it is added.
SUPPORTED_VERSIONS = ((2, 7), (3, 99))
#: Filters slots in a chunk's parameters (``BLOSC2_MAX_FILTERS``).
_MAX_FILTERS = 6
#: Bytes Blosc may add to a chunk that does not compress
#: (``BLOSC2_MAX_OVERHEAD``).
MAX_OVERHEAD = 32

#: ``blosc2.h`` codes of the inner compressors and filters cpersist writes.
CODECS = {"blosclz": 0, "lz4": 1, "zlib": 4, "zstd": 5}
NOFILTER, SHUFFLE, BITSHUFFLE, DELTA, BYTEDELTA = 0, 1, 2, 3, 35
#: ``BLOSC_AUTO_SPLIT``: python-blosc2's default, so the same chunks.
_AUTO_SPLIT = 3


class CParams(ctypes.Structure):
    # blosc2.h, blosc2_cparams (passed by value to blosc2_create_cctx).
    _fields_ = [("compcode", ctypes.c_uint8), ("compcode_meta", ctypes.c_uint8),
                ("clevel", ctypes.c_uint8), ("use_dict", ctypes.c_int),
                ("typesize", ctypes.c_int32), ("nthreads", ctypes.c_int16),
                ("blocksize", ctypes.c_int32), ("splitmode", ctypes.c_int32),
                ("schunk", ctypes.c_void_p),
                ("filters", ctypes.c_uint8 * _MAX_FILTERS),
                ("filters_meta", ctypes.c_uint8 * _MAX_FILTERS),
                ("prefilter", ctypes.c_void_p), ("preparams", ctypes.c_void_p),
                ("tuner_params", ctypes.c_void_p), ("tuner_id", ctypes.c_int),
                ("instr_codec", ctypes.c_bool), ("codec_params", ctypes.c_void_p),
                ("filter_params", ctypes.c_void_p * _MAX_FILTERS)]


class DParams(ctypes.Structure):
    # blosc2.h, blosc2_dparams. Versions without the last field read only
    # the first four (the struct is passed in memory either way).
    _fields_ = [("nthreads", ctypes.c_int16), ("schunk", ctypes.c_void_p),
                ("postfilter", ctypes.c_void_p), ("postparams", ctypes.c_void_p),
                ("typesize", ctypes.c_int32)]


_lock = threading.Lock()
_library = None   # the loaded library once loaded


def library():
    """The wheel's libblosc2, loaded once, with the functions cpersist
    calls declared.

    Raises
    ------
    CodecLibraryError
        If the ``blosc2`` package is not installed, ships no library where
        expected, or ships a version whose structures are not those
        declared here; the message names the file and the version.
    """
    if _library is not None:
        return _library
    return _load()


def _load():
    global _library
    with _lock:
        # A thread that finds it None comes here and waits for the one loading it.
        if _library is None:
            _library = _open()
        return _library


def _library_path():
    spec = importlib.util.find_spec("blosc2")
    if spec is None or not spec.submodule_search_locations:
        raise CodecLibraryError(
            "Blosc codecs need the blosc2 package (its C library, libblosc2), "
            "which is not installed: pip install 'blosc2>=4.0'")
    name = {"win32": "libblosc2.dll", "darwin": "libblosc2.dylib"}.get(sys.platform,
                                                                       "libblosc2.so")
    for folder in spec.submodule_search_locations:
        for sub in ("lib", "lib64", "bin", ""):
            path = os.path.join(folder, sub, name)
            if os.path.exists(path):
                return path
    raise CodecLibraryError(
        f"the installed blosc2 package ({spec.submodule_search_locations[0]}) ships no "
        f"{name} where cpersist looks for it (lib/): reinstall blosc2 from its wheel")


def check_version(version, path="libblosc2"):
    """Raise :class:`CodecLibraryError` naming ``path`` and ``version``
    unless the C-Blosc2 version string ``version`` is supported."""
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = None
    first, last = SUPPORTED_VERSIONS
    if major_minor is None or len(major_minor) != 2 or not first <= major_minor <= last:
        raise CodecLibraryError(
            f"{path} is C-Blosc2 {version}; cpersist reads and writes Blosc chunks through "
            f"C-Blosc2 {first[0]}.{first[1]} to {last[0]}.x only (the layout of its "
            f"parameter structures): install a blosc2 package that ships one of those")


def _open():
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
        lib.blosc2_get_version_string.restype = ctypes.c_char_p
        version = lib.blosc2_get_version_string().decode("ascii", "replace")
    except (OSError, AttributeError) as exc:
        raise CodecLibraryError(f"cannot load {path}: {exc}") from None
    check_version(version, path)
    try:
        _declare(lib)
    except AttributeError as exc:
        raise CodecLibraryError(f"{path} (C-Blosc2 {version}) lacks a function "
                                f"cpersist calls: {exc}") from None
    lib.blosc2_init()  # registers the filters (byte delta) and codecs
    lib.version = version
    return lib


def _declare(lib):
    void_p, int32 = ctypes.c_void_p, ctypes.c_int32
    lib.blosc2_init.restype = None
    lib.blosc2_create_cctx.restype = void_p
    lib.blosc2_create_cctx.argtypes = [CParams]
    lib.blosc2_create_dctx.restype = void_p
    lib.blosc2_create_dctx.argtypes = [DParams]
    lib.blosc2_free_ctx.restype = None
    lib.blosc2_free_ctx.argtypes = [void_p]
    lib.blosc2_compress_ctx.restype = ctypes.c_int
    lib.blosc2_compress_ctx.argtypes = [void_p, void_p, int32, void_p, int32]
    lib.blosc2_set_maskout.restype = ctypes.c_int
    lib.blosc2_set_maskout.argtypes = [void_p, void_p, ctypes.c_int]
    lib.blosc2_decompress_ctx.restype = ctypes.c_int
    lib.blosc2_decompress_ctx.argtypes = [void_p, void_p, int32, void_p, int32]
    lib.blosc2_cbuffer_sizes.restype = ctypes.c_int
    lib.blosc2_cbuffer_sizes.argtypes = [void_p] + 3 * [ctypes.POINTER(int32)]
    lib.blosc2_getitem_ctx.restype = ctypes.c_int
    lib.blosc2_getitem_ctx.argtypes = [void_p, void_p, int32, ctypes.c_int, ctypes.c_int,
                                       void_p, int32]


class Context:
    """A compression or decompression context, freed with its owner."""

    __slots__ = ("lib", "handle", "pid")

    def __init__(self, lib, handle):
        if not handle:
            raise MemoryError("Blosc could not create a context")
        self.lib, self.handle, self.pid = lib, handle, os.getpid()

    def __del__(self):
        # In a forked child a context's threads do not exist: freeing it
        # would wait for them forever, so it is left alone.
        if self.pid == os.getpid():
            self.lib.blosc2_free_ctx(self.handle)


def _compression_params(key):
    """The ``blosc2_cparams`` of ``key``, made once per parameters."""
    params = _cparams.get(key)
    if params is None:
        codec, clevel, typesize, filters, blocksize = key
        params = CParams(compcode=codec, clevel=clevel, typesize=typesize, nthreads=1,
                         blocksize=blocksize, splitmode=_AUTO_SPLIT)
        for i, (code, meta) in enumerate(filters):
            params.filters[i], params.filters_meta[i] = code, meta
        if len(_cparams) >= 64:
            _cparams.clear()
        _cparams[key] = params
    return params


_cparams = {}


def compress(buf, typesize, clevel, codec, filters, blocksize=0):
    """One Blosc2 chunk of ``buf`` (at most 2 GiB), compressed on this thread.

    Parameters
    ----------
    buf : bytes-like
        Contiguous bytes.
    typesize : int
        Item size the filters work on (1-255).
    clevel : int
        Blosc level, 0-9.
    codec : str
        Inner compressor, a key of :data:`CODECS`.
    filters : sequence of int
        Filter codes, applied in order (:data:`SHUFFLE` or :data:`BITSHUFFLE`,
        :data:`BYTEDELTA`); the byte delta filter works on ``typesize``
        bytes (and is left out for single bytes), as ``blosc2.compress2``
        sets it.
    blocksize : int
        Bytes of Blosc's blocks; 0 lets Blosc choose.

    Returns
    -------
    memoryview
        The bytes ``blosc2.compress2(buf, typesize=..., clevel=...,
        filters=..., codec=..., blocksize=..., nthreads=1)`` returns.

    Raises
    ------
    CodecLibraryError
        If the library cannot be used (see :func:`library`).
    ValueError
        If Blosc reports an error.
    """
    lib = library()
    source = memoryview(buf).cast("B")
    size = source.nbytes
    if size > (1 << 31) - 1 - MAX_OVERHEAD:
        raise ValueError(f"a Blosc chunk holds less than 2 GiB, got {size} bytes")
    # As python-blosc2 sets them: byte delta on typesize bytes, and none
    # (no filter in its place) on single bytes.
    filter_list = tuple((0, 0) if code == BYTEDELTA and typesize == 1 else
                        (code, typesize if code == BYTEDELTA else 0) for code in filters)
    params = _compression_params((CODECS[codec], clevel, typesize, filter_list, blocksize))
    # Blosc writes at most the chunk's size plus its overhead; numpy gives
    # the buffers' addresses (a read-only source included) and leaves the
    # output unfilled.
    source = np.frombuffer(source, dtype=np.uint8)
    out = np.empty(size + MAX_OVERHEAD, dtype=np.uint8)
    # A new context per chunk, as python-blosc2 makes one: a context keeps
    # the block size it chose for its first chunk, so a context kept
    # between chunks would cut a large chunk in the blocks of a small sample.
    context = lib.blosc2_create_cctx(params)
    if not context:
        raise MemoryError("Blosc could not create a compression context")
    try:
        done = lib.blosc2_compress_ctx(context, source.ctypes.data, size, out.ctypes.data,
                                       out.size)
    finally:
        lib.blosc2_free_ctx(context)
    if done <= 0:
        raise ValueError(f"Blosc error {done} compressing {size} bytes")
    # A view, not a copy: the pages of ``out`` past ``done`` are never
    # touched, so never backed.
    return memoryview(out)[:done]


renew_after_fork(globals(), _lock=threading.Lock)
