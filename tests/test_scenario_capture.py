"""`capture:` and `--pcap`: which ports a run captures, checked before anything is built."""

from __future__ import annotations

import pytest

from testbed.cli.app import main
from testbed.scenario import validate
from testbed.scenario.capture import capture_ports, parse_pcap_arg
from tests.test_scenario_validation import BASE, error_of, variant


def test_no_capture_by_default_and_the_defaults() -> None:
    sc = validate(BASE)
    assert not sc.capture.enabled
    assert (sc.capture.snaplen, sc.capture.direction, sc.capture.max_mb) == (128, "both", 100.0)


def test_a_switch_a_port_and_hosts_resolve_on_the_fabric() -> None:
    sc = validate(variant(capture={"ports": ["spine1", "leaf1:leaf1-eth0"], "direction": "tx"}))
    fab = sc.fabric()
    assert sc.capture.enabled and sc.capture.direction == "tx"
    got = capture_ports(fab, sc.capture.ports, "capture.ports")
    assert got == {"leaf1": ["leaf1-eth0"], "spine1": [i.name for i in fab.interfaces["spine1"]]}
    hosts = capture_ports(fab, ["hosts"], "capture.ports")
    assert sorted(hosts) == ["leaf1", "leaf2"]
    for leaf, ports in hosts.items():
        facing = [i.peer_node for i in fab.interfaces[leaf] if i.name in ports]
        assert len(facing) == 2 and all(fab.nodes[p].kind == "host" for p in facing)
    # A port named twice (here: by its switch and by itself) is captured once.
    assert capture_ports(fab, ["leaf1", "leaf1:leaf1-eth0"], "k")["leaf1"] == [
        i.name for i in fab.interfaces["leaf1"]
    ]


@pytest.mark.parametrize(
    ("capture", "error"),
    [
        ({"ports": ["leaf9"]}, "capture.ports[0]: no switch 'leaf9' in this fabric; switches: "),
        ({"ports": ["spine1", "h1"]}, "capture.ports[1]: no switch 'h1' in this fabric (a host"),
        ({"ports": ["leaf1:eth7"]}, "capture.ports[0]: leaf1 has no port 'eth7'; its ports: "),
        ({"ports": ["leaf1"], "direction": "up"}, "capture.direction: input should be"),
        ({"ports": ["leaf1"], "snaplen": 8}, "capture.snaplen: "),
        ({"ports": ["leaf1"], "max_mb": 0}, "capture.max_mb: "),
        ({"ports": ["leaf1"], "snap": 64}, "capture.snap: unknown key (did you mean 'snaplen'?)"),
    ],
)
def test_a_bad_capture_names_its_key(capture, error) -> None:
    msg = error_of(variant(capture=capture))
    assert msg.startswith(error), msg
    assert "\n" not in msg


def test_the_pcap_argument_is_a_comma_separated_list() -> None:
    assert parse_pcap_arg("leaf1:leaf1-eth3, spine1") == ["leaf1:leaf1-eth3", "spine1"]
    for bad in ("", "leaf1,,spine1", " , "):
        with pytest.raises(ValueError, match="^--pcap: expected SWITCH"):
            parse_pcap_arg(bad)


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("leaf1,spine9", "--pcap[1]: no switch 'spine9' in this fabric"),
        ("leaf1:leaf1-eth99", "--pcap[0]: leaf1 has no port 'leaf1-eth99'"),
        ("leaf1,", "--pcap: expected SWITCH"),
    ],
)
@pytest.mark.parametrize("cmd", ["run", "compare"])
def test_a_bad_pcap_argument_is_one_line_before_anything_runs(capsys, cmd, spec, error) -> None:
    rc = main([cmd, "gray-failure", "--quick", "--pcap", spec])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and error in err, err
