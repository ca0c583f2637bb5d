"""docs/design.md stays true: its links resolve, its scenario example validates, and its command
line matches the parser (what it says is not implemented yet is indeed not there)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
TEXT = DESIGN.read_text()


def _section(title: str) -> str:
    """The text of the `## title...` section, up to the next `## `."""
    m = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", TEXT, re.M | re.S)
    assert m, f"docs/design.md: no section {title!r}"
    return m.group(1)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}


def test_links_from_and_into_the_design_resolve():
    docs = [DESIGN, *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    for doc in docs:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve()
            assert path.exists(), f"{doc.name}: link to missing {target}"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path), f"{doc.name}: no #{anchor} in {file}"


def test_the_readme_lists_the_design():
    assert "(docs/design.md)" in (ROOT / "README.md").read_text()


def test_the_scenario_example_validates():
    from testbed.scenario import validate

    block = re.search(r"```yaml\n(.*?)```", _section("Scenario file"), re.S)
    sc = validate(yaml.safe_load(block.group(1)))
    assert sc.name == "link-failure" and [e.action for e in sc.timeline()] == [
        "link-down",
        "link-up",
    ]


def _parser_commands() -> dict[str, argparse.ArgumentParser]:
    from testbed.cli.app import build_parser

    ap = build_parser()
    (sub,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_of_the_parser_is_in_the_design():
    section = _section("Command line")
    for name in _parser_commands():
        assert f"testbed {name}" in section, f"docs/design.md does not mention `testbed {name}`"


def _not_yet() -> str:
    m = re.search(r"Not implemented yet: (.*?)\.\n", _section("Command line"), re.S)
    assert m, "docs/design.md, Command line: no 'Not implemented yet:' sentence"
    return m.group(1)


def test_every_contract_command_exists_or_is_said_to_be_missing():
    block = re.search(r"```\n(.*?)```", _section("Command line"), re.S).group(1)
    commands = _parser_commands()
    not_yet = _not_yet()
    for name in re.findall(r"^testbed ([a-z][a-z-]*)", block, re.M):
        assert name in commands or f"testbed {name}" in not_yet, (
            f"`testbed {name}` is in the contract, not in the parser, and not listed as "
            "not implemented yet"
        )
    assert "--version" in block


@pytest.mark.parametrize("what", ["command", "option", "bench"])
def test_what_is_said_to_be_missing_is_missing(what):
    """When something on the 'not implemented yet' list lands, the list must lose it."""
    commands = _parser_commands()
    not_yet = _not_yet()
    if what == "command":
        for name in re.findall(r"`testbed ([a-z-]+)`", not_yet):
            assert name not in commands, f"`testbed {name}` exists now: update docs/design.md"
    elif what == "option":
        for option in re.findall(r"`(--[a-z-]+)`", not_yet):
            for name, parser in commands.items():
                flags = {f for a in parser._actions for f in a.option_strings}
                assert option not in flags, f"`testbed {name} {option}` exists: update design.md"
    else:
        bench = commands["bench"]
        (what_arg,) = [a for a in bench._actions if a.dest == "what"]
        missing = re.search(r"`bench ([a-z|]+)`", not_yet)
        for kind in missing.group(1).split("|") if missing else []:
            assert kind not in what_arg.choices, f"`bench {kind}` exists: update design.md"


def test_the_module_paths_it_names_exist():
    import endpoint.wire
    import topologies

    assert hasattr(endpoint.wire, "BTH") and callable(topologies.leaf_spine)
    import testbed

    for name in ("Fabric", "LeafSpine", "run", "validate"):
        assert name in testbed.__all__
