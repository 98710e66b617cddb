"""Where the broker looks users up: SCRAM credentials from ZooKeeper, PLAIN users from a file.

SCRAM credentials (``/config/users/<user>``, see :mod:`zk_layout.users`) are all read at start-up and one user
is re-read whenever a ``/config/changes`` notification names it (:class:`metaq.broker.admin_watcher.AdminWatcher`
follows the notifications), so a new password works on new connections without a restart. Lookups on the
event loop only read the cache (one dict, replaced per user: no lock needed).

The PLAIN users file (``sasl.plain.users.file``) has one ``user:password`` a line (the password is everything
after the first ``:``); blank lines and lines starting with ``#`` are ignored. It is re-read when its
modification time changes. Keep it readable by the broker only.
"""

from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path

from metaq.errors import ConfigError, MetaqError
from zk_layout import ScramCredential, ZkLayout

log = logging.getLogger(__name__)


class ScramCredentialCache:
    """user -> mechanism -> credential, kept current from ZooKeeper."""

    def __init__(self) -> None:
        self._layout: ZkLayout | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def load_all(self, layout: ZkLayout) -> None:
        """Blocking (ZooKeeper): every user's credentials; later reloads use the same ``layout``."""
        self._layout = layout
        users: dict[str, dict[str, ScramCredential]] = {}
        for user in layout.users():
            try:
                users[user] = layout.scram_credentials(user)
            except MetaqError as e:
                log.error("ignoring the SCRAM credentials of user %s: %s", user, e)
        self._users = users
        log.info("SCRAM credentials loaded for %d users", sum(1 for creds in users.values() if creds))

    def reload(self, user: str) -> None:
        """Blocking (ZooKeeper): re-read one user after a change notification."""
        if self._layout is None:
            return
        try:
            credentials = self._layout.scram_credentials(user)
        except MetaqError as e:
            log.error("ignoring the SCRAM credentials of user %s: %s", user, e)
            credentials = {}
        users = dict(self._users)
        users[user] = credentials
        self._users = users
        log.info("SCRAM credentials of user %s reloaded (%s)", user, ", ".join(sorted(credentials)) or "none")

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)


class PlainUsers:
    """The PLAIN users file; passwords compared in constant time."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)
        self._mtime: int | None = None
        self._users: dict[bytes, bytes] = {}
        self._load()

    def _load(self) -> None:
        try:
            mtime = os.stat(self._path).st_mtime_ns
            if mtime == self._mtime:
                return
            text = self._path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"config 'sasl.plain.users.file': cannot read {self._path}: "
                              f"{getattr(e, 'strerror', None) or type(e).__name__}") from None
        users: dict[bytes, bytes] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            user, sep, password = stripped.partition(":")
            if not sep or not user:
                raise ConfigError(f"config 'sasl.plain.users.file': {self._path}:{number}: expected user:password")
            users[user.encode()] = password.encode()
        self._users, self._mtime = users, mtime

    def check(self, user: bytes, password: bytes) -> bool:
        try:
            self._load()
        except ConfigError as e:  # keep the last good list: a half-edited file must not lock everyone out
            log.error("%s (keeping the users read before)", e)
        expected = self._users.get(user)
        # compare against something even for an unknown user, so timing does not tell users apart
        matches = hmac.compare_digest(password, expected if expected is not None else b"\0" * len(password))
        return expected is not None and matches
