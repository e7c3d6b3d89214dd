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
import re
import shutil
import tempfile
import uuid
from typing import Any, Callable

from dpstream.accounting.ledger import FileDigest
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
                 journaled: Callable[[dict[str, Any]], tuple[str, tuple[FileDigest, ...]]] | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.output_dir, self.overwrite, self._journaled, self._log = output_dir, overwrite, journaled, log
        self.local = is_local(output_dir)
        self.staging = ""
        self.published = False
        self.committed = False  # set once the ledger debited the run: its staging is then never discarded
        self._lock: int | None = None
        self._found: tuple[int, int] | None = None  # (device, inode) of the output directory when checked

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
            if not self.published and not self.committed:  # a debited run's outputs wait for the next run
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
        if os.path.ismount(output):
            raise RunError(f"output directory {output} is a mount point (a volume or bind mount), which cannot be "
                           f"replaced by a rename; give a directory inside it; nothing was debited")
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
        self._found = _identity(output)
        try:
            self.staging = tempfile.mkdtemp(prefix=f".{name}{_STAGING}", dir=parent)
        except OSError as err:
            raise RunError(f"output directory {output}: cannot make a staging directory in {parent}: "
                           f"{err.strerror}; nothing was debited") from err
        _probe(self.staging, output)

    def _recover(self, parent: str, name: str) -> None:
        """Staging directories of this output left by runs that ended before publishing (this run holds the lock,
        so no live run owns one). One whose run the ledger debited (`journaled` says, from its staged report.json,
        matching the ledger by its id) is published now, if its files are exactly those journaled with the debit
        and the output directory is absent or empty, and kept otherwise (with a note); any other is removed."""
        mine = re.compile(re.escape(f".{name}{_STAGING}") + r"[a-z0-9_]{8}")  # `mkdtemp`'s names, no other
        for entry in sorted(os.listdir(parent)):
            if not mine.fullmatch(entry):
                continue
            staged = os.path.join(parent, entry)
            try:
                with open(os.path.join(staged, REPORT_JSON), encoding="utf-8") as handle:
                    report = json.load(handle)
                run = f"ledger run {report['budget']['run_id']}"
            except (OSError, ValueError, KeyError, TypeError):
                report = None  # no report: the run ended before its debit (reports are staged first)
            verdict, files = ("unpaid", ()) if report is None or self._journaled is None else self._journaled(report)
            if verdict == "unpaid":
                shutil.rmtree(staged, ignore_errors=True)
                continue
            changed = _differences(files, _staged_digests(staged)) if files else []
            if verdict != "debited":
                self._log(f"note: {staged} holds the outputs of {run}, which this ledger cannot say was debited or "
                          f"not (another ledger, or a commit in doubt); they are kept there, unpublished")
            elif changed:
                self._log(f"note: {run} was debited but its staged outputs in {staged} differ from what its debit "
                          f"journaled ({changed[0]}); they are kept there, unpublished")
            elif os.path.exists(self.output_dir) and os.listdir(self.output_dir):
                self._log(f"note: {run} was debited but not published; its outputs wait in {staged} while "
                          f"{self.output_dir} holds other files")
            else:
                self._publish_recovered(staged, run)

    def _publish_recovered(self, staged: str, run: str) -> None:
        """Publish a debited run's kept staging; when that fails too, it stays (RunError, nothing debited now)."""
        self.staging = staged
        try:
            self._publish_local()
        except OSError as err:
            raise RunError(f"{run} was debited but its outputs in {staged} cannot be published into "
                           f"{self.output_dir}: {err.strerror or err}; they stay there; this run debited "
                           f"nothing") from err
        finally:
            self.staging = ""
        self._log(f"published {self.output_dir}: {run} was debited and then stopped before publishing its outputs")

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

    def inside(self, staged: str) -> str:
        """A staged file's path inside the output."""
        return _inside(self.staging, staged)

    def final(self, staged: str) -> str:
        """Where a staged file is published."""
        return join(self.output_dir, _inside(self.staging, staged))

    def holds(self, staged: str, files: tuple[FileDigest, ...]) -> bool:
        """Whether the staged file at `staged` is among `files` (paths inside the output)."""
        return _inside(self.staging, staged) in {f.name for f in files}

    def digests(self) -> tuple[FileDigest, ...]:
        """Every staged file's path (inside the output), size and digest: what the debit journals."""
        return tuple(_staged_digests(self.staging))

    def verify(self, journaled: tuple[FileDigest, ...], when: str) -> None:
        """RunError unless the staged files are exactly `journaled` (a file removed, added or changed since)."""
        changed = _differences(journaled, self.digests())
        if changed:
            raise RunError(f"the staged outputs changed {when} ({changed[0]}{' and more' if len(changed) > 1 else ''}: "
                           f"something else writes or cleans {self.staging})")

    def check_unchanged(self) -> None:
        """RunError unless the output directory is as it was when checked (absent, or the same directory): dpstream
        replaces only what it checked, never a directory someone put there while the run computed."""
        if self.local and _identity(self.output_dir) != self._found:
            raise RunError(f"output directory {self.output_dir} was {'created' if self._found is None else 'replaced'} "
                           f"by someone else while the run computed; dpstream deletes only what it checked; move it "
                           f"away and run the job again")

    def publish(self) -> None:
        """Make the staged files the output directory's content (see the module docstring)."""
        try:
            if self.local:
                self.check_unchanged()
                self._publish_local()
            else:
                self._publish_url()
        except (OSError, RunError) as err:
            detail = err if isinstance(err, RunError) else f"publishing {self.output_dir} failed: {err}"
            after = (f"the next run of this job into {self.output_dir} publishes them (it debits nothing for them)"
                     if self.local else f"on an object store no later run publishes them: copy them into "
                                        f"{self.output_dir} (report.json last)")
            raise RunError(f"the debit was committed but {detail}; the complete outputs are kept in {self.staging} "
                           f"and {after}", EXIT_ERROR) from err
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


def _probe(staging: str, output: str) -> None:
    """RunError (before the ledger is asked) unless `staging` takes real bytes: a full filesystem still creates
    empty files and directories, and would fail only when the pipeline writes its first release."""
    probe = os.path.join(staging, ".write-check")
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * 65536)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        raise RunError(f"output directory {output}: cannot write in {os.path.dirname(staging)}: "
                       f"{err.strerror or err}; nothing was debited") from err
    finally:
        if os.path.exists(probe):
            os.remove(probe)


def _staged_digests(staging: str) -> tuple[FileDigest, ...]:
    """(path inside `staging`, size, SHA-256) of every file under it, local or a URL, by path."""
    if is_local(staging):
        paths = [os.path.join(folder, f) for folder, _, names in os.walk(staging) for f in names]
    else:
        paths = [m.path for m in filesystems().match([join(staging, "**")])[0].metadata_list]
    return tuple(sorted((FileDigest.of(_inside(staging, path), read_bytes(path)) for path in paths),
                        key=lambda f: f.name))


def _inside(staging: str, path: str) -> str:
    """A staged file's path inside the output directory."""
    return path[len(staging):].lstrip("/")


def _differences(expected: tuple[FileDigest, ...], found: tuple[FileDigest, ...]) -> list[str]:
    """What differs between two sets of files, one phrase per file ("report.md changed", "a.csv is missing")."""
    wanted, have = {f.name: f for f in expected}, {f.name: f for f in found}
    return ([f"{n} is missing" for n in sorted(wanted.keys() - have.keys())]
            + [f"{n} changed" for n in sorted(wanted.keys() & have.keys()) if wanted[n] != have[n]]
            + [f"{n} was added" for n in sorted(have.keys() - wanted.keys())])


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of a local path without following a final symbolic link; None when absent."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
