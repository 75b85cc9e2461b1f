"""Chunk codecs, one module each, registered by name.

A codec compresses independent chunks of bytes (see :class:`Codec`). The
registry maps names to codec classes: the built-in ones are listed in
:data:`~cpersist.codecs.registry.BUILTIN_CODECS` and their modules (and the
compression libraries behind them) are imported on first use; others come
from :func:`register_codec` or from installed packages through the
``cpersist.codecs`` entry-point group.

Adding a built-in codec means adding a module with a :class:`Codec` subclass
and one line in ``BUILTIN_CODECS``.
"""

from .abc import Codec
from .registry import (
    ALIASES,
    BUILTIN_CODECS,
    DEFAULT_CODEC,
    DEFAULT_LEVEL,
    ENTRY_POINT_GROUP,
    UnknownCodecError,
    available_codecs,
    codec_from_config,
    get_codec,
    parse_compress,
    register_codec,
)

__all__ = [
    "ALIASES",
    "BUILTIN_CODECS",
    "Codec",
    "DEFAULT_CODEC",
    "DEFAULT_LEVEL",
    "ENTRY_POINT_GROUP",
    "UnknownCodecError",
    "available_codecs",
    "codec_from_config",
    "get_codec",
    "parse_compress",
    "register_codec",
]
