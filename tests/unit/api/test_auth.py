"""API keys read at start (`services.api.auth.load_keys`): a keys file asks for keys, so one that is empty, holds
only comments or cannot be read stops the service instead of leaving inference open; so does a blank key."""

from __future__ import annotations

import json

import pytest

from services.api.auth import load_keys
from services.common.errors import ConfigurationError
from services.common.settings import ApiSettings
from services.gateway.settings import GatewaySettings


def settings_with(tmp_path, monkeypatch, content: str | bytes | None, keys: list[str] | None = None, cls=ApiSettings):
    if content is not None:
        path = tmp_path / "keys"
        if content == "a directory":
            path.mkdir()
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        monkeypatch.setenv("SERVING_API_KEYS_FILE", str(path))
    if keys is not None:
        monkeypatch.setenv("SERVING_API_KEYS", json.dumps(keys))
    return cls()


@pytest.mark.parametrize(
    "content, says",
    [
        ("", "holds no key"),
        ("\n   \n\t\n", "holds no key"),
        ("# the keys\n  # indented comment\n", "holds no key"),
        (b"\xff\xfekey\n", "cannot be read (it is not UTF-8 text)"),
        ("a directory", "does not exist or is not a file"),
    ],
)
@pytest.mark.parametrize("cls", [ApiSettings, GatewaySettings])
def test_an_empty_or_unreadable_keys_file_stops_the_start_naming_the_setting(tmp_path, monkeypatch, content, says, cls):
    """The attack: an empty keys file turned authentication off without a word (every request served)."""
    settings = settings_with(tmp_path, monkeypatch, content, cls=cls)
    with pytest.raises(ConfigurationError) as refused:
        load_keys(settings)
    assert says in refused.value.message and "SERVING_API_KEYS_FILE" in refused.value.message, "one name, any stack"


@pytest.mark.parametrize("keys", [[""], ["good-key", "  "]])
def test_a_blank_key_in_the_list_stops_the_start(tmp_path, monkeypatch, keys):
    with pytest.raises(ConfigurationError, match="SERVING_API_KEYS holds an empty or blank key"):
        load_keys(settings_with(tmp_path, monkeypatch, None, keys))


def test_keys_from_the_list_and_the_file_without_comments_or_spaces(tmp_path, monkeypatch):
    settings = settings_with(tmp_path, monkeypatch, "# keys\n first-key \n\n  # old-key\nsecond-key\n", [" third "])
    assert load_keys(settings) == [b"third", b"first-key", b"second-key"]


def test_no_keys_and_no_file_leave_inference_open(monkeypatch):
    monkeypatch.delenv("SERVING_API_KEYS", raising=False)
    monkeypatch.delenv("SERVING_API_KEYS_FILE", raising=False)
    assert load_keys(ApiSettings()) == []
