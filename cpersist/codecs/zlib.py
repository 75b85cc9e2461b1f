"""zlib (DEFLATE) codec: the format joblib and ``np.savez_compressed`` use."""

import zlib as _zlib

from .abc import Codec, fill_stepwise


class Zlib(Codec):
    """zlib at levels 1–9 (the native scale)."""

    codec_id = "zlib"
    #: DEFLATE's limit: a 258-byte match costs at least 2 bits.
    max_expansion = 1032
    #: zlib's window and wrapper: 15 is a 32 KiB window in a zlib wrapper.
    wbits = 15

    def encode(self, buf, typesize=1, hint=None):
        return _zlib.compress(buf, self.level, self.wbits)

    def decode_into(self, src, out):
        decompressor = _zlib.decompressobj(self.wbits)
        pending = [src]

        def decode(max_length):
            # max_length bounds each call's output (the rest of the input
            # waits in unconsumed_tail): a hostile chunk cannot inflate
            # beyond the slice it is meant to fill.
            while not decompressor.eof:
                before = len(pending[0])
                piece = decompressor.decompress(pending[0], max_length)
                pending[0] = decompressor.unconsumed_tail
                if piece:
                    return piece
                if len(pending[0]) == before:
                    break  # no progress: the chunk is cut short
            return b""

        try:
            filled = fill_stepwise(decode, out)
        except _zlib.error as exc:
            raise self._invalid(exc) from None
        if filled != len(out) or not decompressor.eof or decompressor.unused_data:
            raise self._wrong_size(filled, len(out))
