"""How long do the read-only commands take, end to end? A benchmark that prints figures (not a test).

Runs each command --runs times as a fresh process (what a user or a script pays) and prints the median
and the best wall time, plus the modules the slowest import pulls in (`python -X importtime`).

    .venv/bin/python bench/cli_startup.py                          # --help only, no cluster needed
    .venv/bin/python bench/cli_startup.py --kubeconfig PATH        # also status/preflight/render for real

Needs a NodeConfig named `cluster` and a node for the cluster rows (see docs/local-control-plane.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds (user + system) of the child, exit code). On a loaded machine the CPU
    figure is what the command costs; the wall time is that plus waiting for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def slowest_imports(args: list[str], env: dict[str, str], top: int = 8) -> list[tuple[int, str]]:
    argv = [sys.executable, "-X", "importtime", "-m", "eventedpleg", *args]
    err = subprocess.run(argv, capture_output=True, text=True, env=env, check=False).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
                rows.append((int(cumulative), name.strip()))  # top-level imports only
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--node", default=None, help="for `render --node` (default: the first node)")
    options = parser.parse_args()
    env = {**os.environ}
    cases = [["--help"], ["status", "--help"]]
    if options.kubeconfig:
        env["KUBECONFIG"] = options.kubeconfig
        node = (
            options.node
            or subprocess.run(
                ["kubectl", "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout
        )
        cases += [["status"], ["preflight"], ["render", "--node", node]]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {options.runs} runs each")
    for args in cases:
        argv = [sys.executable, "-m", "eventedpleg", *args]
        results = [timed(argv, env) for _ in range(options.runs)]
        seconds = [s for s, _, _ in results]
        cpu = statistics.median(c for _, c, _ in results)
        print(
            f"eventedpleg {' '.join(args):<28} median {statistics.median(seconds):.2f} s  "
            f"best {min(seconds):.2f} s  CPU {cpu:.2f} s  exit {sorted({code for _, _, code in results})}"
        )
    print("\nslowest top-level imports of `eventedpleg status --help` (cumulative ms):")
    for micros, name in slowest_imports(["status", "--help"], env):
        print(f"  {micros / 1000:7.0f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
