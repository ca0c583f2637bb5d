"""`python -m switch --config CFG.json --control SOCK`: run one switch in the current namespace."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from switch.config import SwitchConfig
from switch.control import ControlServer
from switch.dataplane import Switch
from switch.queueing import TRIM_DECISION_ENV
from switch.ring import RingSocket


def _die_with_parent() -> None:
    """A switch outlives nothing: if whoever started it dies (even by SIGKILL), so does it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m switch", description=__doc__)
    ap.add_argument(
        "--config", required=True, help="switch config JSON (written by the fabric builder)"
    )
    ap.add_argument("--control", required=True, help="path of the control Unix socket to create")
    ap.add_argument("--ring-frames", type=int, default=512, help="rx ring slots per port")
    ap.add_argument(
        "--die-with-parent", action="store_true", help="exit when the starting process dies"
    )
    args = ap.parse_args(argv)
    try:
        config = SwitchConfig.load(args.config)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"switch: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    try:
        switch = Switch(config, open_port=lambda name: RingSocket(name, args.ring_frames))
    except OSError as exc:
        print(f"switch {config.name}: cannot open ports: {exc}", file=sys.stderr)
        return 1
    except (ImportError, SyntaxError) as exc:  # TESTBED_TRIM_DECISION names a broken file
        print(f"switch {config.name}: cannot load the trimming decision: {exc}", file=sys.stderr)
        return 2
    control = ControlServer(args.control)

    def stop(_sig, _frm) -> None:
        switch.running = False

    signal.signal(signal.SIGTERM, stop)
    if args.die_with_parent:
        _die_with_parent()
    signal.signal(signal.SIGINT, stop)
    plugged = os.environ.get(TRIM_DECISION_ENV)
    note = f", trimming decision from {plugged}" if plugged else ""
    print(f"switch {config.name}: forwarding on {len(config.ports)} ports{note}", flush=True)
    try:
        switch.run(control)
    finally:
        control.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
