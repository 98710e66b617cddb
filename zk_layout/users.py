"""Users' SCRAM credentials, ``/config/users/<user>``, in Kafka's exact format; part of
:class:`zk_layout.store.ZkLayout`.

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=8192"}}

A change is announced as Kafka's ``kafka-configs --entity-type users`` does: a sequential
``/config/changes/config_change_<seq>`` node ``{"version":2,"entity_path":"users/<user>"}`` written in the same
transaction. Other keys of the node (quotas such as ``producer_byte_rate``, zk_layout/quotas.py) are kept untouched.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from metaq.errors import MalformedNodeError
from zk_layout import paths
from zk_layout.topic_formats import TopicConfig
from zk_layout.topics import _Topics

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096


@dataclass(frozen=True)
class ScramCredential:
    """RFC 5802 server-side credential: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    def encode(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def decode(cls, path: str, mechanism: str, text: str) -> Self:
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        try:
            credential = cls(base64.b64decode(fields["salt"], validate=True),
                             base64.b64decode(fields["stored_key"], validate=True),
                             base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError, binascii.Error) as e:
            raise MalformedNodeError(path, "(not shown)", f"{mechanism} is not salt=...,stored_key=...,"
                                     f"server_key=...,iterations=N ({type(e).__name__})") from None
        if credential.iterations < MIN_ITERATIONS:
            raise MalformedNodeError(path, "(not shown)", f"{mechanism} iterations {credential.iterations} is"
                                     f" below {MIN_ITERATIONS}")
        return credential


class _Users(_Topics):
    def users(self) -> list[str]:
        """Every user with a ``/config/users`` node (desanitized names)."""
        return [paths.desanitize_user(name) for name in self._children(paths.CONFIG_USERS)]

    def user_config(self, user: str) -> dict[str, str] | None:
        """The node's ``config`` map, or None if the user has no node."""
        path = paths.user_config_path(user)
        node = self._read(path)
        if node is None:
            return None
        # a node Kafka created empty as the parent of /clients/<c> quota nodes holds no config
        return TopicConfig.decode(self.full_path(path), node[0]).config if node[0] else {}

    def scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        """Mechanism -> credential ({} for an unknown user); MalformedNodeError naming the node."""
        config = self.user_config(user) or {}
        path = self.full_path(paths.user_config_path(user))
        return {mech: ScramCredential.decode(path, mech, config[mech]) for mech in SCRAM_MECHANISMS if mech in config}

    def set_scram_credentials(self, user: str, credentials: Mapping[str, ScramCredential | None]) -> None:
        """Set (or, for None, remove) the credentials of the given mechanisms, keeping other keys, and announce
        the change."""
        self._ensure(paths.CONFIG_USERS)
        config = dict(self.user_config(user) or {})
        for mechanism, credential in credentials.items():
            if credential is None:
                config.pop(mechanism, None)
            else:
                config[mechanism] = credential.encode()
        self._set_entity_config(paths.user_config_path(user), f"users/{paths.sanitize_user(user)}", config,
                                f"user {user!r}")
