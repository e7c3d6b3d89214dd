"""Fuzzing job files with hypothesis: a valid job with keys replaced by hostile values (wrong types, NaN, inf,
huge and tiny numbers, empty and very long strings, lists, tables, booleans), removed, or added. Property: the
job parses, or JobFileError says why in one line naming the file; never any other exception, and a job that
parses also plans (or fails to plan with a RunError that names the file)."""
from __future__ import annotations

import math
import os
import tomllib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner
from tests.pipelines.test_runner import JOB

BASE = tomllib.loads(JOB.replace("[output]", '[[release]]\nkind = "svt"\nname = "alerts"\nmetric = "count"\n'
                                             'maximum = 100\nthreshold = 0.5\nsigma_threshold = 0.5\n[output]'))
HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e-300, 0, -1, 0.0, 2**63, -(2**63), True, False,
                     "", " ", "x" * 5000, "1d", "-1d", "0s", "1e400", "2013-01-01", "9999-12-31", "NaN", [], {},
                     [1, "a"], {"a": 1}]),
    st.integers(), st.floats(), st.text(max_size=20),
)
SECTIONS = ("input", "window", "privacy", "output", "beam")
LONG = os.environ.get("DPSTREAM_FUZZ_EXAMPLES")  # `make audit`: a longer, randomised run


def _paths(document) -> list[tuple]:
    """Every (section, key) and (release index, key) of the document."""
    paths = [(section, key) for section in SECTIONS for key in document.get(section, {})]
    paths += [(index, key) for index, release in enumerate(document["release"]) for key in release]
    return paths


@st.composite
def mutated(draw):
    document = {section: dict(value) for section, value in BASE.items() if section != "release"}
    document["release"] = [dict(release) for release in BASE["release"]]
    for _ in range(draw(st.integers(1, 3))):
        section, key = draw(st.sampled_from(_paths(document) + [("privacy", "unknown_key"), (0, "unknown_key")]))
        table = document["release"][section] if isinstance(section, int) else document[section]
        action = draw(st.sampled_from(["replace", "replace", "delete"]))
        if action == "delete":
            table.pop(key, None)
        else:
            table[key] = draw(HOSTILE)
    return document


@settings(max_examples=int(LONG or 300), deadline=None, derandomize=LONG is None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=mutated())
def test_hostile_job_files_parse_or_fail_with_one_line(tmp_path, document):
    (tmp_path / "events.csv").write_text("user,time,dest\n")
    source = str(tmp_path / "job.toml")
    try:
        job = jobfile.parse(document, source)
    except jobfile.JobFileError as err:
        assert "\n" not in str(err) and str(err).startswith(source), str(err)
        return
    try:
        runner.plan(job)
    except runner.RunError as err:
        assert "\n" not in str(err) and source in str(err), str(err)
