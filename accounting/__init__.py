"""dpstream accounting: privacy events, tight composition, filters, calibration and the ledger.

Pure Python with numpy/scipy; never imports Apache Beam, so it works from a notebook.
"""
from dpstream.accounting import events
from dpstream.accounting.accountant import Accountant, Explanation, UnsupportedEventError

__all__ = ["Accountant", "Explanation", "UnsupportedEventError", "events"]
