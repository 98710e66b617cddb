"""TLS material the broker loads, checked with certificates made by the ``openssl`` command at test time
(metaq/testing/certs.py): a wrong key password or a missing file is reported by the configuration key that names
it, never with the secret, and a client certificate's subject becomes the connection's principal. The pure
listener and TLS configuration checks are in tests/broker/test_listeners_tls.py."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import pytest

from metaq.broker.auth.tls import TlsSettings, certificate_principal, server_context
from metaq.errors import ConfigError
from metaq.testing.certs import CLIENT_PRINCIPAL, Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_wrong_key_password_or_missing_file_names_the_key_not_the_secret(certs: Certs, tmp_path: Path) -> None:
    encrypted = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs.server_key), "-aes256", "-passout", "pass:right-pass",
                    "-out", str(encrypted)], check=True, capture_output=True)
    settings = TlsSettings(str(certs.server_cert), str(encrypted), "wrong-pass", None, "none", ("TLSv1.2",))
    with pytest.raises(ConfigError, match="ssl.key.password") as e:
        server_context(settings)
    assert "wrong-pass" not in str(e.value)
    server_context(TlsSettings(str(certs.server_cert), str(encrypted), "right-pass", None, "none", ("TLSv1.3",)))
    with pytest.raises(ConfigError, match="no such file"):
        server_context(TlsSettings(str(tmp_path / "nope.pem"), str(encrypted), None, None, "none", ("TLSv1.2",)))
    with pytest.raises(ConfigError, match="ssl.ca.location"):
        server_context(TlsSettings(str(certs.server_cert), str(certs.server_key), None, None, "required",
                                   ("TLSv1.2",)))


def test_client_certificate_subject_is_the_principal(certs: Certs) -> None:
    server_ctx = server_context(TlsSettings(str(certs.server_cert), str(certs.server_key), None, str(certs.ca),
                                            "requested", ("TLSv1.2", "TLSv1.3")))

    async def run(with_cert: bool) -> str | None:
        seen: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(certificate_principal(writer.get_extra_info("ssl_object")))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client_ctx = ssl.create_default_context(cafile=str(certs.ca))
        if with_cert:
            client_ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        principal = await asyncio.wait_for(seen, 30)
        writer.close()
        server.close()
        return principal

    assert asyncio.run(run(True)) == CLIENT_PRINCIPAL
    assert asyncio.run(run(False)) is None
