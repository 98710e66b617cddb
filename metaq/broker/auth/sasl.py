"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: SaslHandshake v0-v1 (API 17), SaslAuthenticate v0-v2
(API 36), mechanisms PLAIN and SCRAM-SHA-256/512 (KIP-43, KIP-84, KIP-152).

One :class:`SaslExchange` per connection walks HANDSHAKE -> AUTHENTICATE -> COMPLETE. Until COMPLETE only
ApiVersions and the two SASL APIs are served (metaq/broker/auth/stage.py closes the connection on
anything else). After a v0 handshake the tokens come as raw size-prefixed frames
(:attr:`SaslExchange.raw_tokens`); after v1 they come inside SaslAuthenticate requests. A failure answers
SASL_AUTHENTICATION_FAILED (58) with a message where the protocol allows an answer, and the connection is
closed after it.

The SCRAM exchange is :mod:`metaq.broker.auth.scram` (why not the ``scramp`` package: see there);
credentials come from :class:`metaq.broker.auth.credentials.ScramCredentialCache`. No message, log line or
exception carries a password or a key.
"""

from __future__ import annotations

import logging

from metaq.broker.auth.credentials import PlainUsers, ScramCredentialCache
from metaq.broker.auth.scram import ScramError, ScramServer
from metaq.errors import ErrorCode, MetaqError

log = logging.getLogger(__name__)

SASL_SERVER_MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size: frames before authentication
HANDSHAKE, AUTHENTICATE, COMPLETE = "HANDSHAKE", "AUTHENTICATE", "COMPLETE"
_ALLOWED = {HANDSHAKE: {AUTHENTICATE}, AUTHENTICATE: {COMPLETE}, COMPLETE: set()}
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


class SaslAuthenticationError(MetaqError):
    """A client failed SASL authentication; the message is safe to send to it and to log."""


class SaslAuthenticator:
    """The broker's SASL settings; makes one exchange per connection."""

    def __init__(self, mechanisms: tuple[str, ...], scram: ScramCredentialCache, plain: PlainUsers | None) -> None:
        self.mechanisms = mechanisms
        self.scram = scram
        self.plain = plain

    def exchange(self) -> SaslExchange:
        return SaslExchange(self)


class SaslExchange:
    """One connection's SASL exchange: owns its state (HANDSHAKE -> AUTHENTICATE -> COMPLETE, changed by
    :meth:`_transition` only), the mechanism the handshake chose, whether tokens come as raw frames, the SCRAM
    server of the exchange in progress and, once COMPLETE, the authenticated user."""

    def __init__(self, authenticator: SaslAuthenticator) -> None:
        self._auth = authenticator
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a v0 handshake: tokens are raw frames
        self.user: str | None = None
        self._scram: ScramServer | None = None

    def _transition(self, state: str) -> None:
        """The one place the state changes; anything but the next state in order is a bug."""
        if state not in _ALLOWED[self.state]:
            raise RuntimeError(f"SASL exchange: illegal transition {self.state} -> {state}")
        log.debug("SASL exchange (%s): %s -> %s", self.mechanism, self.state, state)
        self.state = state

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code to answer (0, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE)."""
        if self.state != HANDSHAKE:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self._auth.mechanisms:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self._transition(AUTHENTICATE)
        self.raw_tokens = version == 0
        return 0

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to one client token; SaslAuthenticationError if authentication fails."""
        if self.state != AUTHENTICATE:
            raise SaslAuthenticationError(f"SaslAuthenticate in state {self.state}: send SaslHandshake first")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram_step(token)

    def _done(self, user: str) -> None:
        self.user = user
        self._transition(COMPLETE)
        self.raw_tokens = False

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = parts
        if not user or not password:
            raise SaslAuthenticationError("Authentication failed: username or password not specified")
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is"
                                          " different from username")
        plain = self._auth.plain
        if plain is None or not plain.check(user, password):
            raise SaslAuthenticationError(INVALID_CREDENTIALS)
        self._done(user.decode("utf-8", "replace"))
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        assert self.mechanism is not None
        try:
            text = token.decode("utf-8")
            if self._scram is None:
                mechanism = self.mechanism
                self._scram = ScramServer(mechanism, lambda user: self._auth.scram.get(user, mechanism))
                return self._scram.client_first(text).encode()
            final = self._scram.client_final(text)
        except UnicodeDecodeError:
            raise SaslAuthenticationError(f"malformed {self.mechanism} message (not UTF-8)") from None
        except ScramError as e:
            raise SaslAuthenticationError(str(e)) from None
        assert self._scram.user is not None
        self._done(self._scram.user)
        return final.encode()
