"""Google Cloud Pub/Sub as the event source of a streaming job: one JSON event per message.

`ReadPubSubEvents`: each message is one event, a JSON object; the
column mapping names its keys (`user`, `partition`, optional `value`). The
event time comes either from a key of the object (`timestamp`, parsed like a
file column with `timestamp_format` and `timezone`) or from a message
attribute (`timestamp_attribute`, milliseconds since the epoch or RFC 3339),
which Beam's `ReadFromPubSub` also uses for the source watermark.

Which records arrive late must not depend on other units' records (a release would
then count more of the others' data when one unit is present). With a JSON key the
watermark follows the messages' publish times, which Pub/Sub stamps on arrival and
no record's content sets: a record is dropped as late exactly when it is published
after its window's release time, a fact about itself. With an attribute, Dataflow
and Flink estimate the watermark from the attribute values of the messages in the
backlog, so one unit's old (or future) timestamps hold back (or advance) every
window; only the DirectRunner holds its Pub/Sub watermark at the wall clock
(`WALL_CLOCK_RUNNERS`). So an attribute is read on the DirectRunner only, and a
stream runs on Dataflow or the DirectRunner only (`watermark_refusal`;
docs/proofs/pipelines.run.stream.md, "Late data").
Messages are grouped per bundle
into `EVENT_SCHEMA` record batches and converted with the file readers' code
(`readers.to_events`); a message that is not a JSON object, or lacks a mapped
key, fails the pipeline with one line naming the subscription, message id and
key.

Releases of a streaming job are written per window to files (`pipelines.run.runner`).

Needs `google-cloud-pubsub` (the `pubsub` extra); set PUBSUB_EMULATOR_HOST
to use the Pub/Sub emulator.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.gcp.pubsub import PubsubMessage, ReadFromPubSub
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from dpstream.connectors import timestamps
from dpstream.connectors.errors import InputError
from dpstream.connectors.readers import to_events
from dpstream.connectors.schema import PUBLISHED, WALL_CLOCK_RUNNERS, EventColumns

FORMAT = "pubsub"
BATCH_MESSAGES = 1000
_TOPIC = re.compile(r"^projects/[^/]+/topics/[^/]+$")
_SUBSCRIPTION = re.compile(r"^projects/[^/]+/subscriptions/[^/]+$")
_EVENT_TIME = "\x00event_time"  # the column that holds attribute timestamps during conversion


PUBLISH_TIME_RUNNERS = ("DataflowRunner", "TestDataflowRunner")
"""Runners whose Pub/Sub read, without a timestamp attribute, holds its watermark at the publish time of the oldest
message not yet acknowledged (Dataflow's documented guarantee), so no record published before a window's release
arrives behind it. Beam's own Pub/Sub read, which other runners (Flink, Spark) use, estimates its watermark from
the messages it has recently pulled, a heuristic other users' messages move: refused there."""


def watermark_refusal(source: "PubSubSource", runner: str) -> str | None:
    """Why `source` may not be read on the runner named `runner`, or None: on a runner whose watermark follows the
    event time of a message attribute (`timestamp_attribute`; every runner but `WALL_CLOCK_RUNNERS`), or whose
    watermark is a heuristic (every runner but those and `PUBLISH_TIME_RUNNERS`), one unit's messages could decide
    which of the other units' records are dropped as late."""
    if runner in WALL_CLOCK_RUNNERS:
        return None
    if runner not in PUBLISH_TIME_RUNNERS:
        return (f"{source.path}: a Pub/Sub stream runs on Dataflow or the DirectRunner; on {runner} Beam's Pub/Sub "
                f"read estimates its watermark from the messages it has pulled, so whether one user's record "
                f"arrives late could depend on other users' messages, beyond the contribution bounds")
    if source.timestamp_attribute is None:
        return None
    return (f"{source.path}: input.timestamp_attribute {source.timestamp_attribute!r} sets the Pub/Sub watermark on "
            f"{runner}, so one user's timestamps could decide which of the other users' records are dropped as late, "
            f"beyond the contribution bounds; put the event time in the message body and name its key in "
            f"input.timestamp (the watermark then follows Pub/Sub's publish times), or run on the DirectRunner")


def check_topic(where: str, topic: str) -> None:
    if not isinstance(topic, str) or not _TOPIC.match(topic):
        raise ValueError(f"{where} must be a topic name projects/PROJECT/topics/TOPIC, got {topic!r}")


@dataclass(frozen=True)
class PubSubSource:
    """A Pub/Sub subscription (or a topic, read through a temporary subscription) of JSON events.

    Exactly one of `subscription` and `topic`; exactly one of `timestamp`
    (a JSON key) and `timestamp_attribute` (a message attribute).
    """

    user: str
    partition: str
    subscription: str | None = None
    topic: str | None = None
    timestamp: str | None = None
    timestamp_attribute: str | None = None
    value: str | None = None
    timestamp_format: str = "auto"
    timezone: str = "UTC"

    format = FORMAT

    def __post_init__(self) -> None:
        if (self.subscription is None) == (self.topic is None):
            raise ValueError(f"a pubsub input needs exactly one of input.subscription and input.topic, "
                             f"got subscription={self.subscription!r}, topic={self.topic!r}")
        if self.subscription is not None and not _SUBSCRIPTION.match(self.subscription):
            raise ValueError(f"input.subscription must be projects/PROJECT/subscriptions/NAME, got {self.subscription!r}")
        if self.topic is not None:
            check_topic("input.topic", self.topic)
        if (self.timestamp is None) == (self.timestamp_attribute is None):
            raise ValueError(f"a pubsub input needs exactly one of input.timestamp (a JSON key) and "
                             f"input.timestamp_attribute (a message attribute), got timestamp={self.timestamp!r}, "
                             f"timestamp_attribute={self.timestamp_attribute!r}")
        for key in ("user", "partition"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ValueError(f"input.{key} must be a non-empty string, got {getattr(self, key)!r}")
        timestamps.check_format(self.timestamp_format, self.timezone)

    @property
    def path(self) -> str:
        """The subscription or topic read (reports name it as the input's path)."""
        if self.subscription is not None:
            return self.subscription
        assert self.topic is not None, "__post_init__ requires exactly one of subscription and topic"
        return self.topic

    @property
    def columns(self) -> dict[str, str]:
        """Event field -> JSON key (the timestamp only when it comes from a key)."""
        mapping = {"user": self.user, "partition": self.partition}
        if self.timestamp is not None:
            mapping["timestamp"] = self.timestamp
        if self.value is not None:
            mapping["value"] = self.value
        return mapping


def messages_to_events(source: PubSubSource, messages: list[tuple[bytes, int, str]]) -> pa.RecordBatch:
    """(data, element timestamp in microseconds, message id) triples -> one EVENT_SCHEMA record batch; with a
    JSON-key event time the element timestamp is the publish time, appended as the `PUBLISHED` column."""
    objects = []
    for data, _, message_id in messages:
        try:
            event = json.loads(data)
        except json.JSONDecodeError as err:  # msg names the problem; the message's text is never quoted
            raise InputError(f"{source.path}: message {message_id}: not valid JSON: {err.msg} (character "
                             f"{err.pos + 1})") from err
        except UnicodeDecodeError as err:  # its own message quotes the bytes
            raise InputError(f"{source.path}: message {message_id}: not valid JSON: not UTF-8 text (byte "
                             f"{err.start + 1})") from err
        if not isinstance(event, dict):
            raise InputError(f"{source.path}: message {message_id}: expected a JSON object, got {type(event).__name__}")
        objects.append(event)
    columns = dict(source.columns)
    arrays = {}
    for field, key in columns.items():
        values = [event.get(key) for event in objects]
        try:
            arrays[key] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed JSON types: text, so the conversion names the problem
            arrays[key] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string())
    micros = np.fromiter((m[1] for m in messages), dtype=np.int64, count=len(messages))
    if source.timestamp_attribute is None:
        conversion = EventColumns(source.user, columns["timestamp"], source.partition, source.value,
                                  source.timestamp_format, source.timezone)
    else:
        arrays[_EVENT_TIME] = pa.array(micros, pa.timestamp("us", tz="UTC"))
        conversion = EventColumns(source.user, _EVENT_TIME, source.partition, source.value, "auto", source.timezone)
    events = to_events(pa.table(arrays), conversion, source.path, lambda i: f"message {messages[i][2]}")
    if source.timestamp_attribute is not None:
        return events
    assert events.num_rows == len(messages), "to_events keeps every row or refuses the batch"
    return events.append_column(PUBLISHED, pa.array(micros, pa.int64()))


class _ToEventBatches(beam.DoFn):
    """Messages -> EVENT_SCHEMA batches of at most BATCH_MESSAGES, one or more per bundle.

    A batch travels at the earliest timestamp of its messages, in the global
    window, so it never runs ahead of the watermark its messages hold.
    """

    def __init__(self, source: PubSubSource):
        self._source = source
        self._batches = Metrics.counter("dpstream", "input_batches")

    def start_bundle(self) -> None:
        self._pending: list[tuple[bytes, int, str]] = []

    def process(self, message: PubsubMessage, timestamp=beam.DoFn.TimestampParam):
        self._pending.append((message.data, timestamp.micros, message.message_id or "(no id)"))
        if len(self._pending) >= BATCH_MESSAGES:
            yield TimestampedValue(*self._flush())

    def finish_bundle(self):
        if self._pending:
            batch, timestamp = self._flush()
            yield WindowedValue(batch, timestamp, [GlobalWindow()])

    def _flush(self) -> tuple[pa.RecordBatch, Timestamp]:
        pending, self._pending = self._pending, []
        self._batches.inc()
        return messages_to_events(self._source, pending), Timestamp(micros=min(m[1] for m in pending))


class ReadPubSubEvents(beam.PTransform):
    """A Pub/Sub source as an unbounded PCollection of `pyarrow.RecordBatch` in EVENT_SCHEMA (module docstring)."""

    def __init__(self, source: PubSubSource, label: str | None = None) -> None:
        super().__init__(label)
        self.source = source

    def default_label(self) -> str:
        return "ReadPubSubEvents"

    def display_data(self) -> dict:
        return {"source": self.source.path, "timestamp_attribute": self.source.timestamp_attribute or ""}

    def expand(self, pbegin):
        refusal = watermark_refusal(self.source, type(pbegin.pipeline.runner).__name__)
        if refusal is not None:
            raise ValueError(refusal)
        return (
            pbegin
            | "Read messages" >> ReadFromPubSub(
                topic=self.source.topic, subscription=self.source.subscription,
                with_attributes=True, timestamp_attribute=self.source.timestamp_attribute)
            | "To event batches" >> beam.ParDo(_ToEventBatches(self.source)).with_output_types(pa.RecordBatch)
        )
