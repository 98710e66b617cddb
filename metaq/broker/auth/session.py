"""Who is on the other end of a connection: the listener it came in on, its principal, its address.

The connection's authentication stage (metaq/broker/auth/stage.py) makes one when the connection opens and
a new one when SASL authentication completes; the network layer hands it to the handlers with the broker's
context (``BrokerContext.for_session``), so handlers, the coordinator and the authorizer read it there.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Session:
    """``listener``: the listener name the connection came in on (Metadata answers its endpoints);
    ``principal``: Kafka's ``User:<name>`` (``User:ANONYMOUS`` before/without authentication);
    ``client_host``: the client's address (ACLs match it; DescribeGroups reports it per member)."""

    listener: str = "PLAINTEXT"
    principal: str = ANONYMOUS
    client_host: str = ""
