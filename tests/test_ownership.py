"""Results written under sudo are handed to the invoking user: only what the run created."""

from __future__ import annotations

import os

import pytest

from testbed.experiment import ownership
from testbed.experiment.ownership import first_missing, hand_over, invoking_user


def test_first_missing_is_the_outermost_new_folder(tmp_path):
    assert first_missing(tmp_path) is None
    assert first_missing(tmp_path / "results" / "run-1") == tmp_path / "results"
    (tmp_path / "results").mkdir()
    assert first_missing(tmp_path / "results" / "run-1") == tmp_path / "results" / "run-1"


def test_invoking_user_only_under_sudo_as_root(monkeypatch):
    monkeypatch.setattr(ownership.os, "geteuid", lambda: 0)
    assert invoking_user({"SUDO_UID": "1000", "SUDO_GID": "1001"}) == (1000, 1001)
    assert invoking_user({"SUDO_UID": "1000"}) == (1000, 1000)
    assert invoking_user({}) is None  # plain root
    assert invoking_user({"SUDO_UID": "0"}) is None  # sudo from root
    assert invoking_user({"SUDO_UID": "x"}) is None
    monkeypatch.setattr(ownership.os, "geteuid", lambda: 1000)
    assert invoking_user({"SUDO_UID": "1000"}) is None  # not root: files are already ours


def test_hand_over_changes_exactly_the_created_tree(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ownership.os, "chown", lambda p, u, g, **kw: calls.append((str(p), u, g)))
    old = tmp_path / "results"
    old.mkdir()
    (old / "someone-elses.txt").write_text("x")
    run = old / "run-1"
    (run / "raw" / "mrc").mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    (run / "raw" / "mrc" / "h1.jsonl").write_text("")
    assert hand_over(run, (1000, 1000)) == 5
    changed = {p for p, _, _ in calls}
    assert changed == {
        str(run), str(run / "raw"), str(run / "raw" / "mrc"),
        str(run / "summary.json"), str(run / "raw" / "mrc" / "h1.jsonl"),
    }  # fmt: skip
    assert all((u, g) == (1000, 1000) for _, u, g in calls)
    assert hand_over(None, (1000, 1000)) == 0 and hand_over(run, None) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_hand_over_for_real(tmp_path):
    run = tmp_path / "r"
    (run / "a").mkdir(parents=True)
    (run / "a" / "f").write_text("x")
    hand_over(run, (4242, 4243))
    for p in (run, run / "a", run / "a" / "f"):
        st = p.stat()
        assert (st.st_uid, st.st_gid) == (4242, 4243)
