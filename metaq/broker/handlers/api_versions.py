"""ApiVersions: the version ranges clients negotiate against (never any tagged field, see docs/wire-protocol.md §1)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode
from metaq.protocol.apis import BROKER_APIS


def _api_keys() -> list[Any]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=lo, max_version=hi)
        for key, (_, _, lo, hi) in sorted(BROKER_APIS.items())
    ]


def unsupported_version_response() -> Any:
    """KIP-511: a v0 body with UNSUPPORTED_VERSION and the full list, for a too-new ApiVersions."""
    return ApiVersionsResponse[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())


async def handle(ctx: BrokerContext, request: Any, version: int) -> Any:
    return ApiVersionsResponse[version](error_code=0, api_keys=_api_keys(), throttle_time_ms=0)
