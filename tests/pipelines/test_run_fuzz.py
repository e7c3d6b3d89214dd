"""Whole runs on hypothesis-generated event files: `dpstream run` (in-process, the CLI's own entry point) on CSV,
JSON lines and Parquet files of hostile cells (`tests.connectors.test_reader_fuzz`'s cells: nulls and null tokens,
wrong types, NaN and inf, huge values, bad encodings, ragged rows, duplicated and spaced headers).

Property, for every example: the run either publishes and debits (exit 0, nothing on stderr), or fails with exactly
one line on stderr and exit 2, publishing nothing and leaving the scope's state and debits unchanged. Exit 5 (an
unexpected error) or any other outcome fails the test. CI runs 12 derandomized examples per format;
DPSTREAM_FUZZ_EXAMPLES (set by `make audit`) runs more, randomised. `python -m tests.pipelines.test_run_fuzz`
prints the rows of docs/failures.md's fuzzer table."""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli import main as cli
from tests.connectors.test_reader_fuzz import CELL, COLUMNS, HEADERS, KINDS, TEXT, _csv_cell

LONG = os.environ.get("DPSTREAM_FUZZ_EXAMPLES")
SETTINGS = settings(max_examples=int(LONG or 12), deadline=None, derandomize=LONG is None,
                    suppress_health_check=[HealthCheck.too_slow])
OUTCOMES: dict[str, list[tuple[int, str, bool, bool]]] = defaultdict(list)
"""Per file format: (exit, first line, released?, debited?) of every example run, for the docs table."""

JOB = """[input]
format = "{format}"
path = "{path}"
user = "user"
timestamp = "time"
partition = "dest"
value = "value"
partitions = ["A", "B"]
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-03
[privacy]
scope = "test"
epsilon = 1.0
delta = 1e-6
min_value = 0
max_value = 10
[[release]]
kind = "histogram"
name = "daily"
[output]
format = "jsonl"
path = "out"
"""


def _ledger_state(url: str):
    with Ledger(url) as ledger:
        return ledger.show("test").state, len(ledger.history("test"))


def _run(fmt: str, name: str, write) -> None:
    """Write the events with `write(path)`, run the job, and check the property (module docstring)."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        write(root / name)
        (root / "job.toml").write_text(JOB.format(format=fmt, path=name))
        url = f"sqlite:///{root / 'ledger.db'}"
        with Ledger(url, create=True) as ledger:
            ledger.init_scope("test", 100.0, 1e-4, "approx:release_delta=1e-6")
        before = _ledger_state(url)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["run", str(root / "job.toml"), "--ledger", url, "--output", str(root / "out")])
        released = (root / "out" / "report.json").exists()
        debited = _ledger_state(url) != before
        lines = err.getvalue().strip().splitlines()
        line = (lines[0] if lines else "").replace(directory, "DIR")
        OUTCOMES[fmt].append((code, line, released, debited))
        if code == 0:
            assert not lines and released and debited, (lines, released, debited)
        else:
            assert code == 2 and len(lines) == 1, (code, lines)  # one line: no traceback, never exit 5
            assert not released and not debited, line


@SETTINGS
@given(header=HEADERS, rows=st.lists(st.lists(CELL, max_size=6), max_size=8), latin1=st.booleans())
def test_runs_on_hostile_csv_publish_or_fail_cleanly(header, rows, latin1):
    text = "\n".join([",".join(header)] + [",".join(_csv_cell(c) for c in row) for row in rows]) + "\n"
    _run("csv", "events.csv", lambda path: path.write_bytes(
        text.encode("latin-1" if latin1 else "utf-8", errors="replace")))


@SETTINGS
@given(records=st.lists(st.one_of(st.fixed_dictionaries({name: CELL for name in COLUMNS}),
                                  st.dictionaries(st.sampled_from(COLUMNS + ["usr"]), CELL, max_size=5), CELL),
                        max_size=8))
def test_runs_on_hostile_jsonl_publish_or_fail_cleanly(records):
    text = "".join(json.dumps(record, allow_nan=True) + "\n" for record in records)
    _run("jsonl", "events.jsonl", lambda path: path.write_text(text, encoding="utf-8"))


_VALUES = {"string": st.one_of(TEXT, st.none()), "int64": st.one_of(st.integers(-(2**63), 2**63 - 1), st.none()),
           "float64": st.one_of(st.floats(), st.none()), "bool": st.one_of(st.booleans(), st.none()),
           "timestamp": st.one_of(st.integers(-(2**62), 2**62), st.none()),
           "date": st.one_of(st.integers(-(2**30), 2**30), st.none())}
_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
          "timestamp": pa.timestamp("us"), "date": pa.date32()}
_STORED = {"timestamp": pa.int64(), "date": pa.int32()}


@SETTINGS
@given(columns=st.one_of(st.fixed_dictionaries({name: KINDS for name in COLUMNS}),
                         st.fixed_dictionaries({"user": st.just("string"), "time": st.sampled_from(["timestamp", "string"]),
                                                "dest": st.just("string"), "value": KINDS}),
                         st.dictionaries(st.sampled_from(COLUMNS), KINDS, min_size=1)),
       rows=st.integers(0, 6), data=st.data())
def test_runs_on_parquet_of_any_column_types_publish_or_fail_cleanly(columns, rows, data):
    arrays = {name: pa.array(data.draw(st.lists(_VALUES[kind], min_size=rows, max_size=rows)),
                             type=_STORED.get(kind, _TYPES[kind])).cast(_TYPES[kind])
              for name, kind in columns.items()}
    _run("parquet", "events.parquet", lambda path: pq.write_table(pa.table(arrays), path))


def table_rows() -> list[str]:
    """One docs row per format: examples, exits seen, the most common failure line, released?/debited? on failure."""
    rows = []
    for fmt, outcomes in OUTCOMES.items():
        exits = Counter(code for code, *_ in outcomes)
        failures = [o for o in outcomes if o[0] != 0]
        common = Counter(line for _, line, *_ in failures).most_common(1)
        rows.append(f"| whole runs on hypothesis {fmt} files ({len(outcomes)} examples: "
                    f"{', '.join(f'{n} exit {c}' for c, n in sorted(exits.items()))}) | "
                    f"{'/'.join(str(c) for c in sorted(exits))} | {common[0][0] if common else ''} | "
                    f"{'yes' if any(o[2] for o in failures) else 'no'} | {'yes' if any(o[3] for o in failures) else 'no'} |")
    return rows


if __name__ == "__main__":
    for test in (test_runs_on_hostile_csv_publish_or_fail_cleanly, test_runs_on_hostile_jsonl_publish_or_fail_cleanly,
                 test_runs_on_parquet_of_any_column_types_publish_or_fail_cleanly):
        test()
    print("\n".join(table_rows()))
