"""The sparse-vector monitor: exact small cases, halting, sealed state round trips, close() charges, errors."""
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from dpstream.accounting.events import ApproxDP, SelfComposed
from dpstream.accounting.filters import WhitehouseFilter
from dpstream.accounting.filters.base import fraction_to_json
from dpstream.accounting.filters.fsrc import basel_delta
from dpstream.accounting.selection import above_threshold_expost_epsilon, above_threshold_pdp_epsilon
from dpstream.pipelines.mechanisms import above_threshold, laplace_above_threshold, laplace_above_threshold_epsilon
from dpstream.pipelines.mechanisms.monitor import MonitorOutput, SparseVectorMonitor
from dpstream.pipelines.mechanisms.noise import SecureRandom

SENSITIVITY = 1e-3
HUGE = 1e6


class ScriptedRandom(SecureRandom):
    """Test rng whose standard_normal / exponential return scripted values in order."""

    def __init__(self, normals=(), exponentials=()):
        super().__init__(0)
        self.normals = list(normals)
        self.exponentials = list(exponentials)

    def standard_normal(self, n):
        out, self.normals = self.normals[:n], self.normals[n:]
        assert len(out) == n, "script ran out of normals"
        return np.array(out)

    def exponential(self, n):
        out, self.exponentials = self.exponentials[:n], self.exponentials[n:]
        assert len(out) == n, "script ran out of exponentials"
        return np.array(out)


def stream(n=60, seed=0):
    """Values in [0, 1] with a few windows far above 0.5, some slightly outside [0, 1] (clipped)."""
    gen = np.random.default_rng(seed)
    values = gen.uniform(-0.05, 0.6, n)
    values[gen.choice(n, n // 6, replace=False)] = gen.uniform(0.8, 1.05, n // 6)
    return values


def alerts(outputs):
    return [o.window for o in outputs if o.alert]


@pytest.mark.parametrize("method", ["fsrc", "whitehouse"])
def test_huge_budget_equals_repeated_gaussian_above_threshold(method):
    values = stream()
    gen = np.random.default_rng(1)
    thresholds, queries = gen.standard_normal(len(values)), gen.standard_normal(len(values))
    sx, sz, rho = 0.1, 0.1 * math.sqrt(3), 0.5
    expected, script, start, instance = [], [], 0, 0
    while start < len(values):
        release = above_threshold(values[start:], sx, sz, rho, ScriptedRandom([thresholds[instance], *queries[start:]]),
                                  sensitivity=SENSITIVITY, lower=0.0, upper=1.0)
        stop = len(values) if release.value is None else start + release.value + 1
        script += [thresholds[instance], *queries[start:stop]]
        if release.value is not None:
            expected.append(start + release.value)
        start, instance = stop, instance + 1
    assert len(expected) >= 5
    monitor = SparseVectorMonitor(rho, sx, SENSITIVITY, HUGE, 1e-6, method=method, rng=ScriptedRandom(script))
    outputs = monitor.process_many(values)
    assert alerts(outputs) == expected
    assert not any(o.halted for o in outputs)
    assert [o.window for o in outputs] == list(range(len(values)))


def test_huge_budget_laplace_equals_repeated_laplace_above_threshold():
    values = stream(seed=3)
    gen = np.random.default_rng(2)
    ta, tb = gen.exponential(size=len(values)), gen.exponential(size=len(values))
    qa, qb = gen.exponential(size=len(values)), gen.exponential(size=len(values))
    sx, sz, rho = 0.1, 0.2, 0.5
    expected, script, start, instance = [], [], 0, 0
    while start < len(values):
        rng = ScriptedRandom(exponentials=[ta[instance], tb[instance], *qa[start:], *qb[start:]])
        release = laplace_above_threshold(np.clip(values[start:], 0, 1), sx / math.sqrt(2), sz / math.sqrt(2), rho,
                                          rng, sensitivity=SENSITIVITY)
        stop = len(values) if release.value is None else start + release.value + 1
        script += [ta[instance], tb[instance]] + [e for pair in zip(qa[start:stop], qb[start:stop]) for e in pair]
        if release.value is not None:
            expected.append(start + release.value)
        start, instance = stop, instance + 1
    assert len(expected) >= 5
    monitor = SparseVectorMonitor(rho, sx, SENSITIVITY, HUGE, 0.0, sigma_query=sz, method="laplace",
                                  rng=ScriptedRandom(exponentials=script))
    assert alerts(monitor.process_many(values)) == expected
    assert monitor.instance_epsilon == laplace_above_threshold_epsilon(sx / math.sqrt(2), sz / math.sqrt(2), SENSITIVITY)


def test_seeded_monitor_is_deterministic_and_outputs_carry_no_spend():
    values = stream()
    a = SparseVectorMonitor(0.5, 0.1, SENSITIVITY, 3.0, 1e-6, rng=SecureRandom(5)).process_many(values)
    b = SparseVectorMonitor(0.5, 0.1, SENSITIVITY, 3.0, 1e-6, rng=SecureRandom(5)).process_many(values)
    assert a == b
    assert set(MonitorOutput.__dataclass_fields__) == {"window", "alert", "halted"}
    monitor = SparseVectorMonitor(0.5, 0.1, SENSITIVITY, 3.0, 1e-6, rng=SecureRandom(5))
    monitor.process_many(values)
    assert "spent" not in json.dumps(monitor.public_dict())
    assert "noisy_threshold" not in json.dumps(monitor.public_dict())


# Always-TOP stream: values at 1 far above threshold 0.2 with small noise (a BOT has probability < 1e-15).
ALWAYS = np.ones(12)
RHO, SIGMA = 0.2, 0.05


def test_fsrc_halts_when_spend_plus_eps_max_reaches_budget():
    """Instance t is admitted at eps_max(delta_t), delta_t = delta 6/(pi^2 t^2): the budget below admits three
    TOPs, and would admit a fourth at the published rule's eps_max(delta)."""
    sz = SIGMA * math.sqrt(3)
    eps_max = [above_threshold_pdp_epsilon(1e-6 * 6 / math.pi**2 / t**2, SIGMA, sz, RHO, SENSITIVITY)
               for t in (1, 2, 3, 4)]
    published = above_threshold_pdp_epsilon(1e-6, SIGMA, sz, RHO, SENSITIVITY)
    one_top = above_threshold_expost_epsilon(1, SIGMA, sz, RHO, SENSITIVITY)
    budget = 3 * one_top + (published + eps_max[3]) / 2
    assert 2 * one_top + eps_max[2] < budget < 3 * one_top + eps_max[3] and 3 * one_top + published < budget
    monitor = SparseVectorMonitor(RHO, SIGMA, SENSITIVITY, budget, 1e-6, rng=SecureRandom(0))
    assert monitor.instance_epsilon == pytest.approx(eps_max[0], rel=1e-12)
    assert [monitor.instance_price(t)[0] for t in (1, 2, 3, 4)] == pytest.approx(eps_max, rel=1e-12)
    outputs = monitor.process_many(ALWAYS)
    assert [o.alert for o in outputs] == [True] * 3 + [False] * 9
    assert [o.halted for o in outputs] == [False] * 3 + [True] * 9
    assert monitor.halted and monitor.halt_reason.startswith("budget exhausted: the fsrc filter")
    assert "window 3" in monitor.halt_reason
    restored = SparseVectorMonitor.from_dict(json.loads(json.dumps(monitor.to_dict())))
    assert restored.process(1.0) == MonitorOutput(12, False, True)


def test_whitehouse_admits_its_calibrated_number_of_instances():
    monitor = SparseVectorMonitor(RHO, SIGMA, SENSITIVITY, 2.0, 1e-6, method="whitehouse", rng=SecureRandom(0))
    planned = sum(o.alert for o in monitor.process_many(np.ones(200)))
    assert monitor.halted and monitor.halt_reason.startswith("budget exhausted: the whitehouse filter")
    event = ApproxDP(monitor.instance_epsilon, monitor.instance_delta)
    assert WhitehouseFilter(2.0, 1e-6).admits(SelfComposed(event, planned))
    assert not WhitehouseFilter(2.0, 1e-6).admits(SelfComposed(event, planned + 1))
    assert monitor.instance_delta * planned <= 0.5e-6
    # One more planned instance would need a smaller delta each, hence a larger epsilon that no longer fits.
    larger = above_threshold_pdp_epsilon(0.5e-6 / (planned + 1), SIGMA, SIGMA * math.sqrt(3), RHO, SENSITIVITY)
    assert not WhitehouseFilter(2.0, 1e-6).admits(SelfComposed(ApproxDP(larger, 0.5e-6 / (planned + 1)), planned + 1))


def test_laplace_admits_budget_over_instance_epsilon():
    monitor = SparseVectorMonitor(RHO, SIGMA, SENSITIVITY, 1.0, 0.0, method="laplace", rng=SecureRandom(0))
    outputs = monitor.process_many(np.ones(100))
    assert sum(o.alert for o in outputs) == math.floor(1.0 / monitor.instance_epsilon)
    assert monitor.halted


def _pair(persist, seed=11, method="fsrc"):
    return [SparseVectorMonitor(0.5, 0.08, SENSITIVITY, 8.0, 1e-6, method=method, persist_threshold=persist,
                                rng=SecureRandom(seed)) for _ in range(2)]


@pytest.mark.parametrize("method", ["fsrc", "whitehouse", "laplace"])
def test_round_trip_mid_instance_with_persisted_threshold_equals_uninterrupted_run(method):
    values = stream(120, seed=4)
    whole, first = _pair(True, method=method)
    expected = whole.process_many(values)
    split = 30
    head = first.process_many(values[:split])
    while first.to_dict()["instance"] is None and split < 100:  # stop inside an open instance
        head += first.process_many(values[split:split + 1])
        split += 1
    state = json.loads(json.dumps(first.to_dict()))
    assert state["instance"]["bots"] >= 1 and "noisy_threshold" in state["instance"]
    resumed = SparseVectorMonitor.from_dict(state, rng=first._rng)  # the same random stream continues
    assert head + resumed.process_many(values[split:]) == expected
    assert resumed.to_dict() == whole.to_dict()


def test_round_trip_between_instances_without_persisting_equals_uninterrupted_run():
    values = stream(120, seed=6)
    whole, first = _pair(False)
    expected = whole.process_many(values)
    split = next(i for i, o in enumerate(expected) if o.alert and i > 20) + 1
    head = first.process_many(values[:split])
    state = json.loads(json.dumps(first.to_dict()))
    assert state["instance"] is None
    resumed = SparseVectorMonitor.from_dict(state, rng=first._rng)
    assert head + resumed.process_many(values[split:]) == expected
    assert resumed.to_dict() == whole.to_dict()


def test_unpersisted_open_instance_is_closed_on_restore_like_close():
    values = stream(40, seed=8)
    monitor = SparseVectorMonitor(0.5, 0.08, SENSITIVITY, 5.0, 1e-6, rng=SecureRandom(3))
    monitor.process_many(values)
    state = monitor.to_dict()
    assert state["instance"] is not None and "noisy_threshold" not in state["instance"]
    restored = SparseVectorMonitor.from_dict(json.loads(json.dumps(state)))
    monitor.close()
    assert restored.to_dict() == monitor.to_dict()
    assert restored.to_dict()["instance"] is None


def test_close_charges_the_bot_t_expost_loss():
    sz = 0.08 * math.sqrt(3)
    monitor = SparseVectorMonitor(0.9, 0.08, SENSITIVITY, 5.0, 1e-6, rng=SecureRandom(2))
    outputs = monitor.process_many(np.zeros(7))  # far below 0.9: seven BOTs with overwhelming probability
    assert not any(o.alert for o in outputs)
    before = monitor.to_dict()["filter"]["state"]
    first_delta = Fraction(basel_delta(1e-6, 1))
    assert before == {"spent_epsilon": 0.0, "open": True, "instances": 1, "spent_delta": fraction_to_json(first_delta)}
    monitor.close()
    after = monitor.to_dict()["filter"]["state"]
    bot7 = above_threshold_expost_epsilon(7, 0.08, sz, 0.9, SENSITIVITY, halted=False)
    assert after["open"] is False
    assert after["spent_epsilon"] == math.nextafter(bot7, math.inf)
    monitor.close()  # nothing open: no charge
    assert monitor.to_dict()["filter"]["state"] == after
    assert monitor.process(0.0) == MonitorOutput(7, False, False)  # a fresh instance starts, at the next delta
    assert monitor.to_dict()["instance"] == {"start": 7, "bots": 1}
    state = monitor.to_dict()["filter"]["state"]
    assert state["instances"] == 2 and state["spent_delta"] == fraction_to_json(first_delta + Fraction(basel_delta(1e-6, 2)))


def test_top_charges_the_bot_t_minus_one_top_loss():
    sz = 0.05 * math.sqrt(3)
    monitor = SparseVectorMonitor(0.5, 0.05, SENSITIVITY, 5.0, 1e-6, rng=SecureRandom(2))
    outputs = monitor.process_many([0.0, 0.0, 0.0, 1.0])
    assert alerts(outputs) == [3]
    spent = monitor.to_dict()["filter"]["state"]["spent_epsilon"]
    assert spent == math.nextafter(above_threshold_expost_epsilon(4, 0.05, sz, 0.5, SENSITIVITY), math.inf)


def test_close_charges_nothing_for_the_baselines():
    for method in ("whitehouse", "laplace"):
        monitor = SparseVectorMonitor(0.9, 0.08, SENSITIVITY, 5.0, 1e-6, method=method, rng=SecureRandom(2))
        monitor.process_many(np.zeros(5))
        before = monitor.to_dict()["filter"]
        monitor.close()
        assert monitor.to_dict()["filter"] == before and monitor.to_dict()["instance"] is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(method="svt"), r"method must be one of fsrc, whitehouse, laplace, got 'svt'"),
        (dict(sigma_query=0.1), r"sigma_query must exceed sigma_threshold .* got sigma_threshold=0.1, sigma_query=0.1"),
        (dict(sigma_threshold=0.0), r"sigma_threshold must be a positive finite number, got 0.0"),
        (dict(threshold=math.nan), r"threshold must be a finite number, got nan"),
        (dict(sensitivity=2.0), r"sensitivity must lie in \(0, 1\] for values in \[0, 1\], got 2.0"),
        (dict(epsilon=-1.0), r"epsilon must be a positive finite number, got -1.0"),
        (dict(delta=0.0), r"delta must lie in \(0, 1\) for method 'fsrc', got 0.0"),
        (dict(delta=1.0, method="laplace"), r"delta must lie in \[0, 1\) for method 'laplace', got 1.0"),
        (dict(epsilon=0.01), r"budget epsilon=0.01 admits no fsrc instance, whose ex-ante epsilon is"),
        (dict(epsilon=0.01, method="whitehouse"), r"budget epsilon=0.01 admits no whitehouse instance"),
        (dict(persist_threshold=1), r"persist_threshold must be True or False, got 1"),
    ],
)
def test_parameter_errors(kwargs, message):
    args = dict(threshold=0.5, sigma_threshold=0.1, sensitivity=SENSITIVITY, epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match=message):
        SparseVectorMonitor(**{**args, **kwargs})


def test_rng_value_and_state_errors():
    with pytest.raises(TypeError, match=r"rng must be a pipelines.mechanisms.noise.SecureRandom or None, got int"):
        SparseVectorMonitor(0.5, 0.1, SENSITIVITY, 1.0, 1e-6, rng=3)
    monitor = SparseVectorMonitor(0.5, 0.1, SENSITIVITY, 1.0, 1e-6, rng=SecureRandom(0))
    with pytest.raises(ValueError, match=r"value must be a finite number, got nan"):
        monitor.process(math.nan)
    monitor.process(0.0)
    state = monitor.to_dict()
    with pytest.raises(ValueError, match=r"holds a noisy threshold although persist_threshold is False"):
        SparseVectorMonitor.from_dict({**state, "instance": {**state["instance"], "noisy_threshold": 0.4}})
    with pytest.raises(ValueError, match=r"instance must have integers start \+ bots == window=1"):
        SparseVectorMonitor.from_dict({**state, "instance": {"start": 0, "bots": 3}})
    with pytest.raises(ValueError, match=r"method 'fsrc' needs a 'fsrc' filter, got 'pure'"):
        SparseVectorMonitor.from_dict({**state, "filter": {"filter": "pure", "parameters": {"epsilon": 1.0},
                                                            "state": {"spent_epsilon": "0/1"}, "halted": False}})
    with pytest.raises(ValueError, match=r"FSRC filter has an uncharged instance exactly when the state has one, got None"):
        SparseVectorMonitor.from_dict({**state, "instance": None})
    with pytest.raises(ValueError, match=r"state lacks or mistypes a field \('window'\)"):
        SparseVectorMonitor.from_dict({k: v for k, v in state.items() if k != "window"})
