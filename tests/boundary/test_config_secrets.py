"""Which host configurations hold a secret value (turnkeeper/boundary/config_secrets.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.boundary.fakes import anthropic_key, github_token, openai_key
from turnkeeper.boundary.config_secrets import check_config_has_no_secrets
from turnkeeper.errors import InvalidArgument

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"env": {"OPENAI_API_KEY": "not-even-key-shaped"}}, "env.OPENAI_API_KEY"),
    ({"env": {"GH_TOKEN": "x"}}, "env.GH_TOKEN"),
    ({"env": {"db_password": "hunter2"}}, "env.db_password"),
    ({"env": {"NOTES": f"key {anthropic_key()}"}}, "env.NOTES"),
    ({"command": ["deploy", "--token", github_token()]}, "command[2]"),
    ({"command": ["psql", "postgresql://app:pw1@db/app"]}, "command[1]"),
    ({"effects": {"providers": {"http": {"headers": {"Authorization": "Bearer x"}}}}},
     "effects.providers.http.headers.Authorization"),
    ({"evidence": {"*": [{"key": "k", "command": f"curl -H 'X: {openai_key()}' x"}]}},
     "evidence.*[0].command"),
]  # fmt: skip

ALLOWED: list[dict[str, Any]] = [
    {"command": ["./agent.sh"], "env": {"LEDGER": "/tmp/ledger.txt", "HOME": "/home/me"}},
    {"env": {"GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcloud/key.json", "API_TOKEN": ""}},
    {"env": {"TOKEN_FILE": "~/.config/tokens/ci"}},
    {"effects": {"providers": {"http": {"header_env": {"Authorization": "ORDERS_TOKEN"}}}}},
    {"env": {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, "model": "gpt-5-codex"},
    {"evidence": {"*": [{"key": "tests", "command": "pytest -q"}]}, "token_budget": 5},
]


@pytest.mark.parametrize(("config", "field"), REFUSED)
def test_a_secret_value_is_refused_naming_its_field_not_its_value(
    config: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check_config_has_no_secrets(config)
    assert refused.value.reason == "secret_in_config"
    assert refused.value.details == {"field": field}
    assert "hunter2" not in refused.value.message and "Bearer x" not in refused.value.message


@pytest.mark.parametrize("config", ALLOWED)
def test_references_and_ordinary_values_pass(config: dict[str, Any]) -> None:
    check_config_has_no_secrets(config)
