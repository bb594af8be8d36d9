"""A mistaken second ``turnkeeper serve`` on a live server's port, as a user makes one.

It cannot listen (the port is taken), fails with ``UNAVAILABLE cannot_listen`` and
exit code 9 — and changes nothing of the live server's access: the admin token the
live server printed still answers 200, and a web login made with it still opens the
dashboard. (Before the fix the second start recorded its own new admin token before
trying the port, which retired the live server's token and with it every web login.)
"""

from __future__ import annotations

import json
import subprocess
from urllib.parse import urlsplit

import httpx

from tests.api.conftest import ApiProject
from tests.api.test_serve_cli import CLI, _env, serving
from turnkeeper.errors import EXIT_CODES, ErrorCode


def test_a_failed_second_serve_leaves_the_live_token_working(api_project: ApiProject) -> None:
    sid = api_project.session_id
    with serving(api_project) as (base, lines, _):
        token = lines[1].split(": ", 1)[1].strip()
        port = urlsplit(base).port
        assert port is not None
        with httpx.Client(base_url=base, timeout=30) as browser:  # one cookie jar
            landed = browser.get(f"/?token={token}", follow_redirects=False)
            assert landed.status_code == 303, landed.text
            assert browser.get("/").status_code == 200

            second = subprocess.run(
                [*CLI, "serve", "--port", str(port)],
                env=_env(api_project),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert second.returncode == EXIT_CODES[ErrorCode.UNAVAILABLE], second.stderr
            assert "cannot_listen" in second.stdout + second.stderr
            assert "admin token" not in second.stdout  # no token was made for it

            api = httpx.get(
                f"{base}/v1/sessions/{sid}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert api.status_code == 200, api.text
            assert json.loads(api.text)["session_id"] == sid
            # The web session opened before the failed start still works ...
            assert browser.get("/").status_code == 200
            assert browser.get(f"/sessions/{sid}").status_code == 200
        # ... and a new login with the live token too.
        with httpx.Client(base_url=base, timeout=30) as fresh:
            assert fresh.get(f"/?token={token}", follow_redirects=False).status_code == 303
            assert fresh.get("/").status_code == 200
