"""Privacy of Gaussian selection mechanisms on bounded queries: report-noisy-max and AboveThreshold.

Bounds (Lebensold–Precup–Balle 2024, "On the Privacy of Selection Mechanisms
with Gaussian Noise", cited below as LPB; Zhu–Wang 2020, "Improving Sparse
Vector Technique with Renyi Differential Privacy", cited as ZW):

- `report_noisy_max_epsilon`: pure DP of Gaussian report-noisy-max on d queries
  with values in [lower, upper] (LPB Thm 8 = Thm 12, worst case from Lemma 13
  and Lemma 16).
- `above_threshold_expost_epsilon`: pure ex-post DP of Gaussian AboveThreshold
  (LPB Algorithm 3) after it output BOT^(t-1) TOP (LPB Thm 17, worst case from
  Lemma 18), or after it was stopped from outside having output BOT^t (same
  argument; docs/proofs/accounting.selection.above_threshold.above_threshold_expost_epsilon.md).
- `above_threshold_rdp`, `above_threshold_pdp_epsilon`: ex-ante RDP of Gaussian
  AboveThreshold on queries bounded below (ZW's general bound, LPB Thm 6, with
  the worst-case stopping-time moment computed exactly; the closed form of LPB
  Thm 7 undershoots that moment near threshold = lower and is not used) and
  the probabilistic DP it implies (LPB Sec 2, from Mironov 2017).

Neighbouring relation: any pair of datasets on which every query differs by at
most `sensitivity` (for dpstream: add or remove one privacy unit). Measures:
pure DP and pure ex-post DP (a bound on the log ratio of output probabilities),
RDP, and probabilistic DP (a tail bound on the privacy loss random variable,
which implies approximate DP with the same (epsilon, delta)).

Modules: `quadrature` (the log-space Gaussian expectations every bound is built on),
`arguments` (argument checks), `report_noisy_max`, `above_threshold`.
"""
from __future__ import annotations

from dpstream.accounting.selection.above_threshold import (
    above_threshold_expost_epsilon,
    above_threshold_pdp_epsilon,
    above_threshold_rdp,
)
from dpstream.accounting.selection.report_noisy_max import report_noisy_max_epsilon

__all__ = [
    "above_threshold_expost_epsilon",
    "above_threshold_pdp_epsilon",
    "above_threshold_rdp",
    "report_noisy_max_epsilon",
]
