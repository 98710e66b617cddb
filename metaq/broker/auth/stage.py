"""The authentication stage of a connection: who the client is, from the TLS handshake to SASL's end.

The network layer asks this stage, for every frame, whether it is admitted and who sent it; it never
knows a SASL API by name. A connection starts with the principal of its TLS client certificate (or
``User:ANONYMOUS``); on a SASL listener, until the exchange completes, frames are bounded by Kafka's
``sasl.server.max.receive.size``, only ApiVersions and the two SASL APIs are served, and this stage answers
those itself (metaq/broker/auth/sasl.py). See docs/architecture.md, "The request path".
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

from metaq.broker.auth.listeners import Listener
from metaq.broker.auth.sasl import (
    SASL_SERVER_MAX_RECEIVE_SIZE,
    SaslAuthenticationError,
    SaslAuthenticator,
    SaslExchange,
)
from metaq.broker.auth.session import ANONYMOUS, Session
from metaq.broker.response import ClosingAfter, Encoded, RawFrame, Response
from metaq.errors import ErrorCode, ProtocolError
from metaq.protocol.apis import ApiKey, api_name
from metaq.protocol.messages import ApiRequest
from metaq.protocol.responses import SaslAuthenticateResponse, SaslHandshakeResponse

log = logging.getLogger(__name__)

SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class ServedListener:
    """A listener and what serving it takes: a TLS context for SSL/SASL_SSL, SASL settings for
    SASL_PLAINTEXT/SASL_SSL."""

    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslAuthenticator | None = None

    def authentication(self, client_host: str, tls_principal: str | None) -> AuthenticationStage:
        """The stage of one new connection from ``client_host`` (after its TLS handshake, if any)."""
        session = Session(self.listener.name, tls_principal or ANONYMOUS, client_host)
        return AuthenticationStage(session, self.sasl)


class AuthenticationStage:
    """One connection's authentication: its current :class:`Session` and, on a SASL listener, the exchange."""

    def __init__(self, session: Session, sasl: SaslAuthenticator | None) -> None:
        self.session = session
        self._sasl = sasl
        self._exchange: SaslExchange | None = sasl.exchange() if sasl is not None else None

    @property
    def _pending(self) -> bool:
        """Whether SASL authentication is required and not complete yet."""
        return self._exchange is not None and not self._exchange.complete

    @property
    def raw_token_expected(self) -> bool:
        """Whether the next frame is a SASL token framed on its own (after SaslHandshake v0)."""
        return self._exchange is not None and self._exchange.raw_tokens

    def check_frame_size(self, size: int) -> bool:
        """True if the frame size was checked here (before SASL authentication: Kafka's smaller bound);
        False if the connection's ordinary bounds apply. ProtocolError for a size outside the bound."""
        if not self._pending:
            return False
        if not 0 <= size <= SASL_SERVER_MAX_RECEIVE_SIZE or (size < 8 and not self.raw_token_expected):
            raise ProtocolError(f"frame size {size} before SASL authentication is outside"
                                f" 8..{SASL_SERVER_MAX_RECEIVE_SIZE}")
        return True

    def raw_token(self, token: bytes) -> Response:
        """A SASL token framed on its own: the answer goes back the same way; a failure just closes the
        connection, as Kafka does (v0 has no way to say why)."""
        assert self._exchange is not None
        answer = self._exchange.evaluate(token)
        self._authenticated()
        return RawFrame(answer)

    def answer(self, api_key: int, request: ApiRequest, version: int) -> Response | None:
        """The stage's own answer to a request (SaslHandshake, SaslAuthenticate), or None when the request
        goes to its handler. SaslAuthenticationError for any other request before authentication."""
        if api_key in SASL_APIS:
            return self._handshake(request, version) if api_key == ApiKey.SASL_HANDSHAKE \
                else self._authenticate(request, version)
        if self._pending and api_key != ApiKey.API_VERSIONS:
            raise SaslAuthenticationError(f"{api_name(api_key)} request before SASL authentication completed")
        return None

    def _handshake(self, request: ApiRequest, version: int) -> Response:
        """SaslHandshake answer; on a listener without SASL, ILLEGAL_SASL_STATE (as Kafka). A refusal closes
        the connection once answered."""
        exchange = self._exchange
        mechanisms = self._sasl.mechanisms if self._sasl is not None else ()
        error = ErrorCode.ILLEGAL_SASL_STATE if exchange is None else exchange.handshake(request.mechanism, version)
        reply = Encoded(SaslHandshakeResponse[version](error_code=error, mechanisms=list(mechanisms)))
        if not error:
            return reply
        return ClosingAfter(reply, SaslAuthenticationError(
            f"SaslHandshake for mechanism {request.mechanism!r} refused with error {error}"
            f" (enabled: {', '.join(mechanisms)})"))

    def _authenticate(self, request: ApiRequest, version: int) -> Response:
        """SaslAuthenticate answer; the connection is closed once a failure is answered."""
        exchange = self._exchange
        fields = {"session_lifetime_ms": 0} if version >= 1 else {}
        if exchange is None or exchange.raw_tokens:
            message = "SaslAuthenticate is not expected on this connection"
            refusal = SaslAuthenticateResponse[version](error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                        error_message=message, auth_bytes=b"", **fields)
            return ClosingAfter(Encoded(refusal), SaslAuthenticationError(f"{message} (mechanism"
                                f" {exchange.mechanism if exchange else None})"))
        try:
            answer = exchange.evaluate(bytes(request.auth_bytes))
        except SaslAuthenticationError as e:
            failed = SaslAuthenticateResponse[version](error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                       error_message=str(e), auth_bytes=b"", **fields)
            return ClosingAfter(Encoded(failed), SaslAuthenticationError(
                f"{e} (mechanism {exchange.mechanism})"))
        self._authenticated()
        return Encoded(SaslAuthenticateResponse[version](error_code=ErrorCode.NONE, error_message=None,
                                                         auth_bytes=answer, **fields))

    def _authenticated(self) -> None:
        """Once the exchange completes, the connection's session carries the SASL principal."""
        exchange = self._exchange
        if exchange is not None and exchange.complete:
            self.session = Session(self.session.listener, exchange.principal, self.session.client_host)
            log.debug("%s authenticated as %s with %s", self.session.client_host, exchange.principal,
                      exchange.mechanism)
