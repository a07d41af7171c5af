"""Fit the link model's per-model parameters to measured profiles, and say how well it fits.

The profiles are the artifact's ``isolated_thp.csv`` (samples/s by ``model,gpus,nodes``) and
``shared_thp_ratio.csv`` (victim x aggressor throughput ratios), measured on the testbed. Only
*measured* cells are used: keys on 8 nodes (never reachable on the 4-node testbed) are left out
(samples recorded on a cluster keep them).
Each cell is simulated as the two jobs sharing the NIC and PCIe of their common nodes, with the
same :mod:`physics` the simulator uses; a cell of jobs that shared a fabric uplink instead
(samples with a ``link`` column, :mod:`.samples`) as each job on its own NIC and PCIe and both on
that uplink, whose work is the job's cross-domain ring volume over the uplink's bandwidth in NICs
(the link model's uplink term, each job across two domains). Samples of a cluster
(:attr:`~.samples.Samples.hardware`) are simulated on its nodes' hardware as the link model
scales a job there (compute over the GPU speed, NIC and PCIe work over their bandwidths, intra-node
work on private NVLink), so the parameters stay in the testbed's units; ``scipy.optimize.least_squares`` fits

* per model: compute time, NIC work, PCIe work, overlap, samples per GPU, latency, PCIe
  coupling, congestion (positivity by log, overlap by logistic transforms) and the two
  placement-shape exponents of the inter-node volume (bounded to +-4 by a tanh);
* per model pair: the interaction ``kappa`` (log-transformed, 1 = neutral);
* per measured placement of a model (``model,gpus,nodes``): the ``sensitivity`` (log-
  transformed, 1 = the model's typical reaction), with a ridge prior residual
  ``SENSITIVITY_PRIOR * log(sensitivity)`` so a placement moves away from 1 only as far as
  its cells agree;

to the log isolated throughputs (weight :data:`ISOLATED_WEIGHT`) and the ratios, under the
``soft_l1`` loss (:data:`LOSS`). Several seeded starts; the best is kept.

Why these terms: with per-model parameters and ``kappa`` only, the in-fit residuals grouped by
the victim's placement carried most of what the model missed (GraphSage on 2 GPUs of 2 nodes
lost 0.08 more than predicted, on 4 GPUs of 2 nodes 0.08 less; an additive "pair + victim
placement" statistical model cross-validates at 0.055 against 0.061), while grouping by the
aggressor's placement explained little. The sensitivity is that term inside the physics: it
scales how much more than a fair share the placement loses, and the coefficient it scales
stays >= 1, so capacity is never exceeded and a lone job keeps its isolated rate. The shape
exponents let NIC volume depend on node count and GPUs per node (NCCL's algorithm and channel
choices) and mainly fix the isolated throughputs (mean |log error| 0.098 -> 0.079).

Quality is the mean absolute error (MAE) of the ratio over the measured cells, in fit and under
k-fold cross-validation over cells, next to two reference predictors evaluated on the same
folds and allowed to see only the training cells of each fold: the training cells' mean ratio,
and the nearest training cell of the same model pair (L1 distance in log2 GPUs and log2 nodes
of victim and aggressor, ties averaged). The fits see every isolated throughput in every fold
(they are separate measurements, not ratio cells); the references do not use them.
"""
from __future__ import annotations

from concurrent.futures import as_completed
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from scipy.optimize import least_squares

from deepshare.core.contention.link import physics
from deepshare.core.contention.link.model import ring_factor
from deepshare.core.contention.link.params import (
    MAX_EXPONENT, MAX_KAPPA, MAX_PARAMETER, MIN_POSITIVE, SIGNED, LinkCatalog, LinkParams, placement_key,
)
from deepshare.core.contention.link.samples import ClusterHardware, Samples, UplinkPair
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import Catalog, ProfileKey
from deepshare.core.workers import worker_pool

ISOLATED_WEIGHT = 0.3
LOSS = "soft_l1"
"""``least_squares`` loss: ``soft_l1`` is quadratic below :data:`LOSS_SCALE` and linear above, so
the fit minimises close to the absolute error it is judged by and a few noisy cells (the table
has single cells 0.3 off their neighbours) do not pull every parameter."""
LOSS_SCALE = 0.05
SENSITIVITY_PRIOR = 0.3
"""Weight of the prior residual ``log(sensitivity)`` per measured placement (ridge toward 1).
Chosen by 5-fold CV MAE on the shipped profiles among 0.02, 0.05, 0.1, 0.2, 0.3 and 0.5
(0.0592, 0.0582, 0.0588, 0.0581, 0.0578, 0.0583): choosing on the CV flatters it a little."""
MAX_EVALUATIONS = 150
"""Cap on least-squares steps per start: later steps polish the third decimal at great cost."""
PER_MODEL = (
    "compute_s", "nic_s", "pcie_s", "overlap", "samples_per_gpu", "latency_s", "pcie_coupling", "congestion",
    "nodes_exponent", "gpus_per_node_exponent",
)
SIGNED_PER_MODEL = tuple(PER_MODEL.index(name) for name in SIGNED)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class FitProgress:
    """One seeded start finished: the unit of a calibration's progress (``deepshare calibrate``
    shows a bar on a terminal and a line per finished fit otherwise)."""

    done: int
    """Starts finished so far, over every fit."""
    total: int
    """Starts in the whole calibration: (1 + folds) x starts."""
    fit: str
    """The fit this start belongs to: ``full fit`` or ``fold K/N``."""
    fit_complete: bool
    """Whether this was the last start of its fit."""


Step = Callable[[FitProgress], None]


TESTBED_NODES_MEASURED = 8
"""Profile keys on this many nodes or more were never measured on the testbed (4 nodes): the
profile tables' entries for them are left out of a fit (samples keep every key)."""


@dataclass(frozen=True)
class Dataset:
    """The measured cells of a profile catalog (and of jobs that shared an uplink), as arrays."""

    models: tuple[str, ...]
    keys: tuple[ProfileKey, ...]
    key_model: np.ndarray      # (K,)
    gpus: np.ndarray           # (K,)
    nodes: np.ndarray          # (K,)
    isolated: np.ndarray       # (K,) samples/s
    victim: np.ndarray         # (C,) key index
    aggressor: np.ndarray      # (C,) key index
    ratio: np.ndarray          # (C,)
    share: np.ndarray | None = None
    """(C,) per cell: 0 where the jobs shared their nodes, else the shared uplink's bandwidth in
    NICs (:attr:`~deepshare.core.contention.link.samples.UplinkPair.share`); None: all 0."""
    hardware: ClusterHardware | None = None
    """The nodes every cell was measured on; None (or the reference): the testbed's."""

    @property
    def shares(self) -> np.ndarray:
        """:attr:`share`, zeros when None."""
        return np.zeros(len(self.ratio)) if self.share is None else self.share

    @staticmethod
    def from_catalog(catalog: Catalog, uplinks: Mapping[UplinkPair, float] | None = None,
                     hardware: ClusterHardware | None = None, testbed: bool = True) -> "Dataset":
        """The measured cells of ``catalog``, then those of ``uplinks`` (pairs of measured keys),
        measured on ``hardware`` (None: the testbed's). ``testbed``: the catalog is the testbed's
        profile tables, whose keys on 8 nodes or more were never measured (the testbed has 4) and
        are left out; samples (``False``) were all measured, every key is kept."""
        crossing = sorted((uplinks or {}).items(), key=lambda kv: kv[0].sort_key())
        named = dict.fromkeys([*catalog.keys, *(k for pair, _ in crossing for k in (pair.victim, pair.aggressor))])
        keys = tuple(k for k in named if (k.nodes < TESTBED_NODES_MEASURED or not testbed) and k in catalog.isolated)
        if not keys:
            raise DeepShareError("profiles: no measured keys (model,gpus,nodes"
                                 + (f" with nodes < {TESTBED_NODES_MEASURED})" if testbed else ")"))
        models = tuple(dict.fromkeys(k.model for k in keys))
        cells = [(i, j) for i, v in enumerate(keys) for j, a in enumerate(keys) if (v, a) in catalog.ratios]
        ratios = [catalog.ratios[(keys[i], keys[j])] for i, j in cells]
        shares = [0.0] * len(cells)
        index = {k: i for i, k in enumerate(keys)}
        for pair, ratio in crossing:
            if pair.victim in index and pair.aggressor in index:
                cells.append((index[pair.victim], index[pair.aggressor]))
                ratios.append(ratio)
                shares.append(pair.share)
        if not cells:
            raise DeepShareError("profiles: the ratio table has no cell between measured keys")
        return Dataset(
            models=models,
            keys=keys,
            key_model=np.array([models.index(k.model) for k in keys]),
            gpus=np.array([k.gpus for k in keys], dtype=float),
            nodes=np.array([k.nodes for k in keys], dtype=float),
            isolated=np.array([catalog.isolated[k] for k in keys]),
            victim=np.array([c[0] for c in cells]),
            aggressor=np.array([c[1] for c in cells]),
            ratio=np.array(ratios, dtype=float),
            share=np.array(shares, dtype=float) if any(shares) else None,
            hardware=None if hardware is None or hardware.is_reference() else hardware,
        )


def _edges(data: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Each cell's two jobs (victim ``2c``, aggressor ``2c + 1``) on their links: per edge the
    job, the link, whether its work is the job's NIC work (else its PCIe work) and the factor on
    it, and the number of links. Jobs that shared nodes share one NIC and one PCIe link; jobs that
    shared an uplink each have their own NIC and PCIe and meet on the uplink, which carries the
    job's NIC work over its ring factor (the volume across two domains, ``ring_factor(2) = 1``)
    over the uplink's share."""
    job, link, nic, factor = [], [], [], []
    n_links = 0
    for c, share in enumerate(data.shares.tolist()):
        victim, aggressor = 2 * c, 2 * c + 1
        if share <= 0:
            for j in (victim, aggressor):
                job += [j, j]
                link += [n_links, n_links + 1]
                nic += [True, False]
                factor += [1.0, 1.0]
            n_links += 2
            continue
        uplink = n_links + 4
        for j, key, own in ((victim, data.victim[c], n_links), (aggressor, data.aggressor[c], n_links + 2)):
            job += [j, j, j]
            link += [own, own + 1, uplink]
            nic += [True, False, True]
            factor += [1.0, 1.0, 1.0 / (ring_factor(int(data.nodes[key])) * share)]
        n_links += 5
    return (np.array(job, dtype=np.int64), np.array(link, dtype=np.int64), np.array(nic, dtype=bool),
            np.array(factor), n_links)


class PairModel:
    """Predicts isolated throughputs and pair ratios of a dataset from a parameter vector."""

    def __init__(self, data: Dataset) -> None:
        self.data = data
        m = len(data.models)
        self._kappa_at = m * len(PER_MODEL)
        self._sens_at = self._kappa_at + m * m
        self.size = self._sens_at + len(data.keys)
        self._ring = np.array([ring_factor(int(k)) for k in data.nodes])
        self._intra_units = 2.0 * (data.gpus / data.nodes - 1.0)
        self._edge_job, self._edge_link, self._edge_nic, self._edge_factor, self._n_links = _edges(data)
        self._jobs_keys = np.stack([data.victim, data.aggressor], axis=1).reshape(-1)

    def unpack(self, x: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """(per-model values by name, kappa (M, M), sensitivity per key (K,))."""
        m = len(self.data.models)
        raw = x[: m * len(PER_MODEL)].reshape(m, len(PER_MODEL))
        values = {name: np.exp(raw[:, i]) for i, name in enumerate(PER_MODEL)}
        values["overlap"] = 1.0 / (1.0 + np.exp(-raw[:, PER_MODEL.index("overlap")]))
        for name in SIGNED:  # exponents: bounded, 0 at 0
            values[name] = MAX_EXPONENT * np.tanh(raw[:, PER_MODEL.index(name)] / MAX_EXPONENT)
        kappa = np.exp(x[self._kappa_at:self._sens_at]).reshape(m, m)
        return values, kappa, np.exp(x[self._sens_at:])

    def pack(self, links: LinkCatalog) -> np.ndarray:
        """The parameter vector of ``links``' values for this dataset's models (inverse of unpack)."""
        rows = []
        for model in self.data.models:
            p = links.params[model]
            row = []
            for name in PER_MODEL:
                value = getattr(p, name)
                if name == "overlap":
                    value = min(max(value, 1e-12), 1 - 1e-12)
                    row.append(np.log(value / (1.0 - value)))
                elif name in SIGNED:
                    row.append(MAX_EXPONENT * np.arctanh(value / MAX_EXPONENT))
                else:
                    row.append(np.log(max(value, 1e-300)))
            rows.append(row)
        kappa = [[links.interaction(v, a) for a in self.data.models] for v in self.data.models]
        sens = [links.placement_sensitivity(k.model, k.gpus, k.nodes) for k in self.data.keys]
        return np.concatenate([np.array(rows).reshape(-1), np.log(np.array(kappa)).reshape(-1), np.log(sens)])

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(isolated samples/s per key, ratio per cell)."""
        d = self.data
        v, kappa, sens = self.unpack(x)
        km = d.key_model
        shape = (d.nodes / 2.0) ** v["nodes_exponent"][km] * (d.gpus / d.nodes) ** v["gpus_per_node_exponent"][km]
        nic = v["nic_s"][km] * self._ring * shape
        hw = d.hardware
        if hw is None:  # the testbed: the works as fitted, bit for bit
            pcie = v["pcie_s"][km] * self._intra_units + v["pcie_coupling"][km] * nic
            compute = v["compute_s"][km] + v["latency_s"][km] * (d.nodes - 1)
            private = np.zeros(len(km))
        else:  # as node_works and LinkState._record scale a job on these nodes
            intra = v["pcie_s"][km] * self._intra_units
            copies = v["pcie_coupling"][km] * nic
            if hw.nvlink_scale > 0:
                pcie, private = copies * hw.pcie_scale, intra * hw.nvlink_scale
            else:
                pcie, private = (intra + copies) * hw.pcie_scale, np.zeros(len(km))
            nic = nic * hw.nic_scale
            compute = v["compute_s"][km] / hw.speed + v["latency_s"][km] * (d.nodes - 1)
        comm = np.maximum(nic, pcie)
        if hw is not None and hw.nvlink_scale > 0:
            comm = np.maximum(comm, private)
        iso_t = physics.iteration_time(compute, comm, v["overlap"][km])
        throughput = d.gpus * v["samples_per_gpu"][km] / iso_t
        jk = self._jobs_keys
        system = physics.System(
            model=km[jk],
            compute=compute[jk],
            overlap=v["overlap"][km][jk],
            congestion=v["congestion"][km][jk],
            private=private[jk],
            edge_job=self._edge_job,
            edge_link=self._edge_link,
            work=np.where(self._edge_nic, nic[jk][self._edge_job], pcie[jk][self._edge_job]) * self._edge_factor,
            n_links=self._n_links,
            kappa=kappa,
            sensitivity=sens[jk],
        )
        return throughput, physics.ratios(system)[0::2]

    def residuals(self, x: np.ndarray, cells: np.ndarray) -> np.ndarray:
        throughput, ratio = self.predict(x)
        return np.concatenate(
            [
                ISOLATED_WEIGHT * np.log(throughput / self.data.isolated),
                ratio[cells] - self.data.ratio[cells],
                SENSITIVITY_PRIOR * x[self._sens_at:],
            ]
        )

    def _sparsity(self, cells: np.ndarray) -> np.ndarray:
        """Which residuals each parameter can move: lets the finite differences share evaluations."""
        d = self.data
        m, p = len(d.models), len(PER_MODEL)
        rows = np.zeros((len(d.keys) + len(cells) + len(d.keys), self.size), dtype=bool)
        for key, model in enumerate(d.key_model):
            rows[key, model * p:(model + 1) * p] = True
        for n, cell in enumerate(cells):
            vm, am = d.key_model[d.victim[cell]], d.key_model[d.aggressor[cell]]
            rows[len(d.keys) + n, vm * p:(vm + 1) * p] = True
            rows[len(d.keys) + n, am * p:(am + 1) * p] = True
            rows[len(d.keys) + n, m * p + vm * m + am] = True
            rows[len(d.keys) + n, m * p + am * m + vm] = True  # the aggressor is slowed too, which feeds back
            rows[len(d.keys) + n, self._sens_at + d.victim[cell]] = True
            rows[len(d.keys) + n, self._sens_at + d.aggressor[cell]] = True
        for key in range(len(d.keys)):
            rows[len(d.keys) + len(cells) + key, self._sens_at + key] = True
        return rows

    def start_points(self, starts: int, seed: int) -> list[np.ndarray]:
        """The seeded starting vectors of :meth:`fit` (drawn in order from one generator). On a
        cluster's hardware they are the same draws in that hardware's units (the compute time
        the cluster's GPUs take, the NIC and PCIe work at its bandwidths), so a start is as far
        from the measured throughputs on an H100 cluster as on the testbed."""
        rng = np.random.default_rng(seed)
        m = len(self.data.models)
        shift = self._hardware_shift()
        points = []
        for _ in range(starts):
            start = rng.normal(0.0, 1.0, (m, len(PER_MODEL)))
            start[:, SIGNED_PER_MODEL] = 0.0  # the ring formula's shape
            if shift is not None:
                start += shift
            points.append(np.concatenate([start.reshape(-1), np.zeros(m * m + len(self.data.keys))]))
        return points

    def _hardware_shift(self) -> np.ndarray | None:
        """Per parameter, the log factor from the hardware's units to the testbed's (None on
        the testbed's hardware)."""
        hw = self.data.hardware
        if hw is None:
            return None
        shift = np.zeros(len(PER_MODEL))
        intra = hw.nvlink_scale if hw.nvlink_scale > 0 else hw.pcie_scale
        shift[PER_MODEL.index("compute_s")] = np.log(hw.speed)
        shift[PER_MODEL.index("nic_s")] = -np.log(hw.nic_scale)
        shift[PER_MODEL.index("pcie_s")] = -np.log(intra)
        shift[PER_MODEL.index("pcie_coupling")] = np.log(hw.nic_scale / hw.pcie_scale)  # copies per NIC work
        return shift

    def fit_from(self, x0: np.ndarray, cells: np.ndarray) -> tuple[float, np.ndarray]:
        """One least-squares run from ``x0``: (mean |ratio error| on ``cells``, parameters)."""
        sol = least_squares(
            self.residuals, x0, args=(cells,), method="trf", max_nfev=MAX_EVALUATIONS, ftol=1e-6, loss=LOSS, f_scale=LOSS_SCALE, jac_sparsity=self._sparsity(cells)
        )
        cost = float(np.abs(self.residuals(sol.x, cells)[len(self.data.keys):len(self.data.keys) + len(cells)]).mean())
        return cost, sol.x

    def fit(self, cells: np.ndarray, starts: int, seed: int) -> np.ndarray:
        """The best of ``starts`` seeded runs (the first one on a tie)."""
        return _best([self.fit_from(x0, cells) for x0 in self.start_points(starts, seed)])

    def to_catalog(self, x: np.ndarray, source: str) -> LinkCatalog:
        """The fitted values as a catalog, each within what a parameter file may hold (a value the
        measurements leave free can drift past it; clipped, it predicts the same cells)."""
        values, kappa, sens = self.unpack(x)
        models = self.data.models
        params = {
            m: LinkParams(**{name: _within(name, float(values[name][i])) for name in PER_MODEL}) for i, m in enumerate(models)
        }
        table = {v: {a: min(float(kappa[i, j]), MAX_KAPPA) for j, a in enumerate(models)} for i, v in enumerate(models)}
        sensitivity: dict[str, dict[str, float]] = {}
        for key, value in zip(self.data.keys, sens):
            sensitivity.setdefault(key.model, {})[placement_key(key.gpus, key.nodes)] = min(float(value), MAX_KAPPA)
        return LinkCatalog(params, table, source, sensitivity)


def _within(name: str, value: float) -> float:
    """``value`` of parameter ``name`` clipped to the bounds :class:`LinkParams` accepts."""
    if name in ("compute_s", "samples_per_gpu"):
        value = max(value, MIN_POSITIVE)
    return min(value, MAX_PARAMETER.get(name, value))


def nearest_cell_prediction(data: Dataset, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Reference: the mean ratio of the nearest training cells of the same model pair that shared
    the same kind of link (their nodes, or an uplink of the same share)."""
    lg, ln = np.log2(data.gpus), np.log2(data.nodes)
    v, a, km, share = data.victim, data.aggressor, data.key_model, data.shares
    fallback = float(data.ratio[train].mean())
    out = np.empty(len(test))
    for n, cell in enumerate(test):
        same = train[(km[v[train]] == km[v[cell]]) & (km[a[train]] == km[a[cell]]) & (share[train] == share[cell])]
        if len(same) == 0:
            out[n] = fallback
            continue
        dist = (
            np.abs(lg[v[same]] - lg[v[cell]]) + np.abs(ln[v[same]] - ln[v[cell]])
            + np.abs(lg[a[same]] - lg[a[cell]]) + np.abs(ln[a[same]] - ln[a[cell]])
        )
        out[n] = float(data.ratio[same[dist == dist.min()]].mean())
    return out


@dataclass(frozen=True)
class CalibrationResult:
    catalog: LinkCatalog
    fit_mae: float
    cv_mae: float
    baseline_mean_mae: float
    baseline_nearest_mae: float
    isolated_log_error: float
    """Mean |log(predicted / measured)| of isolated throughput."""
    cells: int
    folds: int
    per_pair_mae: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "fit_mae": self.fit_mae,
            "cv_mae": self.cv_mae,
            "baseline_mean_mae": self.baseline_mean_mae,
            "baseline_nearest_mae": self.baseline_nearest_mae,
            "isolated_log_error": self.isolated_log_error,
            "cells": self.cells,
            "folds": self.folds,
            "per_pair_mae": self.per_pair_mae,
        }


def _best(runs: list[tuple[float, np.ndarray]]) -> np.ndarray:
    """The parameters of the lowest-cost run, the earliest among equals (as :meth:`PairModel.fit`)."""
    best = runs[0]
    for run in runs[1:]:
        if run[0] < best[0]:
            best = run
    return best[1]


def _fit_start(job: tuple[Dataset, np.ndarray, np.ndarray]) -> tuple[float, np.ndarray]:
    """One seeded start of one fit (a top-level function so worker processes can run it)."""
    data, train, x0 = job
    return PairModel(data).fit_from(x0, train)


def _run_fits(
    model: PairModel, trains: list[np.ndarray], starts: int, seed: int, workers: int, step: Step | None,
) -> list[np.ndarray]:
    """Every fit's best parameters, each start a separate task so progress comes per start.

    Fit ``k`` draws its starts from seed ``seed + k`` exactly as :meth:`PairModel.fit` would,
    and keeps the same best, so the result depends on neither ``workers`` nor finishing order.
    """
    names = ["full fit", *(f"fold {k}/{len(trains) - 1}" for k in range(1, len(trains)))]
    tasks = [(k, i, (model.data, train, x0)) for k, train in enumerate(trains)
             for i, x0 in enumerate(model.start_points(starts, seed + k))]
    runs: dict[tuple[int, int], tuple[float, np.ndarray]] = {}
    left = [starts] * len(trains)

    def finished(k: int, i: int, run: tuple[float, np.ndarray]) -> None:
        runs[(k, i)] = run
        left[k] -= 1
        if step is not None:
            step(FitProgress(len(runs), len(tasks), names[k], left[k] == 0))

    if workers > 1:
        with worker_pool(workers) as pool:  # its workers stop with an interrupted caller
            futures = {pool.submit(_fit_start, job): (k, i) for k, i, job in tasks}
            for future in as_completed(futures):
                finished(*futures[future], future.result())
    else:
        for k, i, job in tasks:
            finished(k, i, _fit_start(job))
    return [_best([runs[(k, i)] for i in range(starts)]) for k in range(len(trains))]


def calibrate(
    catalog: Catalog | Samples,
    *,
    folds: int = 5,
    starts: int = 3,
    seed: int = 0,
    workers: int = 1,
    progress: Progress | None = None,
    step: Step | None = None,
) -> CalibrationResult:
    """Fit on every measured cell, then cross-validate over cells in ``folds`` folds.

    ``catalog``: profiles, or samples (:func:`~deepshare.core.contention.link.samples.read_samples`)
    whose cells of jobs that shared an uplink are fitted too.

    Every seeded start of every fit runs on ``workers`` processes; each fit's seed is fixed, so
    the result does not depend on the number of workers. ``progress`` gets one line up front,
    ``step`` a :class:`FitProgress` after every start.
    """
    if folds < 2:
        raise DeepShareError(f"folds must be at least 2, got {folds}")
    if starts < 1:
        raise DeepShareError(f"starts must be at least 1, got {starts}")
    data = (Dataset.from_catalog(catalog.catalog, catalog.uplinks, catalog.hardware, testbed=False)
            if isinstance(catalog, Samples)
            else Dataset.from_catalog(catalog))
    if len(data.ratio) < folds:  # a fold without a test cell (or, with one cell, without a training one)
        raise DeepShareError(f"{folds}-fold cross-validation needs at least {folds} measured cells (pairs of jobs that "
                             f"shared nodes or an uplink); these profiles have {len(data.ratio)}: measure more pairs"
                             + (f", or ask for fewer folds (--folds {len(data.ratio)})" if len(data.ratio) >= 2 else ""))
    model = PairModel(data)
    everything = np.arange(len(data.ratio))
    say = progress or (lambda _msg: None)
    order = np.random.default_rng(seed).permutation(len(everything))
    tests = np.array_split(order, folds)
    trains = [np.setdiff1d(everything, test) for test in tests]
    say(
        f"fitting {model.size} parameters to {len(data.keys)} isolated throughputs and {len(everything)} ratios, "
        f"then {folds} cross-validation folds ({starts} start(s) each, {workers} worker(s))"
    )
    x, *fold_params = _run_fits(model, [everything, *trains], starts, seed, workers, step)
    throughput, fitted = model.predict(x)
    errors = np.abs(fitted - data.ratio)
    cv_err, mean_err, near_err = [], [], []
    for train, test, params in zip(trains, tests, fold_params):
        _, predicted = model.predict(params)
        cv_err.append(np.abs(predicted[test] - data.ratio[test]))
        mean_err.append(np.abs(data.ratio[train].mean() - data.ratio[test]))
        near_err.append(np.abs(nearest_cell_prediction(data, train, test) - data.ratio[test]))
    per_pair: dict[str, dict[str, float]] = {}
    km = data.key_model
    for i, victim in enumerate(data.models):
        for j, aggressor in enumerate(data.models):
            cells = (km[data.victim] == i) & (km[data.aggressor] == j)
            if cells.any():
                per_pair.setdefault(victim, {})[aggressor] = float(errors[cells].mean())
    return CalibrationResult(
        catalog=model.to_catalog(x, f"deepshare calibrate (seed {seed}, {starts} starts)"),
        fit_mae=float(errors.mean()),
        cv_mae=float(np.concatenate(cv_err).mean()),
        baseline_mean_mae=float(np.concatenate(mean_err).mean()),
        baseline_nearest_mae=float(np.concatenate(near_err).mean()),
        isolated_log_error=float(np.abs(np.log(throughput / data.isolated)).mean()),
        cells=len(everything),
        folds=folds,
        per_pair_mae=per_pair,
    )
