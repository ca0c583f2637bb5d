"""`testbed completion bash|zsh`: the script is read off the parser, is valid bash, and completes
what the parser accepts (checked by running the completion function in bash)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from testbed.cli.app import build_parser, main
from testbed.cli.completion import commands, script
from testbed.scenario.catalog import list_scenarios

BASH = shutil.which("bash")


def generated(capsys, shell: str = "bash") -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def complete(text: str, words: list[str]) -> list[str]:
    """What `_testbed` offers for the command line `words` (the last one being completed)."""
    array = " ".join(f"'{w}'" for w in words)
    probe = (
        f"{text}\nCOMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; _testbed\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run([BASH, "-c", probe], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_every_subcommand_and_its_options_are_in_the_script(capsys):
    text = generated(capsys)
    top, cmds = commands(build_parser())
    assert {"run", "compare", "fib", "path", "completion", "lab", "bench"} <= set(cmds)
    for name in cmds:
        assert f"        {name})" in text
    assert "--plot-format" in text and "--hosts-per-leaf" in text
    assert "complete -o filenames -F _testbed testbed" in text


@pytest.mark.skipif(BASH is None, reason="bash not installed")
def test_bash_accepts_the_script(capsys, tmp_path):
    path = tmp_path / "testbed.bash"
    path.write_text(generated(capsys))
    proc = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(BASH is None, reason="bash not installed")
def test_the_script_completes_commands_options_choices_and_scenarios(capsys):
    text = generated(capsys)
    assert complete(text, ["testbed", "com"]) == ["compare", "completion"]
    assert complete(text, ["testbed", "run", "--plot-format", ""]) == ["png", "svg", "pdf"]
    assert "--plot-format" in complete(text, ["testbed", "compare", "--plo"])
    assert complete(text, ["testbed", "fib", "--j"]) == ["--json"]
    assert complete(text, ["testbed", "path", "--proto", "t"]) == ["tcp"]
    assert complete(text, ["testbed", "lab", ""])[:2] == ["list", "check"]
    assert complete(text, ["testbed", "compare", "x.yaml", "--transports", "mp"]) == ["mptcp"]
    shipped = [e.name for e in list_scenarios() if e.error is None]
    assert "gray-failure" in shipped
    assert "gray-failure" in complete(text, ["testbed", "run", "gray"])
    assert complete(text, ["testbed", "up", "--spines", ""]) == []  # a number: nothing offered


def test_zsh_script_wraps_the_bash_function(capsys):
    text = generated(capsys, "zsh")
    assert text.startswith("# testbed shell completion for zsh")
    assert "bashcompinit" in text and "_testbed() {" in text
    if shutil.which("zsh"):
        proc = subprocess.run(["zsh", "-n", "-c", text], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_unknown_shell_is_refused():
    with pytest.raises(ValueError, match="completion: unknown shell 'fish'"):
        script("fish", build_parser())
    with pytest.raises(SystemExit):
        main(["completion", "fish"])
