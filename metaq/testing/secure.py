"""A broker process serving several listeners at once (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) with test
certificates and SASL users, and the client properties that reach each listener; for tests and benchmarks::

    broker = secure_broker(zk_connect, tmp_path, make_certs(tmp_path / "certs"), plain_users={"alice": "pw"})
    with broker.process:
        Producer({"zookeeper.connect": zk_connect, **broker.client_properties("SASL_SSL", "PLAIN", "alice", "pw")})
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from metaq.broker.process import BrokerProcess, free_port
from metaq.errors import MetaqError
from metaq.testing.certs import Certs

__all__ = ["LISTENERS", "SecureBroker", "secure_broker"]

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class SecureBroker:
    process: BrokerProcess  # not started
    ports: dict[str, int]  # listener (= security protocol) -> port
    certs: Certs
    zk_connect: str

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def add_scram_user(self, user: str, password: str) -> None:
        """SCRAM-SHA-256 and -512 credentials in ZooKeeper, as an operator adds them (``metaq users add``)."""
        done = subprocess.run([sys.executable, "-m", "metaq", "users", "add", user, "--zookeeper", self.zk_connect,
                               "--password", password, "--mechanism", "SCRAM-SHA-256", "--mechanism",
                               "SCRAM-SHA-512"], capture_output=True, timeout=60)
        if done.returncode != 0:
            raise MetaqError(f"metaq users add {user} failed: {done.stderr.decode(errors='replace')}")

    def client_properties(self, protocol: str, mechanism: str | None = None, username: str | None = None,
                          password: str | None = None) -> dict[str, str]:
        """librdkafka-style properties (metaq's client keys) for the ``protocol`` listener."""
        props = {"security.protocol": protocol}
        if "SSL" in protocol:
            props["ssl.ca.location"] = str(self.certs.ca)
        if protocol.startswith("SASL"):
            if not (mechanism and username and password):
                raise ValueError(f"{protocol} needs a mechanism, a username and a password")
            props.update({"sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password})
        return props


def secure_broker(zk_connect: str, data_dir: Path, certs: Certs, *, plain_users: Mapping[str, str],
                  listeners: Sequence[str] = LISTENERS, broker_id: int = 0, process: BrokerProcess | None = None,
                  plaintext: bool = True, **properties: object) -> SecureBroker:
    """A broker (not started; ``process``, or a new one) with one listener per protocol in ``listeners``
    (PLAINTEXT too unless ``plaintext`` is false; the first listener is on the process's port, where
    :meth:`BrokerProcess.start` waits for it to accept), the server certificate of
    ``certs``, every SASL mechanism enabled and ``plain_users`` for SASL/PLAIN (SCRAM users are added in
    ZooKeeper: :meth:`SecureBroker.add_scram_user`)."""
    users = data_dir / f"plain-users-{broker_id}"
    data_dir.mkdir(parents=True, exist_ok=True)
    users.write_text("".join(f"{user}:{password}\n" for user, password in plain_users.items()))
    if process is None:
        process = BrokerProcess(zk_connect, broker_id, data_dir)
    names = [n for n in listeners if n != "PLAINTEXT"]
    names = ["PLAINTEXT", *names] if plaintext else names
    ports = {name: process.port if i == 0 else free_port() for i, name in enumerate(names)}
    process.properties.update({
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.certificate.location": certs.server_cert,
        "ssl.key.location": certs.server_key,
        "ssl.ca.location": certs.ca,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.plain.users.file": users,
        **properties,
    })
    return SecureBroker(process, ports, certs, zk_connect)
