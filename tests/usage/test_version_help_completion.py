"""``turnkeeper --version``, shell completion and the help texts, as a user meets them."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import pytest

import turnkeeper
from tests.usage.project import UserProject

# Commands whose help must show an example.
COMMANDS_WITH_EXAMPLES = ("init", "status", "audit", "verify", "repair", "propose", "demo", "chaos")
JARGON = re.compile(r"(?i:seed 0\d\d|invariants 1)|DESIGN\.md")


def test_version_prints_the_package_version(user_project: UserProject) -> None:
    done = user_project.tk("--version")
    assert done.stdout == f"turnkeeper {turnkeeper.__version__}\n"
    assert turnkeeper.__version__ == version("turnkeeper")  # one version, not two


def test_show_completion_prints_a_bash_script(user_project: UserProject) -> None:
    done = user_project.tk(
        "--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    )
    assert "_TURNKEEPER_COMPLETE=complete_bash" in done.stdout
    assert "complete -o default -F _turnkeeper_completion turnkeeper" in done.stdout


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [("turnkeeper go", "1", {"goal"}), ("turnkeeper session re", "2", {"resume", "revert"})],
)
def test_completion_completes_commands(
    user_project: UserProject, words: str, cword: str, expected: set[str]
) -> None:
    """What bash asks through the script's environment variables, answered."""
    done = user_project.tk(
        env={"_TURNKEEPER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
    )
    assert set(done.stdout.split()) == expected


def test_top_level_help_says_what_it_is_and_shows_a_flow(user_project: UserProject) -> None:
    text = user_project.tk("--help", env={"COLUMNS": "120"}).stdout
    assert "crash-proof control plane for long-running AI agents" in text
    assert "--version" in text
    assert "--install-completion" in text
    # What turnkeeper is, above the option and command tables (whose lines are each
    # command's own help, checked with the command).
    assert JARGON.search(text.split("Options")[0]) is None
    assert len(_flow(text)) == 5


@pytest.mark.parametrize("command", COMMANDS_WITH_EXAMPLES)
def test_each_command_has_an_example_and_no_jargon(user_project: UserProject, command: str) -> None:
    text = user_project.tk(command, "--help", env={"COLUMNS": "200"}).stdout
    assert f"Example: turnkeeper {command}" in text
    assert JARGON.search(text) is None


# ./agent.sh and its host config, written from docs/agents.md: one turn proves the
# todo and the goal's one criterion with a passing "tests" check.
AGENT = """\
#!/bin/sh
set -eu
ev='[{"key": "tests", "command": "true"}]'
met='[{"kind": "satisfy_criterion", "criterion_id": "c1", "evidence_ids": ["ev-'
met="$met$TURNKEEPER_TURN_ID-0\\"]}]"
head='{"kind": "result", "data": {"todo_done": true, '
printf '%s"evidence": %s, "proposals": %s}}\\n' "$head" "$ev" "$met"
"""
AGENT_CONFIG = '{"command": ["./agent.sh"], "event_format": "jsonl"}'


def _flow(help_text: str) -> list[list[str]]:
    """The example flow's command lines, as argument lists (quotes as a shell reads them)."""
    import shlex

    # Indented in the help, unlike the prose around them (which may start "turnkeeper").
    lines = [ln for ln in help_text.splitlines() if re.match(r"\s{3,}turnkeeper ", ln)]
    return [shlex.split(ln.strip()) for ln in lines]


def test_the_flow_in_the_help_works_as_shown(user_project: UserProject) -> None:
    """The five lines of the top-level help, run one by one, with ./agent.sh next to them."""
    agent = user_project.root / "agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    (user_project.root / "agent.json").write_text(AGENT_CONFIG)
    user_project.git("add", "agent.sh", "agent.json")
    user_project.git("commit", "-q", "-m", "the agent")
    text = user_project.tk("--help", env={"COLUMNS": "120"}).stdout
    for argv in _flow(text):
        commands = [argv]
        if "&&" in argv:  # "turnkeeper run && turnkeeper audit parser"
            cut = argv.index("&&")
            commands = [argv[:cut], argv[cut + 1 :]]
        for command in commands:
            assert command[0] == "turnkeeper"
            user_project.tk(*command[1:])
    audit = user_project.tk_json("audit", "parser")
    assert audit["audit"]["terminal"] is True
    shown = user_project.tk_json("goal", "show", "parser")
    assert shown["state"]["goal"]["status"] == "closed"
    assert json.dumps(shown)  # a plain JSON document, as a script reads it


@pytest.mark.parametrize(
    ("command", "name", "meaning"),
    [
        (("session", "show"), "SESSION", "A session id, or a unique prefix of one."),
        (("session", "revert"), "SESSION", "A session id, or a unique prefix of one."),
        (("turn", "list"), "SESSION", "A session id, or a unique prefix of one."),
        (("logs",), "SESSION", "A session id, or a unique prefix of one."),
        (("turn", "show"), "TURN", "A turn id, or a unique prefix of one."),
        (("recover",), "TURN", "The failed turn's id, as `turn list` shows it."),
        (("goal", "show"), "GOAL", "A goal id, or a unique prefix of one."),
    ],
)
def test_an_id_argument_is_named_and_explained(
    user_project: UserProject, command: tuple[str, ...], name: str, meaning: str
) -> None:
    """The usage line and a missing-argument error name what to give, and the help says
    what it is: not the parameter's Python name."""
    shown = user_project.tk(*command, "--help", env={"COLUMNS": "200"}).stdout
    assert f"[OPTIONS] {{{name}}}" in shown or f"[OPTIONS] {name}" in shown, shown
    assert meaning in shown, shown
    missing = user_project.tk(*command, expect=2, env={"COLUMNS": "200"})
    assert f"Missing argument '{name}'." in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr
