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

from types import ModuleType

from contracts import datapath as choice

ENV = choice.ENV
CHOICES = choice.DATAPATHS


def _select() -> tuple[ModuleType | None, str, str]:
    """contracts.datapath's rule for this component; a `c` that cannot run (the CLI refuses
    it before anything starts, so only a hand-started process gets here) runs Python and says
    why, so that an endpoint never fails to start over it."""
    want = choice.requested()  # ValueError (DatapathError) for a value not in CHOICES
    missing = choice.missing("endpoint")
    if want == choice.PYTHON:
        return None, "python", f"{ENV}=python"
    if missing is not None:
        return None, "python", missing
    from endpoint import _burst

    return _burst, "c", f"{ENV}=c" if want else "endpoint._burst is built (default)"


burst, DATAPATH, REASON = _select()
"""``burst``: the C module when the C path runs, else None."""


def describe() -> dict:
    """For the metrics' start record and the process stats."""
    return {"datapath": DATAPATH, "datapath_reason": REASON}
