"""The product on the lab as a cluster administrator installs and runs it: hack/release.sh's image
archive and chart package pushed to the lab's OCI registry, the chart installed from there with `helm
install oci://` and the image pinned by digest (every node pulls it), a workload guarded by a
PodDisruptionBudget, a NodeConfig; and what each lab node must end as (`outcome_problems`). Shared by
`eventedpleg demo --lab` and the lab test tier."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg_lab import image, release
from eventedpleg_lab.demo.harness import NAMESPACE, chart_dir
from eventedpleg_lab.kube import workloads
from eventedpleg_lab.lab import machine
from eventedpleg_lab.lab.lab import Lab, LabError
from eventedpleg_lab.lab.nodefiles import BUSYBOX_IMAGE
from eventedpleg_lab.lab.nodes import REGISTRY, LabRuntime, NodeSpec
from eventedpleg_lab.localcluster import build
from eventedpleg_lab.localcluster.build import Log

RELEASE = "epo"
AGENT_NAMESPACE = "evented-pleg-agent"
AGENT_DAEMONSET = "evented-pleg-agent"  # the chart's epo.agentName for the release
NODECONFIG = "cluster"
WORKLOAD_NAMESPACE = "shop"
WORKLOAD_REPLICAS = 3
WORKLOAD_MIN_AVAILABLE = 2
WORKLOAD_LABELS = {"app": "web"}
WORKLOAD_SELECTOR = workloads.label_selector(WORKLOAD_LABELS)
# The web pods' preStop sleep: an eviction takes at least this long to finish, so a node running one is
# observably Draining for that long (the lab tier's faults land mid-drain).
WORKLOAD_STOP_SECONDS = 8
# The operator's pods go only where the rollout will drain: the leader's own node is changed under it
# (its drain leaves the operator's pods, which keep running through the node's restarts).
OPERATOR_HOST_LABEL = f"lab.{protocol.GROUP}/operator-host"
# The agent's look for a second event consumer on the containerd 1.7 node (core.node.blocks.eventconsumers) at
# every after-Done check (60 s) rather than hourly, so the lab test sees it within minutes.
EVENT_CONSUMER_CHECK_SECONDS = 60

T = TypeVar("T")


def kubectl_ok(lab: Lab, *args: str, stdin: str | None = None, timeout: float = 120.0) -> str:
    done = lab.kubectl(*args, stdin=stdin, timeout=timeout)
    if done.returncode != 0:
        raise LabError(f"kubectl {' '.join(args[:3])}: {(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


def get_json(lab: Lab, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl_ok(lab, "get", *args, "-o", "json"))
    return result


def helm(lab: Lab, *args: str, timeout: float = 330.0) -> str:
    argv = [str(build.ensure(("helm",))["helm"]), f"--kubeconfig={lab.kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise LabError(f"helm {' '.join(args[:2])}: {(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


def wait_for(what: str, check: Callable[[], T], *, timeout: float, interval: float = 2.0) -> T:
    deadline = time.monotonic() + timeout
    last: T = check()
    while not last:
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
        last = check()
    return last


@dataclass(frozen=True)
class Published:
    """What `publish` put into the lab's registry, as a release publishes it."""

    image: str  # REGISTRY/evented-pleg-operator@sha256:...
    chart: str  # oci://REGISTRY/charts/evented-pleg-operator
    version: str  # the chart's version

    @property
    def repository(self) -> str:
        return self.image.split("@", 1)[0]

    @property
    def digest(self) -> str:
        return self.image.split("@", 1)[1]


def publish(lab: Lab, files: release.ReleaseFiles) -> Published:
    """Push hack/release.sh's files into the lab's registry as a release publishes them to a public one:
    the image archive by digest (the digest release.json names) and the chart package as packaged, once
    their checksums verify (`sha256sum -c SHA256SUMS`, as a user checks a download)."""
    problems = release.sum_problems(files.directory)
    if problems:
        raise LabError(f"{files.directory}: {'; '.join(problems)}")
    crane = build.ensure_component(build.CRANE)["crane"]
    work = lab.directory / "publish"
    shutil.rmtree(work, ignore_errors=True)
    (work / "layout").mkdir(parents=True)
    with tarfile.open(files.archive) as tar:
        tar.extractall(work / "layout", filter="data")
    refs = work / "image-refs"
    repository = f"{REGISTRY}/{image.NAME}"
    argv = [str(crane), "push", "--insecure", str(work / "layout"), f"{repository}:{files.version}"]
    done = subprocess.run(
        [*argv, f"--image-refs={refs}"], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise LabError(f"crane push: {(done.stderr or done.stdout).strip()[-800:]}")
    pushed = refs.read_text().strip()
    if pushed != f"{repository}@{files.image_digest}":
        raise LabError(f"crane push gave {pushed}, release.json names {files.image_digest}")
    return Published(pushed, _helm_push(lab, files.chart, chart_dir().name), files.version)


def _helm_push(lab: Lab, package: Path, name: str) -> str:
    """`helm push` the package of chart `name` to the lab's registry; its oci:// reference."""
    helm(lab, "push", str(package), f"oci://{REGISTRY}/charts", "--plain-http")
    return f"oci://{REGISTRY}/charts/{name}"


def push_chart(lab: Lab, source: Path, work: Path) -> str:
    """`helm package` the chart in `source` into `work` and `helm push` it to the lab's registry; returns
    the chart's oci:// reference (its version is the one in source/Chart.yaml)."""
    for old in work.glob(f"{source.name}-*.tgz"):
        old.unlink()
    helm(lab, "package", str(source), "-d", str(work))
    (package,) = work.glob(f"{source.name}-*.tgz")
    return _helm_push(lab, package, source.name)


def install(lab: Lab, specs: tuple[NodeSpec, ...], published: Published, *, timeout: float = 300.0) -> str:
    """`helm install` the chart from the lab's registry with the image pinned by digest (every node pulls
    it from the registry; the chart installs the CRD) and wait until the operator and every agent pod are
    Ready. Returns helm's output."""
    for spec in specs:
        if expected_outcome(spec).state == protocol.NodeState.DONE.value:
            kubectl_ok(lab, "label", "node", spec.name, f"{OPERATOR_HOST_LABEL}=true", "--overwrite")
    out = helm(lab, "install", RELEASE, published.chart, f"--version={published.version}", "--plain-http",
         "-n", NAMESPACE, "--create-namespace",
         f"--set=image.repository={published.repository}", f"--set=image.digest={published.digest}",
         f"--set-string=operator.nodeSelector.{OPERATOR_HOST_LABEL.replace('.', chr(92) + '.')}=true",
         f"--set=agent.eventConsumerCheckSeconds={EVENT_CONSUMER_CHECK_SECONDS}",
         "--wait", f"--timeout={int(timeout)}s", timeout=timeout + 30)  # fmt: skip
    kubectl_ok(lab, "wait", "--for=condition=Established", f"crd/{c.CRD_NAME}", "--timeout=180s")
    return out


def helm_test(lab: Lab, *, timeout: float = 180.0) -> str:
    """`helm test`: the chart's test pod finds the CRD served, every operator replica healthy and every agent
    Ready; its exit code is the verdict. Not `--logs`: Helm 3 deletes a passing pod (hook-succeeded) before
    it reads the logs and then fails with "pods not found" (helm/helm#9098). A failing pod is kept: its log
    is in the error."""
    try:
        return helm(lab, "test", RELEASE, "-n", NAMESPACE, f"--timeout={int(timeout)}s",
                    timeout=timeout + 30)  # fmt: skip
    except LabError as exc:
        logs = lab.kubectl("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=test", "--tail=20")
        raise LabError(f"{exc}\ntest pod log:\n{(logs.stdout or logs.stderr).strip()}") from exc


def install_product(
    lab: Lab,
    specs: tuple[NodeSpec, ...],
    log: Log | None = None,
    *,
    workload: bool = True,
    files: release.ReleaseFiles | None = None,
) -> release.ReleaseFiles:
    """What the demo and the lab tier start from: hack/release.sh's files for this tree (`files`, else
    `release.ensure`: made unless the cache holds this commit's), published to the lab's registry,
    `install`ed, and (unless not `workload`) the workload guarded by its PodDisruptionBudget. Returns the
    release installed."""
    say = log or (lambda _: None)
    try:
        files = files or release.ensure(image.find_repo(), log=say)
    except (release.ReleaseError, image.ImageError, OSError, subprocess.SubprocessError) as exc:
        raise LabError(str(exc)) from exc
    published = publish(lab, files)
    say(f"[lab] pushed {published.image} and the chart {published.chart}:{published.version}"
        f" from {files.directory} ({files.revision[:12]})")  # fmt: skip
    say(
        f"[lab] helm install {RELEASE} {published.chart} --version {published.version} "
        f"--set image.repository={published.repository} --set image.digest={published.digest}"
    )
    say(install(lab, specs, published).rstrip())  # helm's own answer: the release, then NOTES.txt
    if workload:
        start_workload(lab)
    return files


@contextlib.contextmanager
def product_lab(
    specs: tuple[NodeSpec, ...], log: Log, timings: dict[str, float], *, workload: bool = True
) -> Iterator[Lab]:
    """The lab up with `specs` and the product installed on it (`install_product`), as `eventedpleg demo
    --lab` and the benchmarks start; taken down at the end whatever happened (what was left behind is
    logged). `timings` gets "lab up" and "release and install", in seconds."""
    lab = Lab(log=log)
    try:
        began = time.monotonic()
        lab.up(specs)
        timings["lab up"] = round(time.monotonic() - began, 1)
        began = time.monotonic()
        install_product(lab, specs, log, workload=workload)
        timings["release and install"] = round(time.monotonic() - began, 1)
        yield lab
    finally:
        left = lab.down()
        if left:
            log(f"[lab] left behind: {left}")


def uninstall(lab: Lab, *, timeout: float = 300.0) -> None:
    helm(lab, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", f"--timeout={int(timeout)}s",
         timeout=timeout + 30)  # fmt: skip


def lease_holder(lab: Lab) -> str | None:
    lease = get_json(lab, "lease", c.LEASE_NAME, "-n", NAMESPACE)
    holder: str | None = lease.get("spec", {}).get("holderIdentity")
    return holder


def pod_node(lab: Lab, namespace: str, name: str) -> str | None:
    node: str | None = get_json(lab, "pod", name, "-n", namespace).get("spec", {}).get("nodeName")
    return node


# --- the workload and the NodeConfig ------------------------------------------------------------------------


def idle_pod_spec(
    name: str, nodes: Sequence[str], *, readiness: Sequence[str] = (), grace: int = 5
) -> dict[str, Any]:
    """A pod spec pinned to `nodes` whose one container idles until SIGTERM (exits at once on it), Ready
    while the exec probe `readiness` passes (always, when empty)."""
    container: dict[str, Any] = {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", 'trap "exit 0" TERM; while true; do sleep 1; done'],
    }
    if readiness:
        container["readinessProbe"] = {"exec": {"command": list(readiness)}, "periodSeconds": 2}
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        },
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
    }


def workload() -> str:
    """A Deployment of small web servers with a PodDisruptionBudget: the drain must evict, never delete.
    Its pods run, as the operator's do, only on nodes the rollout drains (OPERATOR_HOST_LABEL): with three
    nodes that are never drained in the default set (lab-c16, lab-crio-off, lab-k17) all three replicas
    could otherwise sit on them, and no drain would ever evict one (seen on the lab)."""
    pod_spec = {
        "nodeSelector": {OPERATOR_HOST_LABEL: "true"},
        "terminationGracePeriodSeconds": WORKLOAD_STOP_SECONDS + 10,
        "containers": [
            {
                "name": "web",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                # httpd as PID 1 would ignore SIGTERM (no handler) and wait out the grace period; the shell
                # stops it on SIGTERM, as a server should.
                "command": [
                    "sh",
                    "-c",
                    'echo ok > /tmp/index.html; httpd -f -p 8080 -h /tmp & trap "kill $!; exit 0" TERM; wait',
                ],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
                # As a server behind a load balancer stops: it keeps serving while the endpoints drop it.
                # A drain of a node running one lasts that long.
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(WORKLOAD_STOP_SECONDS)]}}},
            }
        ],
    }
    objects = [
        workloads.namespace(WORKLOAD_NAMESPACE),
        workloads.deployment(
            "web", WORKLOAD_NAMESPACE, replicas=WORKLOAD_REPLICAS, pod_spec=pod_spec, labels=WORKLOAD_LABELS
        ),
        workloads.disruption_budget(
            "web", WORKLOAD_NAMESPACE, min_available=WORKLOAD_MIN_AVAILABLE, labels=WORKLOAD_LABELS
        ),
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def start_workload(lab: Lab, *, timeout: float = 180.0) -> None:
    kubectl_ok(lab, "apply", "-f", "-", stdin=workload())
    kubectl_ok(lab, "-n", WORKLOAD_NAMESPACE, "rollout", "status", "deploy/web", f"--timeout={int(timeout)}s",
        timeout=timeout + 30)  # fmt: skip


def ready_workload_pods(lab: Lab) -> dict[str, str]:
    """Ready web pods -> their node."""
    pods = get_json(lab, "pods", "-n", WORKLOAD_NAMESPACE, "-l", WORKLOAD_SELECTOR)["items"]
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods
        if p["metadata"].get("deletionTimestamp") is None
        and any(
            cond["type"] == "Ready" and cond["status"] == "True"
            for cond in p.get("status", {}).get("conditions", [])
        )
    }


def nodeconfig(evented_pleg: bool = True, *, name: str = NODECONFIG) -> str:
    return json.dumps(
        {
            "apiVersion": f"{protocol.GROUP}/{c.VERSION}",
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {
                "eventedPleg": evented_pleg,
                "rollout": {
                    "maxUnavailable": 1,
                    "canary": {"nodes": 1, "soakSeconds": 10},
                    # The two nodes that must never be Done end Skipped, which is not a failure:
                    # any failed node is unexpected here and halts the rollout.
                    "maxFailedNodes": 1,
                },
                "drain": {"timeoutSeconds": 300},
                "verification": {"timeoutSeconds": 180},
            },
        }
    )


def apply_nodeconfig(lab: Lab, evented_pleg: bool) -> None:
    kubectl_ok(lab, "apply", "-f", "-", stdin=nodeconfig(evented_pleg))


def conditions(body: Mapping[str, Any]) -> dict[str, str]:
    return {cond["type"]: cond["status"] for cond in body.get("status", {}).get("conditions", [])}


def settled(lab: Lab, generation_at_least: int = 1, *, name: str = NODECONFIG) -> dict[str, Any] | None:
    """The NodeConfig once Available or Degraded for the latest generation; None while it runs."""
    body = get_json(lab, "nodeconfig", name)
    status = body.get("status", {})
    if status.get("observedGeneration", 0) < max(generation_at_least, body["metadata"]["generation"]):
        return None
    now = conditions(body)
    if now.get("Available") == "True" or now.get("Degraded") == "True":
        return body
    return None


# --- what each node must end as ------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    state: str  # the node's eventedpleg.io/state at the end of the rollout
    reason_has: str  # a phrase its eventedpleg.io/reason must carry: why it is not Done ("" for Done)


def expected_outcome(spec: NodeSpec) -> Expected:
    """What each lab node must end as (docs/compatibility.md): containerd 1.6 has no container events, so
    the node is skipped from the version the runtime reports; containerd 1.7 is Risky (one event
    subscriber), and CRI-O 1.34 under kubelet 1.36 is Risky (empty container statuses in its events, which
    1.36 dereferences: cri-o#9663), both skipped unless the NodeConfig sets allowRisky (the lab's rollout
    does not); a site drop-in that sorts after ours and turns pod events off is named by the agent's host
    check, and the node is never Done; every other node is Done (v1.37 too, with the note that it saves no
    steady-state CPU; a kubeadm node through the kubelet.service drop-in that adds --config-dir)."""
    if spec.runtime is LabRuntime.CONTAINERD_16:
        return Expected(protocol.NodeState.SKIPPED.value, "GetContainerEvents")
    if spec.runtime is LabRuntime.CONTAINERD_17:
        return Expected(protocol.NodeState.SKIPPED.value, "containerd#7318")
    if spec.runtime is LabRuntime.CRIO_134 and spec.kubelet == "1.36":
        return Expected(protocol.NodeState.SKIPPED.value, "cri-o#9663")
    if spec.admin_pod_events_off:
        return Expected(protocol.NodeState.SKIPPED.value, "99-zz-site-policy.conf")
    return Expected(protocol.NodeState.DONE.value, "")


def outcome_problems(
    specs: tuple[NodeSpec, ...], nodes: Mapping[str, Mapping[str, Any]], body: Mapping[str, Any]
) -> list[str]:
    """Every lab node whose end is not what `expected_outcome` says (empty when all are). A node the
    operator skipped from its Node object alone is never touched: its state and reason are only in the
    NodeConfig's status.nodeStatuses; every other node carries them in its annotations, and its state in
    the label eventedpleg.io/state too."""
    listed = {n["name"]: n for n in body.get("status", {}).get("nodeStatuses", [])}
    problems = []
    for spec in specs:
        want = expected_outcome(spec)
        annotations = nodes.get(spec.name, {}).get("metadata", {}).get("annotations", {})
        state = annotations.get(protocol.ANN_STATE) or listed.get(spec.name, {}).get("state")
        reason = annotations.get(protocol.ANN_REASON) or listed.get(spec.name, {}).get("reason", "")
        label = nodes.get(spec.name, {}).get("metadata", {}).get("labels", {}).get(protocol.LABEL_STATE)
        if state != want.state or want.reason_has not in reason:
            problems.append(f"{spec.name}: {state} ({reason[:160]}), expected {want.state} {want.reason_has}")
        elif label != annotations.get(protocol.ANN_STATE):  # `kubectl get nodes -L eventedpleg.io/state`
            problems.append(f"{spec.name}: label {protocol.LABEL_STATE}={label}, state annotation {state}")
        elif spec.kubelet == "1.37" and "1.37" not in annotations.get(protocol.ANN_BENEFIT, ""):
            problems.append(
                f"{spec.name}: no kubelet 1.37 note in its benefit: {annotations.get(protocol.ANN_BENEFIT)}"
            )
    return problems


def missing_benefits(lab: Lab, specs: tuple[NodeSpec, ...], *, timeout: float = 120.0) -> list[str]:
    """The nodes expected Done still without eventedpleg.io/benefit after waiting up to `timeout`: an agent
    publishes its figures one benefit window (30 s) after reporting Done, so the last node's may come
    after Available. Empty when every one has them."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = lab.nodes()
        left = [
            f"{s.name}: no {protocol.ANN_BENEFIT} {timeout:.0f}s after Available"
            for s in specs
            if expected_outcome(s).state == protocol.NodeState.DONE.value
            and protocol.ANN_BENEFIT not in nodes.get(s.name, {}).get("metadata", {}).get("annotations", {})
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(2.0)


def node_status(lab: Lab, name: str, node: str) -> dict[str, Any]:
    """NodeConfig `name`'s status entry for `node` ({} while it has none)."""
    body = get_json(lab, "nodeconfig", name)
    entries = [n for n in body.get("status", {}).get("nodeStatuses", []) if n["name"] == node]
    return dict(entries[0]) if entries else {}


def cordoned(lab: Lab, node: str) -> bool:
    return bool(lab.nodes()[node]["spec"].get("unschedulable"))


def delete_nodeconfig(lab: Lab, *, name: str = NODECONFIG, timeout: float = 600.0) -> None:
    """Delete the NodeConfig and wait until it is gone: with onDelete: Revert the operator first takes
    its drop-ins off every node it touched, then drops the finalizer."""
    kubectl_ok(lab, "delete", "nodeconfig", name, "--ignore-not-found", f"--timeout={int(timeout)}s",
        timeout=timeout + 30)  # fmt: skip


def on_node(lab: Lab, node: str, *argv: str, timeout: float = 60.0) -> str:
    """Run a command inside a lab node (nsenter into its systemd's namespaces, as the agent does); its
    stdout, or "" when it failed."""
    init = lab.init_pid(node)
    if init is None:
        raise LabError(f"{node} is not running")
    done = machine.nsenter(init, list(argv), timeout=timeout)
    return done.stdout if done.returncode == 0 else ""


def agent_pods(lab: Lab, node: str, *, ready: bool = True) -> list[str]:
    """The node's agent pods not being deleted (Ready ones only, unless `ready` is False)."""
    pods = get_json(lab, "pods", "-n", AGENT_NAMESPACE, f"--field-selector=spec.nodeName={node}")
    return [
        str(p["metadata"]["name"])
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
        and (not ready or any(cond["type"] == "Ready" and cond["status"] == "True"
                              for cond in p["status"].get("conditions", [])))
    ]  # fmt: skip


def agent_log(lab: Lab, node: str) -> str:
    """What the node's agent has logged (its container `agent`)."""
    (pod,) = agent_pods(lab, node, ready=False)
    return kubectl_ok(lab, "logs", pod, "-n", AGENT_NAMESPACE, "-c", "agent", timeout=60)


def _ready(status: Mapping[str, Any]) -> str:
    return next((f"{cond['status']} {cond.get('reason', '')}".strip() for cond in status.get("conditions", [])
                 if cond["type"] == "Ready"), "?")  # fmt: skip


def _container_state(status: Mapping[str, Any]) -> str:
    state: dict[str, dict[str, Any]] = status.get("state", {})
    kind = next(iter(state), "?")
    return f"{status['name']}: {kind} {state.get(kind, {}).get('reason', '')}".rstrip()


def cluster_state(lab: Lab) -> str:
    """The lab at a glance, for a failing test's report: each node's readiness, cordon, taints and our
    state annotation; every pod neither Running-and-Ready nor Succeeded, with its waiting or terminated
    reason; the last Warning events. Never raises: what cannot be read says so."""
    lines: list[str] = []
    try:
        for name, node in sorted(lab.nodes().items()):
            annotations = node["metadata"].get("annotations", {})
            taints = ",".join(f"{t['key']}:{t['effect']}" for t in node["spec"].get("taints", []))
            lines.append(
                f"node {name}: Ready={_ready(node['status'])}"
                f"{' cordoned' if node['spec'].get('unschedulable') else ''}"
                f" taints=[{taints}] {protocol.ANN_STATE}={annotations.get(protocol.ANN_STATE, '-')}"
            )
        for pod in get_json(lab, "pods", "-A")["items"]:
            status, meta = pod.get("status", {}), pod["metadata"]
            phase = status.get("phase", "?")
            if phase == "Succeeded" or (phase == "Running" and _ready(status).startswith("True")):
                continue
            why = [_container_state(s) for s in status.get("containerStatuses", [])]
            lines.append(
                f"pod {meta['namespace']}/{meta['name']} on {pod['spec'].get('nodeName', '-')}: {phase}"
                f"{' (deleting)' if meta.get('deletionTimestamp') else ''} {'; '.join(why)}".rstrip()
            )
        warnings = kubectl_ok(lab, "get", "events", "-A", "--field-selector=type=Warning",
                              "--sort-by=.lastTimestamp", timeout=60).splitlines()  # fmt: skip
        lines += ["last Warning events:", *warnings[-25:]]
    except (LabError, subprocess.SubprocessError, OSError, ValueError, KeyError) as err:
        lines.append(f"(could not read the rest: {err})")
    return "\n".join(lines)
