"""The response class of each request, held strongly by metaq rather than found in kafka-python's registry.

Why not ``ResponseClassRegistry.get_response_class`` (kafka/protocol/api_header.py in kafka-python 3.0.12): the
registry holds one ``weakref.proxy`` per API key, registered by ``ApiMessage.__init_subclass__``
(kafka/protocol/api_message.py). That hook runs not only for the module-level class but for every per-version class
``Family[version]`` makes: ``VersionSubscriptable.__getitem__`` creates it with ``type(..., init=False)``, but
``SlotsBuilder.__new__`` (kafka/protocol/data_container.py) drops the keyword before ``type.__new__``, so
``__init_subclass__`` sees no ``init`` and registers the new class. The registry's entry is thus a proxy to the last
versioned class made. ``__getitem__`` checks ``_VERSIONS`` and then creates, not atomically: two threads asking for
a version not made yet (25 group members of one process sending their first OffsetFetch) both create a class, both
register it, and ``_VERSIONS`` keeps only one. When the registry's proxy is to the other one, that class is
referenced only by its caller, and once the garbage collector frees it (a class is in reference cycles) every later
lookup of that API raises ``ReferenceError: weakly-referenced object no longer exists``, for the life of the
process: the cached version is found from then on, so nothing registers again.

metaq's client needs only the response family (its ``decode`` takes the version), which this module keeps in a
plain dict: the module-level classes of metaq.protocol.apis, or the ``...Response`` beside a request class in its
kafka-python module.
"""

from __future__ import annotations

import sys
from typing import Any

from kafka.protocol.api_message import ApiMessage

from metaq.errors import ProtocolError
from metaq.protocol.apis import BROKER_APIS

_RESPONSES: dict[int, type[ApiMessage]] = {int(key): response for key, (_, response, _, _) in BROKER_APIS.items()}


def response_family(request_class: Any) -> type[ApiMessage]:
    """The (module-level, unversioned) response class answering ``request_class`` (a family or a version of it)."""
    api_key: int = request_class.API_KEY
    family = _RESPONSES.get(api_key)
    if family is None:
        primary = request_class[None]
        name = primary.__name__.removesuffix("Request") + "Response"
        found: Any = getattr(sys.modules[primary.__module__], name, None)
        if not (isinstance(found, type) and issubclass(found, ApiMessage)
                and getattr(found, "API_KEY", None) == api_key):
            raise ProtocolError(f"no response class for {primary.__name__} (API key {api_key})")
        family = _RESPONSES[api_key] = found
    return family
