"""metaq.zkclient.PollHandler carrying a real ZooKeeper session."""

from __future__ import annotations

from metaq.zkclient import PollHandler, connect


def test_sessions_use_it(zk_connect: str) -> None:
    client = connect(zk_connect)
    try:
        assert isinstance(client.handler, PollHandler)
        client.ensure_path("/poll-handler")
        assert client.exists("/poll-handler") is not None
    finally:
        client.stop()
        client.close()
