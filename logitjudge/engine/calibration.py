"""Calibration: temperature (and optional bias) scaling of the final distributions.

For a question of type ``t`` with ``n`` options, the engine's final distribution ``p`` (after
rotations are averaged) is replaced by::

    p' = softmax(log p / T + b)          T in [0.05, 20], b_k in [-5, 5], b_{n-1} = 0

with ``T`` (and ``b``, "where it helps") per **bucket** ``"<type>:<n>"`` (``"<type>:11+"`` for
more than 10 options, temperature only), plus a type-wide ``"<type>:*"`` temperature used for
option counts that had no bucket of their own. Temperature scaling: Guo et al. 2017, "On
calibration of modern neural networks"; with a bias it is vector scaling restricted to a shared
temperature (Platt scaling for two options). With one view, ``log p / T + b`` equals scaling the
label scores themselves (softmax is shift-invariant), so calibrating the final distribution is
exact for un-rotated questions and the natural extension for rotated ones.

Fitting (:func:`fit`) minimises the mean negative log-likelihood of the gold options with
``scipy.optimize.minimize`` (L-BFGS-B, bounds = the clamp ranges above). A bias is kept only when
the bucket has at least :data:`MIN_BIAS_SAMPLES_PER_OPTION` samples per option and it lowers
AIC (``2 k + 2 N NLL``) below the temperature-only fit; buckets with fewer than
:data:`MIN_SAMPLES` samples are left alone.

**A fit must earn its place.** Each bucket's whole fitting procedure (temperature, bias and the
AIC choice) is cross-validated first (:func:`cross_validated_nll`: :data:`CV_FOLDS` folds by
source item, sklearn ``GroupKFold``, so the two answers of one question never sit on both
sides); the scaling is kept only when it lowers the out-of-fold NLL by at least
:data:`MIN_NLL_GAIN` nats per sample, else the bucket is left as it is (identity) and its
record in ``meta.fits`` says why (``refused``). A model whose probabilities carry no signal can
still "gain" by flattening them towards the sample's base rate (``T`` near the clamp): that is
kept, since it does lower NLL on data like the fitting data, and reported as such by
``logitjudge calibrate``, which also checks the held-out part and an imbalanced slice.

A calibration file records what it was fitted for
(model fingerprint, prompt version, dtype; the strategy too, not matched: :data:`FITTED_FOR_KEYS`)
and :meth:`Calibration.check` refuses any other engine with
:class:`~logitjudge.errors.CalibrationMismatchError`.

**Shipped calibrations** (``logitjudge/calibrations/*.json``, :func:`shipped_for`) are applied by
default (``Judge.load(calibration="shipped")``, ``--calibration shipped``) to the engine they
were fitted for, and to no other: any other model, prompt version or dtype runs uncalibrated.
``describe()`` names the one applied (``calibration``: its digest, ``calibration_origin``:
``shipped:<file>`` or a path), and so does ``GET /v1/models``. ``--calibration none`` turns it
off.

**Evaluator scalings** (``Calibration.evaluators``, the file's optional ``"evaluators"``): the
same two-option scaling applied to the 0..1 *score* of a ``probability`` or ``rubric`` evaluator
(by name), after the engine's buckets: ``q = softmax(log (s, 1 - s) / T + (b, 0))_0 =
sigmoid(logit(s) / T + b)``, i.e. Platt scaling of the score's logit (Platt 1999, "Probabilistic
outputs for support vector machines"), bias within :data:`EVALUATOR_BIAS_RANGE`; the scaled score
is the probability that the item passes (gold ``passed``). It exists for scores that no bucket can
move across their threshold: contrast scores (faithfulness v2, ``sigmoid(logit p - logit p0)``: a
bucket's bias added to both answers cancels in the difference) and a rubric's ``E[level] / (L-1)``
(context_recall: the expected level ranks the items but sits in a narrow band, so the hosted 0.75
threshold passes none of them). The rubric scorer applies it
(:func:`logitjudge.rubrics.scoring.score_probability`, :func:`~logitjudge.rubrics.scoring.score_rubric`);
fitting and the held-out refusal are the same as for buckets (:mod:`logitjudge.rubrics.calibrate`).

The readout stage applies it: ``Engine.set_calibration`` hands the calibration to the engine's
:class:`~logitjudge.engine.readout.Readout`, whose ``final_distributions`` scales each question
with :func:`logitjudge.engine.formulas.scale` right after averaging its views; every answer field
(``noul``, ``choice`` = argmax, ``score`` = sum i p_i, confidences) is derived from the
calibrated distribution. This module holds the fitting and the file format; the scaling,
softmax and log-sum-exp it needs are the ones the readout uses (:mod:`logitjudge.engine.formulas`,
which loads torch on first use, so importing this module, as the CLI does to build its parser,
does not import torch). Fitting from labelled data and the
before/after report live in :mod:`logitjudge.rubrics.calibrate` (``logitjudge calibrate``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from logitjudge.engine.formulas import PROBABILITY_FLOOR, logsumexp, scale
from logitjudge.errors import CalibrationMismatchError

__all__ = [
    "Calibration",
    "Scaling",
    "LabelledDistribution",
    "bucket_of",
    "fit",
    "fit_scaling",
    "fit_checked",
    "cross_validated_nll",
    "nll_of",
    "CV_FOLDS",
    "MIN_NLL_GAIN",
    "FITTED_FOR_KEYS",
    "TEMPERATURE_RANGE",
    "BIAS_RANGE",
    "EVALUATOR_BIAS_RANGE",
    "SHIPPED",
    "SHIPPED_DIR",
    "shipped_for",
    "NONE",
    "evaluator_key",
]

FORMAT = 1
TEMPERATURE_RANGE = (0.05, 20.0)
"""Clamp of ``T``: below 0.05 a distribution is made near one-hot, above 20 near uniform."""
BIAS_RANGE = (-5.0, 5.0)
"""Clamp of each bias term (log-odds units: a factor of e^5 ~ 150 at most)."""
EVALUATOR_BIAS_RANGE = (-20.0, 20.0)
"""Clamp of an evaluator scaling's bias. A score can sit far from 0.5 for every item (a rubric's
E[level]/(L-1) lies in [0.53, 0.75] on the 200 recall-set rows run), so the Platt intercept that puts
its crossing between the classes, ``-logit(cut) / T``, can pass 5 by far (about -13 there)."""
MIN_SAMPLES = 8
MIN_BIAS_SAMPLES_PER_OPTION = 10
CV_FOLDS = 5
"""Folds of the cross-validation that decides whether a bucket's scaling is kept."""
MIN_NLL_GAIN = 1e-4
"""Nats per sample a scaling must take off the out-of-fold (and held-out) NLL to be kept."""
FITTED_FOR_KEYS = ("fingerprint", "prompt_version", "dtype")
"""The engine ``describe()`` keys a calibration must match to be applied. The strategy is
recorded (``fitted_for["strategy"]``) but not matched: every strategy gives the same answers
within the dtype's tolerance (the start-up self-check refuses one that does not), so a file
fitted under ``packed`` serves ``auto`` as well. The vLLM backend has its own fingerprint."""


def bucket_of(qtype: str, n_options: int) -> str:
    """``("choice", 3) -> "choice:3"``; more than 10 options share ``"<type>:11+"``."""
    return f"{qtype}:{n_options}" if n_options <= 10 else f"{qtype}:11+"


@dataclass(frozen=True)
class LabelledDistribution:
    """One fitting sample: a question type, the engine's distribution and the gold option index.

    ``group`` names the source item (``logitjudge.rubrics.samples.item_group``); samples of one
    group stay in one cross-validation fold. Empty: the sample is a group of its own.
    """

    type: str
    probs: tuple[float, ...]
    gold: int
    group: str = ""


@dataclass(frozen=True)
class Scaling:
    """Temperature and optional per-option bias of one bucket.

    Attributes:
        temperature: ``T`` (clamped to :data:`TEMPERATURE_RANGE`).
        bias: per option position, last one 0; ``None`` = no bias (required for ``"*"`` and
            ``"11+"`` buckets, whose option count varies).
        n: samples it was fitted on.
        clamped: the optimum lay on a bound of the clamp range.
    """

    temperature: float
    bias: tuple[float, ...] | None = None
    n: int = 0
    clamped: bool = False

    def apply(self, probs: Sequence[float]) -> list[float]:
        """``softmax(log p / T + b)`` (:func:`logitjudge.engine.formulas.scale`, the formula the
        engine applies); ``probs`` must have ``len(bias)`` entries when biased."""
        return scale(probs, self.temperature, self.bias).tolist()


def _log_probs(probs: Sequence[Sequence[float]]) -> np.ndarray:
    """(N, K) fp64 ``log max(p, floor)``, the floor of :func:`~logitjudge.engine.formulas.scale`."""
    return np.log(np.clip(np.asarray(probs, dtype=np.float64), PROBABILITY_FLOOR, 1.0))


def _nll(params: np.ndarray, logp: np.ndarray, gold: np.ndarray, with_bias: bool) -> float:
    import torch  # for from_numpy; on first use (see the module docstring)

    z = logp / params[0]  # (N, K)
    if with_bias:
        z = z + np.append(params[1:], 0.0)  # (N, K): the last option's bias is fixed at 0
    lse = logsumexp(torch.from_numpy(z), dim=1).numpy()  # (N,) fp64
    return float((lse - z[np.arange(len(gold)), gold]).mean())


def fit_scaling(
    samples: Sequence[LabelledDistribution],
    *,
    allow_bias: bool = True,
    bias_range: tuple[float, float] = BIAS_RANGE,
) -> tuple[Scaling, dict[str, Any]]:
    """Fit one bucket's scaling by minimising NLL (scipy L-BFGS-B within the clamp ranges).

    Args:
        samples: distributions with one option count (unless ``allow_bias`` is False).
        allow_bias: consider a per-option bias (chosen by AIC, see the module docstring).
        bias_range: the clamp of each bias term (:data:`BIAS_RANGE`; an evaluator scaling's:
            :data:`EVALUATOR_BIAS_RANGE`).

    Returns:
        The scaling and a record ``{"nll_before", "nll_after", "aic_temperature", "aic_bias"}``.
    """
    from scipy.optimize import minimize

    t_lo, t_hi = TEMPERATURE_RANGE
    b_lo, b_hi = bias_range
    counts = {len(s.probs) for s in samples}
    if allow_bias and len(counts) != 1:
        raise ValueError(f"a bias needs one option count per bucket, got {sorted(counts)}")
    n = len(samples)
    fits = []
    # Mixed option counts (temperature only): one NLL per count group, weighted by its size.
    arrays = []
    for k in sorted(counts):
        grp = [s for s in samples if len(s.probs) == k]
        logp = _log_probs([s.probs for s in grp])  # (N_k, k)
        arrays.append((logp, np.asarray([s.gold for s in grp]), len(grp)))

    def total(params: np.ndarray, with_bias: bool) -> float:
        return sum(m * _nll(params, lp, g, with_bias) for lp, g, m in arrays) / n

    before = total(np.array([1.0]), False)
    res_t = minimize(total, x0=np.array([1.0]), args=(False,), method="L-BFGS-B", bounds=[(t_lo, t_hi)])
    fits.append((2 * 1 + 2 * n * float(res_t.fun), res_t.x, False, float(res_t.fun)))
    k = next(iter(counts))
    record: dict[str, Any] = {"nll_before": before, "aic_temperature": fits[0][0], "aic_bias": None}
    if allow_bias and n >= MIN_BIAS_SAMPLES_PER_OPTION * k:
        x0 = np.concatenate([res_t.x, np.zeros(k - 1)])
        res_b = minimize(
            total, x0=x0, args=(True,), method="L-BFGS-B", bounds=[(t_lo, t_hi)] + [(b_lo, b_hi)] * (k - 1)
        )
        aic = 2 * k + 2 * n * float(res_b.fun)
        record["aic_bias"] = aic
        fits.append((aic, res_b.x, True, float(res_b.fun)))
    _, x, biased, nll = min(fits, key=lambda f: f[0])
    temperature = float(x[0])
    bias = tuple(float(b) for b in np.append(x[1:], 0.0)) if biased else None
    on_bound = math.isclose(temperature, t_lo) or math.isclose(temperature, t_hi)
    if bias is not None:
        on_bound = on_bound or any(math.isclose(b, lim) for b in bias[:-1] for lim in (b_lo, b_hi))
    record["nll_after"] = nll
    return Scaling(temperature=temperature, bias=bias, n=n, clamped=on_bound), record


def nll_of(samples: Sequence[LabelledDistribution], scaling: Scaling | None = None) -> float:
    """Mean ``-log p[gold]`` of ``samples``, as given or after ``scaling`` (probabilities floored
    at 1e-9, as in the fit)."""
    gold_p = [float(s.probs[s.gold]) for s in samples]
    if scaling is not None:  # one scale() call per option count, not one per sample (3x faster)
        by_count: dict[int, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            by_count[len(s.probs)].append(i)
        for idx in by_count.values():
            scaled = scale([samples[i].probs for i in idx], scaling.temperature, scaling.bias)  # (N_k, k)
            for i, row in zip(idx, scaled.tolist()):
                gold_p[i] = row[samples[i].gold]
    total = 0.0
    for p in gold_p:
        total -= math.log(max(PROBABILITY_FLOOR, p))
    return total / max(1, len(samples))


def cross_validated_nll(
    samples: Sequence[LabelledDistribution],
    *,
    allow_bias: bool = True,
    folds: int = CV_FOLDS,
    bias_range: tuple[float, float] = BIAS_RANGE,
) -> tuple[float, float] | None:
    """Out-of-fold NLL without and with the scaling :func:`fit_scaling` would fit.

    ``min(folds, groups)`` folds by ``group`` (sklearn ``GroupKFold``, deterministic); each fold
    is scored with the scaling fitted on the others, bias choice included.

    Returns:
        ``(nll_identity, nll_fitted)``, means over every sample, or None with fewer than two
        groups (nothing to hold out).
    """
    from sklearn.model_selection import GroupKFold

    groups = [s.group or f"#{i}" for i, s in enumerate(samples)]
    k = min(folds, len(set(groups)))
    if k < 2:
        return None
    before = after = 0.0
    for train, test in GroupKFold(n_splits=k).split(np.zeros((len(samples), 1)), groups=groups):
        scaling, _ = fit_scaling([samples[i] for i in train], allow_bias=allow_bias, bias_range=bias_range)
        held = [samples[i] for i in test]
        before += nll_of(held) * len(held)
        after += nll_of(held, scaling) * len(held)
    return before / len(samples), after / len(samples)


def fit_checked(
    group: Sequence[LabelledDistribution], allow_bias: bool, bias_range: tuple[float, float] = BIAS_RANGE
) -> tuple[Scaling | None, dict[str, Any]]:
    """Fit one bucket; None (identity) unless it lowers the out-of-fold NLL by MIN_NLL_GAIN."""
    scaling, record = fit_scaling(group, allow_bias=allow_bias, bias_range=bias_range)
    cv = cross_validated_nll(group, allow_bias=allow_bias, bias_range=bias_range)
    record["cv_nll_before"], record["cv_nll_after"] = cv if cv is not None else (None, None)
    record["temperature"] = scaling.temperature
    if cv is None:
        record["refused"] = "fewer than two source items: nothing to cross-validate on"
        return None, record
    if cv[1] > cv[0] - MIN_NLL_GAIN:
        record["refused"] = (
            f"cross-validated NLL {cv[0]:.4f} -> {cv[1]:.4f}: the fit does not lower it by {MIN_NLL_GAIN}"
        )
        return None, record
    return scaling, record


def fit(
    samples: Sequence[LabelledDistribution],
    fitted_for: Mapping[str, Any],
    *,
    meta: Mapping[str, Any] | None = None,
) -> Calibration:
    """Fit every bucket with at least :data:`MIN_SAMPLES` samples, and a ``"<type>:*"`` temperature.

    A scaling that does not lower the cross-validated NLL is refused (the bucket stays
    uncalibrated; see the module docstring), so the result may have no scalings at all: the
    identity. ``meta["fits"]`` holds every bucket's record, with ``refused`` giving the reason.

    Args:
        samples: labelled distributions (the engine's uncalibrated output).
        fitted_for: the engine's ``describe()`` (at least :data:`FITTED_FOR_KEYS`).
        meta: free-form provenance stored in the file (data, split, report).
    """
    missing = [k for k in FITTED_FOR_KEYS if k not in fitted_for]
    if missing:
        raise ValueError(f"fitted_for lacks {missing}")
    by_bucket: dict[str, list[LabelledDistribution]] = defaultdict(list)
    by_type: dict[str, list[LabelledDistribution]] = defaultdict(list)
    for s in samples:
        by_bucket[bucket_of(s.type, len(s.probs))].append(s)
        by_type[s.type].append(s)
    candidates = [(name, group, not name.endswith("11+")) for name, group in sorted(by_bucket.items())]
    candidates += [(f"{qtype}:*", group, False) for qtype, group in sorted(by_type.items())]
    scalings: dict[str, Scaling] = {}
    fits: dict[str, Any] = {}
    for name, group, allow_bias in candidates:
        if len(group) >= MIN_SAMPLES:
            scaling, fits[name] = fit_checked(group, allow_bias)
            if scaling is not None:
                scalings[name] = scaling
    info = {k: fitted_for[k] for k in (*FITTED_FOR_KEYS, "strategy", "model") if k in fitted_for}
    return Calibration(fitted_for=info, scalings=scalings, meta={**(meta or {}), "fits": fits})


@dataclass(frozen=True)
class Calibration:
    """Per-bucket scalings and what they were fitted for (see the module docstring).

    Attributes:
        fitted_for: ``fingerprint``, ``prompt_version``, ``dtype``, ``strategy`` (and ``model``,
            informative) of the engine the samples came from.
        scalings: bucket name -> :class:`Scaling`.
        evaluators: ``"<evaluator>@<version>"`` -> :class:`Scaling` of its yes/no score.
        meta: provenance (data files, split, per-bucket fit records, report).
    """

    fitted_for: dict[str, Any]
    scalings: dict[str, Scaling]
    meta: dict[str, Any] = field(default_factory=dict)
    evaluators: dict[str, Scaling] = field(default_factory=dict)
    """``"<evaluator>@<version>"`` (:func:`evaluator_key`) -> two-option scaling of its yes/no
    score (see the module docstring)."""
    origin: str = field(default="", compare=False)
    """Where it was read from: ``shipped:<file name>`` or the file's path (not stored in the file)."""

    def scaling_for(self, qtype: str, n_options: int) -> Scaling | None:
        """The bucket's scaling, else the type-wide one without bias, else None (left as is)."""
        own = self.scalings.get(bucket_of(qtype, n_options))
        if own is not None and (own.bias is None or len(own.bias) == n_options):
            return own
        return self.scalings.get(f"{qtype}:*")

    def apply(self, qtype: str, probs: Sequence[float]) -> list[float]:
        """The calibrated distribution of one answer (unchanged where no scaling applies)."""
        scaling = self.scaling_for(qtype, len(probs))
        return list(probs) if scaling is None else scaling.apply(probs)

    def check(self, describe: Mapping[str, Any]) -> None:
        """Refuse an engine other than the one this was fitted for.

        Raises:
            CalibrationMismatchError: a :data:`FITTED_FOR_KEYS` value differs (all named).
        """
        mismatch = self._mismatch(describe)
        if mismatch:
            said = "; ".join(f"{k}: fitted for {a!r}, engine has {b!r}" for k, (a, b) in mismatch.items())
            raise CalibrationMismatchError(
                f"calibration fitted for another engine ({said}); refit it with `logitjudge calibrate`",
                mismatch=mismatch,
            )

    @property
    def digest(self) -> str:
        """Short sha256 of the file contents (reported in the engine's ``describe()``)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        def one(s: Scaling) -> dict[str, Any]:
            bias = list(s.bias) if s.bias is not None else None
            return {"temperature": s.temperature, "bias": bias, "n": s.n, "clamped": s.clamped}

        out: dict[str, Any] = {
            "format": FORMAT,
            "fitted_for": self.fitted_for,
            "scalings": {k: one(s) for k, s in self.scalings.items()},
        }
        if self.evaluators:  # optional: files without evaluator scalings keep their digest
            out["evaluators"] = {k: one(s) for k, s in self.evaluators.items()}
        out["meta"] = self.meta
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str = "calibration") -> Calibration:
        """Strict: an unknown format, a missing key or an out-of-range value is refused.

        Raises:
            CalibrationMismatchError: the data is not a calibration this version can apply.
        """

        def bad(why: str) -> CalibrationMismatchError:
            return CalibrationMismatchError(f"{source}: not a usable calibration file: {why}")

        def number(x: Any, where: str) -> float:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise bad(f"{where} must be a finite number, got {x!r}")
            return float(x)

        if not isinstance(data, Mapping) or type(data.get("format")) is not int or data["format"] != FORMAT:
            raise bad(f"format must be the integer {FORMAT}")
        extra = set(data) - {"format", "fitted_for", "scalings", "evaluators", "meta"}
        if extra:
            raise bad(f"unknown keys {sorted(extra)}")
        fitted_for = data.get("fitted_for")
        if not isinstance(fitted_for, Mapping) or any(k not in fitted_for for k in FITTED_FOR_KEYS):
            raise bad(f"fitted_for must hold {list(FITTED_FOR_KEYS)}")
        if not isinstance(data.get("meta") or {}, Mapping):
            raise bad("meta must be an object")

        def parsed(section: str) -> dict[str, Scaling]:
            entries = data.get(section) or {}
            if not isinstance(entries, Mapping):
                raise bad(f"{section} must be an object")
            out = {}
            for name, s in entries.items():
                where = f"{section}.{name}"
                if not isinstance(s, Mapping) or "temperature" not in s:
                    raise bad(f"{where} must be an object with a temperature")
                if set(s) - {"temperature", "bias", "n", "clamped"}:
                    raise bad(f"{where}: unknown keys {sorted(set(s) - {'temperature', 'bias', 'n', 'clamped'})}")
                t = number(s["temperature"], f"{where}.temperature")
                if not TEMPERATURE_RANGE[0] <= t <= TEMPERATURE_RANGE[1]:
                    raise bad(f"{where}.temperature {t} outside {TEMPERATURE_RANGE}")
                bias = None
                if s.get("bias") is not None:
                    if not isinstance(s["bias"], list) or len(s["bias"]) < 2:
                        raise bad(f"{where}.bias must be a list of at least 2 numbers")
                    bias = tuple(number(b, f"{where}.bias") for b in s["bias"])
                    lo, hi = EVALUATOR_BIAS_RANGE if section == "evaluators" else BIAS_RANGE
                    if not all(lo <= b <= hi for b in bias):
                        raise bad(f"{where}.bias outside {(lo, hi)}")
                    if bias[-1] != 0.0:
                        raise bad(f"{where}.bias: the last option's bias must be 0 (it is the reference)")
                    if section == "evaluators" and len(bias) != 2:
                        raise bad(f"{where}.bias must have 2 entries (a yes/no score)")
                n = s.get("n", 0)
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise bad(f"{where}.n must be a non-negative integer")
                if not isinstance(s.get("clamped", False), bool):
                    raise bad(f"{where}.clamped must be true or false")
                out[str(name)] = Scaling(t, bias, n, bool(s.get("clamped", False)))
            return out

        return cls(
            fitted_for=dict(fitted_for),
            scalings=parsed("scalings"),
            meta=dict(data.get("meta") or {}),
            evaluators=parsed("evaluators"),
            origin=source,
        )

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration file (see :meth:`from_json`)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
            raise CalibrationMismatchError(f"{path}: cannot read the calibration file: {exc}") from None
        return cls.from_json(data, source=str(path))

    def for_evaluator(self, name: str, version: str) -> Scaling | None:
        """The scaling of evaluator ``name`` at ``version`` (:func:`evaluator_key`), else None."""
        return self.evaluators.get(evaluator_key(name, version))

    def _mismatch(self, describe: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """``{key: (fitted for, engine has)}`` for every :data:`FITTED_FOR_KEYS` value that differs."""
        return {
            k: (self.fitted_for.get(k), describe.get(k))
            for k in FITTED_FOR_KEYS
            if self.fitted_for.get(k) != describe.get(k)
        }

    def matches(self, describe: Mapping[str, Any]) -> bool:
        """True when every :data:`FITTED_FOR_KEYS` value equals the engine's (:meth:`check` passes)."""
        return not self._mismatch(describe)


def evaluator_key(name: str, version: str) -> str:
    """``"<name>@<version>"``: an evaluator scaling holds for the definition it was fitted on
    (faithfulness v2's contrast score, not a later v3's)."""
    return f"{name}@{version}"


SHIPPED_DIR = Path(__file__).resolve().parent.parent / "calibrations"
"""The calibrations shipped with the package (``logitjudge/calibrations/*.json``), each fitted
with ``logitjudge calibrate`` on the dev sets for one engine (its ``fitted_for``)."""
SHIPPED = "shipped"
"""The ``calibration`` setting that applies the shipped calibration fitted for the engine, if any
(the default of ``Judge.load`` and of the CLI's ``--calibration``)."""
NONE = "none"
"""The ``calibration`` setting that applies none (raw distributions)."""


def shipped_for(describe: Mapping[str, Any], directory: str | Path | None = None) -> Calibration | None:
    """The shipped calibration fitted for this engine, or None when none matches.

    A file matches when its ``fitted_for`` equals the engine's ``describe()`` on every
    :data:`FITTED_FOR_KEYS` key (model fingerprint, prompt version, dtype): another dtype (a
    GPU's default bf16 against a file fitted in fp32 on CPU), prompt version or backend (vLLM
    fingerprints its files, not the loaded module) gets no calibration rather than one fitted
    elsewhere. Files are tried in name order; the first match wins. Its ``origin`` is
    ``shipped:<file name>``.
    ``directory`` defaults to :data:`SHIPPED_DIR`.

    Raises:
        CalibrationMismatchError: a shipped file cannot be read (a packaging error).
    """
    root = Path(SHIPPED_DIR if directory is None else directory)
    for path in sorted(root.glob("*.json")) if root.is_dir() else ():
        cal = Calibration.load(path)
        if cal.matches(describe):
            return Calibration(cal.fitted_for, cal.scalings, cal.meta, cal.evaluators, origin=f"{SHIPPED}:{path.name}")
    return None
