"""The ZooKeeper client security keys (metaq.zksecurity) and the znode ACL policy (zk_layout.znode_acls): pure logic."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import Id, Permissions

from metaq.broker.config import BrokerConfig
from metaq.consumer.config import ConsumerConfig
from metaq.errors import ConfigError
from metaq.producer.config import ProducerConfig
from metaq.spark.options import ReadOptions, WriteOptions
from metaq.zksecurity import ZooKeeperClientConfig, security_from_properties
from zk_layout.znode_acls import ZnodeAcls, digest_identity, parse_identity, path_kind

SECRET = "pa55-w0rd-never-shown"
BASE = {"group.id": "etl", "zookeeper.connect": "127.0.0.1:2181"}
OPS = digest_identity("ops", "ops-secret")


def test_digest_identity_matches_what_zookeeper_computes() -> None:
    # what a real ZooKeeper 3.9 server reported (getAcl) for a session that ran `addauth digest alice:pw`
    assert digest_identity("alice", "pw") == "digest:alice:V55/p2T0OpjQ+low3NVAH4aLvm0="


def test_auth_inline_and_from_file(tmp_path: Path) -> None:
    inline = security_from_properties({"zookeeper.auth": f"digest:alice:{SECRET}"})
    assert inline.auth_data == (("digest", f"alice:{SECRET}"),)
    assert inline.identities == ["digest:alice"]
    path = tmp_path / "zk-auth"
    path.write_text(f"digest:alice:{SECRET}\n")
    assert security_from_properties({"zookeeper.auth": f"file:{path}"}).auth_data == inline.auth_data
    assert "auth_data" not in repr(inline) and SECRET not in repr(inline) and SECRET not in str(inline)


@pytest.mark.parametrize("value", [f"alice:{SECRET}", f"sasl:alice:{SECRET}", "digest:alice", "digest::pw"])
def test_malformed_auth_is_refused_without_echoing_it(value: str) -> None:
    with pytest.raises(ConfigError, match="zookeeper.auth.*digest:user:password") as e:
        security_from_properties({"zookeeper.auth": value})
    assert SECRET not in str(e.value)


def test_missing_auth_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"cannot read config 'zookeeper.auth' file {tmp_path}/none: No such file"):
        security_from_properties({"zookeeper.auth": f"file:{tmp_path}/none"})


def test_set_acl_needs_auth() -> None:
    with pytest.raises(ConfigError, match="'zookeeper.set.acl': true needs 'zookeeper.auth'"):
        ConsumerConfig.from_properties({**BASE, "zookeeper.set.acl": "true"})
    config = ConsumerConfig.from_properties({**BASE, "zookeeper.set.acl": "true",
                                             "zookeeper.auth": f"digest:etl:{SECRET}",
                                             "zookeeper.acl.ops.identity": OPS})
    acls = config.zookeeper_security().acls
    assert acls == ZnodeAcls((OPS,), world_read=True)


def test_ops_identity_must_be_a_hash_not_a_password() -> None:
    with pytest.raises(ConfigError, match="zookeeper.acl.ops.identity.*not a password"):
        ZooKeeperClientConfig.from_properties({"zookeeper.acl.ops.identity": "digest:ops:plain-password"})
    with pytest.raises(ConfigError, match="is not scheme:id"):
        parse_identity("ops")
    assert parse_identity("x509:CN=ops") == Id("x509", "CN=ops")


def test_keystores_must_be_pem_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.truststore.type.*openssl pkcs12"):
        ZooKeeperClientConfig.from_properties({"zookeeper.ssl.truststore.type": "JKS"})
    with pytest.raises(ConfigError, match=f"zookeeper.ssl.truststore.location': {tmp_path}/ca.pem is not"):
        security_from_properties({"zookeeper.ssl.client.enable": "true",
                                  "zookeeper.ssl.truststore.location": f"{tmp_path}/ca.pem"})


def test_tls_options_reach_kazoo(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "client.pem").write_text("x")
    security = security_from_properties({
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.truststore.location": str(tmp_path / "ca.pem"),
        "zookeeper.ssl.keystore.location": str(tmp_path / "client.pem"),
        "zookeeper.ssl.keystore.password": SECRET, "zookeeper.ssl.endpoint.identification.algorithm": ""})
    options = security.kazoo_options()
    assert options == {"use_ssl": True, "ca": str(tmp_path / "ca.pem"), "certfile": str(tmp_path / "client.pem"),
                       "keyfile": str(tmp_path / "client.pem"), "keyfile_password": SECRET, "verify_certs": True,
                       "check_hostname": False}
    assert SECRET not in repr(security)


@pytest.mark.parametrize("config", [
    lambda: ConsumerConfig.from_properties({**BASE, "zookeeper.auth": f"digest:etl:{SECRET}",
                                            "zookeeper.ssl.keystore.password": SECRET}),
    lambda: BrokerConfig.from_properties({"zookeeper.connect": "z:2181", "zookeeper.auth": f"digest:b:{SECRET}",
                                          "zookeeper.set.acl": "true"}),
    lambda: ProducerConfig.from_properties({"zookeeper.connect": "z:2181", "zookeeper.auth": f"digest:p:{SECRET}"}),
    lambda: ReadOptions.parse({"zookeeper.connect": "z:2181", "subscribe": "t",
                               "zookeeper.auth": f"digest:s:{SECRET}"}, streaming=False),
    lambda: WriteOptions.parse({"zookeeper.connect": "z:2181", "topic": "t", "zookeeper.auth": f"digest:s:{SECRET}"}),
])
def test_no_config_object_shows_a_secret(config) -> None:
    made = config()
    shown = repr(made)
    assert SECRET not in shown and SECRET not in str(made)
    assert "zookeeper" in shown  # the object itself is still described
    auth = getattr(made, "zookeeper_auth", None)
    if auth is not None:  # the value itself, as a log line or an error message would show it, is masked too
        assert SECRET not in f"{auth} {auth!r}"


def test_broker_accepts_set_acl_instead_of_ignoring_it() -> None:
    config = BrokerConfig.from_properties({"zookeeper.connect": "z:2181", "zookeeper.auth": "digest:broker:pw",
                                           "zookeeper.set.acl": "true"})
    assert config.zookeeper_security().acls is not None


def test_spark_option_errors_name_the_option() -> None:
    with pytest.raises(ConfigError, match="metaq source: config 'zookeeper.set.acl'"):
        ReadOptions.parse({"zookeeper.connect": "z:2181", "subscribe": "t", "zookeeper.set.acl": "true"},
                          streaming=False)


@pytest.mark.parametrize(("path", "kind"), [
    ("/consumers", "open"),
    ("/consumers/etl", "group"),
    ("/consumers/etl/offsets/t/0", "group"),
    ("/brokers/ids/1", "cluster"),
    ("/brokers/topics/t/partitions/0/state", "cluster"),
    ("/config/topics/t", "cluster"),
    ("/config/changes/config_change_", "cluster"),
    ("/config/users/alice", "sensitive"),
    ("/config/users", "sensitive"),
    ("/kafka-acl/Topic/t", "sensitive"),
    ("/kafka-acl-extended/prefixed/Topic/t", "sensitive"),
    ("/kafka-acl-changes/acl_changes_", "sensitive"),
    ("/admin/delete_topics/t", "cluster"),
    ("/controller", "cluster"),
    ("/something-else", "open"),
])
def test_path_kinds(path: str, kind: str) -> None:
    assert path_kind(path) == kind


def test_acl_lists() -> None:
    policy = ZnodeAcls((OPS,))
    ops = Id("digest", OPS[len("digest:"):])
    creator = Id("auth", "")
    world = Id("world", "anyone")
    group = {(a.id, a.perms) for a in policy.acl_for("group")}
    assert group == {(creator, Permissions.ALL), (ops, Permissions.ALL), (world, Permissions.READ)}
    assert {(a.id, a.perms) for a in policy.acl_for("cluster")} == group
    assert {(a.id, a.perms) for a in policy.acl_for("sensitive")} == {(creator, Permissions.ALL),
                                                                      (ops, Permissions.ALL)}
    assert {(a.id, a.perms) for a in policy.acl_for("open")} == {(world, Permissions.ALL)}
    private = ZnodeAcls((OPS,), world_read=False)
    assert world not in {a.id for a in private.acl_for("group")}
    assert world in {a.id for a in private.acl_for("cluster")}


def test_describe_configs_values_never_show_zookeeper_auth() -> None:
    """DescribeConfigs hides keys named *password*; zookeeper.auth is not, so its value must mask itself."""
    from metaq.broker.topic_config import config_properties

    config = BrokerConfig.from_properties({"zookeeper.connect": "z:2181", "zookeeper.auth": f"digest:b:{SECRET}",
                                           "inter.broker.sasl.password": SECRET})
    shown = config_properties(config)
    assert shown["zookeeper.auth"] == "********" and shown["inter.broker.sasl.password"] == "********"
