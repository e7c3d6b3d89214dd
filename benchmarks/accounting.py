"""Accounting benchmark: dpstream's accountant against the peer accountants, same machine, same run.

For each case, every system that supports it reports epsilon at delta = 1e-6
and its wall time (median of repeats, each on a fresh accountant). Peers run in
child processes with a time limit, so one that hangs is recorded, not waited
for. Writes `benchmarks/results/accounting.json` and prints a Markdown table.

Validity: where the exact optimum is known (non-adaptive homogeneous BR,
Dong–Durfee–Rogers Thm 3) a value below it is flagged `below_optimum` —
such a value is not a valid guarantee.

Run: `python -m benchmarks.accounting [--repeats N] [--timeout S]`.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np

DELTA = 1e-6
RESULTS = Path(__file__).parent / "results" / "accounting.json"


def _gaussian_sigmas() -> list[float]:
    return [float(s) for s in np.random.default_rng(2026).uniform(30.0, 300.0, size=1000)]


# Each case: a list of (kind, parameter, count); kinds: "em" (epsilon), "gaussian" (sigma, sens 1),
# "laplace" (scale, sens 1).
CASES = {
    "10 x EM(1.0)": [("em", 1.0, 10)],
    "100 x EM(0.1)": [("em", 0.1, 100)],
    "50 x EM(0.5)": [("em", 0.5, 50)],
    "1000 heterogeneous Gaussians": [("gaussian", s, 1) for s in _gaussian_sigmas()],
    "24 Laplace + 24 Gaussian + 24 EM": [("laplace", 20.0, 24), ("gaussian", 10.0, 24), ("em", 0.1, 24)],
}


# ---- dpstream ---------------------------------------------------------------------------------------

def _dpstream(case, adaptive: bool) -> float:
    from dpstream.accounting import Accountant
    from dpstream.accounting.events import BoundedRange, Gaussian, Laplace

    build = {"em": BoundedRange, "gaussian": Gaussian, "laplace": Laplace}
    accountant = Accountant(adaptive=adaptive)
    for kind, parameter, count in case:
        accountant.compose(build[kind](parameter), count)
    return accountant.epsilon(DELTA)


def dpstream_adaptive(case):
    return _dpstream(case, adaptive=True)


def dpstream_nonadaptive(case):
    return _dpstream(case, adaptive=False)


# ---- peers ------------------------------------------------------------------------------------------

def dp_accounting_pld(case):
    """dp_accounting's PLD accountant; it has no exponential-mechanism event, so EM is pure eps-DP."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    total = None
    for kind, parameter, count in case:
        if kind == "gaussian":
            pld = pld_lib.from_gaussian_mechanism(parameter)
        elif kind == "laplace":
            pld = pld_lib.from_laplace_mechanism(parameter)
        else:
            pld = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(parameter, 0.0))
        pld = pld.self_compose(count) if count > 1 else pld
        total = pld if total is None else total.compose(pld)
    return total.get_epsilon_for_delta(DELTA)


def dp_accounting_rdp(case):
    """dp_accounting's RDP accountant; EM enters as (eps^2/8)-zCDP (Cesar–Rogers Lemma 3.2)."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    accountant = rdp_privacy_accountant.RdpAccountant()
    for kind, parameter, count in case:
        if kind == "gaussian":
            event = dp_accounting.GaussianDpEvent(parameter)
        elif kind == "laplace":
            event = dp_accounting.LaplaceDpEvent(parameter)
        else:
            event = dp_accounting.ZCDpEvent(parameter**2 / 8)
        accountant.compose(event, count)
    return accountant.get_epsilon(DELTA)


def opendp(case):
    """OpenDP: each measurement's zCDP map (pure-DP ones via its pureDP -> zCDP), summed as its
    composition does, then its zCDP -> (eps, delta) conversion. Measurements on different metrics
    cannot share one `make_composition`, so the rho values are added here."""
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    scalar = (dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float))
    vector = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float, monotonic=True))
    rho = 0.0
    for kind, parameter, count in case:
        if kind == "gaussian":
            meas = dp.m.make_gaussian(*scalar, scale=parameter)
        elif kind == "laplace":
            meas = dp.c.make_pureDP_to_zCDP(dp.m.make_laplace(*scalar, scale=parameter))
        else:  # report-noisy-max with Gumbel noise of scale sensitivity/eps is the exponential mechanism
            meas = dp.c.make_pureDP_to_zCDP(
                dp.m.make_noisy_max(*vector, output_measure=dp.max_divergence(), scale=1.0 / parameter)
            )
        rho += count * meas.map(1.0)
    total = dp.m.make_user_measurement(
        *scalar, dp.zero_concentrated_divergence(), function=lambda x: x, privacy_map=lambda d_in: rho
    )
    return dp.c.make_zCDP_to_approxDP(total).map(1.0).epsilon(DELTA)


def autodp(case):
    """autodp: its ExponentialMechanism (BR phi functions), Laplace and exact Gaussian, composed by its Composition."""
    from autodp import mechanism_zoo, transformer_zoo

    mechanisms, counts = [], []
    for kind, parameter, count in case:
        if kind == "gaussian":
            mech = mechanism_zoo.ExactGaussianMechanism(sigma=parameter)
        elif kind == "laplace":
            mech = mechanism_zoo.LaplaceMechanism(b=parameter)
        else:
            mech = mechanism_zoo.ExponentialMechanism(eps=parameter)
        mechanisms.append(mech)
        counts.append(count)
    composed = transformer_zoo.Composition()(mechanisms, counts)
    return composed.get_approxDP(DELTA)


def prv_accountant(case):
    """prv_accountant (Gopi et al.): its upper estimate; EM as a pure-DP mechanism."""
    from prv_accountant import PRVAccountant
    from prv_accountant import privacy_random_variables as prv

    prvs, counts = [], []
    for kind, parameter, count in case:
        if kind == "gaussian":
            prvs.append(prv.GaussianMechanism(noise_multiplier=parameter))
        elif kind == "laplace":
            prvs.append(prv.LaplaceMechanism(mu=parameter))
        else:
            prvs.append(prv.PureDPMechanism(eps=parameter))
        counts.append(count)
    accountant = PRVAccountant(prvs=prvs, max_self_compositions=counts, eps_error=0.01, delta_error=DELTA / 1000)
    _, _, upper = accountant.compute_epsilon(delta=DELTA, num_self_compositions=counts)
    return upper


SYSTEMS = {
    "dpstream (adaptive)": dpstream_adaptive,
    "dpstream (non-adaptive)": dpstream_nonadaptive,
    "dp_accounting PLD": dp_accounting_pld,
    "dp_accounting RDP": dp_accounting_rdp,
    "OpenDP": opendp,
    "autodp": autodp,
    "prv_accountant": prv_accountant,
}


def _measure(system: str, case_name: str, repeats: int, queue) -> None:
    try:
        function, case = SYSTEMS[system], CASES[case_name]
        function(case)  # warm-up: imports and caches outside the timing, for every system alike
        times, value = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            value = float(function(case))
            times.append(time.perf_counter() - start)
        queue.put({"epsilon": value, "seconds": statistics.median(times)})
    except Exception as err:  # a peer that cannot handle a case is reported, not fatal
        queue.put({"error": f"{type(err).__name__}: {err}"[:300]})


def run_one(system: str, case_name: str, repeats: int, timeout: float) -> dict:
    queue = mp.get_context("fork").Queue()
    process = mp.get_context("fork").Process(target=_measure, args=(system, case_name, repeats, queue))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        return {"error": f"timeout after {timeout:.0f} s"}
    return queue.get() if not queue.empty() else {"error": f"exited with code {process.exitcode}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per system and case")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    results = {"delta": DELTA, "cases": {}}
    for case_name in CASES:
        row = {}
        for system in SYSTEMS:
            print(f"  {case_name:<36} {system:<26}", end="", flush=True, file=sys.stderr)
            row[system] = run_one(system, case_name, args.repeats, args.timeout)
            print(f" {row[system]}", file=sys.stderr)
        results["cases"][case_name] = row
    _flag_and_rank(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    print(markdown_table(results))
    return 0


def _flag_and_rank(results: dict) -> None:
    """Flag values below the exact non-adaptive optimum (where known) and rank the valid ones."""
    for case_name, row in results["cases"].items():
        optimum = _homogeneous_em_optimum(CASES[case_name])
        for system, entry in row.items():
            if "epsilon" in entry and optimum is not None:
                entry["below_optimum"] = entry["epsilon"] < optimum * (1 - 1e-9)
        valid = {s: e["epsilon"] for s, e in row.items() if "epsilon" in e and not e.get("below_optimum")}
        results.setdefault("summary", {})[case_name] = {
            "exact_nonadaptive_optimum": optimum,
            "smallest_valid": min(valid, key=valid.get) if valid else None,
            "fastest": min(
                (s for s, e in row.items() if "seconds" in e), key=lambda s: row[s]["seconds"], default=None
            ),
        }


def _homogeneous_em_optimum(case) -> float | None:
    if len(case) != 1 or case[0][0] != "em":
        return None
    try:
        from dpstream.accounting.bounds.bounded_range import br_optimal_epsilon
    except ImportError:
        return None
    return br_optimal_epsilon(case[0][2], case[0][1], DELTA)


def markdown_table(results: dict) -> str:
    systems = list(SYSTEMS)
    lines = [
        "| case | " + " | ".join(systems) + " |",
        "|---|" + "---|" * len(systems),
    ]
    for case_name, row in results["cases"].items():
        cells = []
        for system in systems:
            entry = row[system]
            if "epsilon" in entry:
                flag = " (below optimum)" if entry.get("below_optimum") else ""
                cells.append(f"{entry['epsilon']:.4f}{flag}<br>{_fmt_time(entry['seconds'])}")
            else:
                cells.append("n/a")
        lines.append(f"| {case_name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    sys.exit(main())
