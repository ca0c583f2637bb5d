"""An aborted run keeps its endpoints' logs and records: they say why it aborted."""

from __future__ import annotations

from pathlib import Path

from testbed.experiment.api import load
from testbed.harness.endpoint_driver import EndpointDriver


class FakeEndpoints:
    """What EndpointDriver.stop uses of FabricEndpoints: stop, the temporary folder, cleanup."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "tbe-ep-x"
        self.dir.mkdir()
        (self.dir / "h1.log").write_text("h1: select() stalled\n")
        (self.dir / "h1.jsonl").write_text('{"type": "start"}\n')
        (self.dir / "h1.sock").write_text("")
        self.cleaned = False

    def stop(self) -> None:
        raise OSError("an endpoint would not stop")  # stop goes on regardless

    def cleanup(self) -> None:
        self.cleaned = True


def test_stop_without_collect_keeps_the_logs_and_records(tmp_path: Path) -> None:
    driver = EndpointDriver("r0", load("link-failure"), "mrc", tmp_path / "raw" / "mrc")
    driver.eps = FakeEndpoints(tmp_path)
    driver.stop()
    kept = tmp_path / "raw" / "mrc" / "endpoints"
    assert sorted(p.name for p in kept.iterdir()) == ["h1.jsonl", "h1.log"]
    assert (kept / "h1.log").read_text() == "h1: select() stalled\n"
    assert driver.eps.cleaned


def test_stop_after_collect_leaves_the_collected_files_alone(tmp_path: Path) -> None:
    driver = EndpointDriver("r0", load("link-failure"), "mrc", tmp_path / "raw" / "mrc")
    kept = tmp_path / "raw" / "mrc" / "endpoints"
    kept.mkdir(parents=True)
    (kept / "h1.jsonl").write_text("collected\n")
    driver.eps = FakeEndpoints(tmp_path)
    driver.stop()
    assert (kept / "h1.jsonl").read_text() == "collected\n"
    assert not (kept / "h1.log").exists()
