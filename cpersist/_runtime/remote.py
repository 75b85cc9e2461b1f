"""Remote storage through fsspec: telling a URL from a path, resolving it to
a file system and a path, and writing an object there complete or not at all
(the remote twin of :func:`cpersist._runtime.files.write_atomically`). Reading
remote objects is :mod:`cpersist.container.sources.remote`.

fsspec is optional: it is imported only when a URL is given.
"""

import errno
import posixpath

from ..exceptions import RemoteStorageError
from .files import display_name
from .temporaries import TMP_SUFFIX

#: What to install for URLs.
REMOTE_EXTRA = "pip install fsspec s3fs (the remote extra: pip install '.[remote]' in a checkout)"
#: Bytes buffered before a part is uploaded: what a remote write holds in
#: memory, whatever the object's size (S3 parts are 5 MiB at least).
PART_SIZE = 16 << 20
#: Seconds each request of a write to S3 may take by default (a part of
#: :data:`PART_SIZE` bytes at 1 MB/s takes 17).
WRITE_TIMEOUT = 120.0

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SCHEME = _LETTERS | frozenset("0123456789+.-")


def is_url(obj):
    """Whether ``obj`` is a URL string (``s3://...``, ``memory://...``).

    A scheme of two or more characters, then ``://`` or ``::`` (chained,
    ``simplecache::s3://...``); not ``C:\\``. Checked without a regular
    expression, whose compilation every first dump or load would pay.
    """
    if not isinstance(obj, str):
        return False
    colon = obj.find(":")
    return (colon >= 2 and obj[0] in _LETTERS and obj.startswith(("//", ":"), colon + 1)
            and all(c in _SCHEME for c in obj[1:colon]))


def check_storage_options(storage_options, target):
    """Raise unless ``storage_options`` is None, or a dict given with a URL."""
    if storage_options is None:
        return
    if not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if storage_options and not is_url(target):
        raise ValueError(f"storage_options apply to URLs only, not to {display_name(target)}")


def is_filesystem(obj):
    # Checked by name: fsspec need not be installed (nor imported) for paths.
    return any(cls.__module__ == "fsspec.spec" and cls.__name__ == "AbstractFileSystem"
               for cls in type(obj).__mro__)


def is_remote(obj):
    """Whether ``obj`` names something fsspec opens: a URL, a ``(file
    system, path)`` pair or an :class:`fsspec.core.OpenFile`."""
    if is_url(obj):
        return True
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], str):
        return is_filesystem(obj[0])
    return type(obj).__name__ == "OpenFile" and type(obj).__module__ == "fsspec.core"


def _import_fsspec(url):
    try:
        import fsspec
    except ImportError:
        raise ImportError(
            f"{url}: reading and writing URLs needs fsspec: {REMOTE_EXTRA}") from None
    return fsspec


def resolve(obj, storage_options=None):
    """``(fs, path, name)`` of a URL, a ``(fs, path)`` pair or an OpenFile;
    ``fs`` is None for a local file (``file://``), ``path`` then a local path.

    Raises
    ------
    ImportError
        For a URL when fsspec (or the package of its protocol, such as
        s3fs) is not installed, naming what to install.
    ValueError
        For storage options given with a file system or an OpenFile.
    """
    if isinstance(obj, tuple) or not is_url(obj):
        if storage_options:
            raise ValueError("storage_options apply to URLs; a file system given "
                             "already has its options")
        fs, path = obj if isinstance(obj, tuple) else (obj.fs, obj.path)
    else:
        fsspec = _import_fsspec(obj)
        try:
            fs, path = fsspec.core.url_to_fs(obj, **(storage_options or {}))
        except ImportError as exc:
            raise ImportError(f"{obj}: {exc}; or {REMOTE_EXTRA}") from None
    if "file" in protocols_of(fs):
        return None, fs._strip_protocol(path), path
    name = obj if is_url(obj) else fs.unstrip_protocol(path)
    return fs, path, name


def protocols_of(fs):
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def write_remote(obj, storage_options, write, timeout=WRITE_TIMEOUT):
    """Call ``write(file)`` on a file that becomes the object ``obj`` names
    only once complete; return that object's name.

    S3 receives the bytes as a multipart upload, in parts of
    :data:`PART_SIZE`, completed only after ``write`` returns and aborted on
    any exception, so that the object is replaced whole or not at all. Each
    of its requests (s3fs's retries included) ends within ``timeout``
    seconds, else the write fails with a :class:`RemoteStorageError` naming
    the URL: a server that stops reading, or a connection reset mid-part,
    cannot make it hang.
    Other stores are written to a temporary object next to the target
    (``.<name>.<random>.cpersist-tmp``), moved onto it once complete and
    removed on failure. A ``file://`` URL is written like a local path.
    """
    from .files import write_atomically

    fs, path, name = resolve(obj, storage_options)
    if fs is None:
        write_atomically(path, write, fsync=False)
        return path
    if "https" in protocols_of(fs) or "http" in protocols_of(fs):
        raise ValueError(f"{name}: cannot write over HTTP; HTTP URLs are read-only")
    if "s3" in protocols_of(fs):
        _write_multipart(fs, path, name, write, timeout)
    else:
        _write_then_move(fs, path, name, write)
    return name


def _write_multipart(fs, path, name, write, timeout):
    upload = S3Upload(fs, path, name, timeout)
    try:
        write(upload)
        upload.complete()
    except BaseException:
        upload.abort()
        raise
    finally:
        fs.invalidate_cache(path)


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


def _write_then_move(fs, path, name, write):
    # Imported here: secrets imports hashlib and hmac, which reading never needs.
    import secrets

    parent, base = posixpath.split(path)
    tmp = posixpath.join(parent, f".{base}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    try:
        file = _call(name, fs.open, tmp, "wb", block_size=PART_SIZE)
        try:
            write(file)
        finally:
            _call(name, file.close)
        _call(name, fs.mv, tmp, path)
    except BaseException:
        try:
            fs.rm(tmp)
        except Exception:
            pass
        raise


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
