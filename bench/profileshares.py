"""Shares of a py-spy profile's samples (collapsed stacks, as `bench/rollout.py --profile` writes them):
by what the sampled thread was doing (a node step, an Event, a planning pass, the node informer, kopf's
loop), and the functions inside one of them, inclusive. Prints figures; not a test.

    .venv/bin/python bench/profileshares.py bench/results/<file>-profile-1.txt [--inside reconcile_once]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# What a thread was doing, by a frame on its stack (the first that matches wins).
PARTS = (
    ("node steps", "_step (eventedpleg/controller/steprunner.py"),
    ("Events", "_emit (eventedpleg/k8s/events.py"),
    ("node informer", "run (eventedpleg/k8s/informer.py"),
    ("planning passes", "reconcile_once"),
)


def stacks(path: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            out.append((stack.split(";"), int(count)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profile", type=Path)
    parser.add_argument("--inside", help="also: functions inside frames matching this, inclusive")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    samples = stacks(args.profile)
    total = sum(count for _, count in samples)
    parts: Counter[str] = Counter()
    for frames, count in samples:
        joined = ";".join(frames)
        parts[next((name for name, frame in PARTS if frame in joined), "other (kopf's loop, ...)")] += count
    print(f"{total} samples\n\n| part | share |\n| --- | --- |")
    for name, count in parts.most_common():
        print(f"| {name} | {100 * count / total:.1f} % |")
    if args.inside:
        inside: Counter[str] = Counter()
        under = 0
        for frames, count in samples:
            at = next((i for i, frame in enumerate(frames) if args.inside in frame), None)
            if at is None:
                continue
            under += count
            for function in {re.sub(r":\d+\)", ")", frame) for frame in frames[at:]}:
                inside[function] += count
        print(f"\ninside {args.inside}: {under} samples\n")
        for function, count in inside.most_common(args.top):
            print(f"{100 * count / max(1, under):5.1f} %  {function}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
