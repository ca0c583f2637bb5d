"""``python -m endpoint --host h1 --config JSON_OR_PATH --control SOCK --metrics FILE.jsonl``

Runs one host's endpoint process (``endpoint.process``) until a ``stop`` request or SIGTERM.
Prints one line ``ready <control socket>`` on stdout once it accepts requests. Exit status 0
on a clean stop, 2 for a bad command line or config, 1 if the sockets cannot be opened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from endpoint.process import EndpointProcess
from endpoint.process_config import ConfigError, EndpointConfig


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
    ap.add_argument("--host", required=True, help="this host's name in the config")
    ap.add_argument("--config", required=True, help="JSON text or a path to a JSON file")
    ap.add_argument("--control", required=True, help="Unix socket path for control requests")
    ap.add_argument("--metrics", default=None, help="JSON-lines metrics file (appended)")
    ap.add_argument("--io", default=None, help="override config.io (udp, connected, raw)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if args.io is not None:
            cfg.io = args.io
            EndpointConfig.from_obj({**cfg.__dict__})
        proc = EndpointProcess(args.host, cfg, args.control, args.metrics)
    except ConfigError as exc:
        print(f"endpoint: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"endpoint: cannot open sockets: {exc}", file=sys.stderr)
        return 1
    print(f"ready {args.control}", flush=True)
    profile_path = os.environ.get("ENDPOINT_CPU_PROFILE")
    if profile_path:  # development aid: a cProfile of CPU time (not wall time) per process
        import cProfile

        prof = cProfile.Profile(time.process_time)
        prof.runcall(proc.run)
        prof.dump_stats(f"{profile_path}.{args.host}")
    else:
        proc.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
