"""Root conftest: the metaq pytest plugins (fixtures) every test directory can use."""

pytest_plugins = ["metaq.testing.zookeeper", "metaq.testing.broker", "metaq.testing.apache_kafka",
                  "metaq.testing.compat"]
