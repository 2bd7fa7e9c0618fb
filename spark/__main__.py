"""``spark-submit`` entry point of the batch audit jobs (against a cluster in production).

    spark-submit --jars "$(tr : , < ~/.cache/httpbus/realservices/spark-*.classpath)" \\
        --py-files httpbus.zip spark/__main__.py \\
        --job job.json --kafka broker:9092 --topic httpbus.audit --out result.json

``job.json`` is an :class:`~spark.jobs.AuditJob` (``httpbus audit job`` writes one from
the metastore); the result is an :class:`~spark.jobs.AuditOutput` as JSON, which
``httpbus audit load result.json`` stores. ``--files PATH`` reads text files of events instead
of Kafka.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .jobs import AuditJob, run_batch
from .schema import read_files, read_kafka
from .session import build_session


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark", description=__doc__)
    p.add_argument("--job", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--kafka", help="bootstrap servers of the audit topic")
    p.add_argument("--topic", default="httpbus.audit")
    p.add_argument("--files", help="text files of events (instead of Kafka)")
    p.add_argument("--master", default=None, help="default: what spark-submit says")
    args = p.parse_args(argv)
    if bool(args.kafka) == bool(args.files):
        p.error("give exactly one of --kafka and --files")
    job = AuditJob.model_validate_json(args.job.read_text())
    spark = build_session(args.master)
    events = (
        read_files(spark, args.files) if args.files else read_kafka(spark, args.kafka, args.topic)
    )
    args.out.write_text(run_batch(spark, events, job).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
