"""bzip2 codec (the standard library's :mod:`bz2`): each chunk a ``.bz2`` stream.

A Burrows–Wheeler transform on blocks of up to 900 kB: slow, but on text and
on tables of repeated values (NaN-heavy data) it often beats LZ codecs.
"""

from .abc import Codec, fill_stepwise


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
        pending = [src]

        def decode(max_length):
            # max_length bounds each call's output to what the slice has
            # room for; the decompressor keeps the input it has not used.
            for _ in range(3):  # a call may only take in input, never more than twice
                if decompressor.eof or decompressor.needs_input and not pending[0]:
                    break
                piece = decompressor.decompress(pending[0], max_length)
                pending[0] = b""
                if piece:
                    return piece
            return b""

        try:
            filled = fill_stepwise(decode, out)
        except (OSError, ValueError, EOFError) as exc:
            raise self._invalid(exc) from None
        if filled != len(out) or not decompressor.eof or decompressor.unused_data:
            raise self._wrong_size(filled, len(out))
