"""A non-seekable stream (pipe, socket, standard input), copied to an
anonymous temporary file that is then read as a local file."""

import shutil
import tempfile

from ..._files import local_fd
from .local import LocalFileSource

#: Bytes copied from the stream at a time.
SPOOL_BLOCK = 1 << 20


class SpooledSource(LocalFileSource):
    """What is left of ``stream``, spooled to a temporary file.

    The temporary file has no name and disappears when the source is
    closed; it is not memory-mapped, since writes through a map would
    reach only that copy.

    Parameters
    ----------
    stream : binary file object
        Read with ``read`` to its end.
    name : str
    """

    can_map = False

    def __init__(self, stream, name):
        tmp = tempfile.TemporaryFile()
        try:
            shutil.copyfileobj(stream, tmp, SPOOL_BLOCK)
            tmp.flush()
            tmp.seek(0)
            fd = local_fd(tmp)
            super().__init__(tmp, name, fd, owned=True)
        except BaseException:
            tmp.close()
            raise
        self.path = None

    def map(self, offset, length, mode):
        return None
