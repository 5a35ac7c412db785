"""`python -m spark_app offsets --manifest job.yaml list|reset|alter ...` (installed:
`streamingjob-offsets --manifest ...`, also in the Spark image): the offsets actions
of `spark_app.api.offsets_admin` for local use, on the job's consumer group.

    offsets --manifest job.yaml list [--partition orders:0 ...]
    offsets --manifest job.yaml reset --to earliest|latest [--partition orders:0 ...]
    offsets --manifest job.yaml reset --to timestamp --timestamp 2026-11-23T05:00:00Z
    offsets --manifest job.yaml alter --partition orders:0=42 --partition orders:1=7

Stop the job first: its next fresh start (a new checkpoint) begins at the new offsets; a run
that restores its checkpoint ignores them. Credentials come from the KAFKA_* environment
variables, as for the runner. Prints one line per partition (or --json); exit codes: 0 done,
2 refused (nothing written), 3 Kafka unavailable or a topic missing, 4 bad manifest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from spark_app.api.manifest import ManifestError, load_manifest
from spark_app.api.offsets_admin import ACTIONS, RESET_TARGETS, OffsetsRefused, request_of
from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.kafka.config import source_options
from spark_app.kafka.errors import KafkaUnavailable, UnknownTopic
from spark_app.kafka.metadata import KafkaMetadata
from spark_app.kafka.offsets_run import run

EXIT_REFUSED, EXIT_KAFKA, EXIT_MANIFEST = 2, 3, 4


def _partition(text: str) -> tuple[str, int, int | None]:
    """topic:partition or topic:partition=offset."""
    where, _, offset = text.partition("=")
    topic, sep, partition = where.rpartition(":")
    if not sep or not topic or not partition.isdigit() or (offset and not offset.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected topic:partition[=offset]")
    return topic, int(partition), int(offset) if offset else None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spark_app offsets", description="Offsets of a job's consumer group."
    )
    parser.add_argument("--manifest", type=Path, required=True, help="the StreamingJob YAML")
    parser.add_argument("--timeout", type=float, default=30.0, help="Kafka timeout (s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--to", choices=RESET_TARGETS, help="reset: where to")
    parser.add_argument("--timestamp", help="reset --to timestamp: epoch ms or RFC 3339")
    parser.add_argument(
        "--partition",
        action="append",
        type=_partition,
        dest="partitions",
        help="topic:partition (list, reset) or topic:partition=offset (alter); repeatable; "
        "default: every partition",
    )
    parser.add_argument("--dry-run", action="store_true", help="show the plan, commit nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        document = yaml.safe_load(args.manifest.read_text())
        manifest = load_manifest(document if isinstance(document, dict) else {})
        options = SourceOptions.parse(source_options(manifest.spec.job.source))
    except (OSError, yaml.YAMLError, ManifestError, OptionError) as exc:
        print(f"{args.manifest}: {exc}", file=sys.stderr)
        return EXIT_MANIFEST
    metadata = KafkaMetadata(options, args.timeout, {"log_level": 0})
    try:
        request = request_of(args.action, args.to, args.timestamp, args.partitions)
        result = run(metadata, request, dry_run=args.dry_run)
    except OffsetsRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (KafkaUnavailable, UnknownTopic) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_KAFKA
    finally:
        metadata.close()
    if args.json:
        print(
            json.dumps(
                {
                    "group": result.group,
                    "action": request.describe(),
                    "dryRun": args.dry_run,
                    "partitions": [p.as_json() for p in result.partitions],
                },
                indent=2,
            )
        )
    else:
        print(("(dry run) " if args.dry_run else "") + result.summary())
        for p in result.partitions:
            print(
                f"{p.topic}\t{p.partition}\tbefore={_num(p.before)}\tafter={_num(p.after)}\t"
                f"log=[{p.log_start}, {p.log_end}]\tlag={p.lag}"
            )
    return 0


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)
