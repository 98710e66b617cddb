"""The SCRAM server against RFC 7677's test vector, Kafka's lenient nonce check, and the PLAIN/SCRAM state
machine of one connection."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from metaq.broker.auth.credentials import PlainUsers, ScramCredentialCache
from metaq.broker.auth.sasl import SaslAuthenticationError, SaslAuthenticator
from metaq.broker.auth.scram import ScramError, ScramServer, make_credential

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _server(password: str = "pencil") -> ScramServer:
    credential = make_credential("SCRAM-SHA-256", password, 4096, salt=SALT)
    return ScramServer("SCRAM-SHA-256", {"user": credential}.get, server_nonce=SERVER_NONCE)


def test_rfc7677_vector() -> None:
    server = _server()
    assert server.client_first(CLIENT_FIRST) == SERVER_FIRST
    assert server.client_final(CLIENT_FINAL) == SERVER_FINAL
    assert server.user == "user"


def test_wrong_password_unknown_user_and_foreign_nonce_fail() -> None:
    server = _server("not-pencil")
    server.client_first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="Invalid username or password"):
        server.client_final(CLIENT_FINAL)
    with pytest.raises(ScramError, match="Invalid username or password"):
        _server().client_first("n,,n=mallory,r=abc")
    server = _server()
    server.client_first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        server.client_final("c=biws,r=somebody-else,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")


def test_librdkafka_doubled_nonce_is_accepted_like_kafka() -> None:
    """r=<client nonce><server-first nonce>: accepted (Kafka checks endsWith); the proof covers it."""
    import hashlib
    import hmac
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    server = _server()
    server.client_first(CLIENT_FIRST)
    nonce = "rOprNGfwEbeRWgbNEkqO" + SERVER_FIRST[2:SERVER_FIRST.index(",")]
    without_proof = f"c=biws,r={nonce}"
    auth = f"{CLIENT_FIRST[3:]},{SERVER_FIRST},{without_proof}".encode()
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    assert server.client_final(f"{without_proof},p={proof}").startswith("v=")


def test_plain_exchange_and_states(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("# comment\nalice:s3cret:with:colons\n")
    auth = SaslAuthenticator(("PLAIN",), ScramCredentialCache(), PlainUsers(str(users)))
    exchange = auth.exchange()
    with pytest.raises(SaslAuthenticationError):
        exchange.evaluate(b"\0alice\0s3cret:with:colons")  # before the handshake
    assert exchange.handshake("SCRAM-SHA-256", 1) == 33
    assert exchange.handshake("PLAIN", 1) == 0 and not exchange.raw_tokens
    assert exchange.evaluate(b"\0alice\0s3cret:with:colons") == b""
    assert exchange.complete and exchange.principal == "User:alice"
    wrong = auth.exchange()
    wrong.handshake("PLAIN", 0)
    assert wrong.raw_tokens
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password") as e:
        wrong.evaluate(b"\0alice\0guess")
    assert "guess" not in str(e.value)
