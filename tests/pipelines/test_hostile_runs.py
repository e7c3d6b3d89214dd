"""Hostile and mistaken input to `dpstream run`, each in a fresh process, as a user would meet it: the exit code,
exactly one line on stderr, and, for every failure, nothing published and nothing debited (the scope's state,
debits and runs are compared before and after). Some inputs that used to fail are now read as meant (null
tokens as keys, epoch strings, spaced headers, empty JSONL). Faults no input file can cause (a full disk, a file
replaced after the check) are a few lines run in the `dpstream run` process before it starts (`Case.patch`).
`python -m tests.pipelines.test_hostile_runs` prints the table of docs/failures.md from a fresh run of every case."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.accounting.events import PureDP
from dpstream.accounting.ledger import Ledger, PrivacyUnit

JOB = """[input]
format = "csv"
path = "events.csv"
user = "user"
timestamp = "time"
partition = "dest"
partitions = ["A", "B", "NA"]
[window]
size = "1d"
start = 2013-01-01
end = 2013-01-04
[privacy]
scope = "test"
epsilon = 4.0
delta = 1e-6
max_partitions = 2
[[release]]
kind = "histogram"
name = "daily"
[output]
format = "jsonl"
path = "out"
"""


def _events(header: str = "user,time,dest", time=lambda day: f"2013-01-0{day + 1}T10:00:00Z") -> str:
    lines = [header]
    for day in range(3):
        lines += [f"u{user},{time(day)},{'AB'[user % 2]}" for user in range(12)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Case:
    name: str
    exit: int
    message: str  # a regex the one stderr line must match (exit 0: the stdout)
    job: Callable[[str], str] = lambda text: text
    files: dict[str, str | bytes] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    prepare: Callable[[Path], None] | None = None
    patch: str = ""  # Python run inside the `dpstream run` process before it starts: a fault no file can cause


def _replace(old: str, new: str) -> Callable[[str], str]:
    return lambda text: text.replace(old, new)


def _jsonl(key: str = "user") -> Callable[[str], str]:
    return _replace('format = "csv"\npath = "events.csv"\nuser = "user"', f'format = "jsonl"\npath = "events.jsonl"\nuser = "{key}"')


def _fifo(directory: Path) -> None:
    (directory / "events.csv").unlink()
    os.mkfifo(directory / "events.csv")


def _dangling(directory: Path) -> None:
    os.symlink(directory / "nowhere", directory / "out")


def _directory_at_release(directory: Path) -> None:
    (directory / "out" / "daily.jsonl").mkdir(parents=True)


def _parquet_events(bad_user: bytes) -> bytes:
    """The 36 events as Parquet, user ids a `binary` column, then a 37th row whose user id is `bad_user`."""
    users = [f"u{user}".encode() for _ in range(3) for user in range(12)] + [bad_user]
    times = [f"2013-01-0{day + 1}T10:00:00Z" for day in range(3) for _ in range(12)] + ["2013-01-02T10:00:00Z"]
    table = pa.table({"user": pa.array(users, pa.binary()), "time": times,
                      "dest": ["AB"[user % 2] for _ in range(3) for user in range(12)] + ["A"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


FULL_DISK = """
import errno, os
from apache_beam.io.localfilesystem import LocalFileSystem

class _Full:  # a file on a full filesystem: it can be created, but no byte can be written into it
    def __init__(self, handle): self.handle = handle
    def write(self, data):
        if len(data): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    def __enter__(self): return self
    def __exit__(self, *exc): self.handle.close()
    def __getattr__(self, name): return getattr(self.handle, name)

_create = LocalFileSystem.create
LocalFileSystem.create = lambda self, *args, **kwargs: _Full(_create(self, *args, **kwargs))
"""
"""The output's filesystem is full (tmpfs, XFS: files and directories can still be made, bytes not written)."""

HEADER_CHANGES = """
import dpstream.pipelines.run.runner as runner
_check = runner._check_range

def _check_then_replace(job):
    _check(job)
    with open(job.input.path, "w") as out:
        out.write("user,when,dest\\nu1,2013-01-01T10:00:00Z,A\\n")

runner._check_range = _check_then_replace
"""
"""events.csv is replaced by a file whose time column has another name after the run checked its header and
first rows."""

_QUANTILE = ('[[release]]\nkind = "quantiles"\nname = "{name}"\nquantiles = [0.5]\nbuckets = 1000000\npartitions = '
             + str([f"p{i}" for i in range(1000)]).replace("'", '"') + "\n")


def _corrupt_ledger(directory: Path) -> None:
    with Ledger(f"sqlite:///{directory / 'ledger.db'}") as ledger, ledger.engine.begin() as conn:
        conn.execute(ledger.scopes.update().values(filter_state="{truncated"))


SECRET = "SECRET-ROW-VALUE"
"""A distinctive raw value: no message, ledger record or `budget history` line may quote it."""


def _jsonl_rows(key: str) -> str:
    return "".join(json.dumps({key: f"u{u}", "time": f"2013-01-0{d + 1}T10:00:00Z", "dest": "AB"[u % 2]}) + "\n"
                   for d in range(3) for u in range(12))


CASES = [
    # read as meant now
    Case("CSV epoch-second timestamps under timestamp_format auto", 0, r"daily: 9 rows",
         files={"events.csv": _events(time=lambda day: str(1356998400 + 86400 * day + 36000))}),
    Case("CSV header with spaces after the commas", 0, r"daily: 9 rows", files={"events.csv": _events("user, time, dest")}),
    Case("CSV user and partition values NA and null (pyarrow's null tokens)", 0, r"daily: 9 rows",
         files={"events.csv": _events() + "null,2013-01-02T10:00:00Z,NA\nNA,2013-01-02T11:00:00Z,NA\n"}),
    Case("empty JSONL file with input.allow_empty = true (noise only)", 0, r"daily: 9 rows",
         job=lambda text: _jsonl()(text).replace('user = "user"', 'user = "user"\nallow_empty = true'),
         files={"events.jsonl": ""}),
    Case("header-only CSV with input.allow_empty = true (noise only)", 0, r"daily: 9 rows",
         job=_replace('dest"\n', 'dest"\nallow_empty = true\n'), files={"events.csv": "user,time,dest\n"}),
    # refused before the ledger is asked
    Case("JSONL key typo", 2, r"events\.jsonl: input\.user names column 'user', which the file does not have; "
         r"columns: usr, time, dest$", job=_jsonl(), files={"events.jsonl": _jsonl_rows("usr")}),
    Case("release name of 300 characters", 2, r"release #1: name must be 1 to 100 letters",
         job=_replace('name = "daily"', f'name = "{"x" * 300}"')),
    Case("output path a dangling symbolic link", 2, r"output directory .*/out is a symbolic link", prepare=_dangling),
    Case("output path under /proc", 2, r"output directory /proc/dpstream-out: /proc is a system directory",
         args=("--output", "/proc/dpstream-out")),
    Case("a directory at a release file's path", 2, r"output directory .*/out is not empty and holds no dpstream run",
         prepare=_directory_at_release),
    Case("window.start = 9999-01-01", 2, r"window\.start and window\.end must lie between 0001-01-01 and 9000-01-01",
         job=_replace("start = 2013-01-01\nend = 2013-01-04", "start = 9999-01-01\nend = 9999-01-04")),
    Case("10^7 windows", 2, r"the window range holds 14204160 windows, more than window\.max_count = 100000",
         job=_replace('size = "1d"\nstart = 2013-01-01\nend = 2013-01-04', 'size = "1m"\nstart = 2013-01-01\nend = 2040-01-04')),
    Case("10^5 windows x 5,000 partitions on the DirectRunner", 2,
         r"the plan writes 496,800,000 output rows \(about \d+\.\d GB on the DirectRunner\), above \[beam\] "
         r"max_memory_gb = 8: raise it",
         job=lambda text: text.replace('size = "1d"\nstart = 2013-01-01\nend = 2013-01-04',
                                       'size = "1m"\nstart = 2013-01-01\nend = 2013-03-11').replace(
             'partitions = ["A", "B", "NA"]', f"partitions = {[f'p{i}' for i in range(5000)]}".replace("'", '"'))),
    Case("epsilon = 1e-300", 2, r"privacy\.epsilon must lie in \[0\.0001, 1000\]", job=_replace("epsilon = 4.0", "epsilon = 1e-300")),
    Case("epsilon = 1e308", 2, r"privacy\.epsilon must lie in \[0\.0001, 1000\]", job=_replace("epsilon = 4.0", "epsilon = 1e308")),
    Case("max_value = 1e300", 2, r"max\(\|min_value\|, \|max_value\|\) must be 0 or lie in \[2\*\*-256, 2\*\*256\]",
         job=_replace("max_partitions = 2", "max_partitions = 2\nmax_value = 1e300")),
    Case("peak maximum = 1e6 (calibration would take minutes and gigabytes)", 2,
         r"maximum may be at most 20000 times the L1 sensitivity 2 of a window total",
         job=_replace("[output]", '[[release]]\nkind = "peak"\nname = "busiest"\nperiod = "3d"\nmaximum = 1e6\n'
                                  '[output]')),
    Case("job delta = 0.999", 2, r"privacy\.delta must lie in \(0, 0\.01\], got 0\.999", job=_replace("delta = 1e-6", "delta = 0.999")),
    Case("job file not UTF-8", 2, r"not UTF-8 text \(byte \d+\)", job=lambda text: text.replace("daily", "d\xe4ily")),
    Case("input path /dev/zero", 2, r"/dev/zero: not a regular file", job=_replace('path = "events.csv"', 'path = "/dev/zero"')),
    Case("input a FIFO", 2, r"events\.csv: not a regular file", prepare=_fifo),
    Case("--runner=PortableRunner without --job_endpoint", 2, r"--runner=PortableRunner needs --job_endpoint",
         args=("--", "--runner=PortableRunner")),
    Case("--runner=DataflowRunner --dry_run=True", 2, r"--dry_run makes the runner skip the job",
         args=("--", "--runner=DataflowRunner", "--dry_run=True")),
    Case("--direct_num_workers=-1", 2, r"--direct_num_workers must be 0 \(one per core\) or more, got -1",
         args=("--", "--direct_num_workers=-1")),
    Case("--runner=no.such.Runner (a module that does not exist)", 2,
         r"--runner=no\.such\.Runner is not a Beam runner: No module named 'no'; .*nothing was debited$",
         args=("--", "--runner=no.such.Runner")),
    Case("--runner=NoSuchRunner", 2, r"--runner=NoSuchRunner is not a Beam runner: .*nothing was debited$",
         args=("--", "--runner=NoSuchRunner")),
    Case("2 quantile releases x 10^6 buckets x 1,000 partitions x 100 windows (hours of CPU)", 2,
         r"job\.toml: release 'q1': its draws score 100,000,100,000 grid points .* more than max_scores = "
         r"10,000,000,000",
         job=lambda text: text.replace("end = 2013-01-04", "end = 2013-04-11").replace(
             "max_partitions = 2", "max_partitions = 2\nmin_value = 0\nmax_value = 1000").replace(
             '[[release]]\nkind = "histogram"\nname = "daily"\n', _QUANTILE.format(name="q1") + _QUANTILE.format(name="q2"))),
    Case("corrupt ledger JSON", 2, r"a stored record is corrupt .* restore the ledger from a backup; nothing was debited",
         prepare=_corrupt_ledger),
    Case("unreachable PostgreSQL ledger", 2, r"ledger postgresql\+psycopg://nobody@127\.0\.0\.1:1/x: database error: .*"
         r"nothing was debited", args=("--ledger", "postgresql://nobody@127.0.0.1:1/x")),
    Case("unsupported ledger URL with a password on stderr", 2, r"ledger URL 'mysql://root:\*\*\*@host/db': backend "
         r"'mysql' is not supported; use sqlite or postgresql; nothing was debited$",
         args=("--ledger", "mysql://root:PASSWORD@host/db")),
    Case("ledger URL with a malformed port and a password", 2, r"ledger URL 'postgresql://\*\*\*@host:abc/db' is not "
         r"a database URL \(sqlite:///FILE or postgresql://\.\.\.\); nothing was debited$",
         args=("--ledger", "postgresql://u:PASSWORD@host:abc/db")),
    Case("scope missing", 2, r"budget scope 'test' is not in ledger .* create it with `dpstream budget init",
         prepare=lambda directory: _drop_scope(directory)),
    # refused before the ledger is asked, from the input's first rows (issue 33)
    Case("header-only CSV (no rows)", 2, r"job\.toml: no input row falls inside the window range "
         r"\[2013-01-01T00:00:00Z, 2013-01-04T00:00:00Z\) \(the input has no rows\); set input\.allow_empty = true "
         r"to publish noise for it anyway; nothing was debited$", files={"events.csv": "user,time,dest\n"}),
    Case("empty JSONL file (no rows)", 2, r"no input row falls inside the window range .* \(the input has no rows\)",
         job=_jsonl(), files={"events.jsonl": ""}),
    Case("every row outside the window range (events of 2015)", 2,
         r"no input row falls inside the window range \[2013-01-01T00:00:00Z, 2013-01-04T00:00:00Z\) \(36 rows read: "
         r"0 inside the window range, 0 before it, 36 after it\); check "
         r"input\.timestamp_format \(now 'auto'\), input\.timezone and the \[window\] range; set "
         r"input\.allow_empty = true to publish noise for it anyway; nothing was debited$",
         files={"events.csv": _events(time=lambda day: f"2015-01-0{day + 1}T10:00:00Z")}),
    Case("millisecond timestamps under timestamp_format auto", 2,
         r"events\.csv:2: column 'time': not epoch seconds \(timestamp_format auto reads numbers as seconds\): the "
         r"value looks like milliseconds since 1970; set input\.timestamp_format = \"epoch_ms\"; nothing was debited$",
         files={"events.csv": _events(time=lambda day: str((1356998400 + 86400 * day + 36000) * 1000))}),
    Case("millisecond timestamps under timestamp_format epoch_s", 2,
         r"events\.csv:2: column 'time': not epoch seconds: the value looks like milliseconds since 1970; set "
         r"input\.timestamp_format = \"epoch_ms\"; nothing was debited$",
         job=_replace('timestamp = "time"', 'timestamp = "time"\ntimestamp_format = "epoch_s"'),
         files={"events.csv": _events(time=lambda day: str((1356998400 + 86400 * day + 36000) * 1000))}),
    Case("a bad timestamp at line 38 among epoch seconds under auto", 2,
         r"events\.csv:38: column 'time': not a number of seconds like most of the column's values "
         r"\(timestamp_format auto\); nothing was debited$",
         files={"events.csv": _events(time=lambda day: str(1356998400 + 86400 * day + 36000)) + "u1,notatime,A\n"}),
    Case("empty CSV file (0 bytes)", 2, r"events\.csv: the file is empty \(no header line\)$",
         files={"events.csv": ""}),
    # bad rows among the first ones, which the run reads before asking the ledger (issue 33)
    Case("an unclosed quote at line 20 (it used to swallow every later row)", 2,
         r"events\.csv:20: a quoted field not closed on its line \(an unterminated quote, or a line break inside "
         r"quotes\); nothing was debited$",
         files={"events.csv": "\n".join(_events().splitlines()[:19] + ['u5,2013-01-02T10:00:00Z,"A']
                                        + _events().splitlines()[19:]) + "\n"}),
    Case("a bad timestamp in row 38", 2, r"events\.csv:38: column 'time': not an ISO 8601 time; "
         r"nothing was debited$", files={"events.csv": _events() + "u1,2013-13-01,A\n"}),
    Case("a missing user in row 38", 2, r"events\.csv:38: column 'user': missing value; nothing was debited$",
         files={"events.csv": _events() + ",2013-01-01T10:00:00Z,A\n"}),
    Case("a ragged row", 2, r"events\.csv:38: expected 3 fields, got 4; nothing was debited$",
         files={"events.csv": _events() + "u1,2013-01-01T10:00:00Z,A,extra\n"}),
    Case("Parquet user ids that are not UTF-8 (a binary column) in row 37", 2,
         r"events\.parquet:37: column 'user': not UTF-8 text; nothing was debited$",
         job=_replace('format = "csv"\npath = "events.csv"', 'format = "parquet"\npath = "events.parquet"'),
         files={"events.parquet": _parquet_events(b"\xff\xfe")}),
    # found only by reading: the run fails, nothing is published or debited
    Case("a malformed time in a second input file, never echoed (issue 32)", 2, r"events2\.csv:3: column 'time': "
         r"not an ISO 8601 time; nothing was published or debited$", job=_replace('path = "events.csv"', 'path = "events*.csv"'),
         files={"events2.csv": f"user,time,dest\nu1,2013-01-01T10:00:00Z,A\nu2,{SECRET},A\n"}),
    Case("a bad timestamp in a second input file (read by the pipeline only)", 2,
         r"events2\.csv:3: column 'time': not an ISO 8601 time; nothing was published or debited$",
         job=_replace('path = "events.csv"', 'path = "events*.csv"'),
         files={"events2.csv": "user,time,dest\nu1,2013-01-01T10:00:00Z,A\nu2,2013-13-01,A\n"}),
    Case("the output's filesystem full from the start (no space left on device)", 2,
         r"/\.out\.dpstream-staging-\w+/daily\.jsonl: cannot write: No space left on device; nothing was "
         r"published or debited$", patch=FULL_DISK),
    Case("input header changed after the check (events.csv replaced, its time column renamed)", 2,
         r"events\.csv: input\.timestamp names column 'time', which the file does not have \(it changed or appeared "
         r"after the run checked the input\); nothing was published or debited$", patch=HEADER_CHANGES),
    # refused by the scope: nothing read
    Case("budget exhausted", 3, r"refused: release .* would exceed the budget of scope 'test'.*nothing was read or debited",
         job=_replace("epsilon = 4.0", "epsilon = 200.0")),
    Case("a second user x period job on a plain scope with another grid", 2,
         r"job\.toml: scope 'test' serves privacy unit user x 1d period \(periods of 86400 s from "
         r"1970-01-01T12:00:00Z; phase 43200 s\) \(fixed at .*\), but this job's privacy unit is user x 1d period "
         r"\(periods of 86400 s from 1970-01-01T00:00:00Z; phase 0 s\): .*use another scope for this job .*; nothing "
         r"was debited$", job=_replace("max_partitions = 2", 'max_partitions = 2\nunit_period = "1d"'),
         prepare=lambda directory: _noon_job_first(directory)),
]


def _noon_job_first(directory: Path) -> None:
    """A user x 1d job with daily windows from 12:00 UTC was the scope's first: it fixed the scope's unit."""
    with Ledger(f"sqlite:///{directory / 'ledger.db'}") as ledger:
        noon = PrivacyUnit.of(86400, 1357041600.0)  # window.start 2013-01-01T12:00:00Z
        assert ledger.spend("test", PureDP(0.5), "job noon (daily from 12:00 UTC)", unit=noon).admitted


def _drop_scope(directory: Path) -> None:
    (directory / "ledger.db").unlink()
    with Ledger(f"sqlite:///{directory / 'ledger.db'}", create=True) as ledger:
        ledger.init_scope("elsewhere", 1.0, 1e-6)


_MAIN = "\nimport sys\nfrom dpstream.pipelines.cli.main import main\nsys.exit(main())\n"
"""After a case's patch: `dpstream` itself, given the arguments after -c."""


@dataclass(frozen=True)
class Outcome:
    exit: int
    line: str  # stderr's one line, or stdout's when the run succeeded
    stderr_lines: int
    released: bool
    debited: bool


def run_case(case: Case, directory: Path) -> Outcome:
    text = case.job(JOB)
    (directory / "job.toml").write_bytes(text.encode("latin-1") if "\xe4" in text else text.encode("utf-8"))
    files = {"events.csv": _events(), **case.files}
    for name, content in files.items():
        (directory / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    url = f"sqlite:///{directory / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope("test", 100.0, 1e-4, "approx:release_delta=1e-6")
    if case.prepare is not None:
        case.prepare(directory)
    before = _ledger_state(url)
    argv = ["run", "job.toml", "--ledger", url] if "--ledger" not in case.args else ["run", "job.toml"]
    command = ([sys.executable, "-c", case.patch + _MAIN, *argv, *case.args] if case.patch else
               [sys.executable, "-m", "dpstream.pipelines.cli.main", *argv, *case.args])
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=600)
    after = _ledger_state(url)
    stderr = result.stderr.strip().splitlines()
    line = stderr[0] if stderr else next((s for s in result.stdout.splitlines() if " rows -> " in s), "")
    out = directory / "out"
    return Outcome(result.returncode, line, len(stderr), out.is_dir() and (out / "report.json").exists(),
                   after != before)


def _ledger_state(url: str):
    try:
        with Ledger(url) as ledger:
            return ledger.show("test").state, len(ledger.history("test"))  # a debit changes both
    except Exception as err:  # a corrupt or replaced ledger: compare what can be read
        return f"unreadable: {type(err).__name__}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case, tmp_path):
    outcome = run_case(case, tmp_path)
    assert outcome.exit == case.exit, outcome
    assert re.search(case.message, outcome.line), outcome.line
    if case.exit == 0:
        assert outcome.stderr_lines == 0 and outcome.released and outcome.debited
    else:
        assert outcome.stderr_lines == 1, outcome  # one line: no traceback, no library log
        assert not outcome.released and not outcome.debited


def test_a_malformed_rows_raw_value_reaches_neither_the_message_nor_the_ledger(tmp_path):
    """Issue 32: the reason a failed run ended is stored in the ledger and shown by `budget history`, whose views
    are public; it names the file, row and column and the kind of problem, never the row's value."""
    [case] = [case for case in CASES if "never echoed" in case.name]
    outcome = run_case(case, tmp_path)
    assert outcome.exit == 2 and SECRET not in outcome.line and re.search(case.message, outcome.line), outcome
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url) as ledger:
        [run] = ledger.runs_of("test")
    assert run.status == "failed" and run.release_id is None
    assert run.reason is not None and SECRET not in run.reason
    assert re.search(r"events2\.csv:3: column 'time': not an ISO 8601 time; nothing was published or debited$",
                     run.reason), run.reason
    for extra in ((), ("--json",)):
        history = subprocess.run([sys.executable, "-m", "dpstream.pipelines.cli.main", "budget", "history", "--ledger",
                                  url, "--scope", "test", *extra], capture_output=True, text=True, timeout=120)
        assert history.returncode == 0, history.stderr
        assert "not an ISO 8601 time" in history.stdout and SECRET not in history.stdout + history.stderr


def test_max_scores_admits_the_quantile_plan_the_default_refuses(tmp_path):
    """The plan-size limit of quantiles releases is a [[release]] key: raised, the same plan is made."""
    from dpstream.pipelines.config import jobfile
    from dpstream.pipelines.run.runner import RunError, plan

    [case] = [case for case in CASES if case.name.startswith("2 quantile releases")]
    text = case.job(JOB)
    (tmp_path / "job.toml").write_text(text)
    with pytest.raises(RunError, match=r"more than max_scores = 10,000,000,000"):
        plan(jobfile.load(str(tmp_path / "job.toml")))
    (tmp_path / "job.toml").write_text(text.replace("buckets = 1000000", "buckets = 1000000\nmax_scores = 100_000_100_000"))
    assert [release.name for release in plan(jobfile.load(str(tmp_path / "job.toml"))).releases] == ["q1", "q2"]


def test_the_runner_check_takes_a_runner_s_module_path_and_refuses_what_is_not_a_runner():
    from apache_beam.options.pipeline_options import PipelineOptions

    from dpstream.pipelines.run.preflight import check_runner
    from dpstream.pipelines.run.runner import RunError

    check_runner(PipelineOptions(["--runner=apache_beam.runners.direct.direct_runner.BundleBasedDirectRunner"]))
    check_runner(PipelineOptions(["--runner=direct"]))  # Beam's short names
    with pytest.raises(RunError, match=r"^--runner=collections\.OrderedDict is not a Beam runner: .*not a PipelineRunner"):
        check_runner(PipelineOptions(["--runner=collections.OrderedDict"]))
    with pytest.raises(RunError, match=r"^--runner=os\.NoSuchRunner is not a Beam runner: .*NoSuchRunner"):
        check_runner(PipelineOptions(["--runner=os.NoSuchRunner"]))


def test_docs_list_every_case():
    text = (Path(__file__).parents[2] / "docs" / "failures.md").read_text(encoding="utf-8")
    missing = [case.name for case in CASES if f"| {case.name} |" not in text]
    assert not missing, f"docs/failures.md lacks {missing}; regenerate it with python -m tests.pipelines.test_hostile_runs"


def table() -> str:
    rows = ["| case | exit | message (first line of stderr; stdout for exit 0) | released? | debited? |",
            "| --- | --- | --- | --- | --- |"]
    for case in CASES:
        with tempfile.TemporaryDirectory() as directory:
            outcome = run_case(case, Path(directory))
            line = outcome.line.replace(directory, "DIR").replace("|", "\\|")
        rows.append(f"| {case.name} | {outcome.exit} | {line} | {'yes' if outcome.released else 'no'} | "
                    f"{'yes' if outcome.debited else 'no'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
