"""One byte range of a remote object read by a single streamed request.

A load, or a read of a whole section, needs every byte of a long span.
Asking for it in one GET costs one round trip, and the store serves it at
the rate of one transfer, where many range requests each cost a round trip
and, on some servers, a read of the object. The response body is read in
the file system's event loop and its pieces handed to the reading thread, at
most :data:`READ_AHEAD` bytes ahead of it, so that the caller decodes the
first chunks while the next ones arrive and memory stays bounded whatever
the span's length.

s3fs and fsspec's HTTP file system give a response body to stream from
(:func:`can_stream`); other file systems are read by range requests.
"""

import asyncio
import queue
import threading

#: Most bytes of the response read at once (what the response has
#: received so far, up to this).
PIECE_SIZE = 1 << 20
#: Bytes the stream reads ahead of the reader at most.
READ_AHEAD = 32 << 20

_END = object()


def can_stream(fs):
    """Whether ``fs`` (an fsspec file system) can stream a range: s3fs or
    fsspec's HTTP file system, used synchronously (they run their own event
    loop)."""
    if getattr(fs, "asynchronous", False) or getattr(fs, "loop", None) is None:
        return False
    return _is_s3(fs) or _is_http(fs)


def _is_s3(fs):
    return hasattr(fs, "_call_s3") and hasattr(fs, "split_path")


def _is_http(fs):
    return (type(fs).__name__ == "HTTPFileSystem" and hasattr(fs, "set_session")
            and hasattr(fs, "encode_url"))


async def _open(fs, path, start, end, etag):
    """``(read, close)`` of the body of a GET of bytes ``start:end``:
    ``await read(n)`` returns up to ``n`` bytes, empty at the end."""
    if _is_s3(fs):
        bucket, key, version = fs.split_path(path)
        kwargs = {"Bucket": bucket, "Key": key, "Range": f"bytes={start}-{end - 1}"}
        if version:
            kwargs["VersionId"] = version
        elif etag:
            kwargs["IfMatch"] = f'"{etag}"'
        body = (await fs._call_s3("get_object", **kwargs))["Body"]
        return body.read, body.close
    kwargs = dict(fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    if etag and not etag.startswith("W/"):  # a weak ETag never matches
        headers["If-Match"] = f'"{etag}"'
    session = await fs.set_session()
    response = await session.get(fs.encode_url(path), headers=headers, **kwargs)
    if response.status != 206:
        response.release()
        if response.status == 404:
            raise FileNotFoundError(path)
        response.raise_for_status()
        # 200: the whole object, the range ignored; not what was asked for.
        raise OSError(f"a range request was answered with status {response.status}")
    return response.content.read, response.close


class RangeStream:
    """The bytes ``[start, end)`` of an object in ``fs``, read in order.

    Parameters
    ----------
    fs : s3fs.S3FileSystem or fsspec.implementations.http.HTTPFileSystem
    path : str
    start, end : int
    etag : str or None
        The version read so far: a request for another version fails
        rather than mixing two versions' bytes.
    """

    def __init__(self, fs, path, start, end, etag=None):
        self.start = self.position = start
        self.end = end
        self._pieces = queue.Queue()
        self._ahead = 0  # bytes queued and not yet taken
        self._lock = threading.Lock()
        self._space = None  # asyncio.Event in the loop, once started
        self._loop = fs.loop
        self._piece = memoryview(b"")
        self._future = asyncio.run_coroutine_threadsafe(
            self._pump(fs, path, start, end, etag), fs.loop)

    async def _pump(self, fs, path, start, end, etag):
        self._space = asyncio.Event()
        close = None
        try:
            read, close = await _open(fs, path, start, end, etag)
            remaining = end - start
            while remaining:
                piece = await read(min(PIECE_SIZE, remaining))
                if not piece:
                    break  # ended early: the reader reports the truncation
                remaining -= len(piece)
                self._space.clear()
                with self._lock:
                    self._ahead += len(piece)
                    full = self._ahead > READ_AHEAD
                self._pieces.put(piece)
                if full:
                    await self._space.wait()
            self._pieces.put(_END)
        except BaseException as exc:  # handed to the reader, which raises it
            self._pieces.put(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if close is not None:
                close()

    def _next_piece(self):
        piece = self._pieces.get()
        if piece is _END:
            self._pieces.put(_END)
            return None
        if isinstance(piece, BaseException):
            self._pieces.put(piece)
            raise piece
        with self._lock:
            was_full = self._ahead > READ_AHEAD
            self._ahead -= len(piece)
            if was_full and self._ahead <= READ_AHEAD:
                self._loop.call_soon_threadsafe(self._space.set)
        return memoryview(piece)

    def read(self, offset, length, into=None):
        """The ``length`` bytes at ``offset`` (at or after :attr:`position`),
        written to ``into`` if given, else returned (a view of one piece of
        the response or a new bytearray). Fewer bytes come back only if the object ended
        early (a truncated transfer)."""
        if offset < self.position:
            raise ValueError(f"stream at {self.position} cannot go back to {offset}")
        self._skip(offset - self.position)
        if into is None and len(self._piece) >= length:
            data = self._piece[:length]
            self._piece = self._piece[length:]
            self.position += length
            return data
        out = memoryview(bytearray(length) if into is None else into).cast("B")
        filled = 0
        while filled < length:
            if not self._piece:
                piece = self._next_piece()
                if piece is None:
                    break
                self._piece = piece
            n = min(length - filled, len(self._piece))
            out[filled:filled + n] = self._piece[:n]
            self._piece = self._piece[n:]
            filled += n
        self.position += filled
        return out[:filled]

    def _skip(self, n):
        while n:
            if not self._piece:
                piece = self._next_piece()
                if piece is None:
                    return
                self._piece = piece
            step = min(n, len(self._piece))
            self._piece = self._piece[step:]
            self.position += step
            n -= step

    def close(self):
        """Stop the transfer (if still running) and drop what was read ahead."""
        self._future.cancel()
        self._piece = memoryview(b"")
        while True:
            try:
                self._pieces.get_nowait()
            except queue.Empty:
                break
        if self._space is not None:
            self._loop.call_soon_threadsafe(self._space.set)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
