"""The authentication stage of one connection (metaq/broker/auth/stage.py) as the network layer drives it:
frame bounds before SASL completes, what is admitted, the stage's own answers, and the session it hands on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from metaq.broker.auth.credentials import PlainUsers, ScramCredentialCache
from metaq.broker.auth.listeners import Listener
from metaq.broker.auth.sasl import SASL_SERVER_MAX_RECEIVE_SIZE, SaslAuthenticationError, SaslAuthenticator
from metaq.broker.auth.stage import AuthenticationStage, ServedListener
from metaq.broker.response import ClosingAfter, Encoded, RawFrame
from metaq.errors import ErrorCode, ProtocolError
from metaq.protocol.apis import ApiKey
from metaq.protocol.messages import ApiRequest


def _request(**fields: Any) -> ApiRequest:
    return cast(ApiRequest, SimpleNamespace(**fields))


def _stage(tmp_path: Path, *, sasl: bool = True, principal: str | None = None) -> AuthenticationStage:
    users = tmp_path / "users"
    users.write_text("alice:secret\n")
    authenticator = SaslAuthenticator(("PLAIN",), ScramCredentialCache(), PlainUsers(str(users)))
    protocol = "SASL_PLAINTEXT" if sasl else "SSL"
    listener = Listener(protocol, protocol, "127.0.0.1", 0)
    served = ServedListener(listener, None, authenticator if sasl else None)
    return served.authentication("10.0.0.7", principal)


def test_without_sasl_the_tls_principal_is_the_session_and_every_api_goes_to_its_handler(tmp_path: Path) -> None:
    stage = _stage(tmp_path, sasl=False, principal="User:CN=client")
    assert stage.session.principal == "User:CN=client"
    assert stage.session.client_host == "10.0.0.7"
    assert stage.check_frame_size(SASL_SERVER_MAX_RECEIVE_SIZE + 1) is False  # the ordinary bound applies
    assert stage.answer(ApiKey.METADATA, _request(), 9) is None
    handshake = stage.answer(ApiKey.SASL_HANDSHAKE, _request(mechanism="PLAIN"), 1)
    assert isinstance(handshake, ClosingAfter)  # ILLEGAL_SASL_STATE, then closed, as Kafka
    assert isinstance(handshake.response, Encoded)
    assert handshake.response.message.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_before_sasl_completes_frames_are_bounded_and_only_sasl_and_api_versions_pass(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    assert stage.session.principal == "User:ANONYMOUS"
    assert stage.check_frame_size(SASL_SERVER_MAX_RECEIVE_SIZE) is True
    with pytest.raises(ProtocolError, match="before SASL authentication"):
        stage.check_frame_size(SASL_SERVER_MAX_RECEIVE_SIZE + 1)
    assert stage.answer(ApiKey.API_VERSIONS, _request(), 3) is None
    with pytest.raises(SaslAuthenticationError, match="METADATA request before SASL authentication"):
        stage.answer(ApiKey.METADATA, _request(), 9)


def test_v1_plain_exchange_binds_the_sasl_principal(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    handshake = stage.answer(ApiKey.SASL_HANDSHAKE, _request(mechanism="PLAIN"), 1)
    assert isinstance(handshake, Encoded) and handshake.message.error_code == ErrorCode.NONE
    answer = stage.answer(ApiKey.SASL_AUTHENTICATE, _request(auth_bytes=b"\0alice\0secret"), 2)
    assert isinstance(answer, Encoded) and answer.message.error_code == ErrorCode.NONE
    assert stage.session.principal == "User:alice"
    assert stage.session.client_host == "10.0.0.7"
    assert stage.check_frame_size(SASL_SERVER_MAX_RECEIVE_SIZE + 1) is False
    assert stage.answer(ApiKey.METADATA, _request(), 9) is None


def test_a_wrong_password_is_answered_then_closes(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    stage.answer(ApiKey.SASL_HANDSHAKE, _request(mechanism="PLAIN"), 1)
    answer = stage.answer(ApiKey.SASL_AUTHENTICATE, _request(auth_bytes=b"\0alice\0wrong"), 2)
    assert isinstance(answer, ClosingAfter)
    assert isinstance(answer.response, Encoded)
    assert answer.response.message.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in str(answer.error)
    assert stage.session.principal == "User:ANONYMOUS"


def test_v0_handshake_takes_raw_tokens(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    stage.answer(ApiKey.SASL_HANDSHAKE, _request(mechanism="PLAIN"), 0)
    assert stage.raw_token_expected
    assert stage.check_frame_size(0) is True  # an empty raw token is allowed before authentication
    reply = stage.raw_token(b"\0alice\0secret")
    assert isinstance(reply, RawFrame) and reply.payload == b""
    assert not stage.raw_token_expected
    assert stage.session.principal == "User:alice"
