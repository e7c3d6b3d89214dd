"""Ledger spends from other processes: racing workers (fork) and a spend killed inside its debit."""
from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time


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
    """Run `dpstream budget spend` (pure epsilon 0.5, label "killed") and SIGKILL it inside its debit transaction.

    The child process wraps the two ledger methods that write a debit inside the locked transaction (a plain
    scope's filter state, a period scope's period rows): after the write it creates a marker file and sleeps, so
    the kill lands after the writes and before the commit. The wrapping lives here, not in the ledger.
    """
    marker = tmp_path / "inside-debit"
    argv = ["budget", "spend", "--ledger", ledger_url, "--scope", scope, "--event", "pure:epsilon=0.5",
            "--label", "killed", *extra]
    script = (
        "import pathlib, sys, time\n"
        "from dpstream.accounting.ledger import decisions\n"
        "from dpstream.pipelines.cli.main import main\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "def inside(method):\n"
        "    def wrapped(*args, **kwargs):\n"
        "        result = method(*args, **kwargs)\n"
        "        marker.write_text('inside')\n"
        "        time.sleep(60)\n"
        "        return result\n"
        "    return wrapped\n"
        "decisions._save_filter = inside(decisions._save_filter)\n"
        "decisions._PeriodWriter.__call__ = inside(decisions._PeriodWriter.__call__)\n"
        f"sys.exit(main({argv!r}))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "the debit never reached its writes"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
