"""A non-seekable stream (pipe, socket, standard input), whose next dump is
copied to an anonymous temporary file that is then read as a local file."""

from ..files import local_fd
from ..framing import copy_dump
from .local import LocalFileSource


class SpooledSource(LocalFileSource):
    """The next dump of ``stream``, spooled to a temporary file.

    Exactly the dump's bytes are read from the stream (see
    :func:`.framing.copy_dump`), so that it is left at whatever follows:
    the next dump of a pipe, or a socket whose sender waits for an answer.
    The temporary file has no name and disappears when the source is
    closed; it is not memory-mapped, since writes through a map would
    reach only that copy.

    Parameters
    ----------
    stream : binary file object
        Read with ``read``.
    name : str
    owned : bool, default False
        Close ``stream`` once its dump is copied (a path that opened as a
        pipe).
    """

    can_map = False
    whole = True  # copy_dump stops at the end of the dump

    def __init__(self, stream, name, owned=False):
        # Imported here: tempfile imports shutil, random and the bz2 and lzma
        # modules, which only reading from a stream needs.
        import tempfile

        tmp = tempfile.TemporaryFile()
        try:
            copy_dump(stream, tmp, name)
            tmp.flush()
            tmp.seek(0)
            fd = local_fd(tmp)
            super().__init__(tmp, name, fd, owned=True)
        except BaseException:
            tmp.close()
            raise
        finally:
            if owned:
                stream.close()
        self.path = None
        self.not_mapped = ("it is not seekable (a pipe?)" if owned
                           else "the stream is not seekable")

    def map(self, offset, length, mode):
        return None
