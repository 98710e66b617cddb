"""Asking a ZooKeeper server from outside: its four-letter words (is it serving, as what), and free ports to give a
new server.
"""

from __future__ import annotations

import socket


def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter word and return the whole answer. Raises OSError if nobody answers."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def server_mode(host: str, port: int, timeout: float = 1.0) -> str | None:
    """``standalone``, ``leader`` or ``follower`` when the server serves requests, else None."""
    try:
        answer = four_letter_word(host, port, "srvr", timeout)
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (all sockets are held open together so that the
    kernel cannot hand out the same port twice). Another process may still take one before we bind it;
    :meth:`ZooKeeperServer.start` retries with new ports when it chose them itself."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
