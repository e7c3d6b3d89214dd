"""The end of every staged run, `dpstream run`'s and a library `Budget.run`'s alike: the pipeline has computed
every release into a private staging directory; check what is staged, debit the scope once with the staged
files' digests journaled in the same ledger transaction, then publish exactly those files.

Privacy claim (docs/proofs/pipelines.run.budget.Budget.md): nothing leaves staging before the debit that pays
for it committed, and what leaves is byte for byte what the debit journaled. A run that fails before the commit
(the pipeline, a user's DoFn, a missing staged file, a refusal) ends unpublished and undebited (`abandon`);
after the commit, the staging directory is kept until published (`Publication.committed`), by this run or by
the next one into the same output.
"""
from __future__ import annotations

import json
import re
import signal
import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, Mapping, Protocol, TypeVar

import apache_beam as beam

from dpstream.accounting.ledger import FileDigest, LedgerConflict
from dpstream.accounting.ledger.receipts import Admission, Debit
from dpstream.accounting.text import first_line
from dpstream.connectors.errors import InputError, OutputError
from dpstream.connectors.files import write_bytes
from dpstream.pipelines.report.document import REPORT_JSON, budget_json
from dpstream.pipelines.run.errors import EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED, CommitInDoubt, RunError
from dpstream.pipelines.run.lease import LeaseKeeper
from dpstream.pipelines.run.publication import Publication


class Budget(Protocol):
    """What the transaction asks of a `pipelines.run.budget.Budget` (named here so the two modules do not import
    each other)."""

    scope: str
    lease_seconds: float

    def admit(self, label: str | None = None, output: str | None = None) -> Admission: ...
    def renew(self, admission: Admission) -> None: ...
    def sealed_states(self, released: dict[str, set[int]] | None = None) -> Any: ...
    def preview(self, admission: Admission, states: Any) -> tuple[Debit, str]: ...
    def commit(self, admission: Admission, states: Any, expect: str | None = None,
               files: tuple[FileDigest, ...] = ()) -> Debit: ...
    def abandon(self, admission: Admission, reason: str) -> None: ...

COMMIT_ATTEMPTS = 5
Report = TypeVar("Report")


def run_staged(budget: Budget, pipeline: beam.Pipeline, publication: Publication, files: Mapping[str, str],
               label: str | None, log: Callable[[str], Any]) -> Debit:
    """A library pipeline whose releases all go to `Budget.write` sinks, as one transaction: admit, run into
    staging (the lease renewed meanwhile), commit the debit with a report.json and the staged files journaled,
    publish. Any failure before the commit ends the run unpublished and undebited (RunError)."""
    admission = budget.admit(label, output=publication.output_dir)
    log(admission.message)
    with ExitStack() as debiting:
        with ends_unpublished(budget, admission, log):
            with LeaseKeeper(lambda: budget.renew(admission), budget.lease_seconds, f"run-{admission.run_id}"):
                pipeline.run().wait_until_finish()
                states = budget.sealed_states()
            debiting.enter_context(interrupts_deferred(log))
            debit, _, journaled = commit_staged(budget, admission, states, publication, files,
                                                lambda preview: _stage_library_report(preview, files, publication))
        log(debit.message)
        publish_committed(debit, journaled, publication, "run the pipeline again with the same output")
    return debit


def _stage_library_report(preview: Debit, files: Mapping[str, str], publication: Publication) -> dict[str, Any]:
    """report.json of a library run: the debit and the staged release files (what `Publication` reads to tell a
    published run, and to recover one stopped between its debit and its publication)."""
    content = {"job": {"name": "library pipeline", "label": preview.label}, "budget": budget_json(preview),
               "releases": {name: {"file": publication.inside(path)} for name, path in files.items()}}
    write_bytes(publication.path(REPORT_JSON), json.dumps(content, indent=2, sort_keys=True).encode("utf-8"))
    return content


def commit_staged(budget: Budget, admission: Admission, states, publication: Publication,
                  files: Mapping[str, str], stage_report: Callable[[Debit], Report],
                  ) -> tuple[Debit, Report, tuple[FileDigest, ...]]:
    """Stage the report of the debit the ledger previews (`stage_report(preview)`), check that every release in
    `files` (name -> staged path) is staged and the output directory untouched, then commit that very debit with
    the staged files' digests journaled (again, with a fresh report, when another release changed the scope in
    between); (the debit, the report, the journaled files). Once committed, the staging directory is kept until
    it is published."""
    for _ in range(COMMIT_ATTEMPTS):
        preview, token = budget.preview(admission, states)
        written = stage_report(preview)
        staged = publication.digests()
        missing = [name for name, path in files.items() if not publication.holds(path, staged)]
        if missing:
            raise RunError(f"release {missing[0]!r}: its staged file is missing from {publication.staging} (the "
                           f"pipeline did not write it, or a temporary-file cleaner removed it); nothing was "
                           f"published or debited")
        publication.check_unchanged()
        try:
            debit = budget.commit(admission, states, token, staged)
        except LedgerConflict:
            continue
        except CommitInDoubt:
            publication.committed = True  # kept for the next run, which asks the ledger again
            raise
        publication.committed = True
        return debit, written, staged
    raise RunError(f"scope {budget.scope!r} kept changing while run {admission.run_id} tried to publish "
                   f"({COMMIT_ATTEMPTS} attempts); nothing was published or debited")


def publish_committed(debit: Debit, journaled: tuple[FileDigest, ...], publication: Publication,
                      again: str) -> None:
    """Publish a debited run's staging after checking it still holds exactly the journaled files; `again`: how
    the operator runs the job once more (it then publishes them, `Publication._recover`)."""
    try:
        publication.verify(journaled, "after the debit")
    except RunError as err:
        raise RunError(f"the debit (ledger run {debit.run_id}) stands but nothing was published: {err}; the outputs "
                       f"stay in {publication.staging} (the ledger journaled their digests); {again} once the staged "
                       f"files are restored, and it publishes them", EXIT_ERROR) from err
    publication.publish()


@contextmanager
def ends_unpublished(budget: Budget, admission: Admission, log: Callable[[str], Any]) -> Iterator[None]:
    """A failure or an interrupt inside the block ends the admitted run unpublished and undebited (`abandon`,
    recording `RunError.recorded`, never data); an error other than RunError leaves as the one-line RunError of
    `pipeline_error`."""
    try:
        yield
    except Exception as err:
        error = err if isinstance(err, RunError) else pipeline_error(err)
        abandon(budget, admission, error.recorded, log)
        if error is err:
            raise
        raise error from err
    except BaseException as err:  # Ctrl-C: the run ends unpublished too
        abandon(budget, admission, f"interrupted ({type(err).__name__})", log)
        raise


def abandon(budget: Budget, admission: Admission, reason: str, log: Callable[[str], Any]) -> None:
    """End the run unpublished (`budget history` says failed, with `reason`); a ledger that cannot be reached
    lets its lease run out instead."""
    try:
        budget.abandon(admission, reason)
    except RunError as err:
        log(f"note: could not record the run's failure ({err})")


@contextmanager
def interrupts_deferred(log: Callable[[str], Any]) -> Iterator[None]:
    """Ctrl-C (SIGINT) waits until the block ends: a run that is debiting finishes its debit and publication, so
    an interrupt never leaves a debited run unpublished or a message that says otherwise. Only the main thread
    can hold signals; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            log("note: Ctrl-C arrived while the run was debiting and publishing; it finished both first")


def pipeline_error(err: Exception) -> RunError:
    """One line for a failed computation: the input error, or the release file that could not be written (a full
    filesystem), inside the runner's wrapping when there is one."""
    cause = _input_error(err)
    consequence = "nothing was published or debited"
    if str(err).startswith("KeyboardInterrupt"):  # Beam re-raises Ctrl-C in a worker as RuntimeError
        return RunError(f"interrupted; {consequence}", EXIT_INTERRUPTED)
    if cause is not None:
        return RunError(f"{cause}; {consequence}")
    step = _STEP.search(str(err))
    where = f" in step {step.group(1)!r}" if step else ""
    return RunError(f"pipeline failed: {type(err).__name__}: {first_line(err)}; {consequence}", EXIT_INTERNAL,
                    ledger_reason=f"pipeline failed: {type(err).__name__}{where} (its message is not recorded: "
                                  f"it may quote data); {consequence}")


_STEP = re.compile(r"\[while running '([^']*)'\]")


def _input_error(err: BaseException) -> InputError | OutputError | None:
    """The innermost InputError or OutputError of the chain (Beam re-raises it with "[while running ...]"
    appended)."""
    found, seen = None, set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        if isinstance(link, (InputError, OutputError)):
            found = link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return found
