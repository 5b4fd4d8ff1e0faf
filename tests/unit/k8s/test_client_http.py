"""The API client's HTTP behaviour (eventedpleg.k8s.client on the kubernetes client's REST layer) against a
scripted server on the loopback: what a request carries, keep-alive, the answer framings the API server
uses, Retry-After, timeouts, refused connections and the watch stream. (The cluster tier runs the same
client against the real kube-apiserver, over TLS.)"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from eventedpleg import __version__
from eventedpleg.k8s import drain
from eventedpleg.k8s.client import api_client, get_json, open_watch, send_json
from eventedpleg.k8s.errors import (
    Conflict,
    NotFound,
    NotServed,
    Problem,
    TooManyRequests,
    Unreachable,
    diagnose,
    translated,
)
from eventedpleg.k8s.nodes import get_node, node_patch, patch_node

# One scripted answer: the raw bytes to send, then what to do with the connection.
Answer = tuple[bytes, str]  # ("keep" | "close" | "hang" | "late-end": the last chunk 0.3 s later, then keep)


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
                if then == "late-end":
                    body_end = raw.rindex(b"0\r\n")
                    conn.sendall(raw[:body_end])
                    threading.Event().wait(0.3)
                    raw, then = raw[body_end:], "keep"
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


def chunked(*parts: bytes, end: bool = True) -> bytes:
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
    tail = b"0\r\nX-Trailer: t\r\n\r\n" if end else b""
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + tail


def status_body(reason: str, message: str, name: str = "n1") -> bytes:
    return json.dumps(
        {"kind": "Status", "reason": reason, "message": message, "details": {"name": name}}
    ).encode()


def headers_of(head: bytes) -> dict[str, str]:
    lines = head.decode().split("\r\n")[1:]
    return {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: "secret-token"}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def client_for(url: str, tmp_path: Path, timeout: float = 1.0) -> Any:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(url=url))
    return api_client(str(path), request_timeout=(timeout, timeout))


def test_a_request_carries_line_host_token_user_agent_type_and_body_and_the_connection_is_kept(
    tmp_path: Path,
) -> None:
    with serving(lambda i: (answer(b'{"i": %d}' % i), "keep")) as server:
        host = server.url.removeprefix("http://")
        api = client_for(server.url, tmp_path)
        first = send_json(
            api, "PATCH", "/api/v1/nodes/n1", {"x": 1}, query={"a": "b c"},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        second = get_json(api, "/api/v1/pods")
        api.close()
    assert (first, second) == ({"i": 0}, {"i": 1})
    head, body = server.requests[0]
    assert head.split(b"\r\n")[0] == b"PATCH /api/v1/nodes/n1?a=b%20c HTTP/1.1"
    sent = headers_of(head)
    assert sent["host"] == host
    assert sent["authorization"] == "Bearer secret-token"
    assert sent["content-type"] == "application/merge-patch+json"
    assert sent["accept"] == "application/json"
    # The operator names itself to the API server (audit log, APF flow schemas), the client's own name kept.
    assert sent["user-agent"].startswith(f"evented-pleg-operator/{__version__} OpenAPI-Generator/")
    assert json.loads(body) == {"x": 1}
    assert "content-type" not in headers_of(server.requests[1][0])  # no body, no type
    assert server.connections == 1  # kept alive


def test_a_chunked_answer_is_joined_and_the_stream_stays_in_step(tmp_path: Path) -> None:
    with serving(lambda i: (chunked(b'{"items": [', b"1, 2", b"]}"), "keep")) as server:
        api = client_for(server.url, tmp_path)
        assert get_json(api, "/x") == {"items": [1, 2]}
        assert get_json(api, "/x") == {"items": [1, 2]}
        api.close()
    assert server.connections == 1


def test_statuses_become_the_same_domain_errors(tmp_path: Path) -> None:
    answers = [
        answer(b'{"metadata": {"name": "n1"}}'),
        answer(status_body("Conflict", "the object has been modified"), status="409 Conflict"),
        answer(status_body("NotFound", "nodes n1 not found"), status="404 Not Found"),
        answer(b"404 page not found", status="404 Not Found"),
    ]
    with serving(lambda i: (answers[i], "keep")) as server:
        api = client_for(server.url, tmp_path)
        assert patch_node(api, "n1", node_patch(annotations={"a": None}, resource_version="7")) == {
            "metadata": {"name": "n1"}
        }
        with pytest.raises(Conflict, match="has been modified"):
            patch_node(api, "n1", node_patch(annotations={"a": "b"}))
        with pytest.raises(NotFound, match="nodes n1 not found"):
            patch_node(api, "n1", node_patch(annotations={"a": "b"}))
        with pytest.raises(NotServed):
            get_node(api, "n1")
        api.close()
    assert json.loads(server.requests[0][1]) == {
        "metadata": {"annotations": {"a": None}, "resourceVersion": "7"}
    }


def test_a_read_answered_429_with_retry_after_is_sent_again_after_the_wait(tmp_path: Path) -> None:
    throttled = answer(status_body("TooManyRequests", "too many requests"), status="429 Too Many Requests",
                       extra="Retry-After: 1\r\n")  # fmt: skip
    answers = [throttled, answer(b'{"ok": true}')]
    with serving(lambda i: (answers[i], "keep")) as server:
        api = client_for(server.url, tmp_path)
        started = time.monotonic()
        assert get_json(api, "/api/v1/nodes") == {"ok": True}
        waited = time.monotonic() - started
        api.close()
    assert len(server.requests) == 2
    assert waited >= 0.9  # the server's Retry-After, not an immediate retry


def test_a_read_still_throttled_after_one_retry_fails_as_too_many_requests(tmp_path: Path) -> None:
    throttled = answer(status_body("TooManyRequests", "too many requests"), status="429 Too Many Requests",
                       extra="Retry-After: 0\r\n")  # fmt: skip
    with serving(lambda i: (throttled, "keep")) as server:
        api = client_for(server.url, tmp_path)
        with pytest.raises(TooManyRequests):
            translated(get_json)(api, "/api/v1/nodes")
        api.close()
    assert len(server.requests) == 2  # one retry (the client's ceiling is retries.total)


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
def test_a_write_answered_429_is_never_sent_again_and_keeps_the_servers_message(
    tmp_path: Path, method: str
) -> None:
    # An eviction's 429 is a PodDisruptionBudget's answer: the caller must see it, with the budget's name.
    refused = answer(
        status_body("TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."),
        status="429 Too Many Requests",
        extra="Retry-After: 1\r\n",
    )
    with serving(lambda i: (refused, "keep")) as server:
        api = client_for(server.url, tmp_path)
        with pytest.raises(TooManyRequests, match="disruption budget"):
            translated(send_json)(api, method, "/api/v1/namespaces/a/pods/p/eviction", {})
        api.close()
    assert len(server.requests) == 1


@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_no_answer_within_the_read_timeout_is_unreachable_not_a_retry(tmp_path: Path, method: str) -> None:
    with serving(lambda i: (b"", "hang")) as server:
        api = client_for(server.url, tmp_path, timeout=0.3)
        body: dict[str, Any] | None = None if method == "GET" else {}
        with pytest.raises(Unreachable) as raised:
            translated(send_json)(api, method, "/api/v1/nodes/n", body)
    assert len(server.requests) == 1
    diagnosis = diagnose(raised.value)
    assert diagnosis is not None and diagnosis.problem is Problem.UNREACHABLE
    assert diagnosis.message.startswith("cannot reach the API server: ") and "\n" not in diagnosis.message
    assert "timed out" in diagnosis.message


def test_a_kept_connection_the_server_dropped_while_idle_is_replaced_and_nothing_is_sent_twice(
    tmp_path: Path,
) -> None:
    # The server answers, then closes without saying so (an idle timeout).
    with serving(lambda i: (answer(b'{"n": %d}' % i), "close")) as server:
        api = client_for(server.url, tmp_path)
        assert get_json(api, "/a") == {"n": 0}
        time.sleep(0.1)
        assert send_json(api, "POST", "/b", {}) == {"n": 1}
        api.close()
    assert server.connections == 2
    assert [head.split(b" ")[1] for head, _ in server.requests] == [b"/a", b"/b"]  # /b sent once


def test_a_server_that_is_gone_is_unreachable_and_diagnosed_in_one_line_naming_it(tmp_path: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()  # nothing listens there: connection refused
    api = client_for(url, tmp_path)
    with pytest.raises(Unreachable, match="refused"):
        get_node(api, "n1")
    with pytest.raises(Exception) as raised:  # untranslated, as the operator's first request is
        get_json(api, "/version")
    diagnosis = diagnose(raised.value)
    assert diagnosis is not None and diagnosis.problem is Problem.UNREACHABLE
    assert (
        diagnosis.message.startswith("cannot reach the API server: ")
        and "Connection refused" in diagnosis.message
    )
    assert f"{url}/version" in diagnosis.message


def test_a_watch_yields_its_lines_and_a_refused_watch_raises_the_status(tmp_path: Path) -> None:
    events = [b'{"type": "ADDED", "object": {"n": 1}}\n', b'{"type": "MODIFIED",', b' "object": {"n": 2}}\n']
    gone = answer(status_body("Expired", "too old resource version"), status="410 Gone")
    with serving(lambda i: (chunked(*events) if i == 0 else gone, "keep")) as server:
        api = client_for(server.url, tmp_path)
        watch = open_watch(api, "/api/v1/nodes", {"watch": "true", "resourceVersion": "5"}, read_timeout=2)
        lines = [line for line in watch.lines if line]
        watch.close()
        assert [json.loads(line)["object"]["n"] for line in lines] == [1, 2]
        with pytest.raises(ApiException) as refused:
            open_watch(api, "/api/v1/nodes", {"watch": "true", "resourceVersion": "1"}, read_timeout=2)
        api.close()
    assert refused.value.status == 410
    assert (
        server.requests[0][0].split(b"\r\n")[0] == b"GET /api/v1/nodes?watch=true&resourceVersion=5 HTTP/1.1"
    )


def test_a_watch_left_before_its_end_never_hands_its_connection_to_the_next_request(tmp_path: Path) -> None:
    # The informer leaves a watch at its ERROR 410 event, before the server's last chunk has arrived. Put
    # back in the pool, that connection would answer the next LIST with the watch's "0\r\n" as its status
    # line (BadStatusLine, seen against the real API server).
    gone = b'{"type": "ERROR", "object": {"kind": "Status", "code": 410}}\n'
    node = answer(json.dumps({"metadata": {"name": "n1"}}).encode())
    with serving(lambda i: (chunked(gone), "late-end") if i == 0 else (node, "keep")) as server:
        api = client_for(server.url, tmp_path)
        watch = open_watch(api, "/api/v1/nodes", {"watch": "true", "resourceVersion": "5"}, read_timeout=2)
        assert json.loads(next(iter(watch.lines)))["object"]["code"] == 410
        watch.close()
        assert get_node(api, "n1")["metadata"]["name"] == "n1"
        api.close()
    assert server.connections == 2


def test_shutdown_ends_a_watch_that_waits_for_its_next_event(tmp_path: Path) -> None:
    first = chunked(b'{"type": "ADDED", "object": {}}\n', end=False)
    with serving(lambda i: (first, "hang")) as server:
        api = client_for(server.url, tmp_path)
        watch = open_watch(api, "/api/v1/nodes", {"watch": "true"}, read_timeout=30)
        lines = iter(watch.lines)
        assert json.loads(next(lines))["type"] == "ADDED"
        threading.Timer(0.2, watch.shutdown).start()
        started = time.monotonic()
        rest = list(lines)  # waits for the next event until shutdown, then ends (no exception)
        ended = time.monotonic() - started
        watch.close()
        api.close()
    assert rest == [] and ended < 3
    assert len(server.requests) == 1


def test_node_maintenance_not_installed_is_asked_again_only_after_a_minute(tmp_path: Path) -> None:
    """Most clusters have no medik8s NodeMaintenance API: one 404, not one per cordon."""
    not_found = answer(b"404 page not found", status="404 Not Found")
    with serving(lambda i: (not_found, "keep")) as server:
        api = client_for(server.url, tmp_path)
        drain._not_served_until[0] = 0.0
        assert drain.maintenance_of(api, "n1") == [] and drain.maintenance_of(api, "n2") == []
        assert len(server.requests) == 1
        drain._not_served_until[0] = 0.0  # a minute later
        assert drain.maintenance_of(api, "n1") == []
        api.close()
    assert len(server.requests) == 2
    assert server.requests[0][0].split(b"\r\n")[0].startswith(b"GET " + drain.NODE_MAINTENANCES.encode())


def test_node_maintenances_are_read_by_the_node_they_hold(tmp_path: Path) -> None:
    """One LIST for preflight's every node; maintenance_of (before a cordon) reads the same list."""
    items = [
        {"metadata": {"name": "disk"}, "spec": {"nodeName": "n1"}},
        {"metadata": {"name": "bios"}, "spec": {"nodeName": "n1"}},
        {"metadata": {"name": "nic"}, "spec": {"nodeName": "n2"}},
    ]
    listed = answer(json.dumps({"items": items}).encode())
    with serving(lambda i: (listed, "keep")) as server:
        api = client_for(server.url, tmp_path)
        drain._not_served_until[0] = 0.0
        assert drain.maintenances(api) == {
            "n1": ["NodeMaintenance disk", "NodeMaintenance bios"],
            "n2": ["NodeMaintenance nic"],
        }
        assert drain.maintenance_of(api, "n2") == ["NodeMaintenance nic"]
        assert drain.maintenance_of(api, "n3") == []
        api.close()
    assert len(server.requests) == 3
