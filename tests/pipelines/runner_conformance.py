"""The conformance test a Beam runner must pass to be listed in `preflight.VERIFIED_HERE`: the four things dpstream's
pipelines rely on, each in a small pipeline of its own, each checked inside the pipeline (`assert_that`), so it
runs on any runner, remote workers included.

(a) a combine per key in event-time fixed windows: ('a', 1) at 0, 10, 60 and 70 s in 60 s windows is ('a', 2) in
    [0, 60) and ('a', 2) in [60, 120), the window read by the DoFn that labels it (Beam's DaskRunner puts all four
    in the global window and gives ('a', 4): beam#27618);
(b) a side input (AsDict) joined into a ParDo;
(c) GroupByKey on string keys: the empty string, non-ASCII keys, and an NFC and an NFD spelling of "é", which are
    different keys;
(d) a stateful DoFn counting each key's elements in ReadModifyWriteState.

In streaming mode (StandardOptions.streaming) (a) and (d) read a TestStream whose watermark passes the first window
before the second one's elements arrive. By hand, against another runner:
    python -m tests.pipelines.runner_conformance --runner=SomeRunner [its options]
prints each failure and exits 1 if there is one.
"""
from __future__ import annotations

import sys
from typing import Callable

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

WINDOWED = [(0, ("a", 1)), (10, ("a", 1)), (60, ("a", 1)), (70, ("a", 1))]
"""(event time in seconds, element) of check (a)."""
WINDOWED_EXPECTED = [("a", 2, "[0, 60)"), ("a", 2, "[60, 120)")]
NFC_E, NFD_E = "\u00e9", "e\u0301"
KEYED = [("", 1), (NFC_E, 2), ("日本", 3), ("a", 4), (NFD_E, 5), ("", 6), (NFC_E, 7)]
KEYED_EXPECTED = [("", [1, 6]), (NFC_E, [2, 7]), ("日本", [3]), ("a", [4]), (NFD_E, [5])]
COUNTED = [("a", 0), ("b", 0), ("a", 0), ("a", 0), ("b", 0)]
COUNTED_EXPECTED = [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]


def _label(key_total, win=beam.DoFn.WindowParam):
    """(key, total, the window the runner put it in: "[start, end)" in seconds, or "global")."""
    key, total = key_total
    if isinstance(win, window.GlobalWindow):
        return key, total, "global"
    return key, total, f"[{win.start.micros // 10**6}, {win.end.micros // 10**6})"


def _timestamped(pipeline: beam.Pipeline, elements: list[tuple[int, tuple]], streaming: bool) -> beam.PCollection:
    """`elements` (in event-time order) at their event times: in streaming mode a TestStream whose watermark
    reaches the start of each element's 60 s window before the element, so a window is complete and due before
    the next one's elements arrive; else Create."""
    if not streaming:
        return (pipeline | "Create" >> beam.Create(elements)
                | "Stamp" >> beam.Map(lambda pair: window.TimestampedValue(pair[1], pair[0])))
    stream, watermark = TestStream(), 0
    for at, element in elements:
        if at - at % 60 > watermark:
            watermark = at - at % 60
            stream = stream.advance_watermark_to(watermark)
        stream = stream.add_elements([window.TimestampedValue(element, at)])
    return pipeline | "TestStream" >> stream.advance_watermark_to_infinity()


def windowed_combine(pipeline: beam.Pipeline, streaming: bool, into: beam.WindowInto | None = None) -> None:
    """(a); `into` replaces the 60 s fixed windows in the negative control (`global_window`)."""
    sums = (_timestamped(pipeline, WINDOWED, streaming) | "Window" >> (into or beam.WindowInto(window.FixedWindows(60)))
            | "Sum" >> beam.CombinePerKey(sum) | "Label" >> beam.Map(_label))
    assert_that(sums, equal_to(WINDOWED_EXPECTED))


def global_window() -> beam.WindowInto:
    """What DaskRunner does to (a): everything in the global window, combined once the input ends (the trigger
    lets a streaming pipeline take it too)."""
    return beam.WindowInto(window.GlobalWindows(), trigger=trigger.AfterWatermark(),
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)


def side_input(pipeline: beam.Pipeline, streaming: bool) -> None:
    """(b)."""
    table = pipeline | "Table" >> beam.Create([("x", 10), ("y", 20)])
    joined = (pipeline | "Main" >> beam.Create([("x", 1), ("y", 2), ("x", 3)])
              | "Join" >> beam.Map(lambda kv, side: (kv[0], kv[1] + side[kv[0]]), side=beam.pvalue.AsDict(table)))
    assert_that(joined, equal_to([("x", 11), ("y", 22), ("x", 13)]))


def string_keys(pipeline: beam.Pipeline, streaming: bool) -> None:
    """(c)."""
    grouped = (pipeline | "Create" >> beam.Create(KEYED) | "Group" >> beam.GroupByKey()
               | "Sort" >> beam.MapTuple(lambda key, values: (key, sorted(values))))
    assert_that(grouped, equal_to(KEYED_EXPECTED))


class _Count(beam.DoFn):
    SEEN = ReadModifyWriteStateSpec("seen", VarIntCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        count = (seen.read() or 0) + 1
        seen.write(count)
        yield element[0], count


def stateful(pipeline: beam.Pipeline, streaming: bool) -> None:
    """(d)."""
    counted = (_timestamped(pipeline, [(0, element) for element in COUNTED], streaming)
               | "Count" >> beam.ParDo(_Count()))
    assert_that(counted, equal_to(COUNTED_EXPECTED))


CHECKS: dict[str, Callable[[beam.Pipeline, bool], None]] = {
    "windowed combine": windowed_combine, "side input": side_input, "string-key GroupByKey": string_keys,
    "stateful DoFn": stateful,
}


def run_conformance(options: PipelineOptions, checks: dict[str, Callable[[beam.Pipeline, bool], None]] = CHECKS,
                    ) -> list[str]:
    """Run each of `checks` (name -> the function that builds it) on the runner `options` name, each in a pipeline
    of its own; one line per check that failed: its name and what the runner did (empty: the runner conforms)."""
    streaming = bool(options.view_as(StandardOptions).streaming)
    failures = []
    for name, build in checks.items():
        try:
            with beam.Pipeline(options=options) as pipeline:
                build(pipeline, streaming)
        except Exception as err:  # a failed assert_that, or the runner failing the pipeline
            failures.append(f"{name}: {_reason(err)}")
    return failures


def _reason(err: Exception) -> str:
    """The assertion's line of a pipeline error (runners wrap it in lines of their own), else its first line."""
    lines = str(err).splitlines() or [type(err).__name__]
    return next((line.strip() for line in lines if "Failed assert" in line), lines[0])


if __name__ == "__main__":
    found = run_conformance(PipelineOptions(sys.argv[1:]))
    print("\n".join(found) or "the runner passed the four conformance checks")
    sys.exit(1 if found else 0)
