"""``turnkeeper extensions`` and ``turnkeeper doctor`` as a user runs them: the real
command in a project made by ``turnkeeper init`` in a git repository, with plugins
installed beside it and fake agent CLIs on PATH."""

from __future__ import annotations

import json
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tests.extensions.kit import clean_env, fake_cli, turnkeeper, write_plugin
from tests.usage.project import UserProject

BUILTIN_HOSTS = {"subprocess", "python", "scripted", "codex", "claude"}
BUILTIN_EFFECTS = {"command", "http"}
BROKEN = "raise RuntimeError('tkbroken cannot start: libfoo.so.3 is missing')\n"


def _findings(output: str) -> list[dict[str, Any]]:
    report = json.loads(output)
    findings: list[dict[str, Any]] = report["findings"]
    return findings


def _one(findings: list[dict[str, Any]], extension: str, check: str) -> dict[str, Any]:
    found = [f for f in findings if f["extension"] == extension and f["check"] == check]
    assert len(found) == 1, findings
    return found[0]


def test_extensions_lists_the_builtins_and_a_plugin_that_does_not_load(
    user_project: UserProject, tmp_path: Path
) -> None:
    plugins = write_plugin(
        tmp_path / "site",
        "tkbroken",
        "1.4.2",
        {"turnkeeper.hosts": {"broken": "tkbroken_host:BrokenHost"}},
        {"tkbroken_host": BROKEN},
    )
    env = clean_env(tmp_path / "home", [], PYTHONPATH=str(plugins))
    done = turnkeeper("extensions", "--json", cwd=user_project.root, env=env)
    assert done.returncode == 0, done.stderr
    listed = {(e["group"], e["name"]): e for e in json.loads(done.stdout)["extensions"]}
    builtins = {("host", n) for n in BUILTIN_HOSTS} | {("effect", n) for n in BUILTIN_EFFECTS}
    assert builtins <= set(listed)
    for key in builtins:
        ext = listed[key]
        assert (ext["package"], ext["version"], ext["loads"]) == (
            "turnkeeper",
            version("turnkeeper"),
            True,
        )
    assert listed[("host", "codex")]["target"] == "turnkeeper.hosts.codex:CodexHost"
    broken = listed[("host", "broken")]
    assert broken["package"] == "tkbroken" and broken["version"] == "1.4.2"
    assert broken["target"] == "tkbroken_host:BrokenHost"
    assert broken["loads"] is False
    assert broken["error"] == "RuntimeError: tkbroken cannot start: libfoo.so.3 is missing"
    assert "Traceback" not in done.stdout + done.stderr

    # The table says the same, and no project is needed for either.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    table = turnkeeper("extensions", cwd=outside, env=env)
    assert table.returncode == 0, table.stderr
    assert "tkbroken" in table.stdout and "libfoo.so.3" in table.stdout

    # doctor names it, with a fix, and fails.
    doctor = turnkeeper("doctor", "broken", "--json", cwd=outside, env=env)
    assert doctor.returncode == 6, doctor.stdout + doctor.stderr
    finding = _one(_findings(doctor.stdout), "broken", "load")
    assert finding["status"] == "load_failed"
    assert "libfoo.so.3" in finding["detail"] and "tkbroken" in finding["fix"]
    assert json.loads(doctor.stdout)["error"]["reason"] == "doctor_findings"


def test_doctor_finds_a_missing_cli_a_wrong_version_and_a_missing_key(
    user_project: UserProject, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    fake_cli(bin_dir, "codex", 'echo "codex-cli 0.171.0"\n')  # the tested version
    fake_cli(bin_dir, "claude", 'echo "2.0.14 (Claude Code)"\n')  # an older one
    home = tmp_path / "home"
    root = user_project.root

    done = turnkeeper(
        "doctor", "codex", "claude", "--json", cwd=root, env=clean_env(home, [bin_dir])
    )
    assert done.returncode == 6, done.stdout + done.stderr
    findings = _findings(done.stdout)
    codex_version = _one(findings, "codex", "version")
    assert codex_version["status"] == "ok" and "0.171.0" in codex_version["detail"]
    claude_version = _one(findings, "claude", "version")
    assert claude_version["status"] == "wrong_version"
    assert "2.0.14" in claude_version["detail"] and "2.1.197" in claude_version["detail"]
    assert "npm install -g @anthropic-ai/claude-code@2.1.197" in claude_version["fix"]
    codex_key = _one(findings, "codex", "key")
    assert codex_key["status"] == "no_key"
    assert "OPENAI_API_KEY" in codex_key["fix"] and "codex login" in codex_key["fix"]
    assert _one(findings, "claude", "key")["status"] == "no_key"

    # A newer release than the tested one is ready, and said to be newer.
    newer = tmp_path / "bin3"
    fake_cli(newer, "claude", 'echo "2.10.0 (Claude Code)"\n')
    done = turnkeeper("doctor", "claude", "--json", cwd=root, env=clean_env(home, [newer]))
    claude_newer = _one(_findings(done.stdout), "claude", "version")
    assert claude_newer["status"] == "ok", claude_newer
    assert "newer than the tested 2.1.197" in claude_newer["detail"]

    # No codex on PATH (nor in an install cache): missing, with how to install it.
    only_claude = tmp_path / "bin2"
    fake_cli(only_claude, "claude", 'echo "2.1.197 (Claude Code)"\n')
    done = turnkeeper("doctor", "codex", "--json", cwd=root, env=clean_env(home, [only_claude]))
    assert done.returncode == 6
    missing = _one(_findings(done.stdout), "codex", "binary")
    assert missing["status"] == "missing"
    assert "npm install -g @openai/codex@0.171.0" in missing["fix"]

    # A key in the environment: ready, exit 0, and the key's value is never shown.
    secret = "sk-proj-never-print-me-4242"
    env = clean_env(home, [bin_dir], OPENAI_API_KEY=secret)
    done = turnkeeper("doctor", "codex", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True
    key = _one(_findings(done.stdout), "codex", "key")
    assert key["status"] == "ok" and "OPENAI_API_KEY" in key["detail"]
    text = turnkeeper("doctor", "codex", cwd=root, env=env)
    assert text.returncode == 0 and "all ready" in text.stdout
    assert secret not in done.stdout + text.stdout + text.stderr

    # A login file counts as a key: ~/.codex/auth.json and ~/.claude/.credentials.json.
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text('{"tokens": "x"}')
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": "x"}')
    env = clean_env(home, [only_claude, bin_dir])
    done = turnkeeper("doctor", "codex", "claude", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stdout
    for cli, file in (("codex", "auth.json"), ("claude", ".credentials.json")):
        key = _one(_findings(done.stdout), cli, "key")
        assert key["status"] == "ok" and file in key["detail"]


def test_doctor_bounds_a_cli_that_hangs_on_version(
    user_project: UserProject, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    fake_cli(bin_dir, "codex", "sleep 60\n")
    env = clean_env(tmp_path / "home", [bin_dir], CODEX_API_KEY="sk-test")
    started = time.monotonic()
    done = turnkeeper("doctor", "codex", "--json", cwd=user_project.root, env=env)
    assert time.monotonic() - started < 30
    assert done.returncode == 6
    finding = _one(_findings(done.stdout), "codex", "version")
    assert finding["status"] == "wrong_version"
    assert "did not answer within 5 s" in finding["detail"]
    assert "CODEX_API_KEY" in _one(_findings(done.stdout), "codex", "key")["detail"]


PLUG_V1 = """\
from turnkeeper.errors import InvalidArgument

class PlugHost:
    kind = "plug"

    def __init__(self, config):
        if set(config) - {"greeting"}:
            raise InvalidArgument("plug takes only 'greeting'", reason="invalid_host_config")

    def start(self, request):
        raise RuntimeError("not used here")
"""
# Version 2 renamed the setting: a session created under version 1 no longer loads.
PLUG_V2 = PLUG_V1.replace(
    'if set(config) - {"greeting"}:',
    'if "greeting" in config:\n'
    "            raise InvalidArgument(\"'greeting' is now 'message'\", reason=\"renamed\")\n"
    '        if set(config) - {"message"}:',
)


def test_doctor_finds_sessions_whose_config_no_longer_loads(
    user_project: UserProject, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    points = {"turnkeeper.hosts": {"plug": "tkplug_host:PlugHost"}}
    write_plugin(site, "tkplug", "1.0", points, {"tkplug_host": PLUG_V1})
    env = clean_env(tmp_path / "home", [], PYTHONPATH=str(site))
    root = user_project.root

    def tk(*args: str, expect: int = 0) -> str:
        done = turnkeeper(*args, cwd=root, env=env)
        assert done.returncode == expect, done.stdout + done.stderr
        return done.stdout

    tk("goal", "add", "Greet", "--id", "greet")
    created = json.loads(
        tk(
            "session",
            "create",
            "greet",
            "--host",
            "plug",
            "--host-config",
            '{"greeting": "hi"}',
            "--json",
        )
    )
    plug_session = created["session_id"][:8]
    # A provider config is read at a turn's first effect, not at session create.
    bad_effects = '{"effects": {"providers": {"http": {"url": 5}}}}'
    created = json.loads(
        tk(
            "session",
            "create",
            "greet",
            "--host",
            "scripted",
            "--host-config",
            bad_effects,
            "--json",
        )
    )
    effects_session = created["session_id"][:8]

    findings = _findings(tk("doctor", "plug", "--json"))
    assert _one(findings, "plug", f"session {plug_session} host config")["status"] == "ok"

    write_plugin(site, "tkplug", "2.0", points, {"tkplug_host": PLUG_V2})  # an upgrade
    out = tk("doctor", "--json", expect=6)
    report = json.loads(out)
    assert report["sessions_checked"] == 2 and report["project"] == str(root.resolve())
    host = _one(report["findings"], "plug", f"session {plug_session} host config")
    assert host["status"] == "invalid_config"
    assert plug_session in host["detail"] and "'greeting' is now 'message'" in host["detail"]
    assert "session create" in host["fix"]
    effects = _one(report["findings"], "http", f"session {effects_session} effects")
    assert effects["status"] == "invalid_config" and "'http'" in effects["detail"]

    # Only the extensions asked for, and their sessions.
    only = _findings(tk("doctor", "scripted", "--json", expect=0))
    assert {f["extension"] for f in only} == {"scripted"}

    # The plugin uninstalled: the session's host kind is missing.
    env.pop("PYTHONPATH")
    gone = _one(
        _findings(tk("doctor", "--json", expect=6)), "plug", f"session {plug_session} host config"
    )
    assert gone["status"] == "missing" and "not installed" in gone["detail"]


def test_doctor_refuses_an_unknown_extension(user_project: UserProject) -> None:
    done = user_project.tk("doctor", "nosuch", "--json", expect=4)
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "NOT_FOUND" and error["reason"] == "unknown_extension"
    assert error["details"]["unknown"] == ["nosuch"] and "codex" in error["details"]["known"]
    plain = user_project.tk("doctor", "nosuch", expect=4)
    assert "unknown_extension" in plain.stderr and "Traceback" not in plain.stderr
