"""Remote storage through fsspec (S3, GCS, Azure, HTTP, ``memory://``), both
directions: :mod:`.urls` tells a URL from a path and resolves it,
:mod:`.read` reads an object by range requests, :mod:`.reopen` opens the
same version again in another process, :mod:`.write` writes one complete
or not at all. A package rather than one module: the two directions together
are some 775 lines, over the 400 a module may hold.

fsspec itself is imported only when a URL is given.
"""
