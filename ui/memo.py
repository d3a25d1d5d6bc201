"""Core results kept across reruns: the same inputs give the same plan, traffic run and pools.

The core's functions are pure, the traffic run is seeded, and a kernel profile is read once by
its id (mla_core.serving.tables), so a result can be kept for the reruns that do not change its
inputs: the Serving plan page's sidebar context and batch (which its workload overrides), a
slide's toggle, another page and back. The search is about a fifth of that page's server time
and a traffic run takes seconds (benchmarks/served.py).

Plain functools caches in an imported module, shared by the sessions as ui.models' presets are:
a page script is executed anew on every rerun, so a cache defined in it would start empty each
time, and a Streamlit cache would hash the model spec and copy the plan on every hit. Keys: the
model and GPU specs (frozen dataclasses, hashable) and the keyword arguments, sorted into a
tuple of (name, value) pairs here (every value hashable). A result is shared: the pages read it
and never change it. MLAError is raised as the core raises it, and is not kept.

    plan(model, gpu, search_kw) -> mla_core.serving.Plan              serving.search(**search_kw)
    traffic(model, gpu, search_kw, **kw) -> views.TrafficView         views.traffic_view of plan()
    pools(model, gpu, search_kw, **kw) -> views.DisaggView            views.disagg_view of plan()
    clear()                                                           forget every kept result
"""
from __future__ import annotations

import functools

from mla_core.serving import search
from mla_core.views import disagg_view, traffic_view


def _key(kw: dict) -> tuple:
    return tuple(sorted(kw.items()))


def plan(model, gpu, search_kw: dict):
    return _plan(model, gpu, _key(search_kw))


def traffic(model, gpu, search_kw: dict, **traffic_kw):
    return _traffic(model, gpu, _key(search_kw), _key(traffic_kw))


def pools(model, gpu, search_kw: dict, **pools_kw):
    return _pools(model, gpu, _key(search_kw), _key(pools_kw))


def clear() -> None:
    for cached in (_plan, _traffic, _pools):
        cached.cache_clear()


@functools.lru_cache(maxsize=16)
def _plan(model, gpu, search_key: tuple):
    return search(model, gpu, **dict(search_key))


@functools.lru_cache(maxsize=8)
def _traffic(model, gpu, search_key: tuple, traffic_key: tuple):
    return traffic_view(model, gpu, _plan(model, gpu, search_key), **dict(traffic_key))


@functools.lru_cache(maxsize=8)
def _pools(model, gpu, search_key: tuple, pools_key: tuple):
    return disagg_view(model, gpu, _plan(model, gpu, search_key), **dict(pools_key))
