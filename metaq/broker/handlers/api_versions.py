"""ApiVersions: the version ranges clients negotiate against (never any tagged field, see docs/wire-protocol.md §1)."""

from __future__ import annotations

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode
from metaq.protocol.apis import BROKER_APIS
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import ApiVersionsResponse


def _api_keys() -> list[ApiStruct]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=lo, max_version=hi)
        for key, (_, _, lo, hi) in sorted(BROKER_APIS.items())
    ]


def unsupported_version_response() -> ApiResponse:
    """KIP-511: a v0 body with UNSUPPORTED_VERSION and the full list, for a too-new ApiVersions."""
    return ApiVersionsResponse[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    return ApiVersionsResponse[version](error_code=0, api_keys=_api_keys(), throttle_time_ms=0)
