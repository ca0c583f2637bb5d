"""Fuzz the C forwarding core (switch/_core.c) under AddressSanitizer and UBSan.

    .venv/bin/python tools/fuzz_switch_core.py [--frames 2000000] [--seed 1] [--raw]

builds the extension with ``-fsanitize=address,undefined -fno-omit-frame-pointer`` into a
temporary directory (gcc and the interpreter's headers are all it needs; the tree's own build is
untouched), then runs itself again in a child Python with that build preloaded as
``switch._core``, ``LD_PRELOAD=$(gcc -print-file-name=libasan.so)`` and
``ASAN_OPTIONS=detect_leaks=1``. The child drives a 2x2x2 fabric (shaped 10 Gbps links, small
queues, trimming on, source-routed) with random frames -- garbage, valid UDP/RoCE/TCP/ICMP
frames, and valid frames mutated (bytes flipped, cut short, extended, a random TTL, version,
IHL or length) -- injected on host ports in bursts, with the egress served between bursts.

It fails (exit 1) on any sanitizer report (ASan and UBSan abort the child) and unless every
malformed frame is accounted for: the number of injected frames `frames.classify` calls
malformed equals the drops counted by reason (the switches' truncated, non_ipv4, bad_version,
bad_ihl, ip_options, bad_length, and the ports' rx_bad_frame). Those frames go through the
Python reference slow path, as in the running switch; `--raw` replaces it by a counter (faster,
for millions of frames: then it checks that C handed every malformed frame over).
It prints one JSON line of figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "switch" / "_core.c"
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
CHILD_ENV = "FUZZ_SWITCH_CORE_SO"


def build(out_dir: Path) -> Path:
    """The sanitized extension, compiled straight with gcc into `out_dir`."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = out_dir / f"_core{suffix}"
    cmd = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-std=c11",
        "-ffp-contract=off",
        "-Wall",
        *SANITIZE,
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-o",
        str(target),
    ]
    subprocess.run(cmd, check=True)
    return target


def sanitizer_env(so: Path) -> dict:
    asan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(os.environ)
    env.update(
        {
            CHILD_ENV: str(so),
            "LD_PRELOAD": asan,
            # Leaks: CPython leaves objects at exit by design; allocation stacks of two frames
            # tell its (the caller is in python3.11, suppressed) from _core.c's (reported).
            "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:halt_on_error=1:malloc_context_size=2",
            "LSAN_OPTIONS": f"suppressions={suppressions(so.parent)}:print_suppressions=0",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
            "PYTHONMALLOC": "malloc",
        }
    )
    return env


def suppressions(d: Path) -> Path:
    """LSan suppressions: allocations made by the interpreter itself (libpython or the binary)."""
    p = d / "lsan.supp"
    p.write_text("leak:libpython3\nleak:/usr/bin/python3\nleak:python3.\n")
    return p


# ----- the child: fuzz --------------------------------------------------------------------------


def load_sanitized(so: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("switch._core", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["switch._core"] = mod


def _valid(rng: random.Random, hosts: list[bytes], routers: list[bytes]) -> bytearray:
    import struct

    from switch import frames

    src = rng.choice(hosts)
    dst = rng.choice(hosts + hosts + routers + [bytes(rng.getrandbits(8) for _ in range(4))])
    proto = rng.choice((17, 17, 17, 6, 1, rng.randrange(256)))
    body = bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 1, 8, 64, 212)))) * rng.choice(
        (1, 1, 7)
    )
    if proto == 17:
        dport = rng.choice((4791, 4791, rng.randrange(65536)))
        l4 = struct.pack("!HHHH", rng.randrange(65536), dport, 8 + len(body), 0) + body
    elif proto == 6:
        l4 = bytes(20) + body
    elif proto == 1:
        l4 = bytes([rng.choice((8, 0, 11))]) + bytes(7) + body
    else:
        l4 = body
    ip = frames.build_ipv4(
        src,
        dst,
        proto,
        l4[:1480],
        ttl=rng.choice((64, 64, 2, 1, 0, rng.randrange(256))),
        tos=rng.choice((10 << 2 | 2, 10 << 2 | 1, 46 << 2, rng.randrange(256))),
    )
    return bytearray(b"\x02\x7b\0\0\0\x02\x02\x7b\0\0\0\x01\x08\x00") + ip


def _mutate(rng: random.Random, f: bytearray) -> bytes:
    op = rng.randrange(7)
    if op == 0:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(f), 64))
            f[i] ^= 1 << rng.randrange(8)
    elif op == 1:
        del f[rng.randrange(len(f)) :]
    elif op == 2:
        f += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 120)))  # past the slot
    elif op == 3:
        f[14] = rng.randrange(256)
    elif op == 4:
        f[16] = rng.randrange(256)
        f[17] = rng.randrange(256)
    elif op == 5:
        f[12] = rng.randrange(256)
    return bytes(f)


def fuzz(n_frames: int, seed: int, raw: bool) -> dict:
    from switch import frames
    from switch.config import switch_config
    from switch.core import ForwardingCore
    from topologies import leaf_spine

    fab = leaf_spine(
        spines=2,
        leaves=2,
        hosts_per_leaf=2,
        link_mbps=10_000,
        delay_us=1,
        queue_kb=3,
        forwarding="source-routed",
    )
    names = [n for n, node in fab.nodes.items() if node.kind != "host"]
    configs = [switch_config(fab, n, seed=seed, time_dilation=100) for n in names]
    handed = {"malformed": 0, "other": 0}
    if raw:

        def slow(self, sw, port, frame, now):  # C handed it over: count, no reference path
            handed["malformed" if frames.classify(frame) is not None else "other"] += 1

        ForwardingCore._c_slow = slow
    core = ForwardingCore(configs, datapath="c")
    hosts = [n for n, node in fab.nodes.items() if node.kind == "host"]
    ip = [bytes(int(x) for x in fab.host_ip(h).split(".")) for h in hosts]
    routers = [bytes(int(x) for x in c.router_ip.split(".")) for c in configs]
    host_ports = [
        (i, j)
        for i, c in enumerate(configs)
        for j, pc in enumerate(c.ports)
        if fab.nodes[pc.peer_node].kind == "host"
    ]
    rng = random.Random(seed)
    malformed = sent = egress = 0
    now = 0.0
    t0 = time.process_time()
    while sent < n_frames:
        sw, port = rng.choice(host_ports)
        burst = []
        for _ in range(rng.randint(1, 32)):
            kind = rng.randrange(10)
            if kind == 0:
                f = bytes(rng.getrandbits(8) for _ in range(rng.randrange(80)))
            elif kind < 5:
                f = _mutate(rng, _valid(rng, ip, routers))
            else:
                f = bytes(_valid(rng, ip, routers))
            malformed += frames.classify(f) is not None
            burst.append(f)
        sent += len(burst)
        core.receive(sw, port, burst, now)
        now += rng.choice((0.0, 1e-7, 1e-6, 2e-5))
        core.service(now)
        egress += core.discard_egress()
    while (due := core.service(now)) is not None:
        now = max(now, due)
        egress += core.discard_egress()
    cpu = time.process_time() - t0
    counters = core.counters()
    reasons = set(frames.MALFORMED_REASONS) - {frames.BAD_CHECKSUM}
    counted = sum(n for sw in counters for r, n in sw["drops"].items() if r in reasons) + sum(
        p["drops"].get("rx_bad_frame", 0) for sw in counters for p in sw["ports"].values()
    )
    if raw:
        counted = handed["malformed"]
    result = {
        "frames": sent,
        "malformed": malformed,
        "malformed_counted": counted,
        "egress": egress,
        "exceptions": core.exceptions if not raw else sum(handed.values()),
        "trims": sum(p["trims"] for sw in counters for p in sw["ports"].values()),
        "cpu_s": round(cpu, 2),
        "raw": raw,
        "ok": counted == malformed,
    }
    del core
    gc.collect()  # the core's closures make cycles: free it here, so LSan sees any leak of C's
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--raw", action="store_true", help="no Python slow path: count hand-overs")
    args = ap.parse_args(argv)
    so = os.environ.get(CHILD_ENV)
    if so:  # the child: the sanitized build is preloaded
        sys.path.insert(0, str(ROOT))
        load_sanitized(so)
        result = fuzz(args.frames, args.seed, args.raw)
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    if shutil.which("gcc") is None:
        print("fuzz_switch_core: gcc not found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fuzz-switch-core-") as d:
        target = build(Path(d))
        child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
        return subprocess.run(child, env=sanitizer_env(target), cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
