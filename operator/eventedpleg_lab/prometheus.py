"""A real Prometheus (Debian's, localcluster.debtools) over the chart's alerting rules, scraping the
operator's /metrics: whether an alert fires, and with what labels and runbook_url, as a cluster's
Prometheus would say.

    groups = chart_rules(namespace)                       # the rules templates/prometheusrule.yaml renders
    with running(tmp, [ScrapeTarget("127.0.0.1:8080", {"namespace": namespace})], groups) as prom:
        alert = prom.wait_firing("EventedPlegNodeFailedAndCordoned", timeout=120)

`watching_operator` does the same against the operator on a cluster, through `kubectl port-forward`.
The rules' `for:` durations are the chart's values: pass values (e.g. prometheusRule.failedCordonedFor)
to see an alert fire sooner than the chart's defaults say.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eventedpleg_lab.demo.harness import chart_dir, free_port, http_status
from eventedpleg_lab.localcluster import build, debtools
from eventedpleg_lab.localcluster.build import Log, _stderr
from eventedpleg_lab.localcluster.cluster import kubectl_path

RELEASE = "epo"
RULES_TEMPLATE = "templates/prometheusrule.yaml"
INTERVAL = "5s"  # scrape and evaluation: an alert without `for:` fires within ~10 s of its series
JOB = "evented-pleg-operator"

Alert = dict[str, Any]  # one entry of GET /api/v1/alerts: labels, annotations, state, activeAt, value


class PrometheusError(RuntimeError):
    pass


def chart_rules(
    namespace: str, values: Mapping[str, Any] | None = None, *, release: str = RELEASE, log: Log = _stderr
) -> list[dict[str, Any]]:
    """spec.groups of the PrometheusRule the chart renders (`helm template`) for a release in `namespace`,
    with prometheusRule.enabled and `values` (dotted keys, as `--set-json`)."""
    helm = build.ensure(("helm",), log=log)["helm"]
    sets = {"prometheusRule.enabled": True, **(values or {})}
    argv = [str(helm), "template", release, str(chart_dir()), "-n", namespace, "--show-only", RULES_TEMPLATE]
    for key, value in sets.items():
        argv += ["--set-json", f"{key}={json.dumps(value)}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise PrometheusError(f"helm template {RULES_TEMPLATE}: {done.stderr.strip()[-600:]}")
    rule = yaml.safe_load(done.stdout)
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@dataclass(frozen=True)
class ScrapeTarget:
    """One scrape target: host:port serving /metrics, and the labels a ServiceMonitor would give its
    series (the rules select on `namespace`)."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Prometheus:
    """One Prometheus process over `directory` (config, rules, storage, log), on 127.0.0.1:`port`."""

    directory: Path
    targets: Sequence[ScrapeTarget]
    groups: Sequence[Mapping[str, Any]]
    log: Log = _stderr
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "prometheus.log"

    def start(self, *, timeout: float = 60.0) -> None:
        binary, _ = debtools.prometheus(log=self.log)
        self.directory.mkdir(parents=True, exist_ok=True)
        rules = self.directory / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": list(self.groups)}, sort_keys=False))
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "static_configs": [
                        {"targets": [t.address], "labels": dict(t.labels)} for t in self.targets
                    ],
                }
            ],
        }
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        with self.log_path.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    str(binary), f"--config.file={self.directory / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.log(f"[prometheus] pid {self.process.pid} on {self.url}, log {self.log_path}")
        deadline = time.monotonic() + timeout
        while http_status(self.port, "/-/ready") != 200:
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited {self.process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus not ready after {timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.5)

    def _get(self, path: str) -> Any:
        """The JSON answer of GET `path` of the HTTP API."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as answer:
            return json.load(answer)

    def stop(self) -> None:
        """SIGTERM to its PID, SIGKILL if it has not exited within 30 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, chars: int = 1500) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def alerts(self) -> list[Alert]:
        """Every pending and firing alert (GET /api/v1/alerts)."""
        reply = self._get("/api/v1/alerts")
        if reply.get("status") != "success":
            raise PrometheusError(f"/api/v1/alerts answered {reply}")
        found: list[Alert] = reply["data"]["alerts"]
        return found

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now (GET /api/v1/query): each series' metric and value."""
        reply = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if reply.get("status") != "success" or reply["data"]["resultType"] != "vector":
            raise PrometheusError(f"query {expr!r} answered {reply}")
        found: list[dict[str, Any]] = reply["data"]["result"]
        return found

    def wait_scraped(self, *, timeout: float, interval: float = 1.0) -> None:
        """Until every target has been scraped once and answered; PrometheusError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not (health := self.targets_health()) or not all(" up" in t for t in health):
            if time.monotonic() > deadline:
                raise PrometheusError(f"targets not up after {timeout:.0f}s: {health}")
            time.sleep(interval)

    def firing(self, name: str) -> list[Alert]:
        """The firing alerts named `name` (one per label set)."""
        return [a for a in self.alerts() if a["labels"].get("alertname") == name and a["state"] == "firing"]

    def targets_health(self) -> list[str]:
        """Each active target's scrapeUrl, health and lastError: what to look at when nothing fires."""
        active = self._get("/api/v1/targets")["data"]["activeTargets"]
        return [f"{t['scrapeUrl']} {t['health']} {t['lastError']}".strip() for t in active]

    def wait_firing(self, name: str, *, timeout: float, interval: float = 2.0) -> list[Alert]:
        """The firing alerts named `name`, once there is one; PrometheusError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not (found := self.firing(name)):
            if time.monotonic() > deadline:
                raise PrometheusError(
                    f"{name} not firing after {timeout:.0f}s; alerts: {self.alerts()}; "
                    f"targets: {self.targets_health()}"
                )
            time.sleep(interval)
        return found


@contextlib.contextmanager
def running(
    directory: Path,
    targets: Sequence[ScrapeTarget],
    groups: Sequence[Mapping[str, Any]],
    *,
    log: Log = _stderr,
) -> Iterator[Prometheus]:
    prometheus = Prometheus(directory, targets, groups, log=log)
    try:
        prometheus.start()
        yield prometheus
    finally:
        prometheus.stop()


def operator_pods(kubeconfig: Path, namespace: str, *, release: str = RELEASE) -> list[str]:
    """The names of the operator's pods (the chart's operator selector) that are Running."""
    selector = f"app.kubernetes.io/component=operator,app.kubernetes.io/instance={release}"
    done = subprocess.run(
        [kubectl_path(), f"--kubeconfig={kubeconfig}", "-n", namespace, "get", "pods", "-l", selector,
         "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise PrometheusError(f"kubectl get pods -l {selector}: {done.stderr.strip()[-600:]}")
    return done.stdout.split()


@contextlib.contextmanager
def port_forward(kubeconfig: Path, namespace: str, pod: str, directory: Path) -> Iterator[str]:
    """`kubectl port-forward` from a free local port to `pod`'s port named metrics (the ServiceMonitor's
    endpoint); yields 127.0.0.1:<port> once /metrics answers through it."""
    port = free_port()
    log_path = directory / f"port-forward-{pod}.log"
    directory.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [kubectl_path(), f"--kubeconfig={kubeconfig}", "-n", namespace, "port-forward",
             "--address=127.0.0.1", f"pod/{pod}", f"{port}:metrics"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while http_status(port, "/metrics") != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                raise PrometheusError(f"kubectl port-forward pod/{pod}: {log_path.read_text()[-600:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def watching_operator(
    kubeconfig: Path,
    namespace: str,
    directory: Path,
    *,
    values: Mapping[str, Any] | None = None,
    release: str = RELEASE,
    log: Log = _stderr,
) -> Iterator[Prometheus]:
    """A Prometheus over the chart's rules (rendered with `values`) scraping every Running operator pod in
    `namespace` through `kubectl port-forward`, each with the labels namespace and pod, as the chart's
    ServiceMonitor would. A pod that goes away (a drained node) is not followed: its port-forward ends,
    its target goes down, and the other replica's series stay."""
    pods = operator_pods(kubeconfig, namespace, release=release)
    if not pods:
        raise PrometheusError(f"no Running operator pod of release {release} in {namespace}")
    groups = chart_rules(namespace, values, release=release, log=log)
    with contextlib.ExitStack() as stack:
        targets = [
            ScrapeTarget(
                stack.enter_context(port_forward(kubeconfig, namespace, pod, directory)),
                {"namespace": namespace, "pod": pod},
            )
            for pod in pods
        ]
        yield stack.enter_context(running(directory / "prometheus", targets, groups, log=log))
