"""Airflow DAG: one `dpstream run` per day, for the day that just ended.

The job file is rendered per run so [window] start/end cover exactly that day (the ledger's scope keeps
the budget across runs; svt monitors require each run to start where the last ended, so the DAG must not
skip or overlap days: catchup on, max_active_runs 1). Exit code 3 (budget refused) fails the task.
Not executed here (no Airflow installed); syntax-checked only.
"""
import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG(
    dag_id="dpstream_daily",
    schedule="15 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=True,
    max_active_runs=1,
) as dag:
    BashOperator(
        task_id="dpstream_run",
        bash_command=(
            "sed -e 's/@START@/{{ data_interval_start | ds }}/' -e 's/@END@/{{ data_interval_end | ds }}/' "
            "/srv/dpstream/jobs/daily.toml.in > /tmp/dpstream-{{ ds }}.toml && "
            "/srv/dpstream/.venv/bin/dpstream run /tmp/dpstream-{{ ds }}.toml "
            "--output /srv/dpstream/output/{{ ds }} --ledger \"$DPSTREAM_LEDGER\""
        ),
    )
