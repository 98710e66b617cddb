"""TLS for the SSL and SASL_SSL listeners, from PEM files (librdkafka's key names, see docs/security.md).

The server context is built once at start-up, so a missing or unreadable file, a key that does not match
its certificate or a wrong key password stops the broker with an error naming the config key; none of
them ever shows the password.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from metaq.errors import ConfigError

CLIENT_AUTH = ("none", "requested", "required")
_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# RFC 2253 short names, as Java's X500Principal.getName() writes them (Kafka's ssl principal)
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


@dataclass(frozen=True)
class TlsSettings:
    certificate: str | None
    key: str | None
    key_password: str | None
    ca: str | None
    client_auth: str
    protocols: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"TlsSettings(certificate={self.certificate!r}, key={self.key!r}, key_password="
                f"{'[hidden]' if self.key_password else None}, ca={self.ca!r}, client_auth={self.client_auth!r},"
                f" protocols={self.protocols!r})")


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """An SSLContext serving ``settings``; ConfigError naming the key at fault."""
    if not settings.certificate or not settings.key:
        raise ConfigError("config 'ssl.certificate.location' and 'ssl.key.location': both are required for an SSL"
                          " or SASL_SSL listener")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, settings.protocols)
    try:
        context.load_cert_chain(settings.certificate, settings.key, password=settings.key_password)
    except FileNotFoundError as e:
        raise ConfigError(f"config 'ssl.certificate.location'/'ssl.key.location': {e.filename}: no such file") from e
    except (ssl.SSLError, OSError):  # never e.args: keep the message free of anything but the paths
        raise ConfigError(f"config 'ssl.certificate.location'/'ssl.key.location': cannot load {settings.certificate}"
                          f" with key {settings.key} (not PEM, key does not match, or wrong 'ssl.key.password')"
                          ) from None
    if settings.client_auth != "none":
        if not settings.ca:
            raise ConfigError(f"config 'ssl.client.auth={settings.client_auth}' needs 'ssl.ca.location' (the CA"
                              " that signs client certificates)")
        context.verify_mode = ssl.CERT_REQUIRED if settings.client_auth == "required" else ssl.CERT_OPTIONAL
    if settings.ca:
        try:
            context.load_verify_locations(cafile=settings.ca)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"config 'ssl.ca.location': cannot load {settings.ca}: {e.strerror or 'not PEM'}"
                              ) from e
    return context


def _set_protocols(context: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    unknown = [p for p in protocols if p not in _PROTOCOLS]
    if unknown or not protocols:
        raise ConfigError(f"config 'ssl.enabled.protocols': {','.join(protocols)!r} must list some of"
                          f" {', '.join(_PROTOCOLS)}")
    versions = sorted(_PROTOCOLS[p] for p in protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def certificate_principal(ssl_object: Any) -> str | None:
    """``User:<subject DN>`` of the client's verified certificate (RFC 2253 order and names, as Kafka's
    default principal builder), or None without one."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
