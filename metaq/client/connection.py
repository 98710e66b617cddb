"""A blocking Kafka wire connection to one broker, with pipelining.

Used by the producer's sender thread and the consumer's fetcher threads::

    conn = BrokerConnection("127.0.0.1", 9092, client_id="etl")
    conn.connect()                                   # TCP, then ApiVersions to learn the broker's ranges
    meta = conn.send(MetadataRequest, {"topics": [{"name": "clicks"}], "allow_auto_topic_creation": False})
    a = conn.send_async(FetchRequest, fetch_fields)  # pipelined: both requests are on the wire
    b = conn.send_async(FetchRequest, other_fields)
    a.result(), b.result()                           # responses arrive in request order

With an ``ssl_context`` the socket is wrapped in TLS right after the TCP connect; with a ``sasl`` login the
connection authenticates (metaq.client.sasl) right after ApiVersions, before :meth:`connect` returns. Reads
work the same over TLS: ``recv_into`` decrypts straight into the frame buffers (no intermediate bytes), and
a read that would block (SSLWantReadError) is a timeout like any other.

Errors: a socket error, a timeout or the peer closing raise :class:`BrokerConnectionError` (retriable), a response
that does not decode raises :class:`ProtocolError`; a refused certificate or TLS alert raises
:class:`TlsHandshakeError` and a refused SASL login a SASL :class:`AuthenticationError` (both fatal).
Any of them leaves the connection closed, with every in-flight request failed; the caller reconnects (or,
after an AuthenticationError, stops). ``result(timeout)`` running out before the request's own deadline raises the
builtin ``TimeoutError`` (as ``concurrent.futures.Future.result`` does) and leaves the request in flight.

One thread at a time may use a connection; :meth:`BrokerConnection.close` may be called from any thread and
interrupts a blocked read.
"""

from __future__ import annotations

import logging
import math
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Literal, overload

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from metaq import __version__
from metaq.client.frame_reader import _SIZE, _FrameReader, _PeerClosed, _WouldBlock
from metaq.client.in_flight import InFlightRequest
from metaq.client.request_codec import _skip_tagged_fields, build_request
from metaq.client.sasl import SaslLogin, authenticate
from metaq.client.versions import (
    API_VERSIONS_PROBE,
    DEFAULT_FALLBACK,
    ApiKey,
    api_name,
    fallback_versions,
    pick_version,
)
from metaq.errors import (
    BrokerConnectionError,
    ErrorCode,
    ProtocolError,
    TlsHandshakeError,
    UnsupportedVersionError,
    raise_for_code,
)
from metaq.protocol.messages import ApiResponse, RequestFields
from metaq.protocol.response_families import response_family

log = logging.getLogger(__name__)
_ERROR_CODE = struct.Struct(">h")
_CORRELATION_MASK = 0x7FFFFFFF
_OLD_BROKERS: set[str] = set()
_OLD_BROKERS_LOCK = threading.Lock()


def _log_old_broker(address: str, fallback: str, error: BrokerConnectionError) -> None:
    """Say once per broker address that it looks older than Kafka 0.10.0 (every connection to it finds
    the same)."""
    with _OLD_BROKERS_LOCK:
        if address in _OLD_BROKERS:
            return
        _OLD_BROKERS.add(address)
    log.warning("broker %s closed the connection on ApiVersions (%s): taking it for a Kafka 0.8/0.9 broker and "
                "using the API versions of Kafka %s (broker.version.fallback)", address, error, fallback)


class BrokerConnection:
    """A blocking connection to one broker (module docstring). It owns the socket (TLS-wrapped, SASL-authenticated
    if configured), the API version ranges the broker announced (or the fallback's, for a broker older than
    ApiVersions), the frame reader over the socket, and the requests in flight in the order they were written,
    each matched with its response by correlation id. Closing it fails every request in flight."""

    def __init__(self, host: str, port: int, *, client_id: str = "metaq", request_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 10000, max_response_bytes: int = 104857600,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslLogin | None = None,
                 broker_version_fallback: str = DEFAULT_FALLBACK) -> None:
        self.host = host
        self._fallback = fallback_versions(broker_version_fallback)
        self._fallback_name = broker_version_fallback
        self.port = port
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000.0
        self.connect_timeout = connect_timeout_ms / 1000.0
        self.max_response_bytes = max_response_bytes
        self._ssl_context = ssl_context
        self._sasl = sasl
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()  # guards _sock, _busy and _pending against close() from other threads
        self._sock: socket.socket | None = None
        self._busy = False
        self._pending: deque[InFlightRequest] = deque()
        self._next_id = 1
        self._reader = _FrameReader(self._recv_into, max_response_bytes)
        self._io_sock: socket.socket | None = None
        self._io_until = math.inf

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_connected(self) -> bool:
        return self._sock is not None

    def fileno(self) -> int:
        """The socket's descriptor, for selectors; -1 when closed."""
        sock = self._sock
        return sock.fileno() if sock is not None else -1

    def in_flight(self) -> int:
        """How many requests await a response."""
        return len(self._pending)

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.address} {'connected' if self.is_connected else 'closed'}>"

    def __enter__(self) -> BrokerConnection:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connecting ------------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the TCP connection (and TLS), learn the broker's API versions (and authenticate); a no-op when
        already connected."""
        if self._sock is not None:
            return
        self._open_socket()
        self.broker_versions = {}
        try:
            self.broker_versions = self._negotiate_versions_after_tls()
            if self._sasl is not None:
                authenticate(self, self._sasl)
        except BaseException:
            self.close()
            raise
        log.debug("connected to %s, broker versions %s", self.address, self.broker_versions)

    def _open_socket(self) -> None:
        """TCP (and TLS) to the broker, with no request in flight."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as e:
            raise BrokerConnectionError(f"cannot connect to broker {self.address}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl_context is not None:
            sock = self._tls_handshake(sock, self._ssl_context)
        with self._lock:
            self._sock, self._busy, self._pending = sock, False, deque()
        self._reader = _FrameReader(self._recv_into, self.max_response_bytes)

    def _tls_handshake(self, sock: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
        """Wrap a connected socket in TLS (the connect timeout bounds the handshake)."""
        try:
            return context.wrap_socket(sock, server_hostname=self.host)
        except BaseException as e:
            sock.close()
            raise self._tls_error(e, "the TLS handshake") from e

    def _tls_error(self, error: BaseException, doing: str) -> BaseException:
        """A fatal TlsHandshakeError for what the peer or our checks refused; a retriable
        BrokerConnectionError for a connection that merely broke (a restarting broker)."""
        if isinstance(error, ssl.SSLCertVerificationError):
            return TlsHandshakeError(f"TLS with broker {self.address}: its certificate did not verify: "
                                     f"{error.verify_message} (check ssl.ca.location and "
                                     f"ssl.endpoint.identification.algorithm)")
        if isinstance(error, ssl.SSLError) and not isinstance(
                error, ssl.SSLEOFError | ssl.SSLZeroReturnError | ssl.SSLSyscallError):
            return TlsHandshakeError(f"TLS with broker {self.address} failed during {doing}: "
                                     f"{error.reason or error}")
        if isinstance(error, OSError):
            return BrokerConnectionError(f"broker {self.address}: connection broke during {doing}: {error} "
                                         f"(if this persists: is it an SSL listener?)")
        return error

    def _negotiate_versions_after_tls(self) -> dict[int, tuple[int, int]]:
        """ApiVersions; a TLS connection the broker drops right away gets a hint (a broker may close without a
        TLS alert when it refuses our certificate, or wants one: then the error stays retriable)."""
        try:
            return self._negotiate_versions()
        except BrokerConnectionError as e:
            if self._ssl_context is None:
                raise
            raise BrokerConnectionError(f"{e}, right after the TLS handshake: if this persists, the broker may "
                                        f"require a client certificate (ssl.certificate.location) or not trust "
                                        f"this one") from e

    def _negotiate_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions; a broker that closes the connection on it is taken for one before Kafka 0.10.0 (it
        does not know the API), reconnected to and given the ranges of ``broker.version.fallback``, as
        librdkafka does (metaq/client/versions.py)."""
        try:
            response = self.send(ApiVersionsRequest, ApiVersionsRequest[API_VERSIONS_PROBE](
                client_software_name="metaq", client_software_version=__version__))
        except BrokerConnectionError as e:
            self._open_socket()
            self._confirm_old_broker(e)
            _log_old_broker(self.address, self._fallback_name, e)
            return dict(self._fallback)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:  # KIP-511: the broker lacks v3; v0 always works
            response = self.send(ApiVersionsRequest, ApiVersionsRequest[0]())
        raise_for_code(response.error_code, f"ApiVersions from {self.address}")
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def _confirm_old_broker(self, closed: BrokerConnectionError) -> None:
        """An old broker answers Metadata v0 (every Kafka since 0.8 does) on the new connection; a broker that
        closes this one too is not old but refusing us (e.g. a TLS listener that wants a client certificate
        and closes without an alert): the original error is raised, not a fallback to versions it never had."""
        try:
            self.send(MetadataRequest, MetadataRequest[0](topics=[]))
        except BrokerConnectionError:
            raise closed from None

    def api_version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides speak; raises UnsupportedVersionError."""
        if not self.broker_versions:
            raise BrokerConnectionError(f"not connected to broker {self.address}")
        try:
            return pick_version(api_key, self.broker_versions)
        except UnsupportedVersionError as e:
            raise UnsupportedVersionError(f"broker {self.address}: {e}") from e

    # -- requests --------------------------------------------------------------------------------------------

    @overload
    def send(self, request_class: type[ApiMessage], fields: RequestFields | ApiMessage, *,
             expect_response: Literal[True] = ...) -> ApiResponse: ...

    @overload
    def send(self, request_class: type[ApiMessage], fields: RequestFields | ApiMessage, *,
             expect_response: bool) -> ApiResponse | None: ...

    def send(self, request_class: type[ApiMessage], fields: RequestFields | ApiMessage, *,
             expect_response: bool = True) -> ApiResponse | None:
        """Send one request and wait for its decoded response (None when none is expected)."""
        return self.send_async(request_class, fields, expect_response=expect_response).result()

    def send_async(self, request_class: type[ApiMessage], fields: RequestFields | ApiMessage, *,
                   expect_response: bool = True) -> InFlightRequest:
        """Write one request and return at once; responses are matched to requests in order."""
        request = self._build(request_class, fields)
        version = request.API_VERSION
        correlation_id = self._next_id
        self._next_id = (correlation_id + 1) & _CORRELATION_MASK
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        data = self._encode(request, version)
        response_class = None
        if expect_response and request.expect_response():
            # not kafka-python's ResponseClassRegistry: its weak entry can die (metaq/protocol/response_families.py)
            response_class = response_family(request_class)
        handle = InFlightRequest(self, correlation_id, request.API_KEY, version, response_class,
                                 time.monotonic() + self.request_timeout)
        self._write(handle, data)
        if response_class is None:
            handle._set_response(None)
        return handle

    def _build(self, request_class: type[ApiMessage], fields: RequestFields | ApiMessage) -> ApiMessage:
        if isinstance(fields, ApiMessage):
            if fields.API_KEY != request_class.API_KEY:
                raise ValueError(f"a {type(fields).__name__} was given as a {request_class.__name__}")
            if fields.API_VERSION is None:
                fields.API_VERSION = self.api_version(fields.API_KEY)
            return fields
        version = self.api_version(request_class.API_KEY)
        try:
            return build_request(request_class, version, fields)
        except (ValueError, TypeError, AttributeError) as e:
            raise ProtocolError(f"cannot build {api_name(request_class.API_KEY)} v{version}: {e}") from e

    @staticmethod
    def _encode(request: ApiMessage, version: int) -> bytes | bytearray:
        try:
            encoded: bytes | bytearray = request.encode(header=True, framed=True)
            return encoded
        except Exception as e:  # the codec raises a variety of errors for bad field values
            raise ProtocolError(f"cannot encode {api_name(request.API_KEY)} v{version}: {e!r}") from e

    def _write(self, handle: InFlightRequest, data: bytes | bytearray) -> None:
        sock = self._begin_io(handle)
        try:
            if handle.response_class is not None:
                with self._lock:
                    self._pending.append(handle)
            sock.settimeout(self.request_timeout)
            sock.sendall(data)
        except ssl.SSLError as e:
            raise self._fail(self._tls_error(e, f"sending {handle.describe()}")) from e
        except OSError as e:
            raise self._fail(BrokerConnectionError(
                f"broker {self.address}: sending {handle.describe()} failed: {e}")) from e
        finally:
            self._end_io(sock)

    # -- responses -------------------------------------------------------------------------------------------

    def _wait_for(self, handle: InFlightRequest, timeout: float | None) -> None:
        """Read responses, oldest first, until ``handle`` has its own."""
        wait_until = math.inf if timeout is None else time.monotonic() + timeout
        while not handle._done:
            with self._lock:
                head = self._pending[0] if self._pending else None
            if head is None:  # closed meanwhile: close() failed every pending request
                handle._set_error(self._closed_error(handle))
                return
            self._read_response(head, wait_until, timeout)

    def _read_response(self, head: InFlightRequest, wait_until: float, timeout: float | None) -> None:
        sock = self._begin_io(head)
        try:
            self._io_sock, self._io_until = sock, min(wait_until, head.deadline)
            frame = self._reader.next_frame()
            response = self._decode(head, frame)
        except _WouldBlock:
            if time.monotonic() < head.deadline:
                raise TimeoutError(f"no response to {head.describe()} from {self.address} "
                                   f"within {timeout} s; it is still in flight") from None
            raise self._fail(BrokerConnectionError(
                f"broker {self.address}: no response to {head.describe()} "
                f"within {self.request_timeout * 1000:.0f} ms")) from None
        except _PeerClosed:
            raise self._fail(self._closed_error(head)) from None
        except ssl.SSLError as e:  # an alert after the handshake: TLS 1.3 servers refuse client certificates so
            raise self._fail(self._tls_error(e, f"reading the response to {head.describe()}")) from e
        except OSError as e:
            raise self._fail(BrokerConnectionError(
                f"broker {self.address}: reading the response to {head.describe()} failed: {e}")) from e
        except ProtocolError as e:
            raise self._fail(ProtocolError(f"broker {self.address}, {head.describe()}: {e}")) from e
        finally:
            self._io_sock = None
            self._end_io(sock)
        with self._lock:
            if self._pending and self._pending[0] is head:
                self._pending.popleft()
        head._set_response(response)

    def _recv_into(self, view: memoryview) -> int:
        sock = self._io_sock
        assert sock is not None
        sock.settimeout(max(self._io_until - time.monotonic(), 0.0))
        try:
            n = sock.recv_into(view)
        except (TimeoutError, BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise _WouldBlock() from None
        if n == 0:
            raise _PeerClosed()
        return n

    def _decode(self, head: InFlightRequest, frame: memoryview) -> ApiResponse:
        if len(frame) < 4:
            raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
        correlation_id = _SIZE.unpack_from(frame, 0)[0]
        if correlation_id != head.correlation_id:
            raise ProtocolError(f"response correlation id {correlation_id} does not match the oldest "
                                f"in-flight request")
        response_class = head.response_class
        assert response_class is not None
        version = head.api_version
        try:
            pos = 4
            if head.api_key != ApiKey.API_VERSIONS and response_class.flexible_version_q(version):
                pos = _skip_tagged_fields(frame, pos)  # response header v1
            body = frame[pos:]
            if head.api_key == ApiKey.API_VERSIONS and version > 0 and len(body) >= 2 \
                    and _ERROR_CODE.unpack_from(body, 0)[0] == ErrorCode.UNSUPPORTED_VERSION:
                version = 0  # KIP-511: the broker answers a version it does not speak with a v0 body
            response: ApiResponse = response_class.decode(body, version=version)
            return response
        except Exception as e:  # the codec raises struct.error, ValueError, IndexError, UnicodeDecodeError...
            raise ProtocolError(f"cannot decode the {api_name(head.api_key)} v{version} response "
                                f"({len(frame)} bytes): {e!r}") from e

    # -- closing ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the socket and fail every in-flight request; safe from any thread, interrupts a blocked read."""
        self._shut(BrokerConnectionError(f"connection to broker {self.address} was closed"))

    def _fail(self, error: BaseException) -> BaseException:
        """Close after an I/O or protocol error and hand the error to every in-flight request."""
        log.debug("closing connection to %s: %s", self.address, error)
        self._shut(error)
        return error

    def _shut(self, error: BaseException) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
            pending, self._pending = self._pending, deque()
            busy = self._busy
        for handle in pending:
            handle._set_error(error)
        if sock is None:
            return
        try:
            # the plain socket's shutdown, also for a TLS socket: SSLSocket.shutdown would drop its SSL object
            # under a thread that is reading with it; this wakes that thread's recv instead
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass
        if not busy:  # otherwise the thread doing I/O closes it in _end_io, so the fd is not reused under it
            sock.close()

    def _closed_error(self, handle: InFlightRequest) -> BrokerConnectionError:
        if self._sock is None:
            return BrokerConnectionError(f"connection to broker {self.address} was closed "
                                         f"before the response to {handle.describe()}")
        return BrokerConnectionError(f"broker {self.address} closed the connection "
                                     f"before the response to {handle.describe()}")

    def _begin_io(self, handle: InFlightRequest) -> socket.socket:
        with self._lock:
            sock = self._sock
            if sock is None:
                error = self._closed_error(handle)
                handle._set_error(error)
                raise error
            self._busy = True
            return sock

    def _end_io(self, sock: socket.socket) -> None:
        with self._lock:
            self._busy = False
            closed_meanwhile = self._sock is not sock
        if closed_meanwhile:
            sock.close()
