"""``python -m endpoint --host h1 --config JSON_OR_PATH --control SOCK --metrics FILE.jsonl``

Runs one host's endpoint process (``endpoint.process``) until a ``stop`` request or SIGTERM.
Prints one line ``ready <control socket>`` on stdout once it accepts requests. Exit status 0
on a clean stop, 2 for a bad command line or config, 1 if the sockets cannot be opened.

Given ``--host``, ``--control``, ``--metrics`` and ``--netns /proc/PID/ns/net`` once per host,
one process serves them all (``endpoint.shared``): each host's sockets are opened in its own
namespace, each host has its own control socket and metrics file, and the process prints one
``ready`` line per host, in order.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from contracts.netns import Netns
from endpoint.process import EndpointProcess
from endpoint.process_config import ConfigError, EndpointConfig
from endpoint.shared import SharedLoop, in_netns


def load_config(text: str) -> EndpointConfig:
    """``text`` is the JSON itself (starts with ``{``) or a path to a JSON file."""
    if text.lstrip().startswith("{"):
        source, raw = "--config", text
    else:
        source = text
        try:
            raw = Path(text).read_text()
        except OSError as exc:
            raise ConfigError(f"--config: cannot read {text}: {exc.strerror}") from None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not JSON: {exc}") from None
    return EndpointConfig.from_obj(obj)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m endpoint", description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True, action="append", help="a host's name in the config")
    ap.add_argument("--config", required=True, help="JSON text or a path to a JSON file")
    ap.add_argument(
        "--control", required=True, action="append", help="Unix socket path for control requests"
    )
    ap.add_argument(
        "--metrics", action="append", default=None, help="JSON-lines metrics file (appended)"
    )
    ap.add_argument(
        "--netns",
        action="append",
        default=None,
        help="the host's network namespace (/proc/PID/ns/net), once per --host; without it "
        "every host's sockets are in the process's own namespace",
    )
    ap.add_argument("--io", default=None, help="override config.io (udp, connected, raw)")
    args = ap.parse_args(argv)
    n = len(args.host)
    for key in ("control", "metrics", "netns"):
        given = getattr(args, key)
        if given is not None and len(given) != n:
            print(f"endpoint: --{key}: give it once per --host ({n})", file=sys.stderr)
            return 2
    try:
        cfg = load_config(args.config)
        if args.io is not None:
            cfg.io = args.io
            EndpointConfig.from_obj({**cfg.__dict__})
        procs = [
            _open(host, cfg, args.control[i], args.metrics[i] if args.metrics else None,
                  args.netns[i] if args.netns else None)
            for i, host in enumerate(args.host)
        ]  # fmt: skip
    except ConfigError as exc:
        print(f"endpoint: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"endpoint: cannot open sockets: {exc}", file=sys.stderr)
        return 1
    if len(procs) == 1:
        procs[0]._install_signals()  # before `ready`: a SIGTERM from then on stops it cleanly
        run = procs[0].run
    else:
        shared = SharedLoop(procs)
        shared.install_signals()
        run = shared.run
    for control in args.control:
        print(f"ready {control}", flush=True)
    profile_path = os.environ.get("ENDPOINT_CPU_PROFILE")
    if profile_path:  # development aid: a cProfile of CPU time (not wall time) per process
        import cProfile

        prof = cProfile.Profile(time.process_time)
        prof.runcall(run)
        prof.dump_stats(f"{profile_path}.{'+'.join(args.host)}")
    else:
        run()
    return 0


def _open(
    host: str, cfg: EndpointConfig, control: str, metrics: str | None, netns: str | None
) -> EndpointProcess:
    """One host's endpoint, its sockets opened in its namespace (`netns`, if given): those it
    opens now and those its sender opens on first use."""
    if netns is None:
        return EndpointProcess(host, cfg, control, metrics)
    ns = Netns(netns)
    with ns.entered():
        proc = EndpointProcess(host, cfg, control, metrics)
    opener = getattr(proc.tx, "_open", None)
    if opener is not None:
        proc.tx._open = in_netns(opener, ns)
    return proc


if __name__ == "__main__":
    sys.exit(main())
