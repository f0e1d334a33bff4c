"""Fit alpha-beta link models to ping-pong times, group rank pairs into link classes, write a profile.

``t(s) = alpha + s / bandwidth`` is fitted by least squares on the two ends of the size sweep: the
latency end (its two smallest sizes) fixes alpha and the bandwidth end (its two largest) fixes the
bandwidth, as a direct latency and a direct bandwidth measurement would. Real links are not one
straight line in between (shared memory is faster while a message fits in the caches, MPI switches
protocol at its eager limit), so a fit over every size would miss both the latency and the bandwidth;
the sizes in between are reported with their residuals, not fitted. The fit minimises *relative* residuals (each point weighted by 1/t, so a 1 KiB latency
counts as much as a 16 MiB transfer), keeps alpha and 1/bandwidth non-negative (NNLS) and down-weights
outliers (Tukey bisquare, iteratively re-weighted). Pairs are grouped by host (same node / other node)
or, within a node, by measured bandwidth; each class is fitted on all its pairs' points. The result is
a hardware profile in the schema :func:`autotaccl.model.hardware.profile_from_dict` reads.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from autotaccl.errors import InputError
from autotaccl.model.hardware import save_profile


class PoorFitError(ValueError):
    """The measurements do not follow alpha + size/bandwidth well enough to trust a profile."""


@dataclass(frozen=True)
class Fit:
    alpha_us: float
    bandwidth_GBps: float
    r2: float                  # on the relative residuals of the fitted (end) points
    sizes: tuple[int, ...]
    times_us: tuple[float, ...]
    fitted: tuple[bool, ...]   # per point: at one of the sweep's ends (fitted) or in between (reported only)
    rejected: int = 0          # fitted points the robust fit gave no weight (outliers)

    def predict(self, size: float) -> float:
        return self.alpha_us + size / (self.bandwidth_GBps * 1e3)

    @property
    def residuals(self) -> tuple[float, ...]:
        """(measured - fitted) / measured, per point."""
        return tuple((t - self.predict(s)) / t for s, t in zip(self.sizes, self.times_us))

    def worst_residual(self, fitted: bool = True) -> float:
        """The largest relative residual (by magnitude, signed) of the fitted points, or of the points
        between the ends (0 when there are none)."""
        return max((r for r, f in zip(self.residuals, self.fitted) if f == fitted), key=abs, default=0.0)


def end_points(sizes: np.ndarray) -> np.ndarray:
    """Which points have one of the two smallest or the two largest sizes of the sweep (the latency
    and the bandwidth end; every point when the sweep has at most four sizes)."""
    distinct = np.unique(sizes)
    return np.isin(sizes, np.concatenate([distinct[:2], distinct[-2:]]))


def _relative_nnls(s: np.ndarray, t: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """alpha, beta >= 0 minimising sum(weight * ((t - alpha - beta*s) / t)**2)."""
    root = np.sqrt(weight) / t
    coef, _ = nnls(np.column_stack([root, s * root]), t * root)
    return coef


def fit_alpha_beta(sizes: Sequence[int], times_us: Sequence[float], rounds: int = 30) -> Fit:
    """Robust relative least squares on the sweep's ends (:func:`end_points`): the smallest sizes fix
    alpha, the largest fix the bandwidth, and Tukey's bisquare re-weighting (scale from the median
    absolute residual) keeps one disturbed measurement from dragging the line. R² is taken on the
    relative residuals of the points the fit kept; a fit that had to reject more than a quarter of
    them reports R² over all of them (a poor fit is not hidden by discarding data)."""
    s_all = np.asarray(sizes, float)
    t_all = np.asarray(times_us, float)
    if len(s_all) < 2 or len(set(sizes)) < 2 or not np.all(t_all > 0):
        raise PoorFitError("need positive times at two or more distinct sizes")
    ends = end_points(s_all)
    s, t = s_all[ends], t_all[ends]
    weight = np.ones_like(t)
    alpha, beta = _relative_nnls(s, t, weight)
    for _ in range(rounds if len(t) > 3 else 0):
        r = (t - alpha - beta * s) / t
        scale = max(1.4826 * float(np.median(np.abs(r - np.median(r)))), 0.01)
        u = r / (4.685 * scale)
        new = np.where(np.abs(u) < 1, (1 - u ** 2) ** 2, 0.0)
        if np.allclose(new, weight, atol=1e-6):
            break
        weight = new
        alpha, beta = _relative_nnls(s, t, weight)
    if beta <= 0:
        raise PoorFitError("the times do not grow with the message size, so no bandwidth can be fitted")
    if s.max() * beta < alpha:
        raise PoorFitError(f"the largest size ({int(s.max())} bytes) is latency-bound (alpha {alpha:.2f} us, transfer "
                           f"{s.max() * beta:.2f} us), so the bandwidth is not measured: extend --sizes upwards")
    if s.min() * beta > alpha:
        raise PoorFitError(f"the smallest size ({int(s.min())} bytes) is bandwidth-bound (alpha {alpha:.2f} us, transfer "
                           f"{s.min() * beta:.2f} us), so the latency is not measured: start --sizes lower")
    kept = weight if np.count_nonzero(weight) >= 0.75 * len(t) else np.ones_like(t)
    rel = (t - alpha - beta * s) / t
    w = kept / t ** 2
    mean = np.sum(w * t) / np.sum(w)
    total = np.sum(kept * ((t - mean) / t) ** 2)
    r2 = 1.0 - np.sum(kept * rel ** 2) / total if total > 0 else 0.0
    bandwidth = 1.0 / beta / 1e3
    return Fit(float(alpha), float(bandwidth), float(r2), tuple(int(x) for x in sizes), tuple(float(x) for x in t_all),
               tuple(bool(e) for e in ends), int(np.count_nonzero(weight == 0)))


@dataclass(frozen=True)
class LinkClass:
    name: str
    pairs: tuple[tuple[int, int], ...]
    fit: Fit


@dataclass(frozen=True)
class Measured:
    hosts: tuple[str, ...]
    gpus_per_node: int
    pair_fits: dict
    classes: tuple[LinkClass, ...]
    intra: dict              # (local a, local b) -> class name, from node 0
    nic_class: str | None


def node_layout(hosts: Sequence[str]) -> int:
    """Ranks per node, checking that every host holds one contiguous, equally sized block of ranks."""
    blocks: list[list[int]] = []
    for rank, host in enumerate(hosts):
        if not blocks or hosts[blocks[-1][0]] != host:
            blocks.append([])
        blocks[-1].append(rank)
    size = len(blocks[0])
    names = [hosts[b[0]] for b in blocks]
    if len(set(names)) != len(names) or any(len(b) != size for b in blocks):
        raise InputError("ranks", "placement", "the same number of ranks on every host, each host's ranks "
                         "consecutive (e.g. mpiexec -ppn G, or srun --distribution=block)")
    return size


def group_pairs(hosts: Sequence[str], fits: dict, by: str = "host", ratio: float = 1.5) -> dict:
    """Pair -> class name: ``intra``/``net`` by host, or within a node ``link0`` (fastest), ``link1``, ...
    whenever the measured bandwidth drops by more than ``ratio``; pairs across nodes are ``net``."""
    classes = {}
    intra = sorted((p for p in fits if hosts[p[0]] == hosts[p[1]]), key=lambda p: -fits[p].bandwidth_GBps)
    for p in fits:
        if hosts[p[0]] != hosts[p[1]]:
            classes[p] = "net"
    if by == "host":
        classes.update((p, "intra") for p in intra)
    elif by == "speed":
        level, previous = 0, None
        for p in intra:
            bw = fits[p].bandwidth_GBps
            if previous is not None and previous / bw > ratio:
                level += 1
            classes[p] = f"link{level}"
            previous = bw
    else:
        raise InputError("--group", repr(by), "host or speed")
    return classes


def analyse(result: dict, by: str = "host", min_r2: float = 0.9) -> Measured:
    """Fits per pair and per class; raises PoorFitError when a class fits worse than ``min_r2``."""
    hosts = tuple(result["hosts"])
    gpn = node_layout(hosts)
    fits = {(p["a"], p["b"]): fit_alpha_beta(p["sizes"], p["times_us"]) for p in result["pairs"]}
    names = group_pairs(hosts, fits, by)
    classes = []
    for name in sorted(set(names.values()), key=lambda n: (n == "net", n)):
        pairs = tuple(sorted(p for p, n in names.items() if n == name))
        sizes = [s for p in pairs for s in fits[p].sizes]
        times = [t for p in pairs for t in fits[p].times_us]
        fit = fit_alpha_beta(sizes, times)
        classes.append(LinkClass(name, pairs, fit))
        if fit.r2 < min_r2:
            raise PoorFitError(f"link class {name} (pairs {' '.join(f'{a}-{b}' for a, b in pairs)}) fits "
                               f"alpha + size/bandwidth at the sweep's ends with R² {fit.r2:.3f} < {min_r2:g} (worst "
                               f"residual {100 * fit.worst_residual():+.0f}%): the measurements are too noisy or not "
                               f"linear; rerun with more --iters on a quieter machine, or lower --min-r2")
    intra = {(a % gpn, b % gpn): names[(a, b)] for (a, b) in fits if a < gpn and b < gpn}
    return Measured(hosts, gpn, fits, tuple(classes), intra, "net" if "net" in names.values() else None)


def profile_dict(m: Measured, name: str) -> dict:
    """The measured profile in the hardware-profile schema."""
    nodes = len(m.hosts) // m.gpus_per_node
    data = {"name": name,
            "description": f"measured by autotaccl profile (MPI ping-pong) on {nodes} node(s) x {m.gpus_per_node} "
                           f"rank(s): {', '.join(sorted(set(m.hosts)))}",
            "gpus_per_node": m.gpus_per_node,
            "link_classes": {c.name: {"alpha_us": round(c.fit.alpha_us, 4),
                                      "bandwidth_GBps": round(c.fit.bandwidth_GBps, 4)} for c in m.classes}}
    if m.intra:
        kinds = set(m.intra.values())
        if len(kinds) == 1 and len(m.intra) == m.gpus_per_node * (m.gpus_per_node - 1) // 2:
            data["links"] = {"class": kinds.pop(), "pattern": "fully-connected"}
        else:
            first = sorted(m.intra.items())[0][1]
            data["links"] = {"class": first, "pairs": [[a, b, 1, c] for (a, b), c in sorted(m.intra.items())]}
    if m.nic_class:
        data["nics"] = [{"class": m.nic_class, "gpus": list(range(m.gpus_per_node))}]
    return data


def report(m: Measured) -> str:
    """Per pair and per class: alpha, bandwidth, R²; per class and size: measured vs fitted, residual."""
    lines = ["# pair    alpha_us  bandwidth_GBps      R²  worst residual (ends / between)"]
    for (a, b), f in sorted(m.pair_fits.items()):
        lines.append(f"  {a:>2d}-{b:<2d}  {f.alpha_us:9.3f}  {f.bandwidth_GBps:14.3f}  {f.r2:6.3f}  "
                     f"{100 * f.worst_residual():+7.1f}% / {100 * f.worst_residual(False):+.1f}%")
    for c in m.classes:
        f = c.fit
        lines.append(f"# class {c.name}: alpha {f.alpha_us:.3f} us, bandwidth {f.bandwidth_GBps:.3f} GB/s, "
                     f"R² {f.r2:.4f} (relative residuals at the sweep's ends), {len(c.pairs)} pair(s), "
                     f"{f.rejected} outlier point(s) ignored")
        lines.append("#       size   measured_us     fitted_us  residual   (* between the ends: reported, not fitted)")
        ends = dict(zip(f.sizes, f.fitted))
        for size in sorted(ends):
            measured = [t for s, t in zip(f.sizes, f.times_us) if s == size]
            mean = sum(measured) / len(measured)
            lines.append(f"  {size:10d}  {mean:12.3f}  {f.predict(size):12.3f}  {100 * (mean - f.predict(size)) / mean:+7.1f}%"
                         f"{'' if ends[size] else '  *'}")
    return "\n".join(lines)


def write_profile(m: Measured, path: str | Path, name: str, how: str) -> None:
    """Write the profile YAML atomically, with a comment header saying it was measured, when and how;
    it is loaded back with :func:`load_hardware` before it replaces ``path``."""
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [f"# Measured by `autotaccl profile` on {when}.", f"# How: {how}",
              "# Model: one-way time = alpha + bytes / bandwidth, robust least squares on relative residuals at the "
              "sweep's ends (alpha from the smallest sizes, bandwidth from the largest)."]
    for c in m.classes:
        header.append(f"# {c.name}: pairs {' '.join(f'{a}-{b}' for a, b in c.pairs)}; R² {c.fit.r2:.4f}; worst "
                      f"residual {100 * c.fit.worst_residual():+.1f}% at the ends, "
                      f"{100 * c.fit.worst_residual(False):+.1f}% between them")
    if m.nic_class:
        header.append("# The network class is one NIC per node shared by all its ranks (ping-pong measured one pair at a time).")
    save_profile(profile_dict(m, name), path, header)
