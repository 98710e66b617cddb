"""One module per Kafka API the broker answers; ``HANDLERS`` maps an API key to its handler."""

from __future__ import annotations

from metaq.broker.handlers import api_versions, fetch, init_producer_id, list_offsets, metadata, produce
from metaq.protocol.apis import ApiKey

HANDLERS = {
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.INIT_PRODUCER_ID: init_producer_id.handle,
}
