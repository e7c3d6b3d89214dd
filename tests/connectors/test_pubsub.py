"""Pub/Sub messages -> event batches, and the pubsub input keys of a job file (no emulator needed)."""
import json

import pytest

from dpstream.connectors.errors import InputError
from dpstream.connectors.pubsub import PubSubSource, messages_to_events
from dpstream.connectors.schema import PUBLISHED
from dpstream.pipelines.config import jobfile

SUBSCRIPTION = "projects/p/subscriptions/events"


def test_attribute_and_key_timestamps_give_the_same_events_and_a_key_source_keeps_publish_times():
    """A JSON-key event time leaves the element timestamp, the publish time, as the PUBLISHED column (bounding
    drops a record from the windows released before it was published); an attribute source has none."""
    by_attribute = PubSubSource(user="u", partition="d", subscription=SUBSCRIPTION, timestamp_attribute="ts", value="v")
    by_key = PubSubSource(user="u", partition="d", subscription=SUBSCRIPTION, timestamp="t", value="v")
    micros = 1_357_016_400_000_000  # 2013-01-01T05:00:00Z
    messages = [(json.dumps({"u": 7, "d": "JFK", "v": 2.5, "t": "2013-01-01T05:00:00Z"}).encode(), micros, "1")]
    first = messages_to_events(by_attribute, messages)
    published = [(data, micros + 90_000_000, message_id) for data, _, message_id in messages]  # 90 s later
    second = messages_to_events(by_key, published)
    assert first.equals(second.drop_columns([PUBLISHED]))
    assert first.to_pylist() == [{"user": "7", "timestamp": micros, "partition": "JFK", "value": 2.5}]
    assert second.column(PUBLISHED).to_pylist() == [micros + 90_000_000] and PUBLISHED not in first.schema.names


def test_bad_messages_name_the_subscription_and_message_id():
    source = PubSubSource(user="u", partition="d", subscription=SUBSCRIPTION, timestamp_attribute="ts")
    with pytest.raises(InputError, match=rf"^{SUBSCRIPTION}: message 42: not valid JSON"):
        messages_to_events(source, [(b"{oops", 0, "42")])
    with pytest.raises(InputError, match=rf"^{SUBSCRIPTION}:message 9: column 'd': missing value$"):
        messages_to_events(source, [(b'{"u": "a", "d": "x"}', 0, "8"), (b'{"u": "b"}', 0, "9")])


def test_source_needs_one_place_and_one_time():
    with pytest.raises(ValueError, match="exactly one of input.subscription and input.topic"):
        PubSubSource(user="u", partition="d", timestamp_attribute="ts")
    with pytest.raises(ValueError, match="exactly one of input.timestamp"):
        PubSubSource(user="u", partition="d", topic="projects/p/topics/t")


def test_job_file_with_pubsub_input(tmp_path):
    text = f"""
[input]
format = "pubsub"
subscription = "{SUBSCRIPTION}"
timestamp_attribute = "ts"
user = "u"
partition = "d"
partitions = ["A"]
[window]
size = "1h"
start = 2026-01-01
end = 2026-01-02
[privacy]
scope = "s"
epsilon = 1.0
delta = 1e-6
[[release]]
kind = "histogram"
name = "counts"
[output]
path = "gs://bucket/out"
"""
    (tmp_path / "job.toml").write_text(text)
    job = jobfile.load(str(tmp_path / "job.toml"))
    assert job.input.path == SUBSCRIPTION and job.output.path == "gs://bucket/out"
    (tmp_path / "bad.toml").write_text(text.replace('timestamp_attribute = "ts"\n', 'path = "x.csv"\n'))
    with pytest.raises(jobfile.JobFileError, match=r"bad.toml: input.path is not a known key; allowed: format, subscription"):
        jobfile.load(str(tmp_path / "bad.toml"))
