"""Bearer API keys: where they come from, constant-time checks, and the no-auth guard."""

from __future__ import annotations

import hmac
import ipaddress
import os
from pathlib import Path

from gpurag.errors import ConfigError

ENV_KEYS = "GPURAG_API_KEYS"


def load_api_keys(keys_file: str | os.PathLike | None = None) -> list[str]:
    """Keys from ``$GPURAG_API_KEYS`` (comma-separated) plus ``keys_file`` (one a line, ``#``
    comments). Blank entries are dropped."""
    from gpurag.settings import current

    keys = [k.strip() for k in (current().api_keys or "").split(",")]
    if keys_file:
        path = Path(keys_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read API keys file {path}: {exc}") from exc
        keys += [line.strip() for line in lines if not line.strip().startswith("#")]
    return [k for k in dict.fromkeys(keys) if k]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_auth_setup(host: str, keys: list[str], insecure_no_auth: bool) -> None:
    """Refuse to start without keys unless auth is explicitly off on a loopback host."""
    if keys:
        return
    if not insecure_no_auth:
        raise ConfigError(f"no API keys: set {ENV_KEYS} or --api-keys-file (or, on a loopback "
                          "host only, pass --insecure-no-auth)")
    if not is_loopback(host):
        raise ConfigError(f"--insecure-no-auth is allowed on a loopback host only, not {host!r}")


class KeyChecker:
    """Checks ``Authorization: Bearer <key>`` against the keys, each in constant time."""

    def __init__(self, keys: list[str]) -> None:
        self._keys = [k.encode("utf-8") for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def allows(self, authorization: str | None) -> bool:
        if not self._keys:
            return True
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        given = token.strip().encode("utf-8")
        ok = False
        for key in self._keys:  # no early exit: time does not depend on which key matched
            ok |= hmac.compare_digest(given, key)
        return ok
