"""Remote writes end within their timeout when the network fails them.

Dumps go to the loopback S3 server through :class:`FaultProxy`, a TCP proxy
on 127.0.0.1 that forwards each connection until the client has sent a set
number of bytes on it, then stalls (stops reading, as a server that hangs
mid-upload) or resets the connection (RST). Either way the dump raises a
:class:`~cpersist.RemoteStorageError` naming the URL within a few times its
``timeout``, the multipart upload is aborted and the old object is intact.
"""

import socket
import struct
import threading
import time

import numpy as np
import pytest

import cpersist
from cpersist.storage.fsspec.write import PART_SIZE

from ._s3 import s3_server  # noqa: F401 (a fixture)
from .conftest import assert_same

#: Bytes a connection may send before the fault: requests without a body
#: pass, a part upload (16 MiB) is cut.
FAULT_AFTER = 1 << 20


class FaultProxy:
    """Forward connections on 127.0.0.1 (port 0) to ``target_port``; once a
    connection's client has sent :data:`FAULT_AFTER` bytes, ``mode``
    ``"stall"`` stops reading from it (and holds it open), ``"reset"``
    closes both sides with an RST."""

    def __init__(self, target_port, mode):
        self.mode = mode
        self.target_port = target_port
        self.faults = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client),
                             daemon=True).start()

    def _upstream(self, client, server):
        sent = 0
        try:
            while True:
                data = client.recv(1 << 16)
                if not data:
                    server.shutdown(socket.SHUT_WR)
                    return
                server.sendall(data)
                sent += len(data)
                if sent >= FAULT_AFTER:
                    self.faults += 1
                    if self.mode == "stall":
                        self._stop.wait()  # reads nothing more, until the test ends
                    else:
                        for sock in (client, server):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
                            sock.close()
                    return
        except OSError:
            pass

    def _downstream(self, server, client):
        try:
            while True:
                data = server.recv(1 << 16)
                if not data:
                    client.shutdown(socket.SHUT_WR)
                    return
                client.sendall(data)
        except OSError:
            pass

    def close(self):
        self._stop.set()
        self._listener.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass


@pytest.mark.parametrize("mode", ["stall", "reset"])
def test_failing_upload_ends_with_remote_storage_error(s3_server, mode):
    fs = s3_server.filesystem()
    url = s3_server.url(f"faulty-{mode}.cp")
    old = {"x": np.arange(1000)}
    cpersist.dump(old, url, storage_options=s3_server.storage_options)
    before = fs.cat_file(url)
    proxy = FaultProxy(int(s3_server.endpoint.rsplit(":", 1)[1]), mode)
    try:
        options = {"endpoint_url": proxy.endpoint, "skip_instance_cache": True}
        big = np.arange(PART_SIZE // 8 + 1000, dtype=np.float64)  # two parts
        start = time.perf_counter()
        with pytest.raises(cpersist.RemoteStorageError, match=url):
            cpersist.dump({"big": big}, url, storage_options=options, timeout=2)
        elapsed = time.perf_counter() - start
    finally:
        proxy.close()
    assert proxy.faults >= 1
    assert elapsed < 20, elapsed
    assert fs.cat_file(url) == before
    assert fs.list_multipart_uploads(s3_server.bucket) == []  # aborted, none left
    assert_same(old, cpersist.load(url, storage_options=s3_server.storage_options))


def test_timeout_must_be_positive(s3_server):
    for bad in (0, -1, "5", True):
        with pytest.raises(ValueError, match="timeout"):
            cpersist.dump(1, s3_server.url("t.cp"), storage_options=s3_server.storage_options,
                          timeout=bad)
