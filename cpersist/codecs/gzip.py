"""gzip codec: each chunk a gzip member (RFC 1952) holding a DEFLATE stream.

joblib's ``"gzip"``: the same DEFLATE as :mod:`.zlib` with gzip's header and
CRC-32 trailer instead of zlib's, so that a chunk cut out of the file is a
valid ``.gz`` file.
"""

from .zlib import Zlib

#: zlib's wbits for a gzip wrapper around a 32 KiB window.
_GZIP_WBITS = 31


class Gzip(Zlib):
    """gzip members at levels 1–9 (zlib's native scale, as gzip's)."""

    codec_id = "gzip"
    wbits = _GZIP_WBITS
