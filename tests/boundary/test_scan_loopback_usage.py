"""``turnkeeper scan --all`` on a repository whose docs name loopback URLs, as a user
runs it: a real git repository made by ``turnkeeper init``, the real command.

A README that says ``open http://localhost:3000`` names every machine's own address,
not this one's: the scan passes. A key, a password in a loopback URL and a private
network's address in the same files are still reported, and nothing else is.
"""

from __future__ import annotations

from tests.boundary import fakes
from tests.usage.project import UserProject

FAILED_PRECONDITION = 6

LOOPBACK_DOCS = """# Trying it locally

Start the server, then open http://127.0.0.1:8080/ or http://localhost:3000.
Over IPv6: http://[::1]/ (and `curl http://[::1]:8080/health`).
The API listens on <http://0.0.0.0:8000/docs>; a worker on ws://localhost:9000/socket.
A second address: http://127.0.0.2:5000/status.
"""


def _write_docs(project: UserProject) -> None:
    (project.root / "README.md").write_text(LOOPBACK_DOCS)
    (project.root / "docs").mkdir()
    (project.root / "docs" / "dev.md").write_text(
        "Redis: redis://localhost:6379/0\nPostgres: postgresql://app@127.0.0.1:5432/app\n"
    )
    project.git("add", "README.md", "docs/dev.md")
    project.git("commit", "-q", "-m", "docs")


def test_loopback_urls_in_docs_are_no_findings(user_project: UserProject) -> None:
    project = user_project
    _write_docs(project)
    passed = project.tk("scan", "--all")  # exit 0: a clean scan
    assert "private_link" not in passed.stdout + passed.stderr
    report = project.tk_json("scan", "--all")
    assert report["findings"] == []
    assert report["scanned"] >= 2


def test_real_findings_next_to_loopback_urls_are_still_reported(
    user_project: UserProject,
) -> None:
    project = user_project
    _write_docs(project)
    key = fakes.openai_key()
    password = fakes.random_text(16)
    (project.root / "docs" / "setup.md").write_text(
        "# Setup\n\n"
        "Open http://localhost:3000 once the server runs.\n"
        f"export OPENAI_API_KEY={key}\n"
        + fakes.joined("The admin page: http://admin:", password, "@localhost:8080/admin\n")
        + fakes.joined("Staging: http://", "10.0.0.5:9000/\n")
    )
    project.git("add", "docs/setup.md")
    done = project.tk("scan", "--all", "--json", expect=FAILED_PRECONDITION)
    report = done.json()
    found = sorted((f["path"], f["line"], f["rule"]) for f in report["findings"])
    assert found == [
        ("docs/setup.md", 4, "openai_key"),
        ("docs/setup.md", 5, "url_credentials"),
        ("docs/setup.md", 6, "private_host_url"),
    ], report["findings"]
    assert key not in done.stdout + done.stderr
    assert password not in done.stdout + done.stderr
    text = project.tk("scan", "--all", expect=FAILED_PRECONDITION).stdout
    assert "README.md" not in text and "docs/dev.md" not in text
