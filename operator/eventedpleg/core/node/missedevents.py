"""After Done: does the kubelet miss container events another consumer took? A phase. Pure.

containerd 1.7 and CRI-O 1.26-1.27 hand each container event to one consumer only (containerd#7318,
cri-o#6838): with a second consumer of the CRI event stream on the node (`crictl events`, a monitoring
agent), the kubelet misses some events. On kubelet <= 1.36 Evented PLEG then feeds its pod cache, so a pod
that started or ended is seen only at the next relist, up to 300 s late (docs/compatibility.md §5, measured
in tests/lab/test_lab_kubeadm.py). On 1.37 the relist stays at 1 s (k8s#139262): nothing is late.

The kubelet's `kubelet_running_containers{container_state="running"}` moves with each event it receives
(pkg/kubelet/pleg/evented.go, updateRunningContainerMetric) and is set from the runtime's list only at the
relist (generic.go, updateRunningPodAndContainerMetrics); the runtime's own list (`crictl ps --state
running`) is the truth. Measured on containerd 1.7.35 with kubelet 1.36.4 (2 s samples): with the kubelet
alone the count differs only while containers start or stop, for one sample; with `crictl events` running
it stayed 1 below the runtime's, with no container starting or stopping, until the relist set it right.
So three samples `settle` seconds apart: the runtime ran the same containers at all three, the kubelet's
count did not move between the last two (no event still on its way), and it is not the runtime's: an
event the kubelet never got. Any start or stop in between and the check abstains.
"""

from __future__ import annotations

from dataclasses import dataclass

from eventedpleg.core.node.effects import Phase, Run, Scrape, Wait, act, ask, ask_maybe
from eventedpleg.core.node.host import CommandResult
from eventedpleg.core.node.promtext import Metrics
from eventedpleg.core.versions import RuntimeKind, RuntimeVersion, Version

RUNNING_GAUGE = "kubelet_running_containers"
# The kubelet's default --container-runtime-endpoint (kubelet config defaults, 1.27+).
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
SETTLE_SECONDS = 10.0


def one_consumer(runtime: RuntimeVersion | None) -> bool:
    """Runtimes that give each container event to one consumer only (docs/compatibility.md §2, §5)."""
    if runtime is None or runtime.version is None:
        return False
    v = runtime.version
    if runtime.kind is RuntimeKind.CONTAINERD:
        return (1, 7) <= v.minor_pair < (2, 0)  # containerd#7318; 2.0 broadcasts (containerd#9661)
    if runtime.kind is RuntimeKind.CRIO:
        return (1, 26) <= v.minor_pair < (1, 28)  # cri-o#6838
    return False


def applies(kubelet: Version, runtime: RuntimeVersion | None) -> bool:
    """Worth checking: events can be taken away, and a missed one makes pods late (kubelet <= 1.36)."""
    return kubelet.minor_pair < (1, 37) and one_consumer(runtime)


@dataclass(frozen=True)
class Counts:
    kubelet_running: int  # the kubelet's count of its running containers
    running: frozenset[str]  # the runtime's running container IDs


def crictl_ids(stdout: str) -> frozenset[str]:
    """`crictl ps -q` prints one container ID per line."""
    return frozenset(line.strip() for line in stdout.splitlines() if line.strip())


def missed(samples: tuple[Counts, ...], *, settle: float) -> str | None:
    """Why the kubelet's count cannot be right (see the module's rule), or None."""
    if len(samples) < 3 or len({s.running for s in samples}) != 1:
        return None  # too few, or containers started or stopped meanwhile
    last = samples[-1]
    count, running = last.kubelet_running, len(last.running)
    if samples[-2].kubelet_running != count or count == running:
        return None
    steady = f"{settle * (len(samples) - 1):.0f} s"
    return (
        f"the kubelet counts {count} running containers (kubelet_running_containers) where the runtime "
        f"runs {running} (`crictl ps`), both unchanged for {steady}"
    )


def sample(endpoint: str) -> Phase[Counts | None]:
    """The kubelet's count, then the runtime's list."""
    metrics = yield from ask_maybe(Scrape(frozenset({RUNNING_GAUGE})), Metrics)
    value = None if metrics is None else metrics.value(RUNNING_GAUGE, container_state="running")
    if value is None:
        return None
    argv = ("crictl", "--runtime-endpoint", endpoint, "ps", "-q", "--state", "running")
    result = yield from ask(Run(argv, timeout=30), CommandResult)
    if not result.ok:
        return None  # no crictl on this host, or the runtime did not answer: nothing to compare
    return Counts(int(value), crictl_ids(result.stdout))


def check(endpoint: str, *, settle: float = SETTLE_SECONDS) -> Phase[str | None]:
    """Three samples `settle` s apart: why the kubelet missed events, or None (also when it cannot tell)."""
    samples: list[Counts] = []
    for n in range(3):
        if n:
            yield from act(Wait(settle))
        counts = yield from sample(endpoint)
        if counts is None or (samples and counts.running != samples[0].running):
            return None  # cannot tell, or containers start and stop: nothing to conclude now
        samples.append(counts)
    return missed(tuple(samples), settle=settle)
