"""A Spark streaming job: page views per page and 10-second window, from a group's ZooKeeper offsets.

    spark-submit --master 'local[2]' examples/spark_streaming_job.py [--seconds 40]
    spark-submit --master 'local[2]' examples/spark_streaming_job.py --zookeeper zk1:2181/kafka --topic clicks

It reads topic ``clicks`` (page views as JSON, one per message: ``{"page": "/pricing", "user": "u17",
"ms": 42}``) as group ``clicks-per-page``, starting where the group's offsets in ZooKeeper say
(``startingOffsets=committed``), counts views per page per window, writes each closed window to topic
``clicks-per-page`` (which must exist) with the metaq sink, and keeps the group's ZooKeeper offsets up to
date (so ``kafka-consumer-groups``-style tools see its lag). Spark's checkpoint, not ZooKeeper, is what a
restart resumes from: pass ``--checkpoint`` to keep it (by default it is temporary and deleted at the
end). Without ``--zookeeper`` it starts an embedded ZooKeeper and broker and produces fake page views
while it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import window

import metaq.spark
from metaq.spark.embedded import CLICK_SCHEMA, ClickStream, embedded_cluster, ensure_topic


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", help="zookeeper.connect of an existing cluster (default: embedded)")
    parser.add_argument("--topic", default="clicks", help="a topic of JSON page views (default: clicks)")
    parser.add_argument("--output-topic", default="clicks-per-page")
    parser.add_argument("--group", default="clicks-per-page")
    parser.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one, deleted at the end)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to run after the first batch")
    return parser.parse_args()


@contextlib.contextmanager
def cluster(args: argparse.Namespace) -> Iterator[tuple[str, ClickStream | None]]:
    """The given cluster, or the embedded default with a producer of fake page views running."""
    if args.zookeeper:
        yield args.zookeeper, None
        return
    with embedded_cluster() as zk:
        ensure_topic(zk, args.topic, partitions=4)
        ensure_topic(zk, args.output_topic, partitions=1)
        clicks = ClickStream(zk, args.topic, rate=300)
        clicks.start()
        try:
            yield zk, clicks
        finally:
            clicks.finish()


@contextlib.contextmanager
def checkpoint_dir(given: str | None) -> Iterator[str]:
    """``--checkpoint``, or a temporary directory deleted on exit (a rerun then starts afresh)."""
    if given:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="metaq-streaming-checkpoint-") as temporary:
        yield temporary


def views_per_page(clicks: DataFrame) -> DataFrame:
    """Closed 10-second windows of views per page, as (key, value) rows for the metaq sink."""
    counts = (clicks.withWatermark("timestamp", "2 seconds")
              .groupBy(window("timestamp", "10 seconds"), clicks.value.page.alias("page"))
              .count())
    return counts.selectExpr("page AS key", "named_struct('page', page, 'window_start', "
                             "CAST(window.start AS STRING), 'views', count) AS value")


def main() -> None:
    args = parse_args()
    spark = (SparkSession.builder.appName("metaq-streaming-example")
             .config("spark.sql.shuffle.partitions", "4")  # the default 200 state stores crawl on local[2]
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    metaq.spark.register(spark)
    with checkpoint_dir(args.checkpoint) as checkpoint, cluster(args) as (zk, clicks_stream):
        source = {"zookeeper.connect": zk, "subscribe": args.topic, "group.id": args.group,
                  "startingOffsets": "committed", "auto.offset.reset": "earliest", "maxOffsetsPerTrigger": "5000",
                  "valueFormat": "json", "valueSchema": CLICK_SCHEMA}
        clicks = spark.readStream.format("metaq").options(**source).load()
        query = (views_per_page(clicks).writeStream.format("metaq")
                 .option("zookeeper.connect", zk).option("topic", args.output_topic).option("valueFormat", "json")
                 .option("checkpointLocation", checkpoint).outputMode("append").start())
        report(query, args.seconds)
        if clicks_stream is not None:
            print(f"stopping the producer after {clicks_stream.finish():,} page views; draining the backlog")
        query.processAllAvailable()  # a graceful stop: between batches, after the backlog
        committed = metaq.spark.stop_query(query, source)  # commits the last batch's end if Spark has not
        print(f"stopped; last batch's offsets committed to ZooKeeper: {committed or 'already there'}")
        show_results(spark, zk, args.output_topic)
        lag = metaq.spark.snapshot_offsets({**source, "startingOffsets": "committed"}).rows
        print(f"group {args.group}: lag {lag:,} in ZooKeeper after the stop")


def report(query: object, seconds: float) -> None:
    """Print one line per micro-batch for ``seconds`` after the first one (start-up takes a while)."""
    print("waiting for the first micro-batch (Spark starts its Python workers first)...")
    seen, deadline = -1, float("inf")
    while time.monotonic() < deadline:
        time.sleep(0.5)
        progress = query.lastProgress  # type: ignore[attr-defined]
        if progress and progress["batchId"] != seen and progress["numInputRows"]:
            seen = progress["batchId"]
            deadline = min(deadline, time.monotonic() + seconds)
            end = json.loads(progress["sources"][0]["endOffset"])
            took = progress["durationMs"]["triggerExecution"]
            print(f"batch {seen}: {progress['numInputRows']:,} views in {took} ms, offsets now {end}")


def show_results(spark: SparkSession, zk: str, topic: str) -> None:
    results = (spark.read.format("metaq")
               .options(**{"zookeeper.connect": zk, "subscribe": topic, "valueFormat": "json",
                           "valueSchema": "page STRING, window_start STRING, views BIGINT"}).load())
    print(f"closed windows written to topic {topic}:")
    results.select("value.*").orderBy("window_start", "page").show(20, truncate=False)


if __name__ == "__main__":
    main()
