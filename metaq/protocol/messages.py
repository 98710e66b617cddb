"""Types for kafka-python's request and response objects, which ship without type information.

kafka-python builds each API's classes from its JSON schemas at import time, so mypy sees them as ``Any``.
metaq passes them around as these protocols instead: what every message has (its API key and version, its
header, encoding itself) is typed and checked; the schema's own fields stay dynamic attributes.

    response: ApiResponse = conn.send(MetadataRequest, {"topics": None, "allow_auto_topic_creation": False})
    response.brokers                      # a schema field: Any
    request.header.client_id              # typed: str | None
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["ApiMessageLike", "ApiRequest", "ApiResponse", "ApiStruct", "RequestFields", "RequestHeader",
           "ResponseClass", "ResponseFamily", "StructClass"]

RequestFields = Mapping[str, Any]
"""A request as its fields by schema name (structs as nested dicts), built for the version the broker speaks."""


class RequestHeader(Protocol):
    """The request header every Kafka request carries."""

    correlation_id: int
    client_id: str | None


class ApiMessageLike(Protocol):
    """What every kafka-python request and response offers; other attributes are the schema's fields."""

    API_KEY: int
    API_VERSION: int | None

    def with_header(self, correlation_id: int = ..., client_id: str | None = ...) -> None: ...

    def encode(self, version: int | None = ..., header: bool = ..., framed: bool = ...) -> bytes: ...

    def __getattr__(self, name: str) -> Any: ...


class ApiStruct(Protocol):
    """One element of a request's or response's schema (a topic, a partition, a resource, a filter): its
    fields are the schema's, dynamic attributes."""

    def __getattr__(self, name: str) -> Any: ...


class ApiRequest(ApiMessageLike, Protocol):
    """A decoded request, header included (what a broker handler receives)."""

    header: RequestHeader


class ApiResponse(ApiMessageLike, Protocol):
    """A decoded response (what a client reads), or one a broker handler builds."""


class StructClass(Protocol):
    """A nested struct class of a schema (``MetadataResponse.MetadataResponseTopic``): called with its fields by
    schema name it builds an :class:`ApiStruct`; its own nested struct classes are attributes."""

    def __call__(self, *values: object, **fields: object) -> ApiStruct: ...

    def __getattr__(self, name: str) -> StructClass: ...


class ResponseClass(Protocol):
    """One version's response class: called with the response's fields it builds an :class:`ApiResponse`; the
    schema's nested struct classes are attributes."""

    def __call__(self, *values: object, **fields: object) -> ApiResponse: ...

    def __getattr__(self, name: str) -> StructClass: ...


class ResponseFamily(Protocol):
    """An API's response classes, one per version: ``Family[version](**fields)`` builds an :class:`ApiResponse`;
    the schema's nested struct classes are attributes (``Family.Topic``, metaq/protocol/responses.py)."""

    def __getitem__(self, version: int) -> ResponseClass: ...

    def __getattr__(self, name: str) -> StructClass: ...
