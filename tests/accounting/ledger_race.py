"""Run ledger spends from several processes at once (fork), for the concurrency tests."""
from __future__ import annotations

import multiprocessing


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
