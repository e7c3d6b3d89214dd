"""Airflow DAG: one `dpstream run` per day, for the day that just ended.

`--start/--end` set the window range from the DAG's data interval (the job file's own range is only the default),
so a backfill of any day runs the same job file. svt monitors require each run to start where the last ended, so
the DAG must not skip or overlap days: catchup on, max_active_runs 1. Exit code 3 (budget refused) fails the task;
a failed run published nothing and was not debited, so a retry is charged once, when it publishes.
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
            "/srv/dpstream/.venv/bin/dpstream run /srv/dpstream/jobs/daily.toml "
            "--start {{ data_interval_start | ds }} --end {{ data_interval_end | ds }} "
            "--output /srv/dpstream/output/{{ ds }} --ledger \"$DPSTREAM_LEDGER\""
        ),
    )
