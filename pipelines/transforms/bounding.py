"""Contribution bounding per privacy unit and window, vectorised over Arrow record batches.

`BoundContributions` turns `EVENT_SCHEMA` record batches into, per window,
the per-partition sums in which every user counts at most `max_partitions`
partitions and at most `max_contributions` records per partition, each value
clipped to [min_value, max_value] (DESIGN.md section 1). Steps:

1. Pre-aggregate each record batch (numpy, no Python per row): assign window
   indices, clip values and put them on the value grid (integer units of the
   public power-of-two `ContributionBounds.quantum`, `pipelines.mechanisms.fixedpoint`),
   and reduce each (window, user, partition) group to at most
   `max_contributions` records: the records with the smallest random keys
   (a uniform sample without replacement; keys from the CSPRNG, or in test mode
   a keyed hash of the record). Counting jobs (min_value = max_value) need no
   sample: every record is worth the same, so a group reduces to its size.
   Pieces travel as plain arrays (`_Piece`: user ids as Arrow strings,
   partition codes with the piece's own names, narrow counts), cheap to pickle
   through the shuffle. Users are grouped by their exact id, never by a hash:
   two users merged by a collision would be bounded as one unit, and removing
   one of them could then change up to 2 max_partitions cells.
2. Group the pieces of a window (and user shard) by key; merging bottom-m
   samples by smallest key again gives a uniform m-sample of the whole group.
3. Per user, keep `max_partitions` of their partitions, chosen uniformly
   (smallest random key per (user, window, partition)), then sum per partition.

Across windows (`cap`, from `[privacy] max_windows` C and `[privacy] max_partitions_total` T):
- batch: the pieces of every window are grouped per user shard instead, and before step 3 each unit (user, or
  user and unit period) keeps its records in only the C of its windows with the smallest random keys
  (`capped_windows`), so a unit reaches at most C windows; after step 3 each unit keeps its T (window,
  partition) cells with the largest |bounded sum|, ties at random, and of those (`max_contributions_total` K)
  the heaviest while their |bounded sums| add up to at most K records' worth (`within_mass`);
- streaming: a window cannot wait for later ones, so each unit keeps its first C windows in window order, and
  its first T cells (the heaviest of each window while any remain) and its first K records' worth; `_CapInWindowOrder` holds each user
  shard's count per unit in keyed state and takes the windows strictly in index order, whatever order they
  arrive in.
Each unit's choice depends only on its own records and independent keys, never on arrival order. Proof:
docs/proofs/pipelines.transforms.bounding.max_windows.md.

Late records (streaming): a batch with a `PUBLISHED` column (a Pub/Sub source whose event time is a JSON key)
drops each record from every window released (end plus allowed lateness) at or before its publish time, in step
1, so whether a record counts in a window depends on its own event and publish times only; the watermark, which
other records move, then only decides when the window fires (docs/proofs/pipelines.run.stream.md, "Late data").

Proof: docs/proofs/pipelines.transforms.bounding.BoundContributions.md.
With `units`, step 3 also counts, per partition, the users it kept (each
user adds 1 to at most `max_partitions` of these counts).

Privacy: after step 3 one user changes at most `max_partitions` partition sums
of a window, each by at most max_contributions * max(|k_min|, |k_max|) units
of the quantum (`ContributionBounds.linf`, from the quantised bounds), whatever
the other users do; so L1 and L2 sensitivities are those of
`ContributionBounds`, exactly: the sums are exact. Which records are kept
depends only on random keys, never on record order ("first n").
Caller must ensure: batches follow EVENT_SCHEMA; seeded mode only in tests.
Numerics: exact. Every sum is an exact integer sum of value units (`fixedpoint.code_sums`,
`label_sums`: independent of order, batching and sharding): int64 while the |units| of a
partition add up to at most 2**62 (at least 2**32 records at the largest |value| per
partition and window), Python ints (object dtype) for a partition beyond, never a wrap
or an error. A user's cell (step 2) is at most max_contributions 2**30 <= 2**62 units, an
int64 always. Clipping and rint are monotone, so a kept record's units lie in
[k_min, k_max].
Runtime: O(n log n) per batch and per window group (sorts), no per-row Python.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders import PickleCoder
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindows, TimestampedValue

from dpstream.connectors.schema import EVENT_SCHEMA, PUBLISHED, WALL_CLOCK_RUNNERS
from dpstream.pipelines.config.specs import ContributionBounds, WindowSpec
from dpstream.pipelines.mechanisms.fixedpoint import code_sums, group_sums, label_sums, to_units
from dpstream.pipelines.mechanisms.noise import SecureRandom
from dpstream.pipelines.mechanisms.quantiles import ValueGrid
from dpstream.pipelines.planning.windows import WindowCap
from dpstream.pipelines.transforms.windowing import (
    PublicWindows,
    beam_windows,
    release_times,
    window_indices,
    window_timestamp,
)

_MIX = np.uint64(0x9E3779B97F4A7C15)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser: a bijection of uint64 that spreads every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _combine(*parts: np.ndarray | np.unsignedinteger) -> np.ndarray:
    state = np.zeros(np.broadcast_shapes(*(np.shape(p) for p in parts)), dtype=np.uint64)
    for part in parts:
        state = _splitmix((state + _MIX) ^ np.asarray(part).astype(np.uint64, copy=False))
    return state


class _Keys:
    """Random sampling keys: CSPRNG words, or in test mode keyed hashes of what identifies the item.

    In test mode equal inputs give equal keys whatever the batching or order,
    so batch and streaming runs keep the same records.
    """

    def __init__(self, seed: int | None, purpose: str):
        self._seed = seed
        self._purpose = purpose
        self._rng: SecureRandom | None = None
        if seed is not None:
            digest = hashlib.sha256(f"{seed}\x00{purpose}".encode()).digest()
            self._hash_key = digest[:16].hex()[:16]
            self._salt = np.uint64(int.from_bytes(digest[16:24], "little"))

    def strings(self, values: np.ndarray) -> np.ndarray:
        """Keyed 64-bit hashes of strings (test mode only)."""
        return pd.util.hash_array(np.asarray(values, dtype=object), hash_key=self._hash_key, categorize=False)

    def draw(self, size: int, identity) -> np.ndarray:
        """`size` keys; `identity()` returns the arrays that identify the items (called in test mode only)."""
        if self._seed is None:
            if self._rng is None:
                self._rng = SecureRandom()
            return self._rng.words(size)
        return _combine(self._salt, *identity())


def _runs(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the runs of equal values in a sorted array."""
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return starts, np.r_[starts[1:], ordered.size]


def _group_ranks(groups: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, rank): rows sorted by (group, key) and each sorted row's rank within its group."""
    order = np.lexsort((keys, groups))
    sorted_groups = groups[order]
    starts, ends = _runs(sorted_groups)
    lengths = ends - starts
    rank = np.arange(sorted_groups.size) - np.repeat(starts, lengths)
    return order, rank


def _dictionary(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(distinct strings as Arrow, int64 code per row) of a string column, without a Python object per row."""
    encoded = column.dictionary_encode()
    return encoded.dictionary, encoded.indices.to_numpy().astype(np.int64)


@dataclass(frozen=True, slots=True)
class _Piece:
    """Pre-aggregated records of one (window, user shard) from one batch (`_PreAggregate`), or several pieces
    concatenated: plain arrays, which pickle through Beam's shuffle several times faster than a DataFrame. Per
    row: the user id (Arrow strings), the partition (an Arrow dictionary array: int32 codes into the piece's own
    partition names), and the group's record count `n` (counting jobs; the narrowest unsigned type that holds
    max_contributions) or the kept record's sampling `key` and `value` (int64 units of the quantum)."""

    user: pa.Array
    partition: pa.DictionaryArray
    n: np.ndarray | None = None
    key: np.ndarray | None = None
    value: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.user)

    def __reduce__(self):
        """Pickled as numpy arrays, the user ids as their bytes and lengths (one byte each where every id is shorter
        than 256 bytes, instead of Arrow's four-byte offsets): most of what a stream shuffles is user ids."""
        return _restore_piece, (_packed(self.user), self.partition.indices.to_numpy(zero_copy_only=False),
                                self.partition.dictionary, self.n, self.key, self.value)

    def records(self) -> tuple[np.ndarray, np.ndarray]:
        """(sampling keys, value units) of a piece of records with values (not a counting job's)."""
        if self.key is None or self.value is None:
            raise ValueError("a counting job's piece holds record counts, not records with values")
        return self.key, self.value

    def take(self, rows: np.ndarray) -> _Piece:
        """The piece of the given rows (an int64 index array)."""
        taken = pa.array(rows, pa.int64())
        return _Piece(self.user.take(taken), self.partition.take(taken),
                      *(None if column is None else column[rows] for column in (self.n, self.key, self.value)))

    @staticmethod
    def empty() -> _Piece:
        return _Piece(pa.array([], pa.string()), _own_partitions(np.zeros(0, dtype=np.int64), pa.array([], pa.string())))

    @staticmethod
    def concat(pieces) -> _Piece:
        """One piece of all rows of `pieces` (of one job: all counting, or all with keys and values)."""
        pieces = [piece for piece in pieces if piece.rows] or [_Piece.empty()]
        if len(pieces) == 1:
            return pieces[0]

        def joined(name: str):
            columns = [getattr(piece, name) for piece in pieces]
            return None if columns[0] is None else np.concatenate(columns)

        wide = pa.dictionary(pa.int32(), pa.string())
        return _Piece(pa.concat_arrays([piece.user for piece in pieces]),
                      pa.concat_arrays([piece.partition.cast(wide) for piece in pieces]),  # names unified
                      joined("n"), joined("key"), joined("value"))


def _packed(values: pa.Array):
    """Arrow strings without nulls as (their bytes, their lengths in the narrowest unsigned type); any other array
    as itself."""
    buffers = values.buffers()
    if values.null_count or values.type != pa.string() or buffers[2] is None:
        return values
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(values) + 1, offset=values.offset * 4)
    lengths = np.diff(offsets)
    narrow = np.uint8 if lengths.max(initial=0) < 256 else np.int32
    return np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0]:offsets[-1]], lengths.astype(narrow)


def _restore_piece(user, codes: np.ndarray, partitions: pa.Array, n, key, value) -> _Piece:
    if not isinstance(user, pa.Array):
        data, lengths = user
        offsets = np.zeros(lengths.size + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        user = pa.StringArray.from_buffers(lengths.size, pa.py_buffer(offsets), pa.py_buffer(data))
    return _Piece(user, pa.DictionaryArray.from_arrays(pa.array(codes), partitions), n, key, value)


def _own_partitions(codes: np.ndarray, partitions: pa.Array) -> pa.DictionaryArray:
    """Partition `codes` into `partitions` as a dictionary array that holds only the names used (a piece pickles
    its own names, not the batch's), with the narrowest index type."""
    if len(partitions) <= 4 * codes.size:  # a presence mask: no sort
        present = np.zeros(len(partitions), dtype=bool)
        present[codes] = True
        used, compact = np.flatnonzero(present), (np.cumsum(present) - 1)[codes]
    else:
        used, compact = np.unique(codes, return_inverse=True)
    index_type = np.int8 if used.size <= 127 else np.int16 if used.size <= 32767 else np.int32
    return pa.DictionaryArray.from_arrays(pa.array(compact.astype(index_type).ravel()), partitions.take(pa.array(used)))


def _count_type(most: int) -> type:
    """The narrowest unsigned integer type that holds record counts up to `most`."""
    return next(kind for kind in (np.uint8, np.uint16, np.uint32, np.uint64) if most <= np.iinfo(kind).max)


def _python(values: pa.Array) -> np.ndarray:
    return values.to_numpy(zero_copy_only=False)


def needs_publish_times(batches: beam.PCollection) -> bool:
    """Whether `batches` must carry `PUBLISHED`: an unbounded input on a runner whose watermark is not the wall
    clock (`WALL_CLOCK_RUNNERS`), where only the publish-time filter keeps lateness a fact about each record (a
    library pipeline reading Pub/Sub itself, by a timestamp attribute, on Dataflow would otherwise pass)."""
    return not batches.is_bounded and type(batches.pipeline.runner).__name__ not in WALL_CLOCK_RUNNERS


def _published_in_time(batch: pa.RecordBatch, rows: np.ndarray, windows: np.ndarray,
                       releases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, windows), aligned pairs, without those whose record was published at or after its window's release
    time (`releases[i]`, microseconds): a fact about the record alone. Batches without `PUBLISHED` unchanged."""
    if PUBLISHED not in batch.schema.names:
        return rows, windows
    keep = batch.column(PUBLISHED).to_numpy()[rows] < releases[windows]
    return rows[keep], windows[keep]


class _PreAggregate(beam.DoFn):
    """One record batch -> ((window index, shard), `_Piece`) pieces, at most max_contributions records per group.

    The batch's users and partitions are encoded once (an Arrow dictionary; public partitions by their place in
    the list), its rows ordered by window (a radix sort on the window index), and each window's (user, partition)
    groups found from the codes. The user shard is a keyed hash of the user id modulo `shards`, computed once per
    distinct user of the batch.
    """

    def __init__(self, bounds: ContributionBounds, window: WindowSpec, partitions, seed, shards: int,
                 needs_published: bool = False):
        self._needs_published = needs_published
        self._bounds = bounds
        self._window = window
        self._partitions = None if partitions is None else pa.array(list(partitions), pa.string())
        self._seed = seed
        self._shards = shards
        self._counting = bounds.counting

    def setup(self):
        self._keys = _Keys(self._seed, "records")
        self._shard_keys = _Keys(0, "shards")
        self._releases = release_times(self._window)

    def process(self, batch: pa.RecordBatch):
        if batch.schema.names[:4] != EVENT_SCHEMA.names:
            raise TypeError(f"BoundContributions expects record batches with columns {EVENT_SCHEMA.names}, got {batch.schema.names}")
        if self._needs_published and PUBLISHED not in batch.schema.names:
            raise ValueError(f"an unbounded input on a runner other than the DirectRunner needs each record's publish "
                             f"time (the {PUBLISHED!r} column of ReadPubSubEvents with a JSON-key event time), so "
                             f"that whether a record is late is a fact about itself; this batch has the columns "
                             f"{batch.schema.names}")
        if batch.num_rows == 0:
            return
        timestamps = batch.column(1).to_numpy()
        partitions, partition_codes = self._partition_codes(batch.column(2))
        rows = np.arange(batch.num_rows) if self._partitions is None else np.flatnonzero(partition_codes >= 0)
        positions, windows = window_indices(timestamps[rows], self._window)
        rows, windows = _published_in_time(batch, rows[positions], windows, self._releases)
        if rows.size == 0:
            return
        narrow = np.int16 if self._window.count < 2**15 else np.int64  # int16: numpy's stable sort is a radix sort
        order = np.argsort(windows.astype(narrow), kind="stable")
        rows, windows = rows[order], windows[order]
        users, user_codes = _dictionary(batch.column(0))
        shard = None
        if self._shards > 1:
            shard = (self._shard_keys.strings(_python(users)) % np.uint64(self._shards)).astype(np.int64)
        columns = [user_codes[rows], partition_codes[rows]]
        if not self._counting:
            columns += [np.clip(batch.column(3).to_numpy()[rows], self._bounds.min_value, self._bounds.max_value),
                        timestamps[rows]]
        for begin, end in zip(*_runs(windows)):
            yield from self._pieces(int(windows[begin]), users, partitions, shard,
                                    *(column[begin:end] for column in columns))

    def _partition_codes(self, column: pa.Array) -> tuple[pa.Array, np.ndarray]:
        """(partition names, a code per row into them): the public partitions, -1 for a row in none of them; or,
        without a public list, the batch's own (few) partitions."""
        if self._partitions is None:
            return _dictionary(column)
        return self._partitions, pc.index_in(column, value_set=self._partitions).fill_null(-1).to_numpy()

    def _pieces(self, index: int, users: pa.Array, partitions: pa.Array, shard: np.ndarray | None,
                user_codes: np.ndarray, partition_codes: np.ndarray, values: np.ndarray | None = None,
                timestamps: np.ndarray | None = None):
        """One window's rows (codes into the batch's `users` and into `partitions`; values and timestamps unless
        counting) -> its pieces, one per user shard (`shard`: each user's, None for one shard)."""
        groups = user_codes * len(partitions) + partition_codes
        if shard is not None:  # the shard first, so the groups of one shard are contiguous once sorted
            groups += shard[user_codes] * (len(users) * len(partitions))
        columns: dict[str, np.ndarray]
        if values is None:
            distinct, sizes = np.unique(groups, return_counts=True)
            columns = {"n": np.minimum(sizes, self._bounds.max_contributions).astype(
                _count_type(self._bounds.max_contributions))}
        else:
            keys = self._keys.draw(groups.size, lambda: (
                self._keys.strings(_python(users.take(pa.array(user_codes)))),
                self._keys.strings(_python(partitions.take(pa.array(partition_codes)))),
                timestamps, values.view(np.uint64), np.int64(index)))
            order, rank = _group_ranks(groups, keys)
            kept = order[rank < self._bounds.max_contributions]  # still sorted by group
            distinct = groups[kept]
            columns = {"key": keys[kept], "value": to_units(values[kept], self._bounds.quantum)}
        pair, partition_of = np.divmod(distinct, len(partitions))
        shard_of, user_of = (None, pair) if shard is None else np.divmod(pair, len(users))
        for begin, end in [(0, distinct.size)] if shard_of is None else zip(*_runs(shard_of)):
            piece = _Piece(users.take(pa.array(user_of[begin:end])), _own_partitions(partition_of[begin:end], partitions),
                           **{name: column[begin:end] for name, column in columns.items()})
            key = (index, 0 if shard_of is None else int(shard_of[begin]))
            yield TimestampedValue((key, piece), window_timestamp(self._window, index))


@dataclass(frozen=True)
class _Kept:
    """The cells (steps 2 and 3) or, with a value grid, the records kept in one window: the distinct users and
    partitions (Arrow strings) of the window's pieces, each kept item's user and partition code
    into them, and its bounded sum in value units (or value bucket)."""

    users: Any
    user_of: np.ndarray
    partitions: Any
    partition_of: np.ndarray
    values: np.ndarray

    def user_labels(self) -> np.ndarray:
        return np.asarray(self.users.take(self.user_of), dtype=object)

    def partition_labels(self) -> np.ndarray:
        return np.asarray(self.partitions.take(self.partition_of), dtype=object)

    def totals(self, units: bool):
        """Per-partition exact sums of the kept cells (with `units`: and how many users they came from)."""
        return code_sums(self.partition_of, self.partitions, self.values, units)


def _kept(piece: _Piece, index: int, bounds: ContributionBounds, keys: _Keys, partition_keys: _Keys,
          grid: ValueGrid | None = None) -> _Kept:
    """All pieces of one window (one user shard's or more) -> what steps 2 and 3 keep: per kept (user, partition)
    its bounded sum in value units; with `grid` (records with values only), the kept cells' records instead, each
    with its value bucket."""
    users, user_codes = _dictionary(piece.user)
    partition_codes, partitions = piece.partition.indices.to_numpy().astype(np.int64), piece.partition.dictionary
    groups = user_codes.astype(np.int64) * len(partitions) + partition_codes
    if bounds.counting:
        distinct, inverse = np.unique(groups, return_inverse=True)
        kept = np.minimum(np.bincount(inverse, weights=piece.n), bounds.max_contributions)
        sums = kept.astype(np.int64) * bounds.value_units[0]
    else:
        record_keys, units = piece.records()
        order, rank = _group_ranks(groups, record_keys)
        sample = order[rank < bounds.max_contributions]  # still sorted by group
        sampled = groups[sample]
        starts, _ = _runs(sampled)
        distinct = sampled[starts]
        # at most max_contributions <= 2**32 records of |units| <= 2**30 per group: no overflow
        sums = np.add.reduceat(units[sample], starts)
    user_of, partition_of = np.divmod(distinct, len(partitions))
    chosen = _chosen_partitions(user_of, partition_of, users, partitions, index, bounds.max_partitions,
                                partition_keys)
    if grid is not None:  # each chosen cell's sampled records (sample[starts[c]:starts[c + 1]])
        cell_of = np.repeat(np.arange(distinct.size), np.diff(np.r_[starts, sample.size]))
        picked = np.zeros(distinct.size, dtype=bool)
        picked[chosen] = True
        records = picked[cell_of]
        chosen, values = cell_of[records], grid.bucket(units[sample[records]] * bounds.quantum)
    else:
        values = sums[chosen]
    return _Kept(users, user_of[chosen], partitions, partition_of[chosen], values)


def _chosen_partitions(user_of: np.ndarray, partition_of: np.ndarray, users, partitions, index: int, most: int,
                       partition_keys: _Keys) -> np.ndarray:
    """The cells (rows of `user_of`, `partition_of`, one per distinct (user, partition) of a window, sorted by user)
    kept by step 3: all of a user's cells when they are at most `most`, else the `most` with the smallest random
    keys (a uniform choice). Keys are drawn only for the users that have more cells than `most`, the only ones
    a choice is made for. Returned in row order."""
    crowded = np.bincount(user_of)[user_of] > most
    if not crowded.any():
        return np.arange(user_of.size)
    rows = np.flatnonzero(crowded)
    draws = partition_keys.draw(rows.size, lambda: (
        partition_keys.strings(np.asarray(users, dtype=object))[user_of[rows]],
        partition_keys.strings(np.asarray(partitions, dtype=object))[partition_of[rows]], np.int64(index)))
    order, rank = _group_ranks(user_of[rows], draws)
    crowded[rows[order[rank < most]]] = False  # now: the rows not kept
    return np.flatnonzero(~crowded)


def _kept_cells(piece: _Piece, index: int, bounds: ContributionBounds, keys: _Keys,
                partition_keys: _Keys, grid: ValueGrid | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_kept` as (user, partition, bounded sum or value bucket) per kept item, labels as Python strings."""
    kept = _kept(piece, index, bounds, keys, partition_keys, grid)
    return kept.user_labels(), kept.partition_labels(), kept.values


def bucket_counts(labels: np.ndarray, buckets: np.ndarray) -> pd.Series:
    """Kept records (partition, value bucket) -> their int64 counts, indexed by (partition, bucket)."""
    index = pd.MultiIndex.from_arrays([labels, buckets], names=["partition", "bucket"])
    return group_sums(pd.Series(np.ones(labels.size, dtype=np.int64), index=index))


class _BoundWindow(beam.DoFn):
    """All pieces of one (window, shard) -> (window index, per-partition bounded sums as a pandas Series of integer
    units, int64 unless a sum is beyond it (`fixedpoint.code_sums`); with `grid`, the kept records' counts per (partition, value bucket))."""

    def __init__(self, bounds: ContributionBounds, seed, units: bool = False, grid: ValueGrid | None = None):
        self._bounds = bounds
        self._seed = seed
        self._units = units
        self._grid = grid

    def setup(self):
        self._keys = _Keys(self._seed, "records")
        self._partition_keys = _Keys(self._seed, "partitions")

    def process(self, element):
        (index, _), pieces = element
        kept = _kept(_Piece.concat(pieces), index, self._bounds, self._keys, self._partition_keys, self._grid)
        yield index, (bucket_counts(kept.partition_labels(), kept.values) if self._grid is not None
                      else kept.totals(self._units))


def unit_ids(users: np.ndarray, windows: np.ndarray, unit_of_window: tuple[int, ...]) -> np.ndarray:
    """The privacy unit of each item: a code per distinct (user code, unit period of its window)."""
    periods = np.asarray(unit_of_window, dtype=np.int64)[windows]
    _, unit = np.unique(np.stack([users, periods]), axis=1, return_inverse=True)
    return unit.ravel()


def capped_windows(users: np.ndarray, windows: np.ndarray, limit: int | None, unit_of_window: tuple[int, ...],
                   keys: np.ndarray) -> np.ndarray:
    """Which items to keep: per user and unit period (`unit_of_window`: each window's), the `limit` items with
    the smallest keys (a uniform sample of that many when the keys are i.i.d. uniform; None: all). An item is a
    (user code, window) pair (max_windows) or a (user, window, partition) cell (max_partitions_total); arrays
    are aligned, one entry per distinct item. Returns a boolean mask."""
    if limit is None:
        return np.ones(users.size, dtype=bool)
    order, rank = _group_ranks(unit_ids(users, windows, unit_of_window), keys)
    keep = np.zeros(users.size, dtype=bool)
    keep[order[rank < limit]] = True
    return keep


def within_mass(units: np.ndarray, keys: np.ndarray, mass: np.ndarray, budget) -> np.ndarray:
    """Which items to keep: per unit, the longest prefix in `keys` order whose `mass` (non-negative int64)
    sums to at most `budget` (a number, or an array of one budget per item's unit). Returns a boolean mask."""
    order, _ = _group_ranks(units, keys)
    ordered = mass[order]
    if float(ordered.sum(dtype=np.float64)) >= 2.0 ** 62:  # int64 running sums could wrap: exact Python integers
        ordered = ordered.astype(object)
    starts, ends = _runs(units[order])
    running = np.cumsum(ordered)
    running -= np.repeat(running[starts] - ordered[starts], ends - starts)  # cumulative within each unit
    limit = budget if np.isscalar(budget) else np.asarray(budget)[order]
    keep = np.zeros(units.size, dtype=bool)
    keep[order[np.asarray(running <= limit, dtype=bool)]] = True
    return keep


def heaviest_first(sums: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Sort keys that put cells with larger |bounded sum| first, ties in the order of the random `keys`: with them
    `capped_windows` keeps each unit's T heaviest cells (the most of its bounded mass that T cells can hold)."""
    order = np.lexsort((keys, -np.abs(sums)))
    ranks = np.empty(order.size, dtype=np.int64)
    ranks[order] = np.arange(order.size)
    return ranks


class _BoundCapped(beam.DoFn):
    """All pieces of one user shard, every window -> (window index, bounded sums) per window, after keeping each
    unit's records in at most cap.max_windows windows (step 0, uniformly) and, after steps 2 and 3, in at most
    cap.max_cells of its kept (window, partition) cells, the heaviest (step 4, `heaviest_first`); both by
    `capped_windows`; timestamped for its window."""

    def __init__(self, bounds: ContributionBounds, window: WindowSpec, cap: WindowCap, seed, units: bool = False):
        self._bounds = bounds
        self._window = window
        self._cap = cap
        self._seed = seed
        self._units = units

    def setup(self):
        self._keys = _Keys(self._seed, "records")
        self._partition_keys = _Keys(self._seed, "partitions")
        self._window_keys = _Keys(self._seed, "windows")
        self._cell_keys = _Keys(self._seed, "cells")

    def process(self, element):
        _, pieces = element
        pieces = list(pieces)
        merged = _Piece.concat(piece for _, piece in pieces)
        windows = np.concatenate([np.full(piece.rows, index, dtype=np.int64) for index, piece in pieces])
        rows = np.flatnonzero(self._kept_windows(merged.user, windows))
        order = rows[np.argsort(windows[rows], kind="stable")]
        cells = [(int(windows[order[begin]]), *_kept_cells(merged.take(order[begin:end]), int(windows[order[begin]]),
                                                          self._bounds, self._keys, self._partition_keys))
                 for begin, end in zip(*_runs(windows[order]))]
        if not cells:
            return
        windows = np.concatenate([np.full(users.size, index, dtype=np.int64) for index, users, _, _ in cells])
        users, labels, sums = (np.concatenate([cell[i] for cell in cells]) for i in (1, 2, 3))
        user_codes, names = pd.factorize(users)
        keys = self._cell_keys.draw(users.size, lambda: (
            self._cell_keys.strings(np.asarray(names))[user_codes], self._cell_keys.strings(labels), windows))
        heaviest = heaviest_first(sums, keys)
        keep = capped_windows(user_codes.astype(np.int64), windows, self._cap.max_cells, self._cap.unit_of_window,
                              heaviest)
        if self._cap.max_records is not None:  # of those, the heaviest up to the unit's mass (K records' worth)
            units = unit_ids(user_codes.astype(np.int64), windows, self._cap.unit_of_window)
            keep &= within_mass(units, heaviest, np.abs(sums) * keep, self._bounds.mass_units)
        windows, labels, sums = windows[keep], labels[keep], sums[keep]
        order = np.argsort(windows, kind="stable")
        for begin, end in zip(*_runs(windows[order])):
            rows, index = order[begin:end], int(windows[order[begin]])
            yield TimestampedValue((index, label_sums(labels[rows], sums[rows], self._units)),
                                   window_timestamp(self._window, index))

    def _kept_windows(self, user_ids: pa.Array, windows: np.ndarray) -> np.ndarray:
        """Rows (of users and their windows) in the windows each unit keeps (max_windows), as a boolean mask."""
        users, user_codes = _dictionary(user_ids)
        pairs, row_pair = np.unique(user_codes.astype(np.int64) * self._window.count + windows, return_inverse=True)
        pair_users, pair_windows = np.divmod(pairs, self._window.count)
        keys = self._window_keys.draw(pairs.size, lambda: (
            self._window_keys.strings(_python(users))[pair_users], pair_windows))
        keep = capped_windows(pair_users, pair_windows, self._cap.max_windows, self._cap.unit_of_window, keys)
        return keep[row_pair.ravel()]


class _BoundWindowCells(_BoundWindow):
    """All pieces of one (window, shard) -> (shard, (window index, users, partitions, bounded sums)): steps 2 and 3
    without summing, timestamped for its window; every (window, shard) has one element (empty pieces included)."""

    def __init__(self, bounds: ContributionBounds, window: WindowSpec, seed):
        super().__init__(bounds, seed)
        self._window = window

    def process(self, element):
        (index, shard), pieces = element
        pieces = [piece for piece in pieces if piece.rows]
        if pieces:
            cells = _kept_cells(_Piece.concat(pieces), index, self._bounds, self._keys,
                                self._partition_keys)
        else:
            cells = (np.array([], dtype=object), np.array([], dtype=object), np.array([], dtype=np.int64))
        yield TimestampedValue((shard, (index, *cells)), window_timestamp(self._window, index))


class _CapInWindowOrder(beam.DoFn):
    """(shard, one window's kept cells) -> (window index, bounded sums), each unit in its first cap.max_windows
    windows and first cap.max_cells cells (streaming).

    Windows are taken strictly in index order: one that arrives early waits in `PENDING` until every earlier
    window of the shard has been taken (each (window, shard) sends exactly one element). `UNITS` holds the
    current unit period and, per user, (windows kept, cells kept, value units kept) in it; the unit's first
    windows in index order are kept until it has C, and within a kept window its heaviest cells
    (`heaviest_first`) while it has fewer than T and their |sums| fit in what is left of K records' worth.
    Outputs carry their window's timestamp: never late, because the input watermark cannot pass an earlier
    window's element before it arrives.
    """

    PENDING = BagStateSpec("pending", PickleCoder())
    NEXT = ReadModifyWriteStateSpec("next", PickleCoder())
    UNITS = ReadModifyWriteStateSpec("units", PickleCoder())

    def __init__(self, window: WindowSpec, cap: WindowCap, bounds: ContributionBounds, seed, units: bool = False):
        self._window = window
        self._cap = cap
        self._mass = bounds.mass_units if cap.max_records is not None else None  # K records' worth, in units
        self._seed = seed
        self._units = units

    def setup(self):
        self._cell_keys = _Keys(self._seed, "cells")

    def process(self, element, pending=beam.DoFn.StateParam(PENDING), following=beam.DoFn.StateParam(NEXT),
                kept=beam.DoFn.StateParam(UNITS)):
        _, cells = element
        waiting = {item[0]: item for item in pending.read()}
        index, (period, counts) = following.read() or 0, kept.read() or (None, {})
        if cells[0] < index or cells[0] in waiting:  # one element per (window, shard): Beam windows fire once
            raise ValueError(f"window {cells[0]} reached the cross-window cap twice: its counts would be wrong")
        waiting[cells[0]] = cells
        while index in waiting:
            cells = waiting.pop(index)
            if self._cap.unit_of_window[index] != period:  # a new unit period: every unit starts afresh
                period, counts = self._cap.unit_of_window[index], {}
            yield self._take(cells, counts)
            index += 1
        pending.clear()
        for item in waiting.values():
            pending.add(item)
        following.write(index)
        kept.write((period, counts))

    def _take(self, cells, counts: dict) -> TimestampedValue:
        """One window's cells -> its bounded sums over the cells each unit may still keep; `counts` (user ->
        (windows, cells, value units) kept so far in this unit period) is updated."""
        index, users, labels, sums = cells
        keep = np.zeros(users.size, dtype=bool)
        if users.size:
            codes, names = pd.factorize(users)
            keys = self._cell_keys.draw(users.size, lambda: (
                self._cell_keys.strings(np.asarray(names))[codes], self._cell_keys.strings(labels),
                np.int64(index)))
            heaviest = heaviest_first(sums, keys)
            order, rank = _group_ranks(codes.astype(np.int64), heaviest)
            before = [counts.get(name, (0, 0, 0)) for name in names]
            room = np.array([self._room(windows, cells_kept) for windows, cells_kept, _ in before], dtype=np.int64)
            keep[order[rank < room[codes[order]]]] = True
            mass = np.abs(sums) * keep
            if self._mass is not None:  # the heaviest of those up to the unit's remaining mass
                left = np.array([self._mass - used for _, _, used in before], dtype=np.int64)
                keep &= within_mass(codes.astype(np.int64), heaviest, mass, left[codes])
            taken = np.bincount(codes[keep], minlength=len(names))
            kept_mass = np.zeros(len(names), dtype=object)  # exact, whatever the magnitudes
            np.add.at(kept_mass, codes[keep], mass[keep].astype(object))
            for name, (windows, cells_kept, used), count, added in zip(names, before, taken, kept_mass):
                if count:
                    counts[name] = (windows + 1, cells_kept + int(count), used + int(added))
        return TimestampedValue((index, label_sums(labels[keep], sums[keep], self._units)),
                                window_timestamp(self._window, index))

    def _room(self, windows: int, cells: int) -> int:
        """How many of its cells in this window a unit with `windows` windows and `cells` cells kept may keep."""
        if self._cap.max_windows is not None and windows >= self._cap.max_windows:
            return 0
        return np.iinfo(np.int64).max if self._cap.max_cells is None else self._cap.max_cells - cells


class BoundContributions(beam.PTransform):
    """Record batches -> (window index, per-partition bounded sums) per window and user shard.

    Each output Series holds, for the partitions that received a kept
    contribution, the exact sum of the kept clipped values as an integer number
    of units of `bounds.quantum` (int64, or a Python int beyond int64; for counting jobs with an integer value up to
    2**30 the quantum is at least 1; value 1: the counts themselves); with
    `units`, a DataFrame with columns "sum" and "units" (how many users those
    kept contributions came from). Elements are timestamped at
    their window's end minus 1 us and windowed by `windowing.beam_windows`.
    `partitions`: keep only these (public) partitions before bounding.
    `shards`: users are spread over this many groups per window (parallelism);
    the per-window outputs of the shards are summed by `aggregation.PerWindowSums`.
    `cap`: keep each unit's records in at most `cap.max_windows` windows and `cap.max_cells` (window,
    partition) cells (`planning.WindowCap`; bounded inputs only, grouped per shard over all windows).
    `grid` (quantiles; not with `units` or `cap`, and values not all equal): output, per window, the kept
    records' counts per (partition, value bucket of the grid) instead of sums (`bucket_counts`); the records
    kept are the same.
    Privacy, proof and runtime: module docstring.
    """

    def __init__(self, bounds: ContributionBounds, window: WindowSpec, partitions: tuple[str, ...] | None = None,
                 seed: int | None = None, shards: int = 1, units: bool = False, cap: WindowCap | None = None,
                 grid: ValueGrid | None = None):
        super().__init__()
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"BoundContributions: shards must be a positive integer, got {shards!r}")
        if grid is not None and (units or cap is not None or bounds.counting):
            raise ValueError("BoundContributions: value buckets need values (min_value < max_value), without units "
                             "or a cap across windows")
        self._bounds = bounds
        self._window = window
        self._partitions = partitions
        self._seed = seed
        self._shards = shards
        self._units = units
        self._cap = cap
        self._grid = grid

    def default_label(self) -> str:
        return f"BoundContributions(L0={self._bounds.max_partitions}, Linf={self._bounds.max_contributions})"

    def display_data(self):
        return {"max_partitions": self._bounds.max_partitions, "max_contributions": self._bounds.max_contributions,
                "min_value": self._bounds.min_value, "max_value": self._bounds.max_value}

    def expand(self, batches):
        pieces = batches | "Pre-aggregate batches" >> beam.ParDo(_PreAggregate(
            self._bounds, self._window, self._partitions, self._seed, self._shards, needs_publish_times(batches)))
        if self._cap is not None:
            return self._capped(batches, pieces)
        return (
            pieces
            | "Window" >> beam.WindowInto(beam_windows(self._window))
            | "Group per window" >> beam.GroupByKey()
            | "Bound users" >> beam.ParDo(_BoundWindow(self._bounds, self._seed, self._units, self._grid))
        )

    def _capped(self, batches, pieces):
        """Each user shard's pieces of every window together, so that a unit's windows can be capped; in a stream,
        per window in window order (`_CapInWindowOrder`)."""
        if not batches.is_bounded:
            return self._capped_stream(pieces)
        return (
            pieces
            | "Key by shard" >> beam.MapTuple(lambda key, frame: (key[1], (key[0], frame)))
            | "One window for all" >> beam.WindowInto(GlobalWindows())
            | "Group per shard" >> beam.GroupByKey()
            | "Cap windows, bound users" >> beam.ParDo(_BoundCapped(self._bounds, self._window, self._cap, self._seed,
                                                                   self._units))
            | "Window" >> beam.WindowInto(beam_windows(self._window))
        )

    def _capped_stream(self, pieces):
        empty = pieces.pipeline | "Every window and shard" >> PublicWindows(
            self._window, lambda index, shards=self._shards: [((index, shard), _Piece.empty()) for shard in range(shards)],
            key=lambda key: key[0])
        return (
            (pieces, empty)
            | "With every window" >> beam.Flatten()
            | "Window" >> beam.WindowInto(beam_windows(self._window))
            | "Group per window" >> beam.GroupByKey()
            | "Bound users" >> beam.ParDo(_BoundWindowCells(self._bounds, self._window, self._seed))
            | "One window for all" >> beam.WindowInto(GlobalWindows())
            | "Cap in window order" >> beam.ParDo(_CapInWindowOrder(self._window, self._cap, self._bounds, self._seed,
                                                                     self._units))
            | "Window again" >> beam.WindowInto(beam_windows(self._window))
        )
