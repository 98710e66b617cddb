"""A Spark batch job: what is new in a topic since the group's last run, summarised, then committed.

    spark-submit --master 'local[2]' examples/spark_batch_job.py
    spark-submit --master 'local[2]' examples/spark_batch_job.py --zookeeper zk1:2181/kafka --topic clicks \
        --output /data/clicks-summary

The topic holds page views as JSON, one per message: ``{"page": "/pricing", "user": "u17", "ms": 42}``
(``metaq.spark.embedded.fake_click`` makes them). Each run pins its range first (from the group's
ZooKeeper offsets to the logs' ends), reads exactly that range, writes a per-page summary as Parquet to
``--output``, and only then commits the range's end to the group's ZooKeeper offsets: a run that fails is
simply run again, and reads the same range. Without ``--zookeeper`` it starts an embedded ZooKeeper and
broker, and shows two runs with new page views in between (the second run reads only those). Without
``--output`` the summaries go to a temporary directory that is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.functions import approx_count_distinct, avg, col, count, round

import metaq.spark
from metaq.spark.embedded import CLICK_SCHEMA, embedded_cluster, ensure_topic, produce_clicks


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", help="zookeeper.connect of an existing cluster (default: embedded)")
    parser.add_argument("--topic", default="clicks", help="a topic of JSON page views (default: clicks)")
    parser.add_argument("--group", default="clicks-daily")
    parser.add_argument("--output", help="directory for the Parquet summaries (default: a temporary one, "
                                         "deleted at the end)")
    return parser.parse_args()


def run_once(spark: SparkSession, options: dict[str, str], output: Path, run: int) -> None:
    """One run of the job: pin, read, summarise, write, commit."""
    bounds = metaq.spark.snapshot_offsets(options)
    print(f"run {run}: {bounds.rows:,} new page views")
    if bounds.rows == 0:
        return
    clicks = spark.read.format("metaq").options(**{**options, **bounds.read_options()}).load()
    summary = clicks.groupBy(col("value.page").alias("page")).agg(
        count("*").alias("views"), approx_count_distinct("value.user").alias("users"),
        round(avg("value.ms"), 1).alias("avg_ms"))
    target = output / f"run-{run}"
    summary.write.mode("overwrite").parquet(str(target))
    spark.read.parquet(str(target)).orderBy("page").show(truncate=False)
    committed = metaq.spark.commit_offsets(options, bounds.ending)  # only after the output is written
    print(f"run {run}: committed {len(committed)} partition offsets to ZooKeeper for group {options['group.id']}")


@contextlib.contextmanager
def output_dir(given: str | None) -> Iterator[Path]:
    """``--output``, or a temporary directory deleted on exit."""
    if given:
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="metaq-batch-summary-") as temporary:
        yield Path(temporary)


def main() -> None:
    args = parse_args()
    spark = SparkSession.builder.appName("metaq-batch-example").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    metaq.spark.register(spark)

    def options(zk: str) -> dict[str, str]:
        return {"zookeeper.connect": zk, "subscribe": args.topic, "group.id": args.group,
                "startingOffsets": "committed", "valueFormat": "json", "valueSchema": CLICK_SCHEMA}

    with output_dir(args.output) as output:
        if args.zookeeper:
            run_once(spark, options(args.zookeeper), output, 1)
        else:
            with embedded_cluster() as zk:
                ensure_topic(zk, args.topic, partitions=4)
                produce_clicks(zk, args.topic, 5000, seed=1)
                run_once(spark, options(zk), output, 1)
                produce_clicks(zk, args.topic, 700, seed=2)
                run_once(spark, options(zk), output, 2)
                run_once(spark, options(zk), output, 3)
        if args.output:
            print(f"summaries in {output}")
    spark.stop()


if __name__ == "__main__":
    main()
