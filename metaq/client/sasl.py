"""SASL authentication of a new broker connection: SaslHandshake v1, then the mechanism's tokens in
SaslAuthenticate requests (KIP-43, KIP-152), as Kafka's Java client and librdkafka do::

    authenticate(conn, SaslLogin("SCRAM-SHA-256", "alice", Secret("...")))   # after ApiVersions

PLAIN sends one token (``\\0user\\0password``, RFC 4616). SCRAM-SHA-256/512 (RFC 5802, 7677) runs through
``scramp``'s client, which also checks the broker's final signature, so a broker that does not know the
password cannot pretend it does. Every refusal is an :class:`AuthenticationError` (fatal) carrying the
broker's own message; the password appears in no message or log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import scramp
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from metaq.config import Secret
from metaq.errors import (
    AuthenticationError,
    ErrorCode,
    SaslAuthenticationFailedError,
    UnsupportedVersionError,
    for_code,
)
from metaq.protocol.apis import ApiKey
from metaq.protocol.messages import ApiResponse, RequestFields

log = logging.getLogger(__name__)

__all__ = ["SaslLogin", "authenticate", "plain_token"]


@dataclass(frozen=True)
class SaslLogin:
    """Who a connection authenticates as, and how."""

    mechanism: str
    username: str
    password: Secret


class _Conn(Protocol):
    @property
    def address(self) -> str: ...

    def send(self, request_class: type[ApiMessage], fields: RequestFields) -> ApiResponse: ...

    def api_version(self, api_key: int) -> int: ...


def plain_token(username: str, password: str) -> bytes:
    """RFC 4616's message, with no authorization identity."""
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")


def authenticate(conn: _Conn, login: SaslLogin) -> None:
    """Authenticate ``conn`` (versions negotiated, nothing else sent yet); raises AuthenticationError."""
    _handshake(conn, login.mechanism)
    if login.mechanism == "PLAIN":
        _step(conn, login, plain_token(login.username, login.password.reveal()))
    else:
        _scram(conn, login)
    log.debug("authenticated to %s as %r with %s", conn.address, login.username, login.mechanism)


def _handshake(conn: _Conn, mechanism: str) -> None:
    try:
        conn.api_version(ApiKey.SASL_HANDSHAKE)
        conn.api_version(ApiKey.SASL_AUTHENTICATE)
    except UnsupportedVersionError as e:
        raise AuthenticationError(f"broker {conn.address} cannot authenticate with SASL ({e}); is it a "
                                  f"SASL_PLAINTEXT or SASL_SSL listener?") from e
    response = conn.send(SaslHandshakeRequest, {"mechanism": mechanism})
    code = response.error_code
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        enabled = ", ".join(response.mechanisms) or "none"
        raise for_code(code)(f"UNSUPPORTED_SASL_MECHANISM ({code}): broker {conn.address} does not enable "
                             f"sasl.mechanism {mechanism}; it enables {enabled}")
    if code:
        cls = for_code(code)
        hint = "; is it a SASL listener?" if code == ErrorCode.ILLEGAL_SASL_STATE else ""
        raise cls(f"{cls.message} ({code}) from broker {conn.address} in SaslHandshake for {mechanism}{hint}")


def _step(conn: _Conn, login: SaslLogin, token: bytes) -> bytes:
    """One SaslAuthenticate round trip; the broker's token."""
    response = conn.send(SaslAuthenticateRequest, {"auth_bytes": token})
    code = response.error_code
    if code:
        cls = for_code(code)
        reason = response.error_message or "no reason given"
        raise cls(f"{cls.message} ({code}): broker {conn.address} refused {login.mechanism} authentication "
                  f"as {login.username!r}: {reason}")
    lifetime = getattr(response, "session_lifetime_ms", 0)
    if lifetime:
        log.debug("broker %s ends this SASL session after %d ms; metaq reconnects then", conn.address, lifetime)
    return bytes(response.auth_bytes)


def _scram(conn: _Conn, login: SaslLogin) -> None:
    client = scramp.ScramClient([login.mechanism], login.username, login.password.reveal())
    try:
        server_first = _step(conn, login, client.get_client_first().encode("utf-8"))
        client.set_server_first(server_first.decode("utf-8"))
        server_final = _step(conn, login, client.get_client_final().encode("utf-8"))
        client.set_server_final(server_final.decode("utf-8"))
    except (scramp.ScramException, UnicodeDecodeError) as e:
        raise SaslAuthenticationFailedError(
            f"SASL_AUTHENTICATION_FAILED: {login.mechanism} exchange with broker {conn.address} as "
            f"{login.username!r} failed on the client side: {e}") from e
