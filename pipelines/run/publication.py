"""Publication of a run's outputs: staged privately, published all at once, never over another run by accident.

A run writes every file (releases, report.json, report.md, chart.png) into a staging directory that only its
owner can read; nothing there is published. After the debit (`Budget.commit`) the staging directory becomes the
output directory in one step:
- local disk: the staging directory is a hidden sibling of the output directory (same filesystem), renamed onto
  it; an older run's directory, when replaced (`overwrite`), is first renamed aside and removed after, so a
  reader sees the old run's files, then none, then all of the new run's, and never a mix;
- a URL (object stores have no directories): the staging prefix is OUTPUT/.dpstream-staging-ID/; the files are
  moved into OUTPUT with report.json last, so a reader that sees report.json sees every file of the run (an
  older run's files are deleted first when `overwrite` replaces them).
Protection: a run refuses an output directory that holds a published run unless `overwrite` (and refuses, even
then, a non-empty directory that holds no dpstream run, whose files it would delete); it takes an exclusive lock
(a local lock file beside the output; for URLs the ledger's output lease, `Ledger.open_run`) so two runs never
publish into one directory at once. A failed run removes its staging directory (`discard`).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Callable

from dpstream.accounting.text import first_line
from dpstream.connectors.files import filesystems, is_local, join, read_bytes, remove_file, remove_tree, write_bytes
from dpstream.pipelines.report.document import REPORT_JSON
from dpstream.pipelines.run.errors import EXIT_ERROR, RunError

MAX_NAME = 200  # characters of an output directory's last component (filesystems allow 255 bytes)
_STAGING = ".dpstream-staging-"


class Publication:
    """The staging directory of one run into `output_dir` (an absolute local path or a URL), and its lock.

    Use as a context manager: entering checks the output directory (RunError, before any debit), takes the lock
    and makes the staging directory; leaving without `publish` discards the staging directory."""

    def __init__(self, output_dir: str, overwrite: bool = False,
                 committed: Callable[[dict[str, Any]], bool] | None = None, log: Callable[[str], None] = print) -> None:
        self.output_dir, self.overwrite, self._committed, self._log = output_dir, overwrite, committed, log
        self.local = is_local(output_dir)
        self.staging = ""
        self.published = False
        self._lock: int | None = None

    def __enter__(self) -> "Publication":
        try:
            if self.local:
                self._enter_local()
            else:
                self._enter_url()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            if not self.published:
                self.discard()
        finally:
            if self._lock is not None:
                os.close(self._lock)  # releases the flock
                self._lock = None

    # -- local disk ------------------------------------------------------------------------------------

    def _enter_local(self) -> None:
        output = self.output_dir
        parent, name = os.path.split(output.rstrip(os.sep))
        if not name or len(name) > MAX_NAME:
            raise RunError(f"output directory {output}: its name must be 1 to {MAX_NAME} characters; nothing was "
                           f"debited")
        if os.path.realpath(parent).startswith(("/proc", "/sys", "/dev")):
            raise RunError(f"output directory {output}: {parent} is a system directory; nothing was debited")
        if os.path.islink(output):
            raise RunError(f"output directory {output} is a symbolic link; give the directory it should be (a "
                           f"published run replaces the directory itself); nothing was debited")
        try:
            os.makedirs(parent, exist_ok=True)
            descriptor = os.open(os.path.join(parent, f".{name}.dpstream-lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise RunError(f"output directory {output}: cannot write in {parent}: {err.strerror}; nothing was "
                           f"debited") from err
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(descriptor)
            raise RunError(f"output directory {output} is being written by another dpstream run; wait for it to "
                           f"end; nothing was debited") from err
        self._lock = descriptor
        self._recover(parent, name)
        self._check_existing(os.path.exists(output), lambda: os.path.isdir(output) and not os.path.islink(output),
                             lambda: os.listdir(output))
        try:
            self.staging = tempfile.mkdtemp(prefix=f".{name}{_STAGING}", dir=parent)
        except OSError as err:
            raise RunError(f"output directory {output}: cannot make a staging directory in {parent}: "
                           f"{err.strerror}; nothing was debited") from err

    def _recover(self, parent: str, name: str) -> None:
        """Staging directories of this output left by killed runs (this run holds the lock, so no live run owns
        one): a run killed after its debit and before its rename is published now (`committed` says, from its
        staged report.json, whether the ledger debited it); any other is removed."""
        for entry in sorted(os.listdir(parent)):
            if not entry.startswith(f".{name}{_STAGING}"):
                continue
            staged = os.path.join(parent, entry)
            try:
                with open(os.path.join(staged, REPORT_JSON), encoding="utf-8") as handle:
                    report = json.load(handle)
            except (OSError, ValueError):
                report = None
            if report is not None and self._committed is not None and self._committed(report):
                self.staging = staged
                self._publish_local()
                self.staging = ""
                self._log(f"published {self.output_dir}: ledger run {report['budget']['run_id']} was debited and "
                          f"then stopped before publishing its outputs")
            else:
                shutil.rmtree(staged, ignore_errors=True)

    def _check_existing(self, exists: bool, is_directory, entries) -> None:
        """Refuse an output directory that is not a directory, holds a published run (unless overwrite), or holds
        other files."""
        output = self.output_dir
        if not exists:
            return
        if not is_directory():
            raise RunError(f"output directory {output} exists and is not a directory; nothing was debited")
        if not list(entries()):
            return
        job = self._published_job()
        if job is None:
            raise RunError(f"output directory {output} is not empty and holds no dpstream run; choose a new or empty "
                           f"directory (dpstream replaces the whole directory when it publishes); nothing was debited")
        if not self.overwrite:
            raise RunError(f"output directory {output} holds a published run ({job}); pass --overwrite to replace "
                           f"it, or choose another directory; nothing was debited")

    def _published_job(self) -> str | None:
        """'job NAME, ledger run N' of the run published in the output directory, or None when there is none."""
        try:
            report = json.loads(read_bytes(join(self.output_dir, REPORT_JSON)))
            budget = report["budget"]
            return f"job {report['job']['name']!r}, ledger run {budget.get('run_id')} on scope {budget['scope']!r}"
        except Exception:  # absent, unreadable or not a dpstream report: not a published run
            return None

    # -- URLs ------------------------------------------------------------------------------------------

    def _enter_url(self) -> None:
        output = self.output_dir
        beam_files = filesystems()
        try:
            existing = [m.path for m in beam_files.match([join(output, "**")])[0].metadata_list]
        except Exception as err:  # no filesystem for the scheme, or the store refused
            raise RunError(f"output directory {output}: cannot list it: {first_line(err)}; nothing was "
                           f"debited") from err
        existing = [p for p in existing if _STAGING not in p]
        self._check_existing(bool(existing), lambda: True, lambda: existing)
        self.staging = join(output, f"{_STAGING}{uuid.uuid4().hex}")
        try:
            probe = join(self.staging, ".write-check")
            write_bytes(probe, b"")
            remove_file(probe)
        except Exception as err:
            raise RunError(f"output directory {output}: cannot write there: {first_line(err)}; nothing was "
                           f"debited") from err

    # -- publish or discard ----------------------------------------------------------------------------

    def path(self, name: str) -> str:
        """Where a file of the run is staged."""
        return join(self.staging, name)

    def final(self, staged: str) -> str:
        """Where a staged file is published."""
        return join(self.output_dir, staged[len(self.staging):].lstrip("/"))

    def publish(self) -> None:
        """Make the staged files the output directory's content (see the module docstring)."""
        try:
            if self.local:
                self._publish_local()
            else:
                self._publish_url()
        except OSError as err:
            raise RunError(f"the debit was committed but publishing {self.output_dir} failed: {err}; the complete "
                           f"outputs are in {self.staging}", EXIT_ERROR) from err
        self.published = True

    def _publish_local(self) -> None:
        os.chmod(self.staging, 0o777 & ~_umask())
        output = self.output_dir
        aside = None
        if os.path.exists(output):
            aside = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.dpstream-old-", dir=os.path.dirname(output))
            os.rename(output, os.path.join(aside, "old"))
        os.rename(self.staging, output)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def _publish_url(self) -> None:
        beam_files = filesystems()
        staged = sorted(m.path for m in beam_files.match([join(self.staging, "**")])[0].metadata_list)
        if self.overwrite:
            old = [m.path for m in beam_files.match([join(self.output_dir, "**")])[0].metadata_list
                   if _STAGING not in m.path]
            if old:
                beam_files.delete(old)
        last = [p for p in staged if p.endswith("/" + REPORT_JSON)]
        for path in [p for p in staged if p not in last] + last:
            beam_files.rename([path], [self.final(path)])
        remove_tree(self.staging)

    def discard(self) -> None:
        """Remove the staging directory and everything in it."""
        if self.staging:
            remove_tree(self.staging)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
