"""`testbed completion bash|zsh`: a shell completion script generated from the argparse parser.

Why generated and static (no argcomplete): completing then costs the shell nothing -- no Python
start, no import of the testbed (~0.5 s) per <Tab> -- and the script cannot drift from the
parser, since it is read off the parser itself: subcommands, their options, the choices of an
option or positional, nested subcommands (`lab list|check`) and, for `run` and `compare`, the
shipped scenario names (plus *.yaml files). Scenarios added later need the script regenerated.
zsh gets the same function through bashcompinit, which every zsh ships.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh")
FILE_DESTS = {"out", "write", "code"}
"""Options whose value is a path: they complete files and folders; other values, nothing."""
_SAFE = re.compile(r"^[A-Za-z0-9_.,:+=@%/-]+$")
"""Words the script may hold unquoted; anything else (a scenario named oddly) is left out."""


@dataclass
class Command:
    """What completes after one subcommand."""

    options: list[str] = field(default_factory=list)
    option_choices: dict[str, list[str]] = field(default_factory=dict)
    option_files: list[str] = field(default_factory=list)  # their value is a path
    words: list[str] = field(default_factory=list)  # positional choices or nested commands
    files: bool = False  # a positional that is a file (a scenario YAML)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(
    parser: argparse.ArgumentParser,
    scenarios: Iterable[str] = (),
    values: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[str], dict[str, Command]]:
    """(top-level words, subcommand -> Command), read off `parser`. `scenarios`: the names
    `run` and `compare` complete besides files; `values`: words for options that have no
    argparse choices (e.g. --transports: the transport names)."""
    values = values or {}
    top = [o for a in parser._actions for o in a.option_strings]
    subs = _subparsers(parser)
    out: dict[str, Command] = {}
    for name, sub in subs.items():
        c = Command()
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                c.words += list(action.choices)
                for nested in action.choices.values():  # options of `lab check` etc.
                    for a in nested._actions:
                        _add_option(c, a, values)
                continue
            if action.option_strings:
                _add_option(c, action, values)
            elif action.choices:
                c.words += [str(x) for x in action.choices]
        if name in ("run", "compare"):
            c.words += list(scenarios)
            c.files = True
        c.options = list(dict.fromkeys(c.options))
        out[name] = c
    return [*subs, *top], out


def _add_option(c: Command, action: argparse.Action, values: Mapping[str, Sequence[str]]) -> None:
    c.options += action.option_strings
    if action.nargs == 0:  # store_true, help, version: no value follows
        return
    for opt in action.option_strings:
        if action.choices:
            c.option_choices[opt] = [str(x) for x in action.choices]
        elif opt in values:
            c.option_choices[opt] = list(values[opt])
        elif action.dest in FILE_DESTS:
            c.option_files.append(opt)
        else:  # a number or a name: nothing to offer, and no file names either
            c.option_choices[opt] = []


def _words(words: Iterable[str]) -> str:
    return " ".join(w for w in words if _SAFE.match(w))


def bash_script(
    parser: argparse.ArgumentParser,
    scenarios: Iterable[str] = (),
    values: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """A bash completion function `_testbed`, registered for `testbed`."""
    top, cmds = commands(parser, scenarios, values)
    prog = parser.prog
    cases = []
    for name, c in cmds.items():
        prev = [
            f'                {opt}) COMPREPLY=($(compgen -W "{_words(ch)}" -- "$cur")); return ;;'
            for opt, ch in c.option_choices.items()
        ]
        if c.option_files:
            prev.append(
                f"                {'|'.join(c.option_files)}) "
                'COMPREPLY=($(compgen -f -- "$cur")); return ;;'
            )
        files = (
            "\n                COMPREPLY+=($(compgen -f -X '!*.y*ml' -- \"$cur\") "
            '$(compgen -d -- "$cur"))'
            if c.files
            else ""
        )
        prev_block = (
            '            case "$prev" in\n' + "\n".join(prev) + "\n            esac\n"
            if prev
            else ""
        )
        cases.append(
            f"        {name})\n"
            f"{prev_block}"
            '            if [[ "$cur" == -* ]]; then\n'
            f'                COMPREPLY=($(compgen -W "{_words(c.options)}" -- "$cur"))\n'
            "            else\n"
            f'                COMPREPLY=($(compgen -W "{_words(c.words)}" -- "$cur")){files}\n'
            "            fi\n"
            "            ;;"
        )
    body = "\n".join(cases)
    return f"""# {prog} shell completion for bash, generated by `{prog} completion bash`.
# Install: {prog} completion bash > ~/.local/share/bash-completion/completions/{prog}
#      or: eval "$({prog} completion bash)"   (in ~/.bashrc)
_{prog}() {{
    local cur prev cmd i
    COMPREPLY=()
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{_words(top)}" -- "$cur"))
        return
    fi
    case "$cmd" in
{body}
    esac
}}
complete -o filenames -F _{prog} {prog}
"""


def zsh_script(
    parser: argparse.ArgumentParser,
    scenarios: Iterable[str] = (),
    values: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The bash function under zsh's bashcompinit."""
    prog = parser.prog
    bash = bash_script(parser, scenarios, values).split("\n", 3)[3]  # without bash's install lines
    return f"""# {prog} shell completion for zsh, generated by `{prog} completion zsh`.
# Install: eval "$({prog} completion zsh)"   (in ~/.zshrc)
autoload -U +X compinit && compinit
autoload -U +X bashcompinit && bashcompinit
{bash}"""


def script(
    shell: str,
    parser: argparse.ArgumentParser,
    scenarios: Iterable[str] = (),
    values: Mapping[str, Sequence[str]] | None = None,
) -> str:
    if shell == "bash":
        return bash_script(parser, scenarios, values)
    if shell == "zsh":
        return zsh_script(parser, scenarios, values)
    raise ValueError(f"completion: unknown shell {shell!r} (one of {', '.join(SHELLS)})")
