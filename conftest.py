"""Root conftest: the metaq pytest plugins (fixtures) every test directory can use, and the Hypothesis profile."""

from hypothesis import HealthCheck, settings

pytest_plugins = ["metaq.testing.zookeeper", "metaq.testing.broker", "metaq.testing.kafka_fixtures",
                  "metaq.testing.compat", "metaq.testing.schedule"]

# No per-example deadline and no "too slow" health check: both time the code under test, and on the shared 2-core
# machine (parallel test workers, broker JVMs) a slow example says nothing about metaq. Speed is measured in bench/.
settings.register_profile("metaq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("metaq")
