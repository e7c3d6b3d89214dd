"""Job files: the example loads; every bad value fails at load with FILE: KEY must be ..., got VALUE."""
import os

import pytest

from dpstream.pipelines.config import jobfile
from dpstream.pipelines.config.specs import TopKSpec

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "flights.toml")

BASE = """
[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B"]
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-04
[privacy]
scope = "test"
epsilon = 1.0
delta = 1e-6
[[release]]
kind = "topk"
name = "top_k"
k = 1
"""


def _load(tmp_path, text, name="job.toml"):
    path = tmp_path / name
    path.write_text(text)
    return jobfile.load(str(path))


def test_the_bundled_example_loads():
    job = jobfile.load(EXAMPLE)
    assert job.window.count == 365 and job.window.size == 86400
    assert [r.kind for r in job.releases] == ["histogram", "topk", "peak", "svt"]
    assert job.input.user == "tailnum" and len(job.releases[0].partitions) == 104
    assert job.releases[2].period == 30 * 86400 and job.releases[2].maximum == 1100


def test_defaults_and_relative_paths(tmp_path):
    job = _load(tmp_path, BASE)
    assert job.input.path == str(tmp_path / "events.csv")
    assert job.output.path == str(tmp_path / "dpstream-output" / "job") and job.output.format == "parquet"
    assert job.beam.runner == "DirectRunner" and job.beam.seed is None
    assert job.privacy.bounds.max_partitions == 1 and job.privacy.ledger is None
    assert job.releases[0].partitions == ("A", "B") and isinstance(job.releases[0], TopKSpec) and not job.releases[0].counts
    assert job.window.start == 1356998400.0 and job.window.count == 3


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("k = 1", "k = 0", "release.top_k.k must be a positive integer, got 0"),
        ('kind = "topk"', 'kind = "median"', "release.top_k.kind must be one of histogram, topk, peak, svt, quantiles, got 'median'"),
        ('size = "1d"', 'size = "1 fortnight"', "window.size must be a positive duration such as \"1d\", \"6h\", \"30m\" or seconds, or a calendar length such as "
         "\"1day\", \"1week\", \"1month\", \"1y\", got '1 fortnight'"),
        ("end = 2013-01-04", 'end = "2013-02-30"', "window.end must be an ISO 8601 date or date-time such as 2013-01-01, got '2013-02-30'"),
        ("end = 2013-01-04", "end = 2012-12-01", "window.end must be after window.start"),
        ("end = 2013-01-04", "end = 2013-01-04T12:00:00", "window.end 2013-01-04T12:00:00Z is not a window boundary: "
         "windows of 1d from 2013-01-01T00:00:00Z would run past it; set window.end to 2013-01-04T00:00:00Z or "
         "2013-01-05T00:00:00Z"),
        ('size = "1d"', 'size = "1d"\nperiod = "2d"', "window.period must lie in (0, window.size=86400.0]"),
        ('size = "1d"', 'size = "7d"\nperiod = "2d"', "window.end 2013-01-04T00:00:00Z is not a window boundary: "
         "windows of 2d from 2013-01-01T00:00:00Z would run past it; set window.end to 2013-01-03T00:00:00Z or "
         "2013-01-05T00:00:00Z"),
        ("epsilon = 1.0", "epsilon = -1", "privacy.epsilon must lie in [0.0001, 1000], got -1.0"),
        ("delta = 1e-6", "delta = 1", "privacy.delta must lie in (0, 0.01], got 1.0"),
        ("delta = 1e-6", "delta = 1e-6\nmax_partitions = 1.5", "privacy.max_partitions must be a positive integer, got 1.5"),
        ('format = "csv"', 'format = "xlsx"', "input.format must be one of parquet, csv, jsonl, pubsub, got 'xlsx'"),
        ('user = "user"', 'user = ""', "input.user must be a non-empty string, got ''"),
        ('user = "user"', 'usr = "user"', "input.usr is not a known key; allowed:"),
        ('[privacy]', '[privacy]\nbudget = 1', "privacy.budget is not a known key"),
        ('timestamp = "time"', 'timestamp = "time"\ntimezone = "Mars/Olympus"', "input.timezone must be an IANA time zone name"),
        ('timestamp = "time"', 'timestamp = "time"\ntimestamp_format = "unix"', "input.timestamp_format must be one of auto, epoch_s, epoch_ms, epoch_us, epoch_ns, iso8601, got 'unix'"),
        ('partitions = ["A", "B"]', 'partitions = ["A", "A"]', "input.partitions lists a partition more than once"),
        ('name = "top_k"', 'name = "top k"', "release #1: name must be 1 to 100 letters, digits"),
        ("k = 1", "k = 1\n[[release]]\nkind = \"peak\"\nname = \"p\"\nperiod = \"3d\"", "release.p.maximum is required for a peak release"),
        ("k = 1", "k = 1\n[[release]]\nkind = \"topk\"\nname = \"top_k\"\nk = 1", "release.top_k: name is used by more than one release"),
        ("[[release]]", "[output]\nformat = \"xml\"\n[[release]]", "output.format must be one of parquet, csv, jsonl, got 'xml'"),
        ("[[release]]", "[beam]\nseed = -1\n[[release]]", "beam.seed must be an integer >= 0, got -1"),
        ("[[release]]", "[extra]\n[[release]]", "unknown section [extra]"),
        ("k = 1", 'k = 1\nselection = "truncated"',
         "release.top_k.selection applies to histogram releases over unknown partitions (no partitions list), got it on a topk release"),
        ("k = 1", 'k = 1\n[[release]]\nkind = "histogram"\nname = "h"\nselection = "truncated"',
         "release.h.selection applies to histogram releases over unknown partitions (no partitions list), got it on a histogram release with partitions"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, old, new, message):
    assert old in BASE
    with pytest.raises(jobfile.JobFileError) as caught:
        _load(tmp_path, BASE.replace(old, new, 1), "flights.toml")
    text = str(caught.value)
    assert text.startswith(str(tmp_path / "flights.toml") + ": ") and message in text
    assert "\n" not in text


def test_max_windows_is_read_for_batch_and_streaming_inputs(tmp_path):
    streaming = BASE.replace('format = "csv"\npath = "events.csv"',
                             'format = "pubsub"\nsubscription = "projects/p/subscriptions/s"')
    caps = "[privacy]\nmax_windows = 2\nmax_partitions_total = 3\nmax_contributions_total = 4\n"
    for text in (BASE, streaming):
        bounds = _load(tmp_path, text.replace("[privacy]\n", caps)).privacy.bounds
        assert (bounds.max_windows, bounds.max_partitions_total, bounds.max_contributions_total) == (2, 3, 4)


def test_selection_for_unknown_partitions(tmp_path):
    text = BASE.replace('partitions = ["A", "B"]\n', "").replace('kind = "topk"\nname = "top_k"\nk = 1', 'kind = "histogram"\nname = "h"')
    assert _load(tmp_path, text).releases[0].selection == "gaussian"
    assert _load(tmp_path, text + 'selection = "truncated"\n').releases[0].selection == "truncated"
    assert _load(tmp_path, text + 'selection = "distinct"\n').releases[0].selection == "distinct"
    with pytest.raises(jobfile.JobFileError, match="release.h.selection must be one of gaussian, truncated, distinct, got 'laplace'"):
        _load(tmp_path, text + 'selection = "laplace"\n')


def test_clamp_is_a_histogram_flag_off_by_default(tmp_path):
    text = BASE.replace('kind = "topk"\nname = "top_k"\nk = 1', 'kind = "histogram"\nname = "h"')
    assert _load(tmp_path, text).releases[0].clamp is False
    assert _load(tmp_path, text + "clamp = true\n").releases[0].clamp is True
    with pytest.raises(jobfile.JobFileError, match="release.h.clamp must be true or false, got 'no'"):
        _load(tmp_path, text + 'clamp = "no"\n')
    with pytest.raises(jobfile.JobFileError, match="release.top_k.clamp applies to histogram releases"):
        _load(tmp_path, BASE + "clamp = false\n")


def test_unreadable_and_invalid_toml(tmp_path):
    with pytest.raises(jobfile.JobFileError, match=r"missing\.toml: cannot read the job file"):
        jobfile.load(str(tmp_path / "missing.toml"))
    with pytest.raises(jobfile.JobFileError, match=r"job\.toml: not valid TOML"):
        _load(tmp_path, "[input\n")
    with pytest.raises(jobfile.JobFileError, match=r"job\.toml: missing section \[window\]"):
        _load(tmp_path, BASE[: BASE.index("[window]")] + BASE[BASE.index("[privacy]") :])
    with pytest.raises(jobfile.JobFileError, match=r"needs at least one \[\[release\]\] table"):
        _load(tmp_path, BASE[: BASE.index("[[release]]")])
