"""Every bound the accountant can pick states its privacy claim and the theorem it rests on."""
import inspect
import re
import sys
from pathlib import Path

import pytest

from dpstream.accounting.bounds.registry import default_bounds

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("Privacy", "Proof", "Numerics", "Runtime")
CITATION = re.compile(r"(Thm|Theorem|Cor|Lemma|Prop|Def|Eq|Alg|Algorithm)\.?\s*[\dIVX]|docs/proofs/")


@pytest.mark.parametrize("bound", default_bounds(), ids=lambda b: b.name)
def test_bound_docstrings_state_claim_and_proof(bound):
    module = sys.modules[type(bound).__module__]
    text = (inspect.getdoc(type(bound)) or "") + "\n" + (module.__doc__ or "")
    missing = [s for s in SECTIONS if f"{s}" not in text]
    assert not missing, f"{bound.name}: docstrings lack {missing}"
    assert CITATION.search(bound.reference), f"{bound.name}: reference cites no theorem: {bound.reference!r}"


@pytest.mark.parametrize("bound", default_bounds(), ids=lambda b: b.name)
def test_referenced_proof_notes_exist(bound):
    module = sys.modules[type(bound).__module__]
    text = bound.reference + (module.__doc__ or "") + (inspect.getdoc(type(bound)) or "")
    for note in re.findall(r"docs/proofs/[\w.\-]+\.md", text):
        assert (ROOT / note).is_file(), f"{bound.name} cites {note}, which does not exist"


def test_bound_names_are_unique():
    names = [b.name for b in default_bounds()]
    assert len(names) == len(set(names))


def _documented(owner, text: str) -> None:
    missing = [s for s in ("Privacy", "Proof") if s not in text]
    assert not missing, f"{owner}: docstrings lack {missing}"
    assert CITATION.search(text) or "docs/proofs/" in text, f"{owner}: cites no theorem or proof note"


def _mechanisms():
    """The public functions that release something: they return a `Release` (the helpers beside them do not)."""
    from dpstream.pipelines import mechanisms

    functions = [getattr(mechanisms, name) for name in mechanisms.__all__]
    return [f for f in functions if inspect.isfunction(f) and inspect.signature(f).return_annotation == "Release"]


@pytest.mark.parametrize("mechanism", _mechanisms(), ids=lambda f: f.__name__)
def test_mechanisms_state_claim_and_proof(mechanism):
    _documented(mechanism.__name__, inspect.getdoc(mechanism) or "")


def _filters():
    from dpstream.accounting.filters import FILTER_CLASSES

    return sorted(FILTER_CLASSES.values(), key=lambda c: c.__name__)


@pytest.mark.parametrize("filter_class", _filters(), ids=lambda c: c.__name__)
def test_filters_state_claim_and_proof(filter_class):
    module = sys.modules[filter_class.__module__]
    _documented(filter_class.__name__, (inspect.getdoc(filter_class) or "") + "\n" + (module.__doc__ or ""))


def _transforms():
    from dpstream.pipelines.transforms.bounding import BoundContributions
    from dpstream.pipelines.transforms.graph import TRANSFORMS
    from dpstream.pipelines.transforms.svt import SparseVectorAlerts

    return sorted({*TRANSFORMS.values(), SparseVectorAlerts, BoundContributions}, key=lambda c: c.__name__)


@pytest.mark.parametrize("transform", _transforms(), ids=lambda c: c.__name__)
def test_transforms_state_claim_and_proof(transform):
    module = sys.modules[transform.__module__]
    _documented(transform.__name__, (inspect.getdoc(transform) or "") + "\n" + (module.__doc__ or ""))


def test_every_cited_proof_note_exists():
    """Every docs/proofs/... path named anywhere in the code, docs and tests is a file (names follow modules)."""
    cited = set()
    for folder in ("accounting", "connectors", "pipelines", "tests", "docs", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md") and path.is_file():
                cited |= set(re.findall(r"docs/proofs/[\w.\-]+\.md", path.read_text(encoding="utf-8")))
    for path in (ROOT / "README.md", ROOT / "LIMITATIONS.md"):
        cited |= set(re.findall(r"docs/proofs/[\w.\-]+\.md", path.read_text(encoding="utf-8")))
    assert cited and not [note for note in sorted(cited) if not (ROOT / note).is_file()]
