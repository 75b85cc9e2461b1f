"""Chunk codecs, one module each, registered by name.

Adding a codec means adding a module with a :class:`Codec` subclass and
registering it below.
"""

from .abc import Codec
from .blosc import BloscBloscLZ, BloscLZ4, BloscZlib, BloscZstd
from .bz2 import BZ2
from .gzip import Gzip
from .lz4 import LZ4
from .lzma import LZMA, XZ
from .max import Max
from .registry import (
    ALIASES,
    DEFAULT_CODEC,
    DEFAULT_LEVEL,
    available_codecs,
    codec_from_config,
    get_codec,
    parse_compress,
    register_codec,
)
from .zlib import Zlib
from .zstd import Zstd
from .zstd_auto import ZstdAuto

for _cls in (Zlib, LZ4, Zstd, ZstdAuto, BloscLZ4, BloscZstd, BloscZlib, BloscBloscLZ):
    register_codec(_cls)
for _cls in (Gzip, BZ2, LZMA, XZ, Max):
    register_codec(_cls)
del _cls

__all__ = [
    "ALIASES",
    "Codec",
    "DEFAULT_CODEC",
    "DEFAULT_LEVEL",
    "available_codecs",
    "codec_from_config",
    "get_codec",
    "parse_compress",
    "register_codec",
]
