"""The Spark source against a ZooKeeper that enforces digest authentication: zookeeper.auth in the options
(inline or file:), a clear error without it, and the password in no plan."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.producer import Producer
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from metaq.zksecurity import security_from_properties
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout

pyspark = pytest.importorskip("pyspark")

import metaq.spark  # noqa: E402  (after the skip: needs pyspark)

PASSWORD = "spark-pw-never-in-a-plan"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark_session = (SparkSession.builder.master("local[2]").appName("metaq-spark-zk-security")
                     .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                     .getOrCreate())
    metaq.spark.register(spark_session)
    yield spark_session
    spark_session.stop()


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """ZooKeeper with enforced digest auth, a broker authenticated to it, topic ``t`` with 20 records."""
    work = tmp_path_factory.mktemp("spark-zk")
    server = ZooKeeperServer(tick_time_ms=200, force_sync=False, enforce_auth=True, log_path=work / "zk.log")
    server.start()
    connect = f"{server.connect_string}/spark-{uuid.uuid4().hex}"
    auth = {"zookeeper.auth": "digest:etl:etl-pw"}
    broker = BrokerProcess(connect, 0, work, properties=auth).start()
    try:
        with session(connect, security=security_from_properties(auth)) as client:
            create_topic(ZkLayout(client), "t", 2)
        wait_until(lambda: len(topic_leaders(broker.bootstrap, "t")) == 2, 30, "topic t served")
        with Producer({"zookeeper.connect": connect, **auth}) as producer:
            for i in range(20):
                producer.send("t", b"v%d" % i, partition=i % 2)
            producer.flush(30)
        yield connect
    finally:
        broker.stop()
        server.stop()


def test_batch_read_with_zookeeper_auth(spark: Any, secure_cluster: str, tmp_path: Path) -> None:
    auth_file = tmp_path / "zk-auth"
    auth_file.write_text(f"digest:spark:{PASSWORD}\n")
    for auth in (f"digest:spark:{PASSWORD}", f"file:{auth_file}"):
        df = (spark.read.format("metaq").option("zookeeper.connect", secure_cluster).option("subscribe", "t")
              .option("zookeeper.auth", auth).load())
        assert sorted(row.value for row in df.select("value").collect()) == sorted(b"v%d" % i for i in range(20))
        plan = df._jdf.queryExecution().toString()
        assert PASSWORD not in plan


def test_batch_read_without_auth_names_the_fix(spark: Any, secure_cluster: str) -> None:
    df = spark.read.format("metaq").option("zookeeper.connect", secure_cluster).option("subscribe", "t")
    with pytest.raises(Exception, match="requires authentication .*set zookeeper.auth"):
        df.load().collect()
