"""Writing an object to remote storage through fsspec complete or not at
all (the remote twin of :class:`cpersist.container.atomic.AtomicFile`): a
multipart upload to S3, a temporary object moved into place elsewhere.
"""

import errno
import posixpath

from ...container.atomic import AtomicFile
from ...container.files import write_all
from ..._runtime.temporaries import TMP_SUFFIX
from ...exceptions import RemoteStorageError
from .urls import protocols_of, resolve

#: Bytes buffered before a part is uploaded: what a remote write holds in
#: memory, whatever the object's size (S3 parts are 5 MiB at least).
PART_SIZE = 16 << 20
#: Seconds each request of a write to S3 may take by default (a part of
#: :data:`PART_SIZE` bytes at 1 MB/s takes 17).
WRITE_TIMEOUT = 120.0


def write_remote(obj, storage_options, write, timeout=WRITE_TIMEOUT):
    """Call ``write(file)`` on the file of :func:`remote_target`; return the
    name of the object written."""
    with remote_target(obj, storage_options, timeout) as target:
        write(target.file())
    return target.name


def remote_target(obj, storage_options=None, timeout=None):
    """The object ``obj`` names as a dump target (see
    :mod:`cpersist.storage.targets`), which becomes that object only once
    complete.

    S3 receives the bytes as a multipart upload, in parts of
    :data:`PART_SIZE`, completed only when the ``with`` block ends without
    an exception and aborted on any, so that the object is replaced whole
    or not at all. Each of its requests (s3fs's retries included) ends
    within ``timeout`` seconds (default :data:`WRITE_TIMEOUT`), else the
    write fails with a :class:`RemoteStorageError` naming the URL: a server
    that stops reading, or a connection reset mid-part, cannot make it hang.
    Other stores are written to a temporary object next to the target
    (``.<name>.<random>.cpersist-tmp``), moved onto it once complete and
    removed on failure. A ``file://`` URL is written like a local path.
    """
    fs, path, name = resolve(obj, storage_options)
    if fs is None:
        return AtomicFile(path)
    if "https" in protocols_of(fs) or "http" in protocols_of(fs):
        raise ValueError(f"{name}: cannot write over HTTP; HTTP URLs are read-only")
    if "s3" in protocols_of(fs):
        return _MultipartTarget(fs, path, name, WRITE_TIMEOUT if timeout is None else timeout)
    return _MovedTarget(fs, path, name)


class _RemoteTarget:
    """What the targets of :func:`remote_target` share."""

    def __init__(self, fs, path, name):
        self._fs = fs
        self._path = path
        self.name = name
        self.names = [name]

    def write_whole(self, data):
        write_all(self.file(), data, self.name)

    def __enter__(self):
        return self


class _MultipartTarget(_RemoteTarget):
    def __init__(self, fs, path, name, timeout):
        super().__init__(fs, path, name)
        self._upload = S3Upload(fs, path, name, timeout)

    def file(self):
        return self._upload

    def __exit__(self, kind, exc, traceback):
        try:
            if kind is None:
                try:
                    self._upload.complete()
                except BaseException:
                    self._upload.abort()
                    raise
            else:
                self._upload.abort()
        finally:
            self._fs.invalidate_cache(self._path)
        return False


class S3Upload:
    """A write-only file whose bytes become an S3 object once
    :meth:`complete` is called: one ``PutObject`` if they fit in one part,
    else a multipart upload of :data:`PART_SIZE` parts.

    Each request goes through s3fs (its credentials, endpoint, retries and
    extra arguments) with a deadline of ``timeout`` seconds for the whole
    call: aiobotocore's timeouts bound connecting and waiting for a
    response, not sending a body to a server that stopped reading it.
    """

    def __init__(self, fs, path, name, timeout):
        self._fs = fs
        self._bucket, self._key, _ = fs.split_path(path)
        self._name = name
        self._timeout = timeout
        self._buffer = bytearray()
        self._upload_id = None
        self._parts = []

    def writable(self):
        return True

    def seekable(self):
        return False

    def write(self, data):
        self._buffer += data
        while len(self._buffer) >= PART_SIZE:
            self._upload_part(bytes(memoryview(self._buffer)[:PART_SIZE]))
            del self._buffer[:PART_SIZE]
        return len(data)

    def flush(self):
        pass

    def complete(self):
        """Upload what is left and make the object."""
        if self._upload_id is None:
            self._request("put_object", Body=bytes(self._buffer))
        else:
            if self._buffer or not self._parts:
                self._upload_part(bytes(self._buffer))
            self._request("complete_multipart_upload", UploadId=self._upload_id,
                          MultipartUpload={"Parts": self._parts})
            self._upload_id = None
        self._buffer = bytearray()

    def abort(self):
        """Abort the multipart upload, if one is open: the object stays as it was."""
        upload_id, self._upload_id = self._upload_id, None
        self._buffer = bytearray()
        if upload_id is not None:
            try:
                self._request("abort_multipart_upload", UploadId=upload_id)
            except Exception:
                pass  # the store expires what it cannot abort now; the object is intact

    def _upload_part(self, data):
        if self._upload_id is None:
            self._upload_id = self._request("create_multipart_upload")["UploadId"]
        number = len(self._parts) + 1
        response = self._request("upload_part", UploadId=self._upload_id,
                                 PartNumber=number, Body=data)
        self._parts.append({"PartNumber": number, "ETag": response["ETag"]})

    def _request(self, method, **kwargs):
        fs = self._fs
        try:
            return _call(self._name, fs.call_s3, method, fs.s3_additional_kwargs,
                         Bucket=self._bucket, Key=self._key, timeout=self._timeout, **kwargs)
        except RemoteStorageError as exc:
            if _timed_out(exc.__cause__):
                raise RemoteStorageError(
                    f"{self._name}: {method} took more than {self._timeout:g} s (the "
                    f"timeout); nothing was written") from None
            raise


def _timed_out(exc):
    import asyncio

    return isinstance(exc, (asyncio.TimeoutError, TimeoutError))


class _MovedTarget(_RemoteTarget):
    def __init__(self, fs, path, name):
        super().__init__(fs, path, name)
        # Imported here: secrets imports hashlib and hmac, which reading never needs.
        import secrets

        parent, base = posixpath.split(path)
        self._tmp = posixpath.join(parent, f".{base}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        self._file = None

    def file(self):
        if self._file is None:
            self._file = _call(self.name, self._fs.open, self._tmp, "wb", block_size=PART_SIZE)
        return self._file

    def __exit__(self, kind, exc, traceback):
        try:
            if self._file is not None:
                file, self._file = self._file, None
                _call(self.name, file.close)
            if kind is None:
                _call(self.name, self._fs.mv, self._tmp, self._path)
                return False
        except BaseException:
            self._remove_temporary()
            raise
        self._remove_temporary()
        return False

    def _remove_temporary(self):
        try:
            self._fs.rm(self._tmp)
        except Exception:
            pass


def _call(name, func, *args, **kwargs):
    """``func(*args, **kwargs)``, its errors naming ``name``."""
    try:
        return func(*args, **kwargs)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such bucket or directory", name) from None
    except PermissionError as exc:
        raise PermissionError(errno.EACCES, f"access denied ({exc})", name) from None
    except (RemoteStorageError, TypeError, ValueError, NotImplementedError):
        raise  # already named, or a bad argument rather than a failed request
    except Exception as exc:
        raise RemoteStorageError(f"{name}: request failed ({type(exc).__name__}: {exc})") \
            from exc
