"""Per-flow utilisation from htsim runs patched with flow_sampler.h (`-sample T` prints
`FLOWBYTES t_us T NAME BYTES` for every flow at each T).

Utilisation = payload bytes received between the first and last sample x 8 / time / 10 Gbps.
Affected flows are those that start or end on the slow link's leaf (0-based `--leaf`, 4 hosts
per leaf; `-slowlink 1 1 0.1` slows leaf 1, hosts 4-7).

Usage: python3 flow_util.py [--leaf 1] RUN.out [RUN.out ...]
"""

from __future__ import annotations

import statistics
import sys

PER_LEAF = 4
LINK_BPS = 10e9


def utilisation(path: str) -> dict[tuple[int, int], float]:
    """(src, dst) -> % of the link, from one run's output."""
    samples: dict[str, dict[float, int]] = {}
    with open(path) as f:
        for line in f:
            if line.startswith("FLOWBYTES"):
                fields = line.split()
                samples.setdefault(fields[3], {})[float(fields[2])] = int(fields[4])
    out = {}
    for name, by_t in samples.items():
        src, dst = map(int, name.split("_")[1:3])
        t0, t1 = min(by_t), max(by_t)
        out[(src, dst)] = (by_t[t1] - by_t[t0]) * 8 / ((t1 - t0) * 1e-6) / LINK_BPS * 100
    return out


def summary(util: dict[tuple[int, int], float], leaf: int) -> str:
    hit = [u for (s, d), u in util.items() if s // PER_LEAF == leaf or d // PER_LEAF == leaf]
    rest = [u for (s, d), u in util.items() if not (s // PER_LEAF == leaf or d // PER_LEAF == leaf)]
    return (
        f"affected (n={len(hit)}) mean {statistics.fmean(hit):.1f} min {min(hit):.1f} | "
        f"others (n={len(rest)}) mean {statistics.fmean(rest):.1f} min {min(rest):.1f}"
    )


def main() -> None:
    args = sys.argv[1:]
    leaf = 1
    if args[:1] == ["--leaf"]:
        leaf, args = int(args[1]), args[2:]
    for path in args:
        print(f"{path}: {summary(utilisation(path), leaf)}")


if __name__ == "__main__":
    main()
