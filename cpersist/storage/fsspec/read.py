"""An object in remote storage (S3, GCS, Azure, HTTP, ``memory://``) read by
range requests through an fsspec file system.

Each request costs a round trip, so ranges the reader asks for together are
merged when the gap between them is small, and the merged ranges are
fetched concurrently (``cat_ranges``). A long run of ranges (a whole
section) is read by one streamed request where the file system can stream
(:mod:`.streaming`). The module imports nothing from fsspec: it only calls
the file system it is given.
"""

import errno
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ...exceptions import FileChangedError, RemoteStorageError
from ...container.sources.abc import ByteSource
from ...container.sources.ranges import REQUEST_SIZE, merge_ranges, one_span, split_batches
from ...container.sources.streaming import RangeStream, can_stream

#: Bytes fetched at each end of the object by the first read, in one
#: round trip: the header, and the trailer, index and (when small) pickle
#: stream at the end, which every reader of the file needs.
END_BYTES = 64 << 10
#: Requests :meth:`FsspecSource.iter_ranges` keeps in flight: what it holds
#: in memory is about this many times :data:`REQUEST_SIZE`.
FETCH_AHEAD = 3


class FsspecSource(ByteSource):
    """The bytes of one object, read by ranges through an fsspec file system.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
    path : str
        The object's path in ``fs`` (without protocol).
    name : str, optional
        How the source is named in messages (default: ``fs.unstrip_protocol(path)``).
    storage_options : dict, optional
        The options ``fs`` was made with; kept for :meth:`reopen_spec`.
    file : fsspec file object, optional
        The caller's file open on the object at its start, if that is what
        was given: like any file object, it may hold several dumps one after
        another, and is left positioned after the dump read. Without it the
        object, like a path, must hold one dump and nothing after it.

    Raises
    ------
    FileNotFoundError
        If there is no such object.
    RemoteStorageError
        If it cannot be looked up (access denied, timeout).
    """

    remote = True
    not_mapped = "it is in remote storage"

    def __init__(self, fs, path, name=None, storage_options=None, *, file=None, url=None):
        self.whole = file is None
        self._url = url
        self._file = file
        self.fs = fs
        self.path = path
        self.name = name or fs.unstrip_protocol(path)
        self.storage_options = dict(storage_options or {})
        info = self._call(fs.info, path)
        if info.get("type", "file") != "file":
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a cpersist file",
                                    self.name)
        self._size = info["size"]
        etag = info.get("ETag") or info.get("etag")
        #: What identifies this version of the object: its ETag (when the
        #: store gives one) and size.
        self.identity = {"etag": etag.strip('"') if isinstance(etag, str) else None,
                         "size": self._size}

        self._ends = None  # [(start, bytes)] of both ends, once fetched
        self._whole_stream = None  # the object from its start, in a load

    @property
    def size(self):
        return self._size

    def close(self):
        if self._whole_stream is not None:
            self._whole_stream.close()
            self._whole_stream = None
        if self._file is not None and self.end is not None:
            self._file.seek(self.end)

    def will_read_all(self):
        """Stream the whole object by one request, and fetch its end (the
        index, read first) beside it: a load then costs these two requests
        whatever its number of arrays."""
        if (self._ends is not None or self._whole_stream is not None or not self.whole
                or self._size <= REQUEST_SIZE or not self._streams()):
            return
        self._whole_stream = stream = self._stream(0, self._size)
        tail = self._size - END_BYTES
        try:
            self._ends = [(tail, memoryview(self._fetch([(tail, self._size)])[0]))]
        except BaseException:
            self.close()
            raise

    def _from_stream(self, ranges):
        """The bytes of ``ranges`` read from the whole object's stream, or
        None unless they come in file order no farther than
        :data:`REQUEST_SIZE` after what it has delivered."""
        stream = self._whole_stream
        if stream is None or not ranges or not (
                0 <= ranges[0][0] - stream.position <= REQUEST_SIZE):
            return None
        end = 0
        for offset, length in ranges:
            if offset < end:
                return None
            end = offset + length
        return self._read_stream(stream, ranges)

    def _read_stream(self, stream, ranges):
        for offset, length in ranges:
            data = self._stream_read(stream, offset, length)
            if len(data) != length:
                raise self._truncated(offset + len(data), stream)
            yield data

    def check_identity(self, identity):
        """Raise unless this is the version of the object ``identity``
        (from :meth:`reopen_spec`) describes.

        Raises
        ------
        FileChangedError
            Naming the URL, if the object was replaced meanwhile.
        """
        etag = identity.get("etag")
        if identity.get("size") != self._size or (
                etag and self.identity["etag"] and etag != self.identity["etag"]):
            raise FileChangedError(
                f"{self.name}: the object changed since it was first opened "
                f"(was {identity}, now {self.identity}); open it again")

    def _cached_ranges(self, ranges):
        """The ranges from the bytes fetched at the object's ends, or None."""
        out = []
        for offset, length in ranges:
            data = self._cached(offset, length) if length else b""
            if data is None:
                return None
            out.append(data)
        return out

    def _cached(self, offset, length):
        """The range from the bytes fetched at the object's ends, or None."""
        if self._ends is None:
            tail = max(0, self._size - END_BYTES)
            spans = [(0, min(END_BYTES, tail))] if tail else []
            spans.append((tail, self._size))
            self._ends = [(start, memoryview(data))
                          for (start, _), data in zip(spans, self._fetch(spans))]
        for start, data in self._ends:
            if start <= offset and offset + length <= start + len(data):
                return data[offset - start:offset - start + length]
        return None

    @property
    def url(self):
        """The URL this source was opened from, or None (a file system object
        given by the caller cannot be rebuilt in another process)."""
        return self._url

    def reopen_spec(self):
        """``(url, storage_options, identity)``: what reopens this very object
        elsewhere (another process, a dask worker)."""
        return self.name, dict(self.storage_options), dict(self.identity)

    def _call(self, func, *args, **kwargs):
        try:
            return func(*args, **kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", self.name) from None
        except PermissionError as exc:
            raise PermissionError(errno.EACCES, f"access denied ({exc})", self.name) from None
        except (RemoteStorageError, TypeError, ValueError, NotImplementedError):
            raise  # already named, or a bad argument rather than a failed request
        except Exception as exc:  # timeouts, connection and server errors of any client
            raise RemoteStorageError(
                f"{self.name}: request failed ({type(exc).__name__}: {exc})") from exc

    def _fetch(self, spans):
        """The bytes of each ``(start, end)`` span, concurrently."""
        if self._streams() and self.identity["etag"]:
            return self._fetch_pinned(spans)
        if len(spans) == 1:
            start, end = spans[0]
            data = [self._call(self.fs.cat_file, self.path, start=start, end=end)]
        else:
            data = self._call(self.fs.cat_ranges, [self.path] * len(spans),
                              [s for s, _ in spans], [e for _, e in spans], on_error="raise")
        for (start, end), got in zip(spans, data):
            if isinstance(got, BaseException):
                self._call(_reraise, got)
            wanted = min(end, self._size) - start
            if len(got) > wanted:
                raise RemoteStorageError(
                    f"{self.name}: the server does not answer range requests: {len(got)} "
                    f"bytes came for {wanted} at offset {start}")
            if len(got) != wanted:
                raise RemoteStorageError(
                    f"{self.name}: truncated transfer: {len(got)} of {wanted} bytes "
                    f"at offset {start}")
        return data

    def _fetch_pinned(self, spans):
        """:meth:`_fetch` by requests that name the version read so far
        (``If-Match``), so that a replaced object is refused rather than
        read through the old index: each stream starts its request at once,
        so the spans arrive concurrently."""
        spans = [(start, min(end, self._size)) for start, end in spans]
        streams = [self._stream(start, end) for start, end in spans]
        try:
            data = []
            for stream, (start, end) in zip(streams, spans):
                got = self._stream_read(stream, start, end - start)
                if len(got) != end - start:
                    raise self._truncated(start + len(got), stream)
                data.append(got)
            return data
        finally:
            for stream in streams:
                stream.close()

    def _within(self, ranges):
        """``ranges`` as a list, each checked to end within the object."""
        ranges = list(ranges)
        for offset, length in ranges:
            if offset + length > self._size:
                raise self.short_read(offset, length, max(0, self._size - offset))
        return ranges

    def read_ranges(self, ranges):
        ranges = self._within(ranges)
        cached = self._cached_ranges(ranges)
        if cached is not None:
            return cached
        streamed = self._from_stream(ranges)
        if streamed is not None:
            return list(streamed)
        return self._fetch_ranges(ranges)

    def _fetch_ranges(self, ranges):
        """:meth:`read_ranges` by range requests (safe in several threads at
        once, unlike reading the stream)."""
        cached = self._cached_ranges(ranges)
        if cached is not None:
            return cached
        spans, places = merge_ranges([(o, n) for o, n in ranges if n])
        data = [memoryview(d) for d in self._fetch(spans)] if spans else []
        out = []
        nonempty = iter(places)
        for offset, length in ranges:
            if not length:
                out.append(b"")
                continue
            request, start = next(nonempty)
            out.append(data[request][start:start + length])
        return out

    def _streams(self):
        return can_stream(self.fs)

    def _stream(self, start, end):
        return RangeStream(self.fs, self.path, start, end, self.identity["etag"])

    def _streamed(self, ranges, start, end):
        """Yield the bytes of ``ranges`` (in order, within ``start:end``) read
        from one streamed request for ``start:end``."""
        with self._stream(start, end) as stream:
            yield from self._read_stream(stream, ranges)

    def _stream_read(self, stream, offset, length, into=None):
        try:
            return self._call(stream.read, offset, length, into)
        except RemoteStorageError as exc:
            # The request names the version read so far: if it failed
            # because the object was replaced, say so.
            try:
                self.fs.invalidate_cache(self.path)
                now = FsspecSource(self.fs, self.path, self.name)
            except (OSError, RemoteStorageError):
                raise exc from None
            self.check_identity(now.identity)
            raise

    def _truncated(self, at, stream):
        return RemoteStorageError(
            f"{self.name}: truncated transfer: {at - stream.start} of "
            f"{stream.end - stream.start} bytes from offset {stream.start}")

    def iter_ranges(self, ranges):
        ranges = self._within(ranges)
        streamed = self._from_stream(ranges)
        if streamed is not None:
            yield from streamed
            return
        span = one_span(ranges)
        if span is not None and span[1] - span[0] > REQUEST_SIZE and self._streams():
            yield from self._streamed(ranges, *span)
            return
        # About one request per batch, FETCH_AHEAD of them in flight: the
        # caller decodes the first while the next ones arrive.
        batches = split_batches(ranges, REQUEST_SIZE)
        if len(batches) == 1:
            yield from self._fetch_ranges(batches[0])
            return
        with ThreadPoolExecutor(FETCH_AHEAD, thread_name_prefix="cpersist-fetch") as fetcher:
            pending = deque(fetcher.submit(self._fetch_ranges, batch)
                            for batch in batches[:FETCH_AHEAD])
            following = iter(batches[FETCH_AHEAD:])
            try:
                while pending:
                    data = pending.popleft().result()
                    batch = next(following, None)
                    if batch is not None:
                        pending.append(fetcher.submit(self._fetch_ranges, batch))
                    yield from data
                    del data
            finally:
                for future in pending:  # the caller stopped early, or a fetch failed
                    future.cancel()

    def read(self, offset, length):
        if length <= REQUEST_SIZE:
            return self.read_ranges([(offset, length)])[0]
        buffer = bytearray(length)
        self.read_into(offset, buffer)
        return buffer

    def read_into(self, offset, buffer):
        view = memoryview(buffer).cast("B")
        self._within([(offset, len(view))])
        stream = self._whole_stream
        if stream is not None and 0 <= offset - stream.position <= REQUEST_SIZE:
            got = len(self._stream_read(stream, offset, len(view), view))
            if got != len(view):
                raise self._truncated(offset + got, stream)
            return
        if len(view) > REQUEST_SIZE and self._streams():
            with self._stream(offset, offset + len(view)) as stream:
                got = len(self._stream_read(stream, offset, len(view), view))
                if got != len(view):
                    raise self._truncated(offset + got, stream)
            return
        # A large range is fetched as several concurrent requests.
        pieces = [(offset + p, min(REQUEST_SIZE, len(view) - p))
                  for p in range(0, len(view), REQUEST_SIZE)]
        position = 0
        for data in self.read_ranges(pieces):
            view[position:position + len(data)] = data
            position += len(data)


def _reraise(exc):
    raise exc
