"""Where a library pipeline's release rows go, read off the built Beam graph (`Pipeline.visit`): only into
`Budget.write` sinks (staged, published after the debit), or also into transforms of the user's own, which may
publish while the pipeline runs. `Budget.run` debits after the run in the first case and before it in the second.

Privacy claim: the staged path is taken only when nothing but the budget's own sinks can see a release's rows
(docs/proofs/pipelines.run.budget.Budget.md). The rules, each checked on the graph as built:
- every release is applied at most once (each application draws fresh noise, and the plan pays for one);
- a leaf transform that reads release rows (main input or side input) is inside a sink: the sink's node is among
  its ancestors (by node, never by label, since labels may contain '/');
- a sink is applied exactly once, and its one input is the rows of the release it was made for (so no other
  data, and no other release's rows, is published under a release's name);
- a sink's output is nothing the user can read (`WriteRelease` returns PDone).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import apache_beam as beam
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor

from dpstream.pipelines.run.errors import RunError


class _Nodes(PipelineVisitor):
    """Every applied transform, and which of them are leaves."""

    def __init__(self) -> None:
        self.nodes: list[AppliedPTransform] = []
        self.leaves: list[AppliedPTransform] = []

    def enter_composite_transform(self, node: AppliedPTransform) -> None:
        self.nodes.append(node)

    def visit_transform(self, node: AppliedPTransform) -> None:
        self.nodes.append(node)
        self.leaves.append(node)


@dataclass(frozen=True)
class Routes:
    """What the graph does with the releases: `unstaged`, the releases some transform of the user's own reads
    (sorted); `written`, the releases a sink writes."""

    unstaged: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)


def _reads(node: AppliedPTransform) -> list[beam.pvalue.PValue]:
    return list(node.inputs) + [side.pvalue for side in node.side_inputs]


def _inside(node: AppliedPTransform | None, sinks: list[AppliedPTransform]) -> bool:
    while node is not None:
        if any(node is sink for sink in sinks):
            return True
        node = node.parent
    return False


def routes(pipeline: beam.Pipeline, issued: Mapping[int, str], applied: Mapping[str, list[beam.pvalue.PValue]],
           writes: Mapping[str, beam.PTransform]) -> Routes:
    """Check the rules of the module docstring (RunError, exit 2, before anything runs or is debited) and say
    where the releases go. `issued`: id of a transform `Budget.release` made -> its release; `applied`: release ->
    the rows `Budget.apply` gave; `writes`: release -> its `Budget.write` sink."""
    visitor = _Nodes()
    pipeline.visit(visitor)
    released = {name: list(rows) for name, rows in applied.items()}
    for node in visitor.nodes:
        name = issued.get(id(node.transform))
        if name is not None:
            released.setdefault(name, []).extend(node.outputs.values())
    _check_once(issued, applied, visitor.nodes)
    sinks = _check_sinks(visitor.nodes, released, writes)
    unstaged = sorted({name for name, rows in released.items() for leaf in visitor.leaves
                       if any(read is row for read in _reads(leaf) for row in rows) and not _inside(leaf, sinks)})
    return Routes(unstaged, sorted(writes))


def _check_once(issued: Mapping[int, str], applied: Mapping[str, list[beam.pvalue.PValue]],
                nodes: list[AppliedPTransform]) -> None:
    """RunError when a release is applied more than once (its noise drawn afresh each time, paid once)."""
    for name in sorted(set(issued.values()) | set(applied)):
        count = sum(1 for node in nodes if issued.get(id(node.transform)) == name) + len(applied.get(name, []))
        if count > 1:
            raise RunError(f"release {name!r} is applied {count} times in the pipeline; each application draws its "
                           f"noise afresh while the budget pays for one: apply it once and reuse its rows; nothing "
                           f"was debited")


def _check_sinks(nodes: list[AppliedPTransform], released: Mapping[str, list[beam.pvalue.PValue]],
                 writes: Mapping[str, beam.PTransform]) -> list[AppliedPTransform]:
    """The sinks' nodes; RunError unless each sink is applied once, to rows of its own release."""
    found = []
    for name, sink in writes.items():
        placed = [node for node in nodes if node.transform is sink]
        if len(placed) != 1:
            raise RunError(f"budget.write({name!r}) is applied {len(placed)} times; apply it once, to the rows of "
                           f"budget.release({name!r}); nothing was debited")
        [node] = placed
        if len(node.inputs) != 1 or not any(node.inputs[0] is rows for rows in released.get(name, [])):
            raise RunError(f"budget.write({name!r}) must be applied to the rows of budget.release({name!r}) (or "
                           f"budget.apply(...)[{name!r}]), not to other data; nothing was debited")
        found.append(node)
    return found
