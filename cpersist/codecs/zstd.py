"""Zstandard codec: zlib-like ratios at several times its speed."""

import threading

import zstandard as _zstd

from .abc import Codec

# Zstandard contexts are reused, one per thread (they are not thread-safe).
# A new context per chunk allocates and frees megabytes of tables and window
# each time; on a thread pool those mmap/munmap calls serialise the threads.
_local = threading.local()


def _compressor(level):
    # One context per thread, for the last level used: a context keeps its
    # tables (megabytes, more at higher levels) for the thread's life, so
    # one per level would multiply that memory.
    cached = getattr(_local, "compressor", None)
    if cached is None or cached[0] != level:
        cached = _local.compressor = (
            level, _zstd.ZstdCompressor(level=level, write_content_size=True))
    return cached[1]


def _decompressor():
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = _zstd.ZstdDecompressor()
    return decompressor


class Zstd(Codec):
    """Zstandard at levels 1–9 (the native scale; zstd's own default is 3)."""

    codec_id = "zstd"
    #: Zstandard limit: a block decodes to at most 128 KiB and the smallest
    #: block (an RLE block) takes 4 bytes.
    max_expansion = 32768
    #: Frame header: magic, descriptor, window, dictionary id, content size.
    header_size = 18

    def encode(self, buf, typesize=1, hint=None):
        return _compressor(self.level).compress(buf)

    def check_header(self, head, length, raw_length):
        try:
            size = _zstd.frame_content_size(head)
        except _zstd.ZstdError as exc:
            raise self._invalid(exc) from None
        if size != -1 and size != raw_length:  # -1: the frame does not say
            raise self._wrong_size(size, raw_length)

    def decode_into(self, src, out):
        # A frame stating another size is refused before anything is written.
        self.check_header(src[:self.header_size], len(src), len(out))
        filled = 0
        try:
            # stream_reader.readinto writes straight into the final array's
            # memory, and can never write more than len(out) bytes.
            with _decompressor().stream_reader(src, read_across_frames=False) as reader:
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

    def decode_part_into(self, src, skip, out, whole):
        # A frame decodes from its start: the bytes up to ``skip`` are decoded
        # into ``whole`` and dropped, and decoding stops at the part's end.
        # Past half the chunk, decoding all of it in one call is as fast.
        if 2 * (skip + len(out)) > len(whole):
            super().decode_part_into(src, skip, out, whole)
            return
        # Decoding stops before the frame's end: the size it states is
        # checked against the chunk's first.
        self.check_header(src[:self.header_size], len(src), len(whole))
        try:
            with _decompressor().stream_reader(src, read_across_frames=False) as reader:
                for target in (whole[:skip], out):
                    filled = 0
                    while filled < len(target):
                        n = reader.readinto(target[filled:])
                        if n == 0:
                            raise self._wrong_size(skip + filled, len(whole))
                        filled += n
        except _zstd.ZstdError as exc:
            raise self._invalid(exc) from None
