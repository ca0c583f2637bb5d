"""docs/reference/ is what the code says: each page regenerated in memory equals the committed one.

Pure: the generator reads the argparse parser, the scenario models' JSON Schema, build_summary on
a tiny measurement and the frames' schema; no root, no fabric.
"""

from __future__ import annotations

import pytest

from testbed import docs_reference


@pytest.mark.parametrize("name", sorted(docs_reference.PAGES))
def test_committed_reference_page_is_current(name):
    path = docs_reference.REFERENCE / name
    assert path.exists(), f"docs/reference/{name} is missing: {docs_reference.WRITE_HINT}"
    committed = path.read_text(encoding="utf-8")
    assert committed == docs_reference.PAGES[name](), (
        f"docs/reference/{name} differs from the code: {docs_reference.WRITE_HINT}"
    )


def test_cli_page_names_every_command_and_option():
    from testbed.cli.app import build_parser

    page = docs_reference.cli_page()
    for name, _, sub in docs_reference._subparsers(build_parser()):
        assert f"## `testbed {name}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in page, (name, option)


def test_scenario_page_names_every_model():
    from testbed.scenario.schema import scenario_json_schema

    page = docs_reference.scenario_page()
    for model in scenario_json_schema()["$defs"]:
        assert f"## {model}\n" in page


def test_frames_page_names_every_column():
    from testbed.results.schema import FRAMES

    page = docs_reference.frames_page()
    for frame, columns in FRAMES.items():
        assert f"## {frame}\n" in page
        assert all(f"| `{c}` |" in page for c in columns)


def test_check_mode_reports_a_stale_page(tmp_path):
    for name, page in docs_reference.PAGES.items():
        (tmp_path / name).write_text(page(), encoding="utf-8")
    assert docs_reference.stale_pages(tmp_path) == []
    (tmp_path / "frames.md").write_text("old\n", encoding="utf-8")
    assert docs_reference.stale_pages(tmp_path) == ["frames.md"]
