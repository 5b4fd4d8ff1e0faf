"""The operator's lean HTTP/1.1 transport (eventedpleg.k8s.transport) against a scripted server on the
loopback: what it sends, the body framings the API server uses, keep-alive and its failure modes. (The
cluster tier runs the operator through it against the real kube-apiserver, over TLS.)"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eventedpleg.k8s.client import api_client, get_json
from eventedpleg.k8s.errors import Conflict, NotFound, Problem, Unreachable, diagnose
from eventedpleg.k8s.nodes import get_node, node_patch, patch_node
from eventedpleg.k8s.transport import JsonTransport, TransportError

# One scripted answer: the raw bytes to send, then what to do with the connection.
Answer = tuple[bytes, str]  # ("keep" | "close" | "hang")


@dataclass
class Server:
    """Answers the i-th request with script(i); records each request (head, body) and connection."""

    script: Callable[[int], Answer]
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    connections: int = 0
    listener: socket.socket = field(default_factory=socket.socket)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                self.requests.append((head, body))
                raw, then = self.script(len(self.requests) - 1)
                conn.sendall(raw)
                if then == "hang":
                    threading.Event().wait(5)
                if then != "keep":
                    return


@contextmanager
def serving(script: Callable[[int], Answer]) -> Iterator[Server]:
    server = Server(script)
    server.listener.bind(("127.0.0.1", 0))
    server.listener.listen()
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield server
    finally:
        server.listener.close()


def answer(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def chunked(*parts: bytes) -> bytes:
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-Trailer: t\r\n\r\n"


class Cfg:
    """The Configuration fields the transport reads."""

    def __init__(self, host: str, token: str = "") -> None:
        self.host, self.token = host, token
        self.proxy = None
        self.tls_server_name = None

    def get_api_key_with_prefix(self, identifier: str, alias: str | None = None) -> str | None:
        return f"Bearer {self.token}" if self.token else None


def transport(server: Server, timeout: float = 2.0, token: str = "") -> JsonTransport:
    made = JsonTransport.for_configuration(Cfg(server.url, token), (timeout, timeout))
    assert made is not None
    return made


def test_a_request_carries_its_line_host_token_type_length_and_body_and_the_connection_is_kept() -> None:
    with serving(lambda i: (answer(b'{"i": %d}' % i), "keep")) as server:
        host = server.url.removeprefix("http://")
        http = transport(server, token="t0k")
        first = http.request("PATCH", "/api/v1/nodes/n1", query={"a": "b c"}, body=b'{"x":1}',
                             content_type="application/merge-patch+json")  # fmt: skip
        second = http.request("GET", "/api/v1/pods")
    assert (first.status, first.data, second.data) == (200, b'{"i": 0}', b'{"i": 1}')
    head, body = server.requests[0]
    lines = head.decode().split("\r\n")
    assert lines[0] == "PATCH /api/v1/nodes/n1?a=b+c HTTP/1.1"
    assert {
        f"Host: {host}",
        "Authorization: Bearer t0k",
        "Content-Type: application/merge-patch+json",
        "Content-Length: 7",
        "Accept: application/json",
    } <= set(lines)
    assert body == b'{"x":1}'
    assert "Content-Type" not in server.requests[1][0].decode()  # no body, no type
    assert server.connections == 1  # kept alive


def test_a_chunked_answer_is_joined_and_its_trailers_are_read_past() -> None:
    with serving(lambda i: (chunked(b'{"items": [', b"1, 2", b"]}"), "keep")) as server:
        http = transport(server)
        assert http.request("GET", "/x").data == b'{"items": [1, 2]}'
        assert http.request("GET", "/x").data == b'{"items": [1, 2]}'  # the stream stayed in step
    assert server.connections == 1


def test_connection_close_and_an_answer_without_length_end_the_connection() -> None:
    def script(i: int) -> Answer:
        if i == 0:
            return answer(b"{}", extra="Connection: close\r\n"), "close"
        return b'HTTP/1.1 200 OK\r\n\r\n{"until": "closed"}', "close"

    with serving(script) as server:
        http = transport(server)
        assert http.request("GET", "/a").data == b"{}"
        assert http.request("GET", "/b").data == b'{"until": "closed"}'
        assert http.request("GET", "/c").data == b'{"until": "closed"}'
    assert server.connections == 3


def test_a_kept_connection_the_server_dropped_while_idle_is_replaced_once() -> None:
    # The server answers, then closes without saying so (an idle timeout): the next request finds the
    # socket closed before any answer and is sent again on a new connection.
    with serving(lambda i: (answer(b'{"n": %d}' % i), "close")) as server:
        http = transport(server)
        assert http.request("GET", "/a").data == b'{"n": 0}'
        assert http.request("POST", "/b", body=b"{}").data == b'{"n": 1}'
    assert server.connections == 2
    assert [head.split(b" ")[1] for head, _ in server.requests] == [b"/a", b"/b"]  # /b sent once


def test_an_answer_cut_off_midway_fails_and_is_not_sent_again() -> None:
    with serving(lambda i: (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"part', "close")) as server:
        http = transport(server)
        with pytest.raises(TransportError, match="mid-answer"):
            http.request("POST", "/events", body=b"{}")
    assert len(server.requests) == 1


def test_no_answer_within_the_read_timeout_is_a_timeout_not_a_retry() -> None:
    with serving(lambda i: (b"", "hang")) as server:
        http = transport(server, timeout=0.3)
        with pytest.raises(
            TransportError, match=r"no answer within 0.3s \(PATCH http://127.0.0.1:\d+/api/v1/nodes/n\)"
        ):
            http.request("PATCH", "/api/v1/nodes/n", body=b"{}")
    assert len(server.requests) == 1


def test_garbage_is_not_taken_for_an_answer() -> None:
    with serving(lambda i: (b"SSH-2.0-OpenSSH\r\n\r\n", "close")) as server, pytest.raises(TransportError):
        transport(server).request("GET", "/")


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: "secret-token"}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def lean_client(url: str, tmp_path: Path) -> Any:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(url=url))
    api = api_client(str(path), lean=True, request_timeout=(1.0, 1.0))
    assert getattr(api, "json_transport", None) is not None
    return api


def test_send_json_through_the_transport_raises_the_same_errors_as_the_client(tmp_path: Path) -> None:
    status = b'{"kind":"Status","reason":"%s","message":"%s","details":{"name":"n1"}}'
    answers = [
        answer(b'{"metadata": {"name": "n1"}}'),
        answer(status % (b"Conflict", b"the object has been modified"), status="409 Conflict"),
        answer(status % (b"NotFound", b"nodes n1 not found"), status="404 Not Found"),
    ]
    with serving(lambda i: (answers[i], "keep")) as server:
        api = lean_client(server.url, tmp_path)
        assert patch_node(api, "n1", node_patch(annotations={"a": None}, resource_version="7")) == {
            "metadata": {"name": "n1"}
        }
        with pytest.raises(Conflict, match="has been modified"):
            patch_node(api, "n1", node_patch(annotations={"a": "b"}))
        with pytest.raises(NotFound):
            patch_node(api, "n1", node_patch(annotations={"a": "b"}))
        api.close()
    head, body = server.requests[0]
    assert b"Authorization: Bearer secret-token" in head
    assert body == b'{"metadata":{"annotations":{"a":null},"resourceVersion":"7"}}'


def test_a_server_that_is_gone_is_unreachable_and_diagnosed_as_such(tmp_path: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()  # nothing listens there: connection refused
    api = lean_client(url, tmp_path)
    with pytest.raises(Unreachable, match="refused"):
        get_node(api, "n1")
    with pytest.raises(TransportError) as raised:  # untranslated, as the operator's first request is
        get_json(api, "/version")
    diagnosis = diagnose(raised.value)
    assert diagnosis is not None and diagnosis.problem is Problem.UNREACHABLE
    assert (
        diagnosis.message.startswith("cannot reach the API server: ")
        and f"{url}/version" in diagnosis.message
    )


def test_a_proxy_in_the_kubeconfig_keeps_the_clients_own_path() -> None:
    cfg = Cfg("https://10.0.0.1:6443")
    cfg.proxy = "http://proxy:3128"  # type: ignore[assignment]
    assert JsonTransport.for_configuration(cfg, (1.0, 1.0)) is None
