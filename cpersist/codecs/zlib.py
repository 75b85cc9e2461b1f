"""zlib (DEFLATE) codec: the format joblib and ``np.savez_compressed`` use."""

import zlib as _zlib

from .abc import Codec


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
        try:
            # max_length bounds the output: a hostile chunk cannot inflate
            # beyond the slice it is meant to fill.
            data = decompressor.decompress(src, len(out) + 1)
        except _zlib.error as exc:
            raise self._invalid(exc) from None
        if len(data) != len(out) or not decompressor.eof or decompressor.unused_data:
            raise self._wrong_size(len(data), len(out))
        out[:] = data
