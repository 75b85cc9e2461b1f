"""LZ4 block codec: the fastest to decompress."""

import lz4.block as _lz4_block

from .abc import Codec


class LZ4(Codec):
    """LZ4 blocks.

    Levels 1–3 use LZ4's fast mode (level 1 with acceleration 3, level 3 with
    the default acceleration 1); levels 4–9 use LZ4-HC at the same native
    level, which compresses better and much more slowly.
    """

    codec_id = "lz4"
    #: LZ4 block limit: each extra 255 bytes of match length costs one byte.
    max_expansion = 255

    def encode(self, buf, typesize=1, hint=None):
        if self.level <= 3:
            return _lz4_block.compress(
                buf, mode="fast", acceleration=4 - self.level, store_size=False
            )
        return _lz4_block.compress(
            buf, mode="high_compression", compression=self.level, store_size=False
        )

    def decode_into(self, src, out):
        try:
            # The stated size bounds the allocation; a hostile chunk cannot
            # make LZ4 allocate more than the slice it fills.
            data = _lz4_block.decompress(src, uncompressed_size=len(out))
        except _lz4_block.LZ4BlockError as exc:
            raise self._invalid(exc) from None
        if len(data) != len(out):
            raise self._wrong_size(len(data), len(out))
        out[:] = data
