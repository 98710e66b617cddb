"""From the broker config to what the network layer serves and what is registered in ZooKeeper."""

from __future__ import annotations

import time
from collections.abc import Sequence

from metaq.broker.auth.credentials import PlainUsers, ScramCredentialCache
from metaq.broker.auth.listeners import PLAINTEXT, Listener
from metaq.broker.auth.sasl import SaslAuthenticator
from metaq.broker.auth.stage import ServedListener
from metaq.broker.auth.tls import server_context
from metaq.broker.config import BrokerConfig
from zk_layout import BrokerInfo


def served_listeners(config: BrokerConfig, scram: ScramCredentialCache) -> list[ServedListener]:
    """Every listener with its TLS context and SASL settings (each built once and shared by the listeners
    that need it)."""
    listeners = config.listener_list
    context = server_context(config.tls_settings) if any(lst.tls for lst in listeners) else None
    sasl = None
    if any(lst.sasl for lst in listeners):
        plain = PlainUsers(config.sasl_plain_users_file) if config.sasl_plain_users_file else None
        sasl = SaslAuthenticator(config.sasl_enabled_mechanisms, scram, plain)
    return [ServedListener(lst, context if lst.tls else None, sasl if lst.sasl else None) for lst in listeners]


def registration_info(config: BrokerConfig, advertised: Sequence[Listener]) -> BrokerInfo:
    """``/brokers/ids/<id>`` as Kafka writes it: every advertised endpoint, the listener -> protocol map of
    those endpoints, and host/port of the first one whose security protocol is PLAINTEXT (null/-1 without)."""
    plain = next((a for a in advertised if a.protocol == PLAINTEXT), None)
    return BrokerInfo(
        id=config.broker_id,
        host=plain.host if plain else None,
        port=plain.port if plain else -1,
        endpoints=tuple(a.endpoint() for a in advertised),
        timestamp_ms=int(time.time() * 1000),
        rack=config.broker_rack,
        security_protocol_map={a.name: a.protocol for a in advertised},
    )
