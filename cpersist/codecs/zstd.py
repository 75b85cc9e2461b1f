"""Zstandard codec: zlib-like ratios at several times its speed."""

import zstandard as _zstd

from .abc import Codec


class Zstd(Codec):
    """Zstandard at levels 1–9 (the native scale; zstd's own default is 3)."""

    codec_id = "zstd"
    #: Zstandard limit: a block decodes to at most 128 KiB and the smallest
    #: block (an RLE block) takes 4 bytes.
    max_expansion = 32768
    #: Frame header: magic, descriptor, window, dictionary id, content size.
    header_size = 18

    def __init__(self, level=3):
        super().__init__(level)
        # Contexts are not thread-safe; compressor objects are cheap, so each
        # call makes its own (ZstdCompressor creation is ~microseconds).
        self._params = dict(level=level, write_content_size=True)

    def encode(self, buf, typesize=1, hint=None):
        return _zstd.ZstdCompressor(**self._params).compress(buf)

    def check_header(self, head, stored, raw):
        try:
            size = _zstd.frame_content_size(head)
        except _zstd.ZstdError as exc:
            raise self._invalid(exc) from None
        if size != -1 and size != raw:  # -1: the frame does not say
            raise self._wrong_size(size, raw)

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
