"""What one API request costs the operator's process in CPU, on this machine. A benchmark that prints
figures (not a test).

A node update costs the operator 2 node PATCHes (cordon + apply request, uncordon), 2 pod LISTs
(kubectl drain's look before and after the cordon) and 1 Event POST, plus the watch events the node's
changes bring. This measures each kind on the real local control plane, one thread, keep-alive (one
TLS connection for the whole series), as utime + stime of this process per request:

- through the operator's own helpers (`patch_node`, `node_pods`, the Event POST, `get_node`) on the
  kubernetes client's REST layer (urllib3), the one HTTP stack the operator, the CLI and the agent use;
- the same PATCH as a bare urllib3 request on the same pool (pre-encoded body and headers, no client
  machinery): what a leaner path on the same library could save at most;
- the same PATCH through two other clients, on the same credentials and one kept-alive TLS connection:
  aiohttp (kopf's own client, C HTTP parser), awaited one after another on its event loop, and pycurl
  (libcurl, a C HTTP stack; the `bench` extra installs it): what changing the library would save;
- a plain-HTTP GET of etcd's /health: the floor of one request through urllib3 and http.client here,
  without TLS;
- decoding one watch event's Node (json.loads) and turning it into a NodeView;
- a watch event received by the operator's node informer into its node cache (the same PATCH series
  with the informer running, less the series alone);
- the same PATCH made from 8 and 32 threads at once (the operator's step pools have 32 + 16 threads):
  what contention for the GIL adds to each request.

    .venv/bin/python bench/requestcost.py [--requests 400] [--threads 8 32]

Prints a markdown table and writes it to bench/results/requestcost.md (the headline file, rewritten by
every run).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import resource
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pycurl
import urllib3

from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.k8s.client import api_client
from eventedpleg.k8s.drain import node_pods
from eventedpleg.k8s.events import EventRecorder, node_ref
from eventedpleg.k8s.informer import NodeInformer
from eventedpleg.k8s.nodes import get_node, node_patch, patch_node
from eventedpleg.reasons import EventReason
from eventedpleg_lab.kube.fakenodes import FakeNode
from eventedpleg_lab.localcluster.cluster import LocalCluster

NODE = "cost-0"
RESULTS = Path(__file__).resolve().parent / "results"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def per_call_ms(call: Callable[[int], object], count: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call, after one warm-up call."""
    call(-1)
    cpu, wall = cpu_seconds(), time.perf_counter()
    for i in range(count):
        call(i)
    return (cpu_seconds() - cpu) * 1e3 / count, (time.perf_counter() - wall) * 1e3 / count


def concurrent_ms(call: Callable[[int], object], count: int, threads: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call with `threads` threads making `count` calls each at once, as the
    operator's step pools do; wall is the whole series divided by all calls."""
    call(-1)
    workers = [threading.Thread(target=lambda: [call(i) for i in range(count)]) for _ in range(threads)]
    cpu, wall = cpu_seconds(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    calls = count * threads
    return (cpu_seconds() - cpu) * 1e3 / calls, (time.perf_counter() - wall) * 1e3 / calls


def _ssl_files(api: Any) -> tuple[str, str | None, str | None]:
    cfg = api.configuration
    return cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file


def aiohttp_patch_ms(api: Any, headers: dict[str, str], count: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per node PATCH through aiohttp, awaited one after another on its loop."""
    ca, cert, key = _ssl_files(api)
    context = ssl.create_default_context(cafile=ca)
    if cert:
        context.load_cert_chain(cert, key)
    url = f"{api.configuration.host}/api/v1/nodes/{NODE}"

    async def series() -> tuple[float, float]:
        connector = aiohttp.TCPConnector(ssl=context)
        timeout = aiohttp.ClientTimeout(sock_connect=5, sock_read=15)
        async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout) as session:

            async def patch(i: int) -> object:
                body = json.dumps({"metadata": {"annotations": {"bench/i": str(i)}}}).encode()
                async with session.patch(url, data=body) as answer:
                    answer.raise_for_status()
                    return json.loads(await answer.read())

            await patch(-1)
            cpu, wall = cpu_seconds(), time.perf_counter()
            for i in range(count):
                await patch(i)
            return (cpu_seconds() - cpu) * 1e3 / count, (time.perf_counter() - wall) * 1e3 / count

    return asyncio.run(series())


def pycurl_patch_ms(api: Any, headers: dict[str, str], count: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per node PATCH through pycurl, one handle (its connection kept alive)."""
    ca, cert, key = _ssl_files(api)
    curl = pycurl.Curl()
    curl.setopt(pycurl.CAINFO, ca)
    if cert:
        curl.setopt(pycurl.SSLCERT, cert)
        curl.setopt(pycurl.SSLKEY, key)
    curl.setopt(pycurl.URL, f"{api.configuration.host}/api/v1/nodes/{NODE}")
    curl.setopt(pycurl.CUSTOMREQUEST, "PATCH")
    curl.setopt(pycurl.HTTPHEADER, [f"{k}: {v}" for k, v in headers.items()])
    curl.setopt(pycurl.CONNECTTIMEOUT, 5)
    curl.setopt(pycurl.LOW_SPEED_LIMIT, 1)
    curl.setopt(pycurl.LOW_SPEED_TIME, 15)

    def patch(i: int) -> object:
        answer = io.BytesIO()
        curl.setopt(pycurl.POSTFIELDS, json.dumps({"metadata": {"annotations": {"bench/i": str(i)}}}))
        curl.setopt(pycurl.WRITEDATA, answer)
        curl.perform()
        if curl.getinfo(pycurl.RESPONSE_CODE) != 200:
            raise RuntimeError(f"PATCH answered {curl.getinfo(pycurl.RESPONSE_CODE)}")
        return json.loads(answer.getvalue())

    try:
        return per_call_ms(patch, count)
    finally:
        curl.close()


def measure(cluster: LocalCluster, count: int, threads: tuple[int, ...]) -> dict[str, tuple[float, float]]:
    cluster.add_nodes([FakeNode(NODE, zone="zone-a", labels={"bench": "cost"})], timeout=60)
    api: Any = api_client(str(cluster.kubeconfig), pool_size=max(threads, default=1))
    recorder = EventRecorder(api, "requestcost")
    pool, host = api.rest_client.pool_manager, api.configuration.host
    headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
    api.update_params_for_auth(headers, [], ["BearerToken"], "", "", None)
    timeout = urllib3.Timeout(connect=5, read=15)

    def patch(i: int) -> object:
        return patch_node(api, NODE, node_patch(annotations={"bench/i": str(i)}))

    def bare_patch(i: int) -> object:
        body = json.dumps({"metadata": {"annotations": {"bench/i": str(i)}}}).encode()
        answer = pool.request(
            "PATCH", f"{host}/api/v1/nodes/{NODE}", body=body, headers=headers, timeout=timeout
        )
        return json.loads(answer.data)

    plain = urllib3.PoolManager()
    health = f"http://127.0.0.1:{cluster.ports['etcd']}/health"
    node = get_node(api, NODE)
    encoded = json.dumps(node)
    figures = {
        "node PATCH (patch_node)": per_call_ms(patch, count),
        "pod LIST by node (node_pods)": per_call_ms(lambda i: node_pods(api, NODE), count),
        "Event POST (EventRecorder)": per_call_ms(  # any reason: what is measured is the POST
            lambda i: recorder.emit(node_ref(NODE), "Normal", EventReason.DRAINING, str(i)), count
        ),
        "node GET (get_node)": per_call_ms(lambda i: get_node(api, NODE), count),
        "node PATCH, bare urllib3": per_call_ms(bare_patch, count),
        "node PATCH, aiohttp (kopf's client)": aiohttp_patch_ms(api, headers, count),
        "node PATCH, pycurl (libcurl)": pycurl_patch_ms(api, headers, count),
        "plain-HTTP GET, etcd /health": per_call_ms(lambda i: plain.request("GET", health).data, count),
        f"json.loads of a Node ({len(encoded)} bytes)": per_call_ms(lambda i: json.loads(encoded), 5000),
        "node_view of a Node": per_call_ms(lambda i: node_view(node), 5000),
    }
    for n in threads:  # the same PATCH from several threads at once, as the step pools make them
        figures[f"node PATCH (patch_node), {n} threads at once"] = concurrent_ms(
            patch,
            max(1, count // n),
            n,
        )
    figures["watch event into the node cache"] = watch_event_ms(cluster, patch, count, figures)
    api.close()
    return figures


def watch_event_ms(
    cluster: LocalCluster,
    patch: Callable[[int], object],
    count: int,
    figures: dict[str, tuple[float, float]],
) -> tuple[float, float]:
    """The same PATCH series with the operator's node informer watching in this process, feeding a
    NodeCache: the CPU above the series alone, per watch event received."""
    cache, seen = NodeCache(), [0]

    def on_event(kind: str, body: dict[str, Any]) -> None:
        seen[0] += 1
        cache.apply_event(kind, body)

    watcher: Any = api_client(str(cluster.kubeconfig))  # as the operator watches
    informer = NodeInformer(watcher, on_event=on_event, on_synced=lambda names: None)
    informer.start()
    while informer.lists < 1:
        time.sleep(0.1)
    seen[0] = 0  # the LIST's node is not a watch event
    cpu = cpu_seconds()
    for i in range(count):
        patch(i)
    time.sleep(1.0)  # the last events arrive
    spent = cpu_seconds() - cpu - count * figures["node PATCH (patch_node)"][0] / 1e3
    informer.close()
    watcher.close()
    return spent * 1e3 / max(1, seen[0]), math.nan  # no wall time of its own


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=400, help="requests per kind")
    parser.add_argument(
        "--threads", type=int, nargs="*", default=[8, 32], help="also PATCH from this many threads at once"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="requestcost-") as work:
        cluster = LocalCluster(Path(work) / "cluster")
        cluster.start()
        try:
            figures = measure(cluster, args.requests, tuple(args.threads))
        finally:
            cluster.stop()
    lines = ["| request | CPU ms | wall ms |", "| --- | --- | --- |"]
    for name, (cpu, wall) in figures.items():
        lines.append(f"| {name} | {cpu:.3f} | {'-' if math.isnan(wall) else f'{wall:.3f}'} |")
    update = (
        2 * figures["node PATCH (patch_node)"][0]
        + 2 * figures["pod LIST by node (node_pods)"][0]
        + figures["Event POST (EventRecorder)"][0]
    )
    lines += [
        "",
        f"the requests of one node update (2 PATCHes, 2 pod LISTs, 1 Event POST): {update:.2f} ms of CPU",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "requestcost.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
