"""bzip2 codec (the standard library's :mod:`bz2`): each chunk a ``.bz2`` stream.

A Burrows–Wheeler transform on blocks of up to 900 kB: slow, but on text and
on tables of repeated values (NaN-heavy data) it often beats LZ codecs.
"""

from .abc import Codec, fill_from_decompressor


def _bz2():
    # Imported at first use: a Python built without libbz2 still imports
    # cpersist, and fails only when this codec is asked for.
    import bz2

    return bz2


class BZ2(Codec):
    """bzip2 at levels 1–9, passed as ``compresslevel`` (the block size in
    100 kB units, as ``bzip2 -1`` to ``-9`` and joblib's ``"bz2"``)."""

    codec_id = "bz2"

    def encode(self, buf, typesize=1, hint=None):
        # CPython's bz2 releases the GIL while it compresses.
        return _bz2().compress(buf, self.level)

    def decode_into(self, src, out):
        decompressor = _bz2().BZ2Decompressor()

        try:
            filled = fill_from_decompressor(decompressor, src, out)
        except (OSError, ValueError, EOFError) as exc:
            raise self._invalid(exc) from None
        if filled != len(out) or not decompressor.eof or decompressor.unused_data:
            raise self._wrong_size(filled, len(out))
