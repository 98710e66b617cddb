"""A request written to a broker connection and waiting for its response (pipelined requests are answered in
order), for :class:`metaq.client.connection.BrokerConnection`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.api_message import ApiMessage

from metaq.client.versions import api_name
from metaq.protocol.messages import ApiResponse

if TYPE_CHECKING:
    from metaq.client.connection import BrokerConnection


class InFlightRequest:
    """A request written to the wire; :meth:`result` waits for its response (or returns None without one)."""

    __slots__ = ("_conn", "correlation_id", "api_key", "api_version", "response_class", "deadline",
                 "_done", "_response", "_error")

    def __init__(self, conn: BrokerConnection, correlation_id: int, api_key: int, api_version: int,
                 response_class: type[ApiMessage] | None, deadline: float) -> None:
        self._conn = conn
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.response_class = response_class
        self.deadline = deadline  # time.monotonic() after which the broker is considered stuck
        self._done = False
        self._response: ApiResponse | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> ApiResponse | None:
        """The decoded response (None when none is expected); waits up to ``timeout`` seconds (None: until the
        request times out)."""
        if not self._done:
            self._conn._wait_for(self, timeout)
        if self._error is not None:
            raise self._error
        return self._response

    def describe(self) -> str:
        return f"{api_name(self.api_key)} v{self.api_version} (correlation id {self.correlation_id})"

    def _set_response(self, response: ApiResponse | None) -> None:
        self._response = response
        self._done = True

    def _set_error(self, error: BaseException) -> None:
        if not self._done:
            self._error = error
            self._done = True

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<InFlightRequest {self.describe()} to {self._conn.address} {state}>"
