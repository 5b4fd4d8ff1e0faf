"""A small TCP proxy in front of the API server that a test can pause: while paused it forwards nothing
and answers no new connection, so every request through it hangs (a partitioned or wedged path to the
API server, as the leader sees it), while other clients keep talking to the server directly."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class PausableProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.paused = threading.Event()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.paused.set()

    def close(self) -> None:
        self.closed.set()
        self.paused.clear()
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _hold(self) -> bool:
        """Wait while paused; False once closed."""
        while self.paused.is_set() and not self.closed.is_set():
            time.sleep(0.05)
        return not self.closed.is_set()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self.sockets.append(client)
        if not self._hold():
            return
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        self.sockets.append(upstream)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._hold():
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
