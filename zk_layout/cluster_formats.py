"""Codecs of the cluster-wide nodes: the cluster id, the elected controller and the controller epoch
(``/cluster/id``, ``/controller``, ``/controller_epoch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Self

from zk_layout._codec import _dumps, _Fields, _Node, _parse_int_text, now_ms


def encode_controller_epoch(epoch: int) -> bytes:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"a controller epoch must be an integer >= 0, got {epoch!r}")
    return str(epoch).encode("ascii")


def decode_controller_epoch(path: str, raw: bytes | None) -> int:
    node = _Node(path, raw)
    return _parse_int_text(node, node.text().strip(), "the controller epoch", signed=False)


@dataclass(frozen=True)
class ClusterId:
    """``/cluster/id``: ``{"version":"1","id":"<22-char URL-safe base64 UUID>"}`` (version is a string)."""

    id: str
    version: str = "1"

    def encode(self) -> bytes:
        return _dumps({"version": self.version, "id": self.id})

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        cluster_id = fields.str("id")
        if not cluster_id:
            node.fail("empty cluster id")
        version = fields.value("version", "1")
        if isinstance(version, bool) or not isinstance(version, str | int):
            node.fail(f"'version' must be a string, got {version!r:.40}")
        return cls(id=cluster_id, version=str(version))


@dataclass(frozen=True)
class ControllerInfo:
    """``/controller`` (ephemeral): the elected controller. v2 (Kafka 3.x) adds ``kraftControllerEpoch``."""

    broker_id: int
    timestamp_ms: int = field(default_factory=now_ms)
    version: int = 1
    kraft_controller_epoch: int | None = None

    def encode(self) -> bytes:
        obj: dict[str, object] = {
            "version": self.version,
            "brokerid": self.broker_id,
            "timestamp": str(self.timestamp_ms),
        }
        if self.version >= 2:
            obj["kraftControllerEpoch"] = -1 if self.kraft_controller_epoch is None else self.kraft_controller_epoch
        return _dumps(obj)

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        return cls(
            broker_id=fields.int("brokerid"),
            timestamp_ms=fields.timestamp(),
            version=fields.int("version", 1),
            kraft_controller_epoch=fields.int("kraftControllerEpoch", None),
        )
