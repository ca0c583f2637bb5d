"""Write an htsim connection matrix: a random permutation of 16 hosts (4 per leaf) in which
every host sends one flow to a host on another leaf (the fidelity bench's traffic).

Usage: python3 gen_perm.py SEED [BYTES] > perm_sSEED.cm
"""

from __future__ import annotations

import random
import sys

HOSTS = 16
PER_LEAF = 4


def permutation(seed: int) -> list[int]:
    """dst[src] for a permutation with no flow inside a leaf, drawn by rejection."""
    rng = random.Random(seed)
    while True:
        dst = list(range(HOSTS))
        rng.shuffle(dst)
        if all(s // PER_LEAF != dst[s] // PER_LEAF for s in range(HOSTS)):
            return dst


def main() -> None:
    seed = int(sys.argv[1])
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000_000
    dst = permutation(seed)
    print("Nodes", HOSTS)
    print("Connections", HOSTS)
    for s in range(HOSTS):
        print(f"{s}->{dst[s]} id {s + 1} start 0 size {size}")


if __name__ == "__main__":
    main()
