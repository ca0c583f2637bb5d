"""Fuzz endpoint._burst under AddressSanitizer and UBSan: random and mutated datagrams and items
through each of its entry points, every result checked against the Python twin.

    tools/burst_fuzz.py build DIR          # DIR/_burst*.so, -fsanitize=address,undefined
    tools/burst_fuzz.py run SO [--iterations N] [--seed S]

``run`` must start with the sanitizer runtime loaded first (Python itself is not instrumented):

    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        PYTHONMALLOC=malloc .venv/bin/python tools/burst_fuzz.py run DIR/_burst....so

``detect_leaks=0``: CPython keeps interned objects and arenas to its exit, which LeakSanitizer
reports by the hundred. ``PYTHONMALLOC=malloc`` puts Python's objects (the bytes recv_burst and
seal_data build) on ASan's heap, so an overrun of one is caught. Any sanitizer report is printed
on stderr ("ERROR: AddressSanitizer", "runtime error:"); tests/test_endpoint_burst_fuzz.py runs
both steps in a subprocess and fails on one.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "endpoint" / "_burst.c"
SAN_FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]


def build(out_dir: Path) -> Path:
    """Compile endpoint/_burst.c with the sanitizers into out_dir; returns the .so's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    so = out_dir / ("_burst" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [
        "gcc",
        *SAN_FLAGS,
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-lz",
        "-o",
        str(so),
    ]
    subprocess.run(cmd, check=True)
    return so


def _load(so: Path):
    spec = importlib.util.spec_from_file_location("_burst", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1:
            del b[rng.randrange(len(b) + 1) :]
        elif op == 2:
            b += rng.randbytes(rng.randrange(64))
        elif b:
            k = rng.randrange(len(b))
            b[k : k + 4] = rng.randbytes(4)
    return bytes(b)


def run(so: Path, iterations: int, seed: int) -> None:
    sys.path.insert(0, str(ROOT))
    from endpoint import codec, udp_io

    burst = _load(so)
    rng = random.Random(seed)
    header = codec._DATA.pack(0x0A, 0, 0xFFFF, 5, 7, 0, 1, 100, 100, 9, 0, 0, 3, 4, 0)
    seed_pkt = codec._seal_py(header, rng.randbytes(100))
    rx = udp_io.open_rx("127.0.0.1", 0)
    port = rx.getsockname()[1]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    checked = 0
    try:
        for _ in range(iterations):
            # crc: random and mutated packets, every buffer type
            pkt = _mutate(rng, seed_pkt) if rng.random() < 0.7 else rng.randbytes(rng.randrange(80))
            buf = rng.choice((bytes, bytearray, memoryview))(pkt)
            assert burst.data_crc(buf) == codec.data_crc_py(pkt)
            # seal: headers of every length near 52, payloads of any
            h = rng.randbytes(rng.choice((0, 51, 52, 52, 52, 53)))
            p = rng.randbytes(rng.randrange(2000))
            if len(h) == 52:
                assert burst.seal_data(h, p) == codec._seal_py(h, p)
            else:
                for seal in (burst.seal_data, codec._seal_py):
                    try:
                        seal(h, p)
                    except ValueError:
                        pass
                    else:
                        raise AssertionError(f"{seal.__name__} took a {len(h)}-byte header")
            # receive: a few datagrams of random sizes, read with a random buffer and limit
            sent = []
            for _ in range(rng.randrange(6)):
                d = _mutate(rng, pkt)[: rng.choice((0, 1, 600, 9000))]
                tos = rng.randrange(256) & ~3
                tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
                tx.sendto(d, ("127.0.0.1", port))
                sent.append((d, tos))
            bufsize = rng.choice((1, 16, 700, 65535))
            out: list = []
            got = trunc = 0
            for _ in range(len(sent) + 2):
                a, t = burst.recv_burst(rx.fileno(), out, rng.randint(1, 8), bufsize)
                got += a
                trunc += t
            assert out == [(d, tos) for d, tos in sent if len(d) <= bufsize]
            assert (got, trunc) == (len(out), len(sent) - len(out))
            # send: items good and bad; a bad one raises TypeError/ValueError, never crashes
            items = []
            for _ in range(rng.randrange(5)):
                item = [
                    tx.fileno(),
                    "127.0.0.1",
                    port,
                    rng.randrange(256) & ~3,
                    rng.randbytes(rng.randrange(1500)),
                ]
                if rng.random() < 0.2:
                    k = rng.randrange(5)
                    item[k] = rng.choice((None, -1, 1 << 40, "x", b"y", 1.5, 70000))
                items.append(tuple(item) if rng.random() < 0.95 else item)
            try:
                done, sent_n, errors = burst.send_burst(items)
                assert done == len(items) and sent_n + errors == len(items)
            except (TypeError, ValueError, OverflowError):
                pass
            out.clear()
            while udp_io.recv_batch_py(rx, out, 64):
                out.clear()
            checked += 1
    finally:
        rx.close()
        tx.close()
    print(f"burst_fuzz: {checked} iterations, seed {seed}: no mismatch")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=Path)
    r = sub.add_parser("run")
    r.add_argument("so", type=Path)
    r.add_argument("--iterations", type=int, default=2000)
    r.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.cmd == "build":
        print(build(args.dir))
    else:
        run(args.so, args.iterations, args.seed)


if __name__ == "__main__":
    main()
