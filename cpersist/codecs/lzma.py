"""LZMA codecs (the standard library's :mod:`lzma`), as joblib writes them.

``"lzma"`` makes each chunk a legacy ``.lzma`` stream (LZMA1, the
"alone" format), ``"xz"`` an ``.xz`` stream (LZMA2 in the xz container,
with xz's default CRC-64 check). Both compress better than zlib and far more
slowly, and decompress at tens of MB/s.
"""

from .abc import Codec, fill_from_decompressor


def _lzma():
    # Imported at first use: a Python built without liblzma still imports
    # cpersist, and fails only when this codec is asked for.
    import lzma

    return lzma


class _LZMA(Codec):
    """LZMA at levels 1–9, passed as the ``preset`` (``xz -1`` to ``-9``)."""

    #: Name of the :mod:`lzma` format constant.
    format_name = None

    def encode(self, buf, typesize=1, hint=None):
        # CPython's lzma releases the GIL while it compresses.
        lzma = _lzma()
        return lzma.compress(buf, format=getattr(lzma, self.format_name), preset=self.level)

    def decode_into(self, src, out):
        lzma = _lzma()
        decompressor = lzma.LZMADecompressor(format=getattr(lzma, self.format_name))

        try:
            filled = fill_from_decompressor(decompressor, src, out)
        except (lzma.LZMAError, ValueError, EOFError) as exc:
            raise self._invalid(exc) from None
        if filled != len(out) or not decompressor.eof or decompressor.unused_data:
            raise self._wrong_size(filled, len(out))


class LZMA(_LZMA):
    codec_id = "lzma"
    format_name = "FORMAT_ALONE"


class XZ(_LZMA):
    codec_id = "xz"
    format_name = "FORMAT_XZ"
