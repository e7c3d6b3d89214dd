"""Where a library pipeline's release rows go: only into `Budget.write` sinks (staged, published after the debit),
or also into transforms of the user's own, which may publish while the pipeline runs.

Read off the built graph (`Pipeline.visit`), so it holds whatever the user's code looks like: a PCollection of
release rows is staged when every transform that reads it, as its main input or as a side input, is one of the
budget's `WriteRelease` sinks or a step inside one.
"""
from __future__ import annotations

from typing import Mapping

import apache_beam as beam
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor


class _Readers(PipelineVisitor):
    """Every applied transform (composite or leaf) with the PCollections it reads."""

    def __init__(self) -> None:
        self.nodes: list[AppliedPTransform] = []

    def enter_composite_transform(self, node: AppliedPTransform) -> None:
        self.nodes.append(node)

    def visit_transform(self, node: AppliedPTransform) -> None:
        self.nodes.append(node)


def _nodes(pipeline: beam.Pipeline) -> list[AppliedPTransform]:
    readers = _Readers()
    pipeline.visit(readers)
    return readers.nodes


def _reads(node: AppliedPTransform) -> list[beam.pvalue.PValue]:
    return list(node.inputs) + [side.pvalue for side in node.side_inputs]


def issued_outputs(pipeline: beam.Pipeline, issued: Mapping[int, str]) -> dict[str, list[beam.pvalue.PValue]]:
    """Release name -> the outputs of the transforms `Budget.release` issued (`issued`: id of the transform ->
    release), as applied in `pipeline`."""
    found: dict[str, list[beam.pvalue.PValue]] = {}
    for node in _nodes(pipeline):
        name = issued.get(id(node.transform))
        if name is not None:
            found.setdefault(name, []).extend(node.outputs.values())
    return found


def unstaged_releases(pipeline: beam.Pipeline, released: Mapping[str, list[beam.pvalue.PValue]],
                      writes: Mapping[str, tuple[str, beam.PTransform]]) -> list[str]:
    """The releases (sorted) whose rows some transform other than a `Budget.write` sink reads; `released`: release
    -> the PCollections of its rows; `writes`: release -> (staged file, its sink)."""
    nodes = _nodes(pipeline)
    sinks = [node.full_label for node in nodes if any(node.transform is sink for _, sink in writes.values())]
    inside = tuple(label + "/" for label in sinks)
    unstaged = set()
    for name, collections in released.items():
        ids = {id(rows) for rows in collections}
        for node in nodes:
            if not any(id(read) in ids for read in _reads(node)):
                continue
            if node.full_label not in sinks and not node.full_label.startswith(inside):
                unstaged.add(name)
    return sorted(unstaged)
