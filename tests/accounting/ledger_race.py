"""Ledger spends from other processes: racing workers (fork) and a spend killed inside its debit."""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dpstream.accounting.ledger import DEBIT_HOOK_ENV

REPO = Path(__file__).resolve().parents[2]


def race(worker, ledger_url: str, scope: str, workers: int, timeout: float) -> list[int]:
    """Start `workers` processes running worker(ledger_url, scope, index, queue); return what each put on the queue."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=worker, args=(ledger_url, scope, w, queue)) for w in range(workers)]
    for process in processes:
        process.start()
    counts = [queue.get(timeout=timeout) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return counts


def kill_inside_debit(tmp_path, ledger_url: str, scope: str, *extra: str) -> None:
    """Run `dpstream budget spend` (pure epsilon 0.5, label "killed") and SIGKILL it inside its debit transaction."""
    marker = tmp_path / "inside-debit"
    env = {**os.environ, DEBIT_HOOK_ENV: str(marker), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "dpstream.pipelines.cli.main", "budget", "spend", "--ledger", ledger_url,
               "--scope", scope, "--event", "pure:epsilon=0.5", "--label", "killed", *extra]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "the debit never reached the test hook"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
