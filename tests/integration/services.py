"""Helpers for tests that start local services: free ports, bounded waits, cleanup, and the skip-or-fail rule.

DESIGN.md §7: a test that needs a tool skips, with the reason, only when the tool is genuinely absent,
and under CI (env CI=true) fails instead, so CI can never pass by skipping.
"""
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest


def require(available: bool, reason: str) -> None:
    """Skip (locally) or fail (CI=true) the calling test when `available` is false."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: integration tests must run, not skip)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Service:
    """A started service: its process (leader of its own session and process group) and the group's watcher."""

    process: subprocess.Popen
    watcher: subprocess.Popen


def start(command: list[str], log_path: str) -> Service:
    """Start a service as the leader of a new session, so it and everything it spawns stay in one process group.

    (`gcloud beta emulators ... start` moves itself into a group of its own unless it leads its session, and
    then starts java there.) A watcher kills that group within a second of this process dying, even by
    SIGKILL or a hard timeout.
    """
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    group = process.pid
    watch = (f"while kill -0 {os.getpid()} 2>/dev/null && kill -0 -- -{group} 2>/dev/null; do sleep 1; done; "
             f"kill -KILL -- -{group} 2>/dev/null; true")
    watcher = subprocess.Popen(["bash", "-c", watch], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    return Service(process, watcher)


def wait_for_port(port: int, service: Service, seconds: float, log_path: str) -> None:
    """Return once 127.0.0.1:port accepts connections; fail with the service's log if it dies or times out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    with open(log_path, encoding="utf-8", errors="replace") as log:
        tail = log.read()[-2000:]
    pytest.fail(f"service on port {port} did not start within {seconds:.0f}s (exit code {service.process.poll()}):\n{tail}")


def _signal_group(group: int, number: int) -> None:
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        pass


def stop(service: Service) -> None:
    """Stop the service's whole process group (SIGTERM, then SIGKILL after 10 s), then its watcher."""
    group = service.process.pid
    _signal_group(group, signal.SIGTERM)
    try:
        service.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(group, signal.SIGKILL)  # the leader's children (java) and a leader that ignored SIGTERM
    service.process.wait()
    service.watcher.wait(timeout=5)
