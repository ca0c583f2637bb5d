"""`testbed fib NODE` and `testbed path SRC DST`: the command-line face of testbed.fabric.fib_view."""

from __future__ import annotations

import argparse
import ipaddress
import json

from contracts.ports import ROCEV2_UDP_PORT
from testbed.fabric import client
from testbed.fabric.fib_view import (
    PROTOCOLS,
    fib_json,
    fib_rows,
    format_fib,
    format_path,
    host_address,
    live_ports,
    load_configs,
    path_json,
    walk,
)


def cmd_fib(args: argparse.Namespace) -> int:
    configs = load_configs(args.name)
    if args.node not in configs:
        raise client.ClientError(
            f"fib: {args.node!r} is not a switch of fabric {args.name!r} "
            f"(switches: {', '.join(configs)})"
        )
    up = live_ports(args.name, args.node)
    rows = fib_rows(configs[args.node], None if up is None else up.get(args.node))
    if args.json:
        print(json.dumps(fib_json(configs[args.node], rows, live_known=up is not None), indent=1))
    else:
        print(format_fib(configs[args.node], rows, live_known=up is not None))
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    st = client.state(args.name)
    configs = load_configs(args.name)
    if args.dst in st.nodes:
        dst_ip, _ = host_address(st, args.dst)
    else:
        try:
            dst_ip = str(ipaddress.IPv4Address(args.dst))
        except ValueError:
            raise client.ClientError(
                f"path: {args.dst!r} is neither a node nor an IPv4 address"
            ) from None
    src_ip, leaf = host_address(st, args.src, dst_ip)
    proto = PROTOCOLS[args.proto]
    up = live_ports(args.name) or {}
    hops = walk(configs, up, leaf, src_ip, dst_ip, args.sport, args.dport, proto)
    what = (args.src, src_ip, dst_ip, args.sport, args.dport, proto, hops)
    print(json.dumps(path_json(*what), indent=1) if args.json else format_path(*what))
    return 0


def add_parsers(sub, named) -> None:
    """Register `fib` and `path` on the `testbed` command's sub-parsers."""
    fp = named(sub.add_parser("fib", help="a switch's static FIB and ECMP groups (live members)"))
    fp.add_argument("node", help="a switch, e.g. leaf1 or spine2")
    fp.add_argument("--json", action="store_true", help="the table as JSON on stdout")
    fp.set_defaults(func=cmd_fib)
    pp = named(
        sub.add_parser("path", help="the switches a 5-tuple crosses, by the switches' own hash")
    )
    pp.add_argument("src", help="source host, e.g. h1")
    pp.add_argument("dst", help="destination host or address, e.g. h6 or 10.1.3.2")
    pp.add_argument("--sport", type=int, default=49152, help="UDP/TCP source port (the EV)")
    pp.add_argument(
        "--dport", type=int, default=ROCEV2_UDP_PORT, help="destination port (default RoCEv2)"
    )
    pp.add_argument("--proto", choices=sorted(PROTOCOLS), default="udp")
    pp.add_argument("--json", action="store_true", help="the hops as JSON on stdout")
    pp.set_defaults(func=cmd_path)
