"""The student's ev_policy.py, installed as the EV policy of every EVSet a check builds."""

from __future__ import annotations

import pytest

from endpoint.ev import use_policy
from testbed.labs.grading import load_student


@pytest.fixture
def policy():
    module = load_student("ev_policy")
    previous = use_policy(module)
    yield module
    use_policy(previous)
