# Two entry points, both self-installing into .venv (see README):
#   make demo   installs everything and runs the main job on the embedded default
#   make test   installs everything and runs the whole test suite
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# pytest-xdist workers for make test: each runs whole test modules (--dist loadfile: module-scoped brokers stay
# shared); two on two cores: most integration tests wait on real processes; three starved timing-sensitive ones.
# --no-loadscope-reorder: the modules are handed out longest first (metaq/testing/schedule.py, from
# test-durations.json), not by number of tests; `make test METAQ_STORE_DURATIONS=1` refreshes test-durations.json
TEST_WORKERS ?= 2
# test peers from Debian, as command:package: kcat (librdkafka 2.0.2), tmux (metaq top under a terminal), prometheus
# (metrics scraping), mvn (resolves Apache Kafka's brokers, clients and tools from Maven Central: metaq/testing/maven.py)
DEBIAN_TOOLS := kcat:kcat tmux:tmux prometheus:prometheus mvn:maven
# what building metaq's C extension (metaq/protocol/_legacy_decode.c, setup.py) needs: a C compiler, and Python.h of
# $(PYTHON) (Debian's python3-dev for Debian's python3; another interpreter brings its own headers)
BUILD_TOOLS := gcc:gcc+libc6-dev
HAS_PYTHON_H := $(PYTHON) -c "import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"

.PHONY: install demo test unit lint bench spark-examples clean

install: $(STAMP)

# editable_mode=compat: the default editable install imports metaq through a finder that Spark's data
# source discovery (pkgutil.iter_modules) cannot list, so pyspark_metaq would be found only from the checkout.
$(STAMP): setup.cfg pyproject.toml setup.py metaq/protocol/_legacy_decode.c
	@missing=""; for entry in $(DEBIAN_TOOLS) $(BUILD_TOOLS); do command -v $${entry%%:*} >/dev/null 2>&1 || missing="$$missing $$(echo $${entry#*:} | tr + " ")"; done; \
	$(HAS_PYTHON_H) || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = "0" ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	elif [ -n "$$missing" ]; then echo "tests need Debian packages:$$missing (run make as root to install them)" >&2; fi
	@command -v gcc >/dev/null 2>&1 && $(HAS_PYTHON_H) || { echo "building metaq needs gcc and Python.h for $(PYTHON)" \
	    "(Debian: apt-get install gcc python3-dev, or run make as root)" >&2; exit 1; }
	@command -v java >/dev/null 2>&1 || { echo "java not found: install a JDK (Java 17)" >&2; exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[spark,test]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: install
	$(VENV)/bin/metaq demo

test: install
	$(VENV)/bin/ruff check metaq zk_layout pyspark_metaq tests integration_tests bench examples tools
	$(VENV)/bin/python tools/typecheck.py
# test peers from Maven Central (real Apache Kafka brokers: metaq/testing/apache_kafka.py; Kafka's Java clients and
# tools: metaq/testing/java_peers.py) and Python peers in virtualenvs of their own (metaq/testing/pypeer.py): a
# failure to fetch them stops here, before any test
	$(VENV)/bin/python -m metaq.testing.apache_kafka fetch
	$(VENV)/bin/python -m metaq.testing.java_peers fetch
	$(VENV)/bin/python -m metaq.testing.pypeer fetch
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30; status=$$?; \
	$(VENV)/bin/python tools/compat_table.py || echo "docs/compatibility.md not regenerated" >&2; exit $$status

unit: install
	$(VENV)/bin/python -m pytest -q tests

lint: install
	$(VENV)/bin/ruff check metaq zk_layout pyspark_metaq tests integration_tests bench examples tools
	$(VENV)/bin/python tools/typecheck.py

bench: install
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

spark-examples: install
	for job in batch streaming; do \
	    PATH=$(CURDIR)/$(VENV)/bin:$$PATH SPARK_LOCAL_IP=127.0.0.1 spark-submit --master 'local[2]' \
	        --conf spark.ui.enabled=false --conf spark.log.level=WARN examples/spark_$${job}_job.py || exit 1; \
	done

clean:
	rm -rf $(VENV) build *.egg-info
