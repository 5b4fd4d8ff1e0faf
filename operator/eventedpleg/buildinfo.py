"""What every /metrics of the product carries besides its own series: eventedpleg_build_info (version,
commit, Python) and prometheus_client's standard process and platform collectors (process_cpu_seconds_total,
process_resident_memory_bytes, process_open_fds, ..., python_info)."""

from __future__ import annotations

import os
import platform

from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector

from eventedpleg import __version__

# The commit the image was built from; the image build sets it (hack/release.sh passes REVISION).
REVISION_ENV = "EVENTEDPLEG_REVISION"


def register(registry: CollectorRegistry, component: str) -> None:
    """Add build_info and the process collectors to `registry`; `component` is operator or agent."""
    info = Gauge(
        "eventedpleg_build_info",
        "Always 1; its labels say which build runs: version, commit (unknown if not from git), Python",
        ["component", "version", "revision", "python_version"],
        registry=registry,
    )
    revision = os.environ.get(REVISION_ENV) or "unknown"
    info.labels(component, __version__, revision, platform.python_version()).set(1)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
