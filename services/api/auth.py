"""Optional API keys for inference: the routes under `/serve/`, `/v1/` and `/v2/` (`paths.PROTECTED`) need
`Authorization: Bearer <key>` (what the openai client sends as its api_key) when keys are configured; health stays
open, `/metrics` too unless `protect_metrics` is set. Keys are compared in constant time and never logged. The admin
API has its own token (`services.gateway.admin`)."""

from __future__ import annotations

import hmac
from pathlib import Path

from starlette.types import Receive, Scope, Send

from services.api.errors import error_response
from services.api.paths import METRICS, PROTECTED
from services.common.errors import ConfigurationError, Unauthorized
from services.common.settings import ApiSettings
from services.common.settings_env import env_name


def load_keys(settings: ApiSettings) -> list[bytes]:
    """The keys of `api_keys` and of `api_keys_file`, read once at start. A blank key, or a keys file that is missing,
    cannot be read or holds no key, is a ConfigurationError that names the setting: the service does not start
    rather than serve inference to anyone."""
    keys = [key.get_secret_value().strip() for key in settings.api_keys]
    if not all(keys):
        raise ConfigurationError(
            f"{env_name(type(settings), 'api_keys')} holds an empty or blank key, which would let any caller in: "
            "give every key a value"
        )
    if settings.api_keys_file is not None:
        keys += _keys_in(Path(settings.api_keys_file), env_name(type(settings), "api_keys_file"))
    return [key.encode() for key in keys]


def _keys_in(path: Path, setting: str) -> list[str]:
    if not path.is_file():
        raise ConfigurationError(f"API keys file {path} does not exist or is not a file ({setting})")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise ConfigurationError(
            f"API keys file {path} cannot be read ({reason}) ({setting}): make it a text file the server reads, "
            "one key a line"
        ) from None
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise ConfigurationError(
            f"API keys file {path} holds no key ({setting}), which would leave inference open: write one key a line "
            f"into it, or unset {setting} to serve without keys"
        )
    return keys


class ApiKeys:
    """The keys, and the path prefixes they guard: a step of the edge (`services.api.edge`)."""

    def __init__(self, keys: list[bytes], protect_metrics: bool):
        self.keys = keys
        self.prefixes = PROTECTED + ((METRICS,) if protect_metrics else ())

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        header = next((v for k, v in headers if k == b"authorization"), b"")
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        given = given.strip()
        # every key compared, so the time taken says nothing about which one (or how much of one) matched
        return sum(hmac.compare_digest(given, key) for key in self.keys) > 0

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = Unauthorized("send an API key as 'Authorization: Bearer <key>' (the openai client's api_key)")
        response = error_response(error)
        response.headers["WWW-Authenticate"] = "Bearer"
        await response(scope, receive, send)
