"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka serves it: the server half of the exchange and the
credential derivation that ``metaq users add`` stores.

Why not the ``scramp`` package: its server compares the client-final nonce for equality, as the RFC says,
but librdkafka 2.0.2 (what kcat links here) sends ``r=<client nonce><server-first nonce>``, which
Kafka's ScramSaslServer accepts because it only checks that the nonce *ends with* the server-first nonce; the
proof still covers exactly what the client sent, so that leniency costs nothing. This module does the same.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable

from zk_layout import ScramCredential

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SALT_BYTES = 32  # Kafka's ScramFormatter uses a random salt of this order


class ScramError(Exception):
    """The exchange failed; ``str()`` is safe to show the client (no secret in it)."""


def make_credential(mechanism: str, password: str, iterations: int, salt: bytes | None = None) -> ScramCredential:
    """RFC 5802: SaltedPassword = Hi(password, salt, i); StoredKey = H(HMAC(SaltedPassword, "Client Key"));
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    name = HASHES[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), hmac.digest(salted, b"Server Key", name),
                           iterations)


def _attributes(message: str, what: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM {what} message")
        attrs.setdefault(part[0], part[2:])
    return attrs


def _saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is malformed."""
    decoded = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return decoded


class ScramServer:
    """One exchange: :meth:`client_first` -> server-first, :meth:`client_final` -> server-final."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], *,
                 server_nonce: str | None = None) -> None:
        """``lookup``: user -> credential (None: unknown); ``server_nonce`` only for test vectors."""
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def client_first(self, message: str) -> str:
        gs2_flag, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("SCRAM channel binding is not supported (gs2 header must be n,, or y,,)")
        attrs = _attributes(bare, "client-first")
        if "m" in attrs or "n" not in attrs or not attrs.get("r"):
            raise ScramError("malformed SCRAM client-first message")
        user = _saslname(attrs["n"])
        if authzid and _saslname(authzid[2:]) != user:
            raise ScramError("Authentication failed: authorization id differs from the user name")
        credential = self._lookup(user)
        if credential is None:
            raise ScramError("Authentication failed: Invalid username or password")
        self.user, self._credential = user, credential
        self._gs2 = f"{gs2_flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def client_final(self, message: str) -> str:
        assert self._credential is not None
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        attrs = _attributes(without_proof, "client-final") if sep else {}
        # Kafka's check (ScramSaslServer): the nonce must end with ours; see the module docstring
        if not sep or not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("Authentication failed: invalid nonce in the SCRAM client-final message")
        try:
            channel = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise ScramError("malformed SCRAM client-final message") from None
        if channel != self._gs2.encode():
            raise ScramError("Authentication failed: SCRAM channel binding does not match")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise ScramError("Authentication failed: Invalid username or password")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise ScramError("Authentication failed: Invalid username or password")
        server_signature = hmac.digest(self._credential.server_key, auth_message, self._hash)
        return "v=" + base64.b64encode(server_signature).decode()


def client_final(mechanism: str, password: str, client_first_bare: str, server_first: str) -> str:
    """The client's final message (RFC 5802 section 3), for tests and benchmarks that speak SCRAM raw."""
    name = HASHES[mechanism]
    attrs = _attributes(server_first, "server-first")
    salted = hashlib.pbkdf2_hmac(name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.digest(salted, b"Client Key", name)
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(name, client_key).digest(), auth_message, name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"
