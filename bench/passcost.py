"""What one planning pass costs in-process, with the previous memo and with incremental planning. A
benchmark that prints figures (not a test).

Builds N nodes with the planner tests' cluster model (eventedpleg_lab/sim/rolloutworld.py), runs a rollout at
maxUnavailable 10% for 20 ticks (a tenth Done, a tenth in progress, the rest waiting), then times
`plan()` over the same views again and again with a `SelectionMemo` and with a `PassMemo`, two series
each, and prints the best mean per pass. The views stay the same objects, as the node cache hands them
out while nodes do not change: what it shows is a pass's floor, not the cost of nodes that changed.

    .venv/bin/python bench/passcost.py --nodes 1000 5000 10000
"""

from __future__ import annotations

import argparse
import time

from eventedpleg.core.rollout import planner
from eventedpleg_lab.sim.rolloutworld import World, fleet, spec


def per_pass_ms(world: World, memo: planner.SelectionMemo | planner.PassMemo, passes: int) -> float:
    views, target = world.views(), world.target
    first = planner.plan(views, target, world.now, memo)
    assert first == planner.plan(views, target, world.now)  # the memo never changes a plan
    started = time.perf_counter()
    for _ in range(passes):
        planner.plan(views, target, world.now, memo)
    return (time.perf_counter() - started) / passes * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    print("| nodes | SelectionMemo ms / pass | PassMemo ms / pass |")
    print("| --- | --- | --- |")
    for n in args.nodes:
        world = World(fleet(n, labels={}), spec(rollout={"maxUnavailable": "10%"}))
        for _ in range(20):  # the first tenth verified, the second being verified
            world.tick()
        best: dict[str, float] = {}
        for memo in (
            planner.SelectionMemo(),
            planner.PassMemo(),
            planner.SelectionMemo(),
            planner.PassMemo(),
        ):
            kind = type(memo).__name__
            best[kind] = min(best.get(kind, float("inf")), per_pass_ms(world, memo, args.passes))
        print(f"| {n} | {best['SelectionMemo']:.2f} | {best['PassMemo']:.2f} |")


if __name__ == "__main__":
    main()
