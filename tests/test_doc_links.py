"""Every relative link in README.md and docs/**/*.md resolves: the file exists and, for a link
with a `#fragment` into a markdown file, a heading of that file gives that anchor (GitHub's
rule: lower case, punctuation but `-` and `_` dropped, spaces to `-`; repeats get `-1`, `-2`).

Pure: reads the markdown only. Links inside fenced code blocks and absolute URLs are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a page."""
    seen: dict[str, int] = {}
    out = set()
    for title in _HEADING.findall(_FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text(encoding="utf-8"))
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                out.append((no, target))
    return out


def broken(page: Path) -> list[str]:
    bad = []
    for no, target in links(page):
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}:{no}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif fragment and dest.suffix == ".md":
            if fragment.lower() not in anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{where} (no heading gives #{fragment})")
    return bad


def test_anchor_rule():
    md = "# Results (`summary.json`)\n## Time dilation (issue 18)\n## A\n## A\n"
    assert anchors(md) == {"results-summaryjson", "time-dilation-issue-18", "a", "a-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken(page)
