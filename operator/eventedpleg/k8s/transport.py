"""A lean HTTP/1.1 transport for the operator's JSON requests: one kept-alive connection per thread.

Why: through the kubernetes client (urllib3's pool, http.client's header parsing by the email package,
the client's request and response wrappers) one node PATCH cost the operator ~0.6 ms of CPU on the
reference machine, four times what the same request costs written and read on the socket directly
(~0.17 ms: bench/requestcost.py). A node update is five such requests, on thread pools that share one GIL.

What it keeps from the client: the Configuration's server, TLS settings (CA, client certificate,
`insecure-skip-tls-verify`, `tls-server-name`) and bearer token, re-read through the client's (throttled)
credential hook before each request. It speaks only what the API server answers to a JSON request:
`Content-Length` or chunked bodies, keep-alive, `Connection: close`. Anything else -- a proxy in the
kubeconfig -- is not handled here: `for_configuration` returns None and the client's own path is used.

Errors: an HTTP status is returned to the caller (which raises ApiException, as the client does); a
connection failure, timeout or broken answer raises TransportError (an OSError naming the server),
which `errors.translated` turns into Unreachable and `errors.diagnose` into "cannot reach the API server".
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from urllib3.util.ssl_ import create_urllib3_context

CHUNK = 65536
MAX_HEAD = 65536  # a status line and headers larger than this are not an API server's


class TransportError(OSError):
    """A request got no (whole) answer: the connection failed, timed out or broke. Names the server."""


class ResponseError(OSError):
    """The server's answer could not be read as HTTP/1.1 (or it closed the connection mid-answer)."""


class ClosedBeforeAnswerError(ResponseError):
    """The server closed the connection before a byte of the answer: a kept-alive connection it dropped."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    data: bytes


@dataclass
class _Head:
    status: int
    reason: str
    keep: bool  # the connection may carry the next request
    length: int | None = None
    chunked: bool = False


class LineStream:
    """A streamed answer (a watch) on a connection of its own, line by line."""

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn

    def lines(self) -> Iterator[bytes]:
        """Each line of the body; ends when the server ends the stream. A broken or timed-out stream
        raises TransportError."""
        pending = b""
        try:
            for chunk in self._conn.chunks():
                *complete, pending = (pending + chunk).split(b"\n")
                yield from complete
        except OSError as exc:
            raise TransportError(f"watch stream broken: {exc or type(exc).__name__}") from exc
        if pending:
            yield pending

    def shutdown(self) -> None:
        """End a read that waits for the next line, from another thread."""
        with contextlib.suppress(OSError):
            self._conn.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._conn.close()


class _Connection:
    """One socket and what was read past the last response."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.used = False  # a request was answered on it: a failure on the next may be a stale socket
        self.received = 0  # bytes of the current answer received so far

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _fill(self) -> None:
        data = self.sock.recv(CHUNK)
        if not data:
            if not self.received:
                raise ClosedBeforeAnswerError("the API server closed the connection before answering")
            raise ResponseError("the API server closed the connection mid-answer")
        self.received += len(data)
        self.buffer += data

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            if len(self.buffer) > MAX_HEAD:
                raise ResponseError("response line too long")
            self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def read_head(self) -> _Head:
        status_line = self._line()
        version, _, rest = status_line.partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ResponseError(f"not an HTTP/1.1 response: {status_line[:80]!r}")
        head = _Head(int(code), reason.decode("latin-1"), keep=version == b"HTTP/1.1")
        while line := self._line():
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                head.length = int(value)
            elif name == b"transfer-encoding":
                head.chunked = value.endswith(b"chunked")
            elif name == b"connection":
                head.keep = value == b"keep-alive" or (head.keep and value != b"close")
        return head

    def read_body(self, head: _Head) -> bytes:
        """The whole body `head` announces (a body without a length ends the connection)."""
        if head.chunked:
            return b"".join(self.chunks())
        if head.length is not None:
            return self._exactly(head.length)
        head.keep = False
        return self._until_closed()

    def read_response(self) -> tuple[Response, bool]:
        """(the response, whether the connection may be used again)."""
        head = self.read_head()
        data = self.read_body(head)
        return Response(head.status, head.reason, data), head.keep

    def chunks(self) -> Iterator[bytes]:
        """A chunked body, chunk by chunk (a watch: one event a chunk, as the server flushes each)."""
        while True:
            size = int(self._line().split(b";", 1)[0], 16)
            if size == 0:
                while self._line():  # trailers, then the empty line
                    pass
                return
            yield self._exactly(size)
            self._exactly(2)  # the chunk's CRLF

    def _until_closed(self) -> bytes:
        while data := self.sock.recv(CHUNK):
            self.buffer += data
        body = bytes(self.buffer)
        self.buffer.clear()
        return body


class JsonTransport:
    """Requests from any thread; each thread keeps its own connection (no pool, no lock per request)."""

    def __init__(self, configuration: Any, timeout: tuple[float, float]) -> None:
        url = urlsplit(str(configuration.host))
        self._cfg = configuration
        self._tls = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path.rstrip("/")
        self._netloc = url.netloc
        self._connect_timeout, self._read_timeout = timeout
        self._context: ssl.SSLContext | None = _tls_context(configuration) if self._tls else None
        self._server_name = configuration.tls_server_name or self._host
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def for_configuration(cls, configuration: Any, timeout: tuple[float, float]) -> JsonTransport | None:
        """None when the client's own path must be used (a proxy)."""
        if configuration.proxy:
            return None
        return cls(configuration, timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Any = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> Response:
        try:
            return self._send(self._wire(method, path, query, body, content_type))
        except OSError as exc:
            raise self._failure(exc, method, path, self._read_timeout) from exc

    def stream(self, path: str, *, query: Any = None, read_timeout: float) -> Response | LineStream:
        """GET a streamed answer (a watch) on a new connection: a LineStream, or the Response when the
        server refused (its status is not 200)."""
        try:
            conn = self._connect(read_timeout, keep=False)
            try:
                conn.sock.sendall(self._wire("GET", path, query, None, ""))
                head = conn.read_head()
                if head.status == 200 and head.chunked:
                    return LineStream(conn)
                data = conn.read_body(head)
            except BaseException:
                conn.close()
                raise
            conn.close()
            return Response(head.status, head.reason, data)
        except OSError as exc:
            raise self._failure(exc, "GET", path, read_timeout) from exc

    def _wire(self, method: str, path: str, query: Any, body: bytes | None, content_type: str) -> bytes:
        target = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        head = f"{method} {target} HTTP/1.1\r\nHost: {self._netloc}\r\nAccept: application/json\r\n"
        token = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            head += f"Authorization: {token}\r\n"
        if body is not None:
            head += f"Content-Type: {content_type}\r\n"
        head += f"Content-Length: {len(body or b'')}\r\n\r\n"
        return head.encode("latin-1") + (body or b"")

    def _failure(self, exc: OSError, method: str, path: str, timeout: float) -> TransportError:
        what = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            what = f"no answer within {timeout}s"
        return TransportError(f"{what} ({method} {self._cfg.host}{path})")

    def _send(self, wire: bytes) -> Response:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            try:
                return self._exchange(conn, wire)
            except (ClosedBeforeAnswerError, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed while it idled: try once on a new one. Not
                # after a timeout or a half-read answer (the server may have done the request).
                if not conn.used or conn.received:
                    raise
        return self._exchange(self._connect(), wire)

    def _exchange(self, conn: _Connection, wire: bytes) -> Response:
        conn.received = 0
        try:
            conn.sock.sendall(wire)
            response, keep = conn.read_response()
        except BaseException:
            self._drop(conn)
            raise
        conn.used = True
        if not keep:
            self._drop(conn)
        return response

    def _connect(self, read_timeout: float | None = None, *, keep: bool = True) -> _Connection:
        """A new connection; `keep`: this thread's, for its next requests too."""
        sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._server_name)
            sock.settimeout(self._read_timeout if read_timeout is None else read_timeout)
        except BaseException:
            sock.close()
            raise
        conn = _Connection(sock)
        if keep:
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def _tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings the kubernetes client gives urllib3, for our own sockets."""
    verify = bool(configuration.verify_ssl)
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
    if verify:
        if configuration.ssl_ca_cert or configuration.ca_cert_data:
            context.load_verify_locations(
                cafile=configuration.ssl_ca_cert or None, cadata=configuration.ca_cert_data or None
            )
        else:
            context.load_default_certs()
        context.check_hostname = configuration.assert_hostname is not False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    context.set_alpn_protocols(["http/1.1"])
    return context
