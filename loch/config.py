"""Server settings: one frozen object, built from flags and ``LOCH_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loch.events.dispatcher import DispatcherSettings

__all__ = ["DEFAULT_PORT", "Settings", "default_data_dir"]

DEFAULT_PORT = 19120


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the embedded store lives by default: ``$LOCH_DATA_DIR``, else
    ``$XDG_DATA_HOME/loch``, else ``~/.local/share/loch``."""
    env = os.environ if env is None else env
    if env.get("LOCH_DATA_DIR"):
        return Path(env["LOCH_DATA_DIR"])
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "loch"


@dataclass(frozen=True)
class Settings:
    """Everything :func:`loch.api.create_app` needs; nothing is read at import time."""

    store_url: str = ""
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    default_branch: str = "main"
    cache_mb: int = 96
    max_body_bytes: int = 16 * 1024 * 1024
    dispatch_webhooks: bool = True
    webhooks: DispatcherSettings = field(default_factory=DispatcherSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``LOCH_*`` variables, then explicit overrides (None ignored)."""
        env = os.environ if env is None else env
        s = cls(
            store_url=env.get("LOCH_STORE", ""),
            host=env.get("LOCH_HOST", "127.0.0.1"),
            port=int(env.get("LOCH_PORT", DEFAULT_PORT)),
            default_branch=env.get("LOCH_DEFAULT_BRANCH", "main"),
            cache_mb=int(env.get("LOCH_CACHE_MB", 96)),
            max_body_bytes=int(env.get("LOCH_MAX_BODY_BYTES", 16 * 1024 * 1024)),
            dispatch_webhooks=env.get("LOCH_WEBHOOKS", "on").lower() not in ("0", "off", "false"),
            webhooks=DispatcherSettings(
                timeout=float(env.get("LOCH_WEBHOOK_TIMEOUT", 10.0)),
                give_up_after=float(env.get("LOCH_WEBHOOK_GIVE_UP_SECONDS", 24 * 3600.0)),
                base_backoff=float(env.get("LOCH_WEBHOOK_BASE_BACKOFF", 1.0)),
                max_backoff=float(env.get("LOCH_WEBHOOK_MAX_BACKOFF", 300.0)),
            ),
        )
        s = replace(s, **{k: v for k, v in overrides.items() if v is not None})
        if not s.store_url:
            s = replace(s, store_url=f"sqlite:///{default_data_dir(env) / 'loch.db'}")
        return s
