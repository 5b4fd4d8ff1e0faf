"""spec.rollout.alertGate against a real Prometheus (Debian's, unpacked into the cache): an alerting rule
over a metric the test serves fires, the rollout holds with Paused=True naming the alert, the metric
clears, the alert resolves, the rollout completes. Another alert firing all along never holds it."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventedpleg_lab.localcluster import debtools
from tests.cluster.rollout_harness import (
    ProtocolAgents,
    nodeconfig,
    operator_running,
    planned_again,
    wait_for,
)
from tests.cluster.test_rollout import NS, Env

pytestmark = pytest.mark.cluster


class Blocker:
    """Serves `maintenance_blocker VALUE` for Prometheus to scrape."""

    def __init__(self) -> None:
        self.value = 1
        blocker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"maintenance_blocker {blocker.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Blocker]]:
    binary = debtools.ensure(debtools.PROMETHEUS)["prometheus"]
    blocker = Blocker()
    rules = {
        "groups": [
            {
                "name": "maintenance",
                "rules": [
                    {"alert": "MaintenanceBlocker", "expr": "maintenance_blocker == 1"},
                    {"alert": "UnrelatedWatchdog", "expr": "vector(1)"},  # fires all along
                ],
            }
        ]
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "scrape_configs": [{"job_name": "blocker", "static_configs": [{"targets": [blocker.address]}]}],
    }
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{_free_port()}"
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            str(binary), f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address={url.removeprefix('http://')}",
        ],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield url, blocker
    finally:
        process.terminate()
        process.wait(timeout=30)
        blocker.server.shutdown()
        log.close()


def firing(url: str) -> set[str]:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5) as answer:
            alerts = json.load(answer)["data"]["alerts"]
    except OSError:
        return set()
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def test_a_firing_alert_holds_the_rollout_until_it_resolves(
    env: Env, prometheus: tuple[str, Blocker]
) -> None:
    url, blocker = prometheus
    wait_for(lambda: firing(url) == {"MaintenanceBlocker", "UnrelatedWatchdog"}, what="both alerts firing")
    names = env.nodes([{}, {}])
    gate = {"prometheusUrl": url, "alertNameRegexp": "^MaintenanceBlocker$"}
    env.apply(nodeconfig("alerts", env.prefix, rollout={"canary": {"nodes": 0}, "alertGate": gate}))
    with operator_running(env.cluster, NS, env.tmp) as op, ProtocolAgents(env.api, env.prefix):
        paused = wait_for(
            lambda: (cond := env.condition("alerts", "Paused")).get("reason") == "AlertsFiring" and cond,
            what="Paused: AlertsFiring",
        )
        print(env.cluster.kubectl("get", "nodeconfig", "alerts", "-o", "yaml", check=True).stdout)  # for -s
        assert paused["status"] == "True"
        assert paused["message"] == "no new node while alerts firing: MaintenanceBlocker (rollout.alertGate)"
        assert env.condition("alerts", "Progressing")["reason"] == "AlertsFiring"
        planned_again(env.api, op.port, names[0])
        assert set(env.node_states().values()) == {(None, False)}  # nothing taken
        blocker.value = 0  # the cause is gone: Prometheus resolves the alert
        wait_for(lambda: firing(url) == {"UnrelatedWatchdog"}, what="MaintenanceBlocker resolved")
        wait_for(lambda: env.condition("alerts", "Ready").get("status") == "True", what="Ready", timeout=90)
        assert set(env.node_states().values()) == {("Done", False)}, op.log()[-2000:]
        assert env.condition("alerts", "Paused")["status"] == "False"
