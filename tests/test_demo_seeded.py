"""The bundled demo job with a fixed seed releases exactly what it released before the library restructuring.

The hashes below are of the four release files' rows (and of the plan text) from the demo job run with
`[beam] seed = 12345` at commit acc2d4a, the last commit with the old top-level import names; every later commit
must give the same rows for the same seed: restructuring changes no output. A deliberate change of outputs
updates them, with the reason in its commit message.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import resources

import pyarrow.parquet as pq

from dpstream.accounting.ledger import Ledger
from dpstream.pipelines.cli import demo
from dpstream.pipelines.config import jobfile
from dpstream.pipelines.run import runner

SEED = 12345
ROWS = {
    "daily_departures": (37960, "13788b869854fc6637a249618b493b0fe01fc9c980850f234325868373eab40f"),
    "daily_top5": (1825, "bbd651458750951175939d4591c44ca469eaae0f02e1a51d8a4e310a00e3d68e"),
    "busiest_day": (13, "27eb79dec36195b108bd7c20bb85f6126c957fe3d751ac3b76f1ae3a68503bab"),
    "delay_alerts": (365, "b6bce6d910ee1a384d21a16c5b38b131789b3d5c9f67fd81c445e295cc7a6ec3"),  # the halting window once
}
# "name: text\n" per release; changed deliberately when histogram texts began to name their metric
PLAN_TEXT = "e73ac81cc801692ac07481c536fcc277e7835fa2176245ef289eeb3dfbf9dd85"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_seeded_demo_releases_the_rows_and_plan_text_of_the_previous_layout(tmp_path):
    data = demo.cache_dir() / demo.DEMO_FILE
    if not data.exists():
        demo.export_flights(data)
    with resources.as_file(demo.DEMO_JOB) as path:
        job = jobfile.load(str(path))
    job = dataclasses.replace(job, input=dataclasses.replace(job.input, path=str(data)),
                              beam=dataclasses.replace(job.beam, seed=SEED))
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, create=True) as ledger:
        ledger.init_scope(job.privacy.scope, job.privacy.epsilon, job.privacy.delta,
                          f"approx:release_delta={job.privacy.delta!r}")
    outcome = runner.run(job, str(tmp_path / "out"), url, log=lambda _: None)
    plan_text = "".join(f"{name}: {text}\n" for name, text in runner.plan(job).describe().items())
    assert _digest(plan_text) == PLAN_TEXT
    for name, (count, digest) in ROWS.items():
        rows = pq.read_table(outcome.files[name]).to_pylist()
        text = json.dumps(rows, sort_keys=True, default=lambda stamp: stamp.isoformat())  # Parquet times: the row's ISO text
        assert (len(rows), _digest(text)) == (count, digest), name
