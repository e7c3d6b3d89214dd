"""Every bound the accountant can pick states its privacy claim and the theorem it rests on."""
import inspect
import re
import sys
from pathlib import Path

import pytest

from dpstream.accounting.bounds.registry import default_bounds

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("Privacy", "Proof", "Numerics", "Runtime")
CITATION = re.compile(r"(Thm|Theorem|Cor|Lemma|Prop|Def|Eq\.|Alg)\s*[\dIVX]|docs/proofs/")


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
