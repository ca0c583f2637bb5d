"""Every `testbed <command> ... --flag` the docs show is accepted by that command's parser.

The usages are read out of README.md, docs/**/*.md and labs/**/*.md: fenced code blocks (with
`\\` line continuations joined) and inline code spans (which may wrap a line). Each is checked
against the real parser (testbed.cli.app.build_parser), walked the way testbed.cli.completion
walks it: the subcommand must exist, every option must be one of that subcommand's own (no
abbreviations), and a value the docs give an option must pass the option's type and choices --
`--time-dilation auto` on `up`, whose value is a number, fails. Nested commands (`lab check`)
and choice positionals (`bench <kind>`, `completion bash|zsh`) are followed and checked too.

Doc notation is understood: `sudo testbed`, `[--opt V]` brackets, `a|b` alternatives (each
checked), and placeholders (`N`, `DIR`, `KEY=V1,V2,...`, `<kind>`, `$var`), which are not values.
Prose claims are checked the same way: "`run`, `compare` and the benches take `--x N`",
"`--pcap` on `run`/`compare`", "`testbed up` options: `--a`, `--b`" and "every command takes
`--help`" (each command of the parser). Pure: no root, no fabric; ~0.2 s after the import.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.cli.app import build_parser

ROOT = Path(__file__).resolve().parents[1]

NOT_COMMANDS = {"probe"}
"""`testbed <word>` spans that name a command on purpose although it does not exist
(docs/transport.md: "There is no `testbed probe` command")."""

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"(?<!`)`([^`]+?)`(?!`)", re.S)
_CALL = re.compile(r"(?<![\w./-])(?<!from )testbed[ \t]+(?=[a-z])")
_COMMENT = re.compile(r"(?:^|\s)#.*$")
_END = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "&", ")", "#"}
_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[=,.].*)?|<[^>]*>|\$.*|\.\.\.|…)$")


@dataclass(frozen=True)
class Usage:
    """One doc line that runs `testbed`: where it is and its words after `testbed`."""

    where: str  # file:line
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: testbed {' '.join(self.words)}"


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return files + sorted((ROOT / "labs").rglob("*.md"))


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _words(command: str) -> list[str]:
    """Words of one command, up to where the shell would end it (a pipe, `;`, a comment)."""
    command = command.replace("\\|", "|")  # `a\|b` in a table cell
    try:
        raw = shlex.split(command, comments=False)
    except ValueError:  # an unbalanced quote in prose: plain words will do
        raw = command.split()
    out: list[str] = []
    for w in raw:
        if w in _END or w.startswith("#"):
            break
        last = w.endswith(";")  # `...; done`
        w = w.lstrip("[").rstrip("]").rstrip(",.;:)\"'")
        if w:
            out.append(w)
        if last:
            break
    return out


_ITEM = r"(?:`[a-z][a-z-]*`|the benches)"
_FLAG = r"`--?[a-z][^`]*`(?: \([^()]*\))?"  # `--mtu` (1280..9000)
_AND = r"(?:, |,? and |/| or )"
_ITEMS = rf"{_ITEM}(?:{_AND}{_ITEM})*"
_FLAGS = rf"{_FLAG}(?:{_AND}{_FLAG})*"
_CLAIMS = (  # what prose says a command takes
    re.compile(rf"(?P<cmds>{_ITEMS}|\b[Ee]very command) takes? (?P<flags>{_FLAGS})"),
    re.compile(rf"(?P<flags>{_FLAGS}) on (?P<cmds>{_ITEMS})"),  # `--pcap` on `run`/`compare`
    re.compile(rf"(?P<cmds>`testbed [a-z-]+`) options: (?P<flags>{_FLAGS})"),
)


def claims(para: str) -> list[tuple[int, tuple[str, ...]]]:
    """(offset, words) for each command and option a prose sentence says go together; `*` is
    every command."""
    out: list[tuple[int, tuple[str, ...]]] = []
    flat = para.replace("\n", " ")
    for pattern in _CLAIMS:
        for m in pattern.finditer(flat):
            cmds = m.group("cmds")
            names = re.findall(r"`(?:testbed )?([^`]+)`|the benches", cmds)
            for name in ["*"] if "command" in cmds else names:
                for flag in re.findall(r"`([^`]+)`", re.sub(r"\([^()]*\)", "", m.group("flags"))):
                    out.append((m.start(), (name or "bench", *_words(flag))))
    return out


def extract(text: str, where: str) -> list[Usage]:
    """Every `testbed <word> ...` in the code blocks and inline code of one markdown text."""
    found: list[tuple[int, str]] = []  # (line, command text from the word after `testbed`)

    def calls(chunk: str, line: int) -> None:
        for m in _CALL.finditer(chunk):
            found.append((line + chunk.count("\n", 0, m.start()), chunk[m.end() :]))

    prose = text
    for fence in _FENCE.finditer(text):
        first = _line(text, fence.start())
        lines = fence.group(0).split("\n")
        n = 1
        while n < len(lines) - 1:  # the fence's own lines are not code
            start, code = n, lines[n]
            while code.endswith("\\") and n + 1 < len(lines) - 1:  # a line continuation
                n += 1
                code = code[:-1] + " " + lines[n]
            calls(_COMMENT.sub("", code), first + start)
            n += 1
        blank = re.sub(r"[^\n]", " ", fence.group(0))
        prose = prose[: fence.start()] + blank + prose[fence.end() :]
    for para in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", prose):  # spans stop at blank lines
        for span in _SPAN.finditer(para.group(0)):
            calls(span.group(1), _line(text, para.start() + span.start(1)))
    usages = [Usage(f"{where}:{line}", tuple(_words(cmd))) for line, cmd in found]
    for para in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", prose):
        for pos, words in claims(para.group(0)):
            usages.append(Usage(f"{where}:{_line(text, para.start() + pos)}", words))
    return sorted(usages, key=lambda u: int(u.where.rpartition(":")[2]))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _alternatives(word: str) -> list[str]:
    """The concrete values a doc word names: `auto|N` -> [auto]; `per-node|shared` -> both."""
    return [w for w in word.split("|") if w and not _PLACEHOLDER.match(w)]


def _check_value(parser: argparse.ArgumentParser, action: argparse.Action, word: str) -> str:
    """'' if the parser takes `word` for `action`, else why not."""
    for value in _alternatives(word):
        try:
            parser._get_values(action, [value])  # the parser's own type and choices check
        except argparse.ArgumentError as exc:
            return str(exc)
    return ""


def check(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> list[str]:
    """What the parser would refuse in `testbed <words>` (empty: all accepted)."""
    if not words:
        return []
    subs = _subparsers(parser)
    names = list(subs) if words[0] == "*" else _alternatives(words[0]) or list(subs)
    problems: list[str] = []
    for name in names:
        if name in subs:
            problems += _check_command(subs[name], name, list(words[1:]))
            continue
        owners = [n for n, p in subs.items() if name in _first_choices(p)]  # "`capacity` takes"
        if len(owners) == 1:
            problems += _check_command(subs[owners[0]], owners[0], list(words))
        elif name not in NOT_COMMANDS:
            problems.append(f"no command {name!r}")
    return problems


def _first_choices(p: argparse.ArgumentParser) -> list[str]:
    """What the first positional of a command may be: `bench`'s kinds, `lab`'s subcommands."""
    first = next((a for a in p._actions if not a.option_strings), None)
    return [str(c) for c in first.choices or ()] if first is not None else []


def _check_command(p: argparse.ArgumentParser, path: str, words: list[str]) -> list[str]:
    options = {o: a for a in p._actions for o in a.option_strings}
    positionals = [a for a in p._actions if not a.option_strings]
    problems: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w == "--":  # `exec NODE -- CMD`: the rest is not ours
            break
        if w.startswith("-") and len(w) > 1 and not re.match(r"^-\d", w):
            flag, eq, value = w.partition("=")
            action = options.get(flag)
            if action is None:
                problems.append(f"{path}: no option {flag}")
                continue
            if action.nargs == 0:
                continue
            if not eq:
                if i >= len(words) or words[i].startswith("--"):
                    continue  # the docs name the option alone: `--pcap` on `run`
                value = words[i]
                i += 1
            why = _check_value(p, action, value)
            if why:
                problems.append(f"{path} {flag} {value}: {why}")
            continue
        if not positionals:
            continue
        action = positionals[0]
        if isinstance(action, argparse._SubParsersAction):  # `lab check`
            nested = dict(action.choices)
            for name in _alternatives(w) or list(nested):
                if name in nested:
                    problems += _check_command(nested[name], f"{path} {name}", words[i:])
                else:
                    problems.append(f"{path}: no subcommand {name!r}")
            return problems
        if action.choices is not None:
            why = _check_value(p, action, w)
            if why:
                problems.append(f"{path} {w}: {why}")
        if action.nargs not in ("*", "+", argparse.REMAINDER):
            positionals.pop(0)
    return problems


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.fixture(scope="module")
def usages() -> list[Usage]:
    out: list[Usage] = []
    for path in doc_files():
        out += extract(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return out


def test_the_docs_show_many_commands(usages):
    """The extractor finds what is there (a silent regex would pass everything)."""
    assert len(usages) > 150
    shown = {u.words[0] for u in usages if u.words}
    assert {"up", "run", "compare", "bench", "lab", "ctl", "capture", "soak"} <= shown
    assert any(u.words[:2] == ("lab", "check") and "--unit-only" in u.words for u in usages)


def test_every_flag_the_docs_show_is_accepted(parser, usages):
    bad = [f"{u}\n    -> {p}" for u in usages for p in check(parser, u.words)]
    assert not bad, "the docs show what the parser refuses:\n" + "\n".join(bad)


SYNTHETIC = """\
Some prose with `sudo testbed up --spines 2 --no-such-flag` inline.

```
sudo testbed run silent-blackhole \\
    --repeat 5 --plot-format gif   # a comment --not-a-flag
testbed bench warp --json
for d in x/; do testbed lab check 2 --code "$d" --bogus; done
```
An inline span that wraps: `testbed up --spines 2
--time-dilation auto`, and `testbed completion fish`.
Fine: `testbed up --switch-processes per-node|shared`, `testbed run|compare X --pcap SPEC`.
`up`, `run` and the benches take `--time-dilation auto|N`; `--pcap` on `run`/`soak`.
Every command takes `--name N` (it does not).
"""


def test_the_checker_catches_known_bad_lines(parser):
    """The extractor and the check together find each planted mistake, and only those."""
    found = [(u.where, u.words[0], check(parser, u.words)) for u in extract(SYNTHETIC, "x.md")]
    assert len(found) == 14  # 8 commands (two on line 11), 6 command-option claims
    bad = [(where, problems) for where, _, problems in found if problems]
    expected = [  # argparse's own words after these vary with the Python version
        ("x.md:1", "up: no option --no-such-flag"),
        ("x.md:4", "run --plot-format gif: argument --plot-format: invalid choice: 'gif'"),
        ("x.md:6", "bench warp: argument what: invalid choice: 'warp'"),
        ("x.md:7", "lab check: no option --bogus"),
        ("x.md:9", "up --time-dilation auto: argument --time-dilation: invalid float value"),
        ("x.md:10", "completion fish: argument shell: invalid choice: 'fish'"),
        ("x.md:12", "up --time-dilation auto|N: argument --time-dilation: invalid float value"),
        ("x.md:12", "soak: no option --pcap"),
    ]
    assert len(bad) == len(expected) + 1
    for (where, problems), (line, start) in zip(bad, expected, strict=False):
        assert where == line and len(problems) == 1 and problems[0].startswith(start), problems
    where, everyone = bad[-1]  # "Every command takes `--name N`": the commands that do not
    assert where == "x.md:13"
    assert {"clean: no option --name", "run: no option --name"} <= set(everyone)
    assert "up: no option --name" not in everyone
