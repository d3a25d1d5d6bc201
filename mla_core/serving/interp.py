"""Log-space interpolation between measured kernel shapes: the one place a kernel table is read
between its points (docs/model.md, "Estimated step time").

A `Grid` holds latencies measured on the product of sorted axis values (M x N x K for a GEMM,
batch x context for decode attention, bytes for a collective); cells that were not measured
are NaN. A query inside the grid whose 2^d surrounding cells were all measured is interpolated
multilinearly in (log axis, log latency): kernel latencies are close to power laws in their
shape between the floor and the roofline, so log-log is where they are straight. Anything
else is never extrapolated silently: the answer is the nearest measured point with `outside`
set (the query clamped into the measured box when the cells there were measured, else the
nearest measured cell in log space), and the caller scales it by the roofline ratio of the two
shapes and says so in a note (tables.py).

Pure numpy; a query costs a few microseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Hit:
    """A grid's answer: `value` at the query (interpolated) or at `point` (the nearest measured
    shape, a tuple of axis values) when `outside` is True."""

    value: float
    outside: bool
    point: tuple[float, ...] | None = None


class Grid:
    """Latencies on a product of axes. `axes` a tuple of 1-D increasing arrays (all values > 0);
    `values` an array of shape (len(a) for a in axes), NaN where not measured. Raises
    ValueError for an empty grid or non-positive axis values."""

    def __init__(self, axes, values):
        self.axes = tuple(np.asarray(a, dtype=float) for a in axes)
        self.values = np.asarray(values, dtype=float)
        if self.values.shape != tuple(len(a) for a in self.axes):
            raise ValueError("grid values do not match its axes")
        if any((a <= 0).any() for a in self.axes):
            raise ValueError("grid axes must be positive (log space)")
        measured = ~np.isnan(self.values) & (self.values > 0)
        if not measured.any():
            raise ValueError("a grid needs at least one measured cell")
        self._log_axes = tuple(np.log(a) for a in self.axes)
        self._log_values = np.where(measured, np.log(np.where(measured, self.values, 1.0)), np.nan)
        idx = np.argwhere(measured)
        self._points = idx
        self._log_points = np.stack([self._log_axes[d][idx[:, d]] for d in range(len(self.axes))], axis=1)
        # Axis spans normalise the nearest-point distance, so no axis dominates by its units.
        self._span = np.array([max(la[-1] - la[0], 1e-9) for la in self._log_axes])

    @classmethod
    def from_points(cls, points, values) -> Grid:
        """A grid from scattered measurements: `points` a sequence of equal-length tuples of axis
        values, `values` their latencies (duplicates keep the smallest: the fastest kernel)."""
        pts = np.asarray(points, dtype=float)
        if pts.ndim == 1:
            pts = pts[:, None]
        vals = np.asarray(values, dtype=float)
        axes = [np.unique(pts[:, d]) for d in range(pts.shape[1])]
        grid = np.full(tuple(len(a) for a in axes), np.nan)
        index = tuple(np.searchsorted(axes[d], pts[:, d]) for d in range(pts.shape[1]))
        order = np.argsort(-vals)  # write the largest first so the smallest of duplicates stays
        for i in order:
            grid[tuple(ix[i] for ix in index)] = vals[i]
        return cls(axes, grid)

    def __call__(self, *query: float) -> Hit:
        if len(query) != len(self.axes):
            raise ValueError(f"grid of {len(self.axes)} axes queried with {len(query)} values")
        if all(x > 0 for x in query):
            lq = [math.log(x) for x in query]
            inside = all(la[0] - 1e-12 <= lx <= la[-1] + 1e-12 for lx, la in zip(lq, self._log_axes))
            if inside:
                v = self._interpolate(lq)
                if v is not None:
                    return Hit(v, False)
            else:
                # the nearest point of the measured box: clamp each axis into its range
                clamped = [min(max(lx, la[0]), la[-1]) for lx, la in zip(lq, self._log_axes)]
                v = self._interpolate(clamped)
                if v is not None:
                    point = tuple(float(a[0]) if lx < la[0] else float(a[-1]) if lx > la[-1] else float(x)
                                  for x, lx, a, la in zip(query, lq, self.axes, self._log_axes))
                    return Hit(v, True, point)
        return self._nearest(query)

    def _interpolate(self, lq: list[float]) -> float | None:
        """exp of the multilinear interpolation of log latency at log point `lq` (inside the
        axes), or None when a cell it needs was not measured."""
        lo_idx, weights = [], []
        for lx, la in zip(lq, self._log_axes):
            n = len(la)
            if n == 1:
                if abs(lx - la[0]) > 1e-9:
                    return None
                lo_idx.append(0)
                weights.append(0.0)
                continue
            i = int(np.searchsorted(la, lx, side="right")) - 1
            i = min(max(i, 0), n - 2)
            w = (lx - la[i]) / (la[i + 1] - la[i])
            lo_idx.append(i)
            weights.append(min(max(w, 0.0), 1.0))
        total = 0.0
        d = len(lq)
        for corner in range(1 << d):
            w = 1.0
            cell = []
            for k in range(d):
                up = (corner >> k) & 1
                wk = weights[k] if up else 1.0 - weights[k]
                if wk == 0.0:
                    w = 0.0
                    break
                w *= wk
                cell.append(lo_idx[k] + up)
            if w == 0.0:
                continue
            v = self._log_values[tuple(cell)]
            if np.isnan(v):
                return None
            total += w * v
        return math.exp(total)

    def _nearest(self, query) -> Hit:
        lq = np.array([math.log(x) if x > 0 else -50.0 for x in query])
        dist = (((self._log_points - lq) / self._span) ** 2).sum(axis=1)
        j = int(np.argmin(dist))
        cell = tuple(self._points[j])
        point = tuple(float(self.axes[d][cell[d]]) for d in range(len(self.axes)))
        return Hit(float(self.values[cell]), True, point)
