"""Which data path this process runs: the C one (``endpoint._burst``) or its Python twins.

``TESTBED_DATAPATH=c|python`` chooses; unset, the C path runs when the extension is built
(setup.py builds it in place; without a compiler it is skipped and the Python path runs). Asking
for ``c`` without the extension runs Python and says why (``REASON``), so a process never fails
to start over it. Both paths produce the same bytes: tests/test_endpoint_burst.py sends the same
inputs through both and compares the datagrams.

What the C path replaces, each twin staying in Python beside it:

* ``endpoint.udp_io``: one ``recvmmsg`` per data socket and wake-up instead of a ``recvmsg``
  per datagram; one ``sendmmsg`` per run of a socket's packets in a transmit pass instead of a
  ``sendto`` (and a ``setsockopt(IP_TOS)`` when the ToS changes) per packet;
* ``endpoint.codec``: a data packet's header + payload copy and crc32 in one pass, and the crc
  check on receive without slicing the payload.
"""

from __future__ import annotations

import os
from types import ModuleType

ENV = "TESTBED_DATAPATH"
CHOICES = ("c", "python")


def _select() -> tuple[ModuleType | None, str, str]:
    try:
        from endpoint import _burst
    except ImportError as exc:
        _burst = None
        missing = f"endpoint._burst is not built ({exc})"
    want = os.environ.get(ENV, "").strip().lower()
    if want and want not in CHOICES:
        raise ValueError(f"{ENV}={want!r}: expected one of {', '.join(CHOICES)}")
    if want == "python":
        return None, "python", f"{ENV}=python"
    if _burst is None:
        return None, "python", missing
    return _burst, "c", f"{ENV}=c" if want else "endpoint._burst is built (default)"


burst, DATAPATH, REASON = _select()
"""``burst``: the C module when the C path runs, else None."""


def describe() -> dict:
    """For the metrics' start record and the process stats."""
    return {"datapath": DATAPATH, "datapath_reason": REASON}
