"""A loopback S3 server for the tests: moto's server on 127.0.0.1, port 0.

``s3_server`` (a module-scoped fixture) starts moto's WSGI application
behind werkzeug, as ``moto.server.ThreadedMotoServer`` does, but wrapped in
:class:`Counter`, which records every request and the bytes served, so that
tests can assert how many requests a load makes. Dummy credentials are set
in the environment, so that no real ones (nor any other address) are used.
"""

import threading
import uuid

import pytest

#: Environment of every S3 client in these tests (and of the CLI subprocesses).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class Counter:
    """WSGI middleware recording ``(method, path, Range header, bytes served)``."""

    def __init__(self, app):
        self.app = app
        self.requests = []
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        record = [environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                  environ.get("HTTP_RANGE"), 0]
        with self._lock:
            self.requests.append(record)
        for piece in self.app(environ, start_response):
            record[3] += len(piece)
            yield piece

    def clear(self):
        with self._lock:
            self.requests.clear()

    def gets(self, key=None):
        """The GET requests recorded (for ``key`` only, if given)."""
        with self._lock:
            return [r for r in self.requests
                    if r[0] == "GET" and (key is None or r[1].endswith("/" + key))]


class S3Server:
    """The running server: ``endpoint``, ``bucket``, ``counter``."""

    def __init__(self):
        from moto.moto_server.werkzeug_app import (DomainDispatcherApplication,
                                                   MotoRequestHandler, create_backend_app)
        from werkzeug.serving import make_server

        self.counter = Counter(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, self.counter, threaded=True,
                                   request_handler=MotoRequestHandler)
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.bucket = f"cpersist-{uuid.uuid4().hex[:8]}"

    @property
    def storage_options(self):
        # skip_instance_cache: a fresh client per call, not one bound to an
        # event loop of an earlier test.
        return {"endpoint_url": self.endpoint, "skip_instance_cache": True}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)

    def url(self, key):
        return f"s3://{self.bucket}/{key}"

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture(scope="module")
def s3_server():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        patch.delenv("AWS_PROFILE", raising=False)
        server = S3Server()
        try:
            server.filesystem().mkdir(server.bucket)
            yield server
        finally:
            server.stop()
