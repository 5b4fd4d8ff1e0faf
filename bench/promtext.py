"""Our /metrics reader (core/node/facts/promtext.py) against prometheus_client.parser on a real kubelet's
body (no test).

It answers "could prometheus_client.parser replace core/node/facts/promtext.py?": the same samples, the same
values
through what verification reads, and the time to parse a body of about 1 MB (the real body repeated).

    .venv/bin/python bench/promtext.py [--body tests/realnode/fixtures/kubelet-metrics-v1.36.4.txt] [--mb 1]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from eventedpleg.core.node.facts.kubeletlog import scan
from eventedpleg.core.node.facts.promtext import Metrics, Sample, parse_metrics
from eventedpleg.core.node.facts.verify import (
    CONN_ERROR,
    CONN_SUCCESS,
    RELIST_COUNT,
    fallen_back,
    gate_metric,
)
from eventedpleg.core.versions import parse_version

BODY = Path(__file__).parent.parent / "tests" / "realnode" / "fixtures" / "kubelet-metrics-v1.36.4.txt"


def via_prometheus_client(text: str) -> Metrics:
    """The same Metrics, built from prometheus_client's families (NaN dropped, as promtext does)."""
    samples = [
        Sample(s.name, tuple(s.labels.items()), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.value == s.value
    ]
    return Metrics(tuple(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--body", type=Path, default=BODY)
    parser.add_argument("--mb", type=float, default=1.0, help="size of the timed body")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    text = args.body.read_text()
    ours, theirs = parse_metrics(text), via_prometheus_client(text)

    def keys(m: Metrics) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {(s.name, s.labels, s.value) for s in m.samples}

    print(f"{args.body.name}: promtext {len(ours.samples)} samples, prometheus_client {len(theirs.samples)}")
    print("  only promtext:         ", sorted({k[0] for k in keys(ours) - keys(theirs)}))
    print("  only prometheus_client:", sorted({k[0] for k in keys(theirs) - keys(ours)}))
    for name in (CONN_ERROR, CONN_SUCCESS, RELIST_COUNT):
        print(f"  value({name}): promtext {ours.value(name)}, prometheus_client {theirs.value(name)}")
    print(f"  gate_metric: promtext {gate_metric(ours)[0]}, prometheus_client {gate_metric(theirs)[0]}")
    v136 = parse_version("v1.36.4")
    print(f"  fallen_back: promtext {fallen_back(v136, ours, scan([]))!r}")
    print(f"               prometheus_client {fallen_back(v136, theirs, scan([]))!r}")

    big = text * max(1, round(args.mb * 1_048_576 / len(text)))
    print(f"timing on {len(big) / 1_048_576:.2f} MiB ({big.count(chr(10))} lines), {args.repeat} runs each:")
    readers: tuple[tuple[str, Callable[[str], Metrics]], ...] = (
        ("promtext", parse_metrics),
        ("prometheus_client", via_prometheus_client),
    )
    for label, parse in readers:
        runs = [1000 * t for t in timeit.repeat(partial(parse, big), number=1, repeat=args.repeat)]
        print(f"  {label:18} best {min(runs):6.0f} ms, median {statistics.median(runs):6.0f} ms")


if __name__ == "__main__":
    main()
