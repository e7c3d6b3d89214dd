"""The release journal of a stream: the one record of what it published, kept in the ledger.

An artifact is one release's rows at one emission (a window index) of one stream, as the bytes a worker publishes.
It is journaled by `Ledger.publish_stream_window` (or `seal_and_publish_stream_window` for an svt alert) in the
transaction that decides, and if need be debits, the steps its rows read, and it is never replaced: the first
artifact journaled for (stream, release, emission) is the one every session, retry and recovery publishes.

Invariant (docs/proofs/pipelines.run.stream.md, "The journal"): a stream's output file for (release, emission)
is only ever written with the journaled bytes of that triple, and a triple is journaled only in a transaction in
which every step its rows read is debited. So whatever is published was paid for, and each emission is published
with one content only, however often its window is computed again (a resumed session, a replayed bundle, events
delivered twice): a computation whose artifact is not journaled is dropped unseen. A published file that went
missing, or whose bytes differ from the journal, is written again from the journal (`Ledger.stream_journal`).

A run (`dpstream run`, batch) journals each file it publishes as a `FileDigest` (path, size, digest) with its
debit; its bytes stay in the run's staging directory until they are published, and are checked against the
journal before they are (`pipelines.run.publication`).
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Sequence

import sqlalchemy as sa

from dpstream.accounting.ledger.decisions import now_text
from dpstream.accounting.ledger.errors import LedgerError
from dpstream.accounting.ledger.schema import Tables


def digest_of(content: bytes) -> str:
    """The SHA-256 of published bytes, hex: how a file is checked against its journal entry."""
    return hashlib.sha256(content).hexdigest()


@dataclass(frozen=True)
class Artifact:
    """One release's published bytes at one emission of a stream, and how many rows they hold."""

    release: str
    emission: int
    content: bytes
    rows: int

    @property
    def digest(self) -> str:
        return digest_of(self.content)


@dataclass(frozen=True)
class PublishAnswer:
    """The ledger's answer to a worker about to publish an artifact: `refusal` (a step its rows read was refused:
    publish nothing) or the `content` to publish, which is the journaled artifact's, not necessarily the one the
    worker computed."""

    refusal: str | None
    content: bytes | None


def journaled(tables: Tables, conn: sa.Connection, stream_id: int, release: str, emission: int) -> Artifact | None:
    """The artifact journaled for (stream, release, emission), if any."""
    table = tables.stream_journal
    row = conn.execute(sa.select(table).where((table.c.stream_id == stream_id) & (table.c.release == release)
                                              & (table.c.emission == emission))).one_or_none()
    return None if row is None else _artifact(row)


def record(tables: Tables, conn: sa.Connection, stream_id: int, session: int, artifact: Artifact) -> None:
    """Journal `artifact` for the stream (the caller checked that none is journaled for its emission)."""
    conn.execute(tables.stream_journal.insert().values(
        stream_id=stream_id, release=artifact.release, emission=artifact.emission, rows=artifact.rows,
        digest=artifact.digest, content=zlib.compress(artifact.content), session=session, recorded_at=now_text()))


def artifacts(tables: Tables, conn: sa.Connection, stream_id: int) -> dict[str, dict[int, Artifact]]:
    """Release -> emission -> journaled artifact, for every artifact of the stream."""
    table = tables.stream_journal
    out: dict[str, dict[int, Artifact]] = {}
    for row in conn.execute(sa.select(table).where(table.c.stream_id == stream_id)).all():
        out.setdefault(row.release, {})[row.emission] = _artifact(row)
    return out


def _artifact(row: sa.Row) -> Artifact:
    """The artifact of a journal row; LedgerError when its bytes no longer match their digest."""
    try:
        content = zlib.decompress(row.content)
    except zlib.error:
        content = b""
    if digest_of(content) != row.digest:
        raise LedgerError(f"stream {row.stream_id}: the journaled bytes of release {row.release!r} at window "
                          f"{row.emission} do not match their digest; restore the ledger from a backup")
    return Artifact(row.release, int(row.emission), content, int(row.rows))


@dataclass(frozen=True)
class FileDigest:
    """One file a run publishes: its path inside the output directory, its size and the SHA-256 of its bytes.
    Journaled with the run's debit (`Ledger.commit_run(files=...)`), so publication, recovery and an operator can
    check that what is (or is about to be) published is exactly what was paid for."""

    name: str
    size: int
    digest: str

    @classmethod
    def of(cls, name: str, content: bytes) -> "FileDigest":
        return cls(name, len(content), digest_of(content))


def record_run_files(tables: Tables, conn: sa.Connection, run_id: int, files: Sequence[FileDigest]) -> None:
    """Journal the files of run `run_id` (in its commit's transaction)."""
    names = [f.name for f in files]
    if len(set(names)) != len(names) or any(not name or len(name) > 1000 for name in names):
        raise LedgerError(f"run {run_id}: the files to journal need distinct paths of 1 to 1000 characters")
    for item in files:
        conn.execute(tables.run_journal.insert().values(run_id=run_id, name=item.name, size=int(item.size),
                                                        digest=item.digest))


def run_files(tables: Tables, conn: sa.Connection, run_id: int) -> tuple[FileDigest, ...]:
    """The files journaled for run `run_id`, by path (empty for a run published before the journal)."""
    table = tables.run_journal
    rows = conn.execute(sa.select(table).where(table.c.run_id == run_id).order_by(table.c.name)).all()
    return tuple(FileDigest(r.name, int(r.size), r.digest) for r in rows)
