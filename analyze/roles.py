"""Role clustering: which scheduling treatment a thread group calls for.

Problem: each name-pattern group must get one role, `compute` (hot, long
slices, always runnable), `latency` (in a wake chain, short slices, frequent
wakeups), `housekeeping` (low duty, periodic), `batch` (long bursts nobody
waits on) or `default` (too little activity to say), with a confidence, and
the same answer every time for the same capture. A workload has a handful of
groups, far too few to learn clusters from scratch, and absolute CPU shares
are unreliable on a shared machine (another VM steals CPU, so a spinner may
get only 40% of a CPU).
Approach: soft clustering anchored on role prototypes. Each group is a point
in a small feature space built from scale-free evidence (`demand`: running or
runnable share of its life, which stays ~1 for a spinner however much CPU is
stolen; involuntary-switch fraction; log slice length; log wakeups per
thread; latency evidence, the larger of wake-chain membership (0 or 1) and
being woken by requests from outside the workload (0..1, requests.py: a
thread woken from the network is in no wake chain); periodicity). Responsibilities are a softmax
of weighted squared distances to the prototypes (`temperature`); `n_iter`
EM-style steps move each prototype towards its members, pulled back by
`anchor` pseudo-points at the prior, so a workload can shift a prototype but
never relabel it. Confidence is the winning responsibility. `n_init` > 1
restarts from prototypes jittered with `random_state` and keeps the lowest
objective; the default (1, no jitter) involves no randomness at all.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import polars as pl
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from threadwise.analyze.contract import ROLES

FEATURES = ("demand", "involuntary_frac", "log_slice_us", "log_wakeups_per_thread", "chain_or_requests",
            "periodicity", "log_share_per_thread")
# Prior prototypes, one row per role in ROLES, columns as FEATURES.
PROTOTYPES = np.array([
    #  demand invol  log10 slice us  log10(1+wake/s)  chain/req  periodic  log10(1+1000*share)
    [0.98,   0.95,  3.3,            0.2,             0.0,   0.0,      2.6],   # compute
    [0.15,   0.30,  1.9,            2.2,             1.0,   0.3,      1.2],   # latency
    [0.02,   0.20,  2.2,            1.0,             0.0,   0.9,      0.6],   # housekeeping
    [0.70,   0.40,  3.7,            0.5,             0.0,   0.1,      2.4],   # batch
    [0.00,   0.50,  1.5,            0.0,             0.0,   0.0,      0.0],   # default
])
# Per-feature weights (how strongly each feature discriminates) and scales.
WEIGHTS = np.array([3.0, 1.5, 0.6, 1.0, 2.5, 1.0, 1.2])
SCALES = np.array([1.0, 1.0, 1.5, 1.5, 1.0, 1.0, 2.0])


def group_feature_matrix(groups: pl.DataFrame) -> np.ndarray:
    """FEATURES for each group row (columns from analyze's group table, nulls as no evidence)."""
    threads = groups["thread_count"].cast(pl.Float64).clip(lower_bound=1.0).to_numpy()
    slices = groups["slices"].cast(pl.Float64).to_numpy()
    invol = groups["involuntary"].cast(pl.Float64).to_numpy()
    slice_us = groups["slice_p50_ns"].cast(pl.Float64).fill_null(0.0).to_numpy() / 1e3
    wakes = groups["wakeups_per_s"].cast(pl.Float64).fill_null(0.0).to_numpy()
    cv = groups["wake_interval_cv"].cast(pl.Float64).fill_null(np.inf).to_numpy()
    share = groups["cpu_share"].cast(pl.Float64).fill_null(0.0).to_numpy()
    chain = groups["in_wake_chain"].cast(pl.Float64).to_numpy()
    requests = (groups["request_driven"].cast(pl.Float64).fill_null(0.0).to_numpy()
                if "request_driven" in groups.columns else np.zeros(len(groups)))
    return np.column_stack([
        groups["demand"].cast(pl.Float64).fill_null(0.0).to_numpy(),
        np.divide(invol, slices, out=np.full_like(invol, 0.5), where=slices > 0),
        np.log10(1.0 + slice_us),
        np.log10(1.0 + wakes / threads),
        np.maximum(chain, requests),
        np.clip(1.0 - np.where(np.isfinite(cv), cv, 1.0), 0.0, 1.0) * (wakes / threads >= 0.5),
        np.log10(1.0 + 1000.0 * share / threads),
    ])


class RoleClusterer(ClusterMixin, BaseEstimator):
    """Assign each row of a FEATURES matrix one of ROLES, with a confidence.

    Parameters (keyword-only, stored untouched, checked in `fit` against
    `_parameter_constraints`):
    - `prototypes`: the prior, one row per role. None: the role prior
      (PROTOTYPES, with WEIGHTS and SCALES) over the FEATURES columns; X must
      have exactly those columns. "quantiles": an uninformed prior for any
      feature space, prototypes at evenly spaced per-feature quantiles of X
      (unit weights, the features' spread as scales); scikit-learn's common
      checks run the estimator this way. An array: (len(ROLES), n_features).
    - `weights`: per-feature weights (None: WEIGHTS for the role prior, else 1).
    - `temperature`, `n_iter`, `anchor`, `n_init`, `jitter`, `random_state`:
      see the module note.
    `fit` learns `n_features_in_`, `prototypes_`, `weights_`, `scales_`,
    `responsibilities_`, `labels_` (index into ROLES), `roles_`,
    `confidence_` and `inertia_`. With the role prior, X may have no rows (a
    workload without groups): the prior stands and every label list is empty.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "prototypes": ["array-like", StrOptions({"quantiles"}), None],
        "weights": ["array-like", None],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "anchor": [Interval(Real, 0, None, closed="neither")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "jitter": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, *, prototypes: np.ndarray | str | None = None, weights: np.ndarray | None = None,
                 temperature: float = 0.35, n_iter: int = 5, anchor: float = 4.0, n_init: int = 1,
                 jitter: float = 0.05, random_state: int | np.random.RandomState | None = None) -> None:
        self.prototypes = prototypes
        self.weights = weights
        self.temperature = temperature
        self.n_iter = n_iter
        self.anchor = anchor
        self.n_init = n_init
        self.jitter = jitter
        self.random_state = random_state

    def _distances(self, x: np.ndarray, protos: np.ndarray) -> np.ndarray:
        diff = (x[:, None, :] - protos[None, :, :]) / self.scales_
        return np.einsum("ikf,f->ik", diff * diff, self.weights_)

    def _responsibilities(self, dist: np.ndarray) -> np.ndarray:
        logits = -dist / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        resp = np.exp(logits)
        return resp / resp.sum(axis=1, keepdims=True)

    def _run(self, x: np.ndarray, prior: np.ndarray,
             start: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        protos = start.copy()
        for _ in range(self.n_iter):
            resp = self._responsibilities(self._distances(x, protos))
            mass = resp.sum(axis=0)[:, None]
            protos = (self.anchor * prior + resp.T @ x) / (self.anchor + mass)
        dist = self._distances(x, protos)
        resp = self._responsibilities(dist)
        return protos, resp, float((resp * dist).sum())

    def _prior(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Prototypes, weights and scales for X's feature space."""
        n_features = x.shape[1]
        role_space = n_features == len(FEATURES)
        if self.prototypes is None:
            if not role_space:
                raise ValueError(f"X has {n_features} features, but RoleClusterer's role prior is over "
                                 f"the {len(FEATURES)} FEATURES {FEATURES}; pass prototypes=\"quantiles\" "
                                 "or an array for another feature space")
            prior = PROTOTYPES
        elif isinstance(self.prototypes, str):   # "quantiles"
            if len(x) == 0:
                raise ValueError("prototypes='quantiles' needs at least one sample; got 0 samples")
            prior = np.quantile(x, (np.arange(len(ROLES)) + 0.5) / len(ROLES), axis=0)
        else:
            prior = check_array(self.prototypes, dtype=np.float64)
            if prior.shape != (len(ROLES), n_features):
                raise ValueError(f"prototypes must have shape {(len(ROLES), n_features)}, got {prior.shape}")
        if self.weights is not None:
            weights = check_array(self.weights, dtype=np.float64, ensure_2d=False)
            if weights.shape != (n_features,):
                raise ValueError(f"weights must have shape {(n_features,)}, got {weights.shape}")
        else:
            weights = WEIGHTS if role_space and self.prototypes is None else np.ones(n_features)
        if role_space:
            scales = SCALES
        else:   # no units known: each feature's spread (1 where it has none)
            spread = x.std(axis=0) if len(x) else np.ones(n_features)
            scales = np.where(spread > 0, spread, 1.0)
        return prior, weights, scales

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None) -> RoleClusterer:
        """Learn the prototypes from X (n_samples, n_features); returns self."""
        x = validate_data(self, X, dtype=np.float64, ensure_min_samples=0)
        prior, self.weights_, self.scales_ = self._prior(x)
        rng = check_random_state(self.random_state)
        best: tuple[np.ndarray, np.ndarray, float] | None = None
        for attempt in range(self.n_init):
            jittered = prior + rng.normal(0.0, self.jitter, prior.shape) * self.scales_
            start = prior if attempt == 0 else jittered
            result = self._run(x, prior, start) if len(x) else (prior, np.zeros((0, len(ROLES))), 0.0)
            if best is None or result[2] < best[2] - 1e-12:
                best = result
        assert best is not None
        self.prototypes_, self.responsibilities_, self.inertia_ = best
        self.labels_ = self.responsibilities_.argmax(axis=1).astype(np.int64)
        self.roles_ = [ROLES[i] for i in self.labels_]
        self.confidence_ = self.responsibilities_.max(axis=1) if len(x) else np.zeros(0)
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The role index (into ROLES) of each row of X, by the fitted prototypes."""
        check_is_fitted(self)
        x = validate_data(self, X, dtype=np.float64, reset=False)
        return self._responsibilities(self._distances(x, self.prototypes_)).argmax(axis=1)
