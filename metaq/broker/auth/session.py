"""Who is on the other end of the connection whose request is being handled.

The network layer sets :data:`SESSION` once per connection task (and again when SASL authentication
completes); handlers, the coordinator and the authorizer read it through :func:`current_session` or
``BrokerContext.principal`` without it being passed down every call.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Session:
    """``listener``: the listener name the connection came in on (Metadata answers its endpoints);
    ``principal``: Kafka's ``User:<name>`` (``User:ANONYMOUS`` before/without authentication)."""

    listener: str = "PLAINTEXT"
    principal: str = ANONYMOUS


_DEFAULT = Session()
SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar("metaq_broker_session", default=None)


def current_session() -> Session:
    return SESSION.get() or _DEFAULT
