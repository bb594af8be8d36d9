"""The web view's tests: a project made the way a user makes one, a real
``turnkeeper serve`` process, and Chromium driven by Playwright.

:class:`WebProject` is a git repository set up with the ``turnkeeper`` command line
(``init``, ``goal add``, ``todo add``, ``session create`` with the scripted host)
on SQLite or PostgreSQL. :meth:`WebProject.serve` starts ``turnkeeper serve`` on a
free port; :meth:`WebProject.start_run` starts ``turnkeeper run`` (both are this
test's own child processes, stopped by their pid).

Every browser page a test opens records console errors and page errors; the test
fails if there is any. Screenshots go to ``test-output/screenshots/`` at the
repository root (git-ignored; CI keeps them as artifacts). Without Chromium or
Playwright the browser tests are skipped, unless ``TURNKEEPER_REQUIRE_BROWSER=1``
or ``TURNKEEPER_REQUIRE_POSTGRES=1`` (CI) is set: then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.api import conftest as api_conftest
from tests.api.conftest import store_digest

CHROMIUM = os.environ.get("TURNKEEPER_CHROMIUM", "/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"
WIDTHS = (1280, 390)
ADMIN = "tka_web-test-admin-token-0123456789"
GOAL = "g"
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
CLI_TIMEOUT = 90.0


def browser_required() -> bool:
    return os.environ.get("TURNKEEPER_REQUIRE_BROWSER") == "1" or pg.required()


def turnkeeper_command() -> list[str]:
    script = Path(sys.executable).with_name("turnkeeper")
    return [str(script)] if script.exists() else [sys.executable, "-m", "turnkeeper.cli.main"]


def message_turn(title: str, *, attempt: int, messages: int, pause: bool) -> dict[str, Any]:
    """A scripted turn that says ``messages`` things a quarter second apart, then
    pauses forever (``pause``: it ends only by being killed)."""
    steps: list[dict[str, Any]] = []
    for n in range(messages):
        steps += [{"op": "message", "text": f"step {n}"}, {"op": "sleep", "seconds": 0.25}]
    if pause:
        steps.append({"op": "checkpoint", "name": "web-mid-turn", "pause": True})
    return {"match": {"todo": title, "attempt": attempt}, "steps": steps, "result": {}}


def write_turn(title: str, path: str, *, attempt: int | None = None) -> dict[str, Any]:
    """A scripted turn that writes ``path`` and reports its todo done with evidence."""
    match: dict[str, Any] = {"todo": title}
    if attempt is not None:
        match["attempt"] = attempt
    return {
        "match": match,
        "steps": [
            {"op": "message", "text": f"writing {path}"},
            {"op": "write", "path": path, "content": f"{path}\n"},
        ],
        "result": {
            "todo_done": True,
            "evidence": [{"key": f"{path}-exists", "command": f"test -f {path}"}],
        },
    }


@dataclass
class Served:
    base: str
    process: subprocess.Popen[bytes]


@dataclass
class WebProject:
    backend: str
    tmp: Path
    url: str = ""
    session_id: str = ""
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _calls: int = 0

    @property
    def root(self) -> Path:
        return self.tmp / "repo"

    @property
    def logs(self) -> Path:
        path = self.tmp / "logs"
        path.mkdir(exist_ok=True)
        return path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["NO_COLOR"] = "1"
        return env

    def tk(self, *args: str) -> str:
        """``turnkeeper ARGS`` in the repository, to its end; its stdout."""
        done = subprocess.run(
            [*turnkeeper_command(), *args],
            check=False,
            cwd=self.root,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def tk_json(self, *args: str) -> Any:
        return json.loads(self.tk(*args, "--json"))

    def digest(self) -> str:
        return store_digest(self.backend, self.url)

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        self._calls += 1
        out = (self.logs / f"{self._calls:02d}-{name}.out").open("wb")
        err = (self.logs / f"{self._calls:02d}-{name}.err").open("wb")
        with out, err:
            proc = subprocess.Popen(
                [*turnkeeper_command(), *args],
                cwd=self.root,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.children.append(proc)
        return proc

    def start_run(self, *args: str) -> subprocess.Popen[bytes]:
        """``turnkeeper run`` with hosts in its own process tree (no runner daemon), so
        that killing it loses the turn in flight."""
        return self._spawn("run", "run", "--json", "--runner", "off", "--lease", "30", *args)

    def run_to_end(self, *args: str) -> None:
        proc = self.start_run(*args)
        assert proc.wait(timeout=CLI_TIMEOUT) == 0, self.last_log("run")

    def last_log(self, name: str) -> str:
        found = sorted(self.logs.glob(f"*-{name}.err"))
        return found[-1].read_text(errors="replace") if found else ""

    @contextmanager
    def serve(self) -> Iterator[Served]:
        """A real ``turnkeeper serve`` on a free port with the admin token from a file."""
        token_file = self.tmp / "admin-token"
        token_file.write_text(ADMIN + "\n")
        proc = self._spawn("serve", "serve", "--port", "0", "--token-file", str(token_file))
        out = self.logs / f"{self._calls:02d}-serve.out"
        deadline = time.monotonic() + 30
        base = None
        while base is None:
            assert proc.poll() is None, self.last_log("serve")
            assert time.monotonic() < deadline, "serve did not start"
            found = re.search(r" on (http://127\.0\.0\.1:\d+)", out.read_text())
            base = found.group(1) if found else None
            time.sleep(0.05)
        try:
            yield Served(base, proc)
        finally:
            stop(proc)

    def share(self, mode: str) -> str:
        flag = "--read-only" if mode == "read" else "--update"
        made = self.tk_json("share", "create", self.session_id, flag)
        return str(made["token"])

    def stop_children(self) -> None:
        for proc in self.children:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a child this test started, by its pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def make_web_project(
    backend: str, tmp: Path, turns: list[dict[str, Any]], *, criteria: tuple[str, ...] = ()
) -> WebProject:
    project = WebProject(backend, tmp)
    root = project.root
    root.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=root, check=True, timeout=60)
    (root / "README").write_text("web test workspace\n")
    pg_url = pg.fresh_postgres_url() if backend == "postgresql" else None
    init = project.tk_json("init", *(["--database-url", pg_url] if pg_url else []))
    project.url = pg_url or str(init["database"])
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True, timeout=60)
    subprocess.run([*GIT, "commit", "-qm", "initial"], cwd=root, check=True, timeout=60)
    criterion_args = [arg for text in criteria for arg in ("-c", text)]
    project.tk("goal", "add", "the web view", "--id", GOAL, *criterion_args, "-q")
    project.tk("todo", "add", GOAL, "write a", "--id", "t1", "-q")
    project.tk("todo", "add", GOAL, "write b", "--id", "t2", "--depends-on", "t1", "-q")
    config = {
        "state_dir": str(tmp / "host-state"),
        "script": {"turns": turns, "default": {"steps": [{"op": "message", "text": "idle"}]}},
    }
    (tmp / "host.json").write_text(json.dumps(config))
    created = project.tk_json(
        "session", "create", GOAL, "--host", "scripted", "--host-config", f"@{tmp / 'host.json'}"
    )
    project.session_id = str(created.get("session_id") or created["session"]["session_id"])
    return project


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# The API tests' project (in-process app, both backends), for the page access matrix.
api_project = api_conftest.api_project


@pytest.fixture
def web_factory(tmp_path: Path) -> Iterator[Callable[..., WebProject]]:
    made: list[WebProject] = []

    def make(backend: str, turns: list[dict[str, Any]], **kwargs: Any) -> WebProject:
        project = make_web_project(backend, tmp_path / f"p{len(made)}", turns, **kwargs)
        made.append(project)
        return project

    try:
        yield make
    finally:
        for project in made:
            project.stop_children()


# --- the browser ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if browser_required():
            pytest.fail("playwright is not installed (pip install playwright)")
        pytest.skip("playwright is not installed")
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        if browser_required():
            pytest.fail(f"no chromium at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Pages:
    """Browser contexts (each its own cookie jar) whose pages must log no error."""

    browser: Any
    errors: list[str] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)
    # Addresses a test opens expecting a refusal: the browser logs each such answer
    # ("Failed to load resource: ... 403"), which is no error of the page's.
    refusals: set[str] = field(default_factory=set)

    def expect_refusal(self, url: str) -> None:
        self.refusals.add(url)

    def _console(self, msg: Any) -> None:
        if msg.type != "error":
            return
        if msg.text.startswith("Failed to load resource") and msg.location.get("url") in (
            self.refusals
        ):
            return
        self.errors.append(f"console {msg.text} at {msg.location}")

    @contextmanager
    def open(self) -> Iterator[None]:
        """Close every page on leaving: before the server they talk to stops (a page
        still polling a stopped server would log errors of the test's own making)."""
        try:
            yield
        finally:
            for context in self.contexts:
                context.close()
            self.contexts.clear()

    def new(self, width: int = WIDTHS[0]) -> Any:
        context = self.browser.new_context(viewport={"width": width, "height": 900})
        self.contexts.append(context)
        page = context.new_page()
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page error {exc}"))
        page.on("dialog", lambda dialog: dialog.accept())
        return page


@pytest.fixture
def pages(browser: Any) -> Iterator[Pages]:
    made = Pages(browser)
    try:
        yield made
    finally:
        for context in made.contexts:
            context.close()
    assert made.errors == [], "\n".join(made.errors)


def screenshot(page: Any, name: str) -> list[Path]:
    """The page at each width, full length, under test-output/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shots = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)  # a relayout
        path = SCREENSHOTS / f"{name}-{width}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000, path
        shots.append(path)
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})
    return shots


def csrf_of(page: Any) -> str:
    headers = page.get_attribute("body", "hx-headers")
    return str(json.loads(headers)["X-CSRF-Token"])
