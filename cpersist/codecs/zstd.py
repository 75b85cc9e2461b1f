"""Zstandard codec: zlib-like ratios at several times its speed."""

import zstandard as _zstd

from .abc import Codec


class Zstd(Codec):
    """Zstandard at levels 1–9 (the native scale; zstd's own default is 3)."""

    codec_id = "zstd"

    def __init__(self, level=3):
        super().__init__(level)
        # Contexts are not thread-safe; compressor objects are cheap, so each
        # call makes its own (ZstdCompressor creation is ~microseconds).
        self._params = dict(level=level, write_content_size=True)

    def encode(self, buf, typesize=1):
        return _zstd.ZstdCompressor(**self._params).compress(buf)

    def decode_into(self, src, out):
        filled = 0
        try:
            # stream_reader.readinto writes straight into the final array's
            # memory, and can never write more than len(out) bytes.
            with _zstd.ZstdDecompressor().stream_reader(src, read_across_frames=False) as reader:
                while filled < len(out):
                    n = reader.readinto(out[filled:])
                    if n == 0:
                        break
                    filled += n
                extra = reader.read(1)
        except _zstd.ZstdError as exc:
            raise self._invalid(exc) from None
        if filled != len(out) or extra:
            raise self._wrong_size(filled + len(extra), len(out))
