"""The KV page's layer map: what each layer of a model holds for one sequence (bytes, ints).

Built from `mla_core.kv.layer_groups` (the same groups the `kv` command's JSON `layers` lists)
and `kv.all_full_attention_bytes`; no formula of its own (docs/model.md, "Every layer its own
cache"). A module of its own so that the command line, which never draws a map, does not build
its classes at start-up.
"""
from __future__ import annotations

from dataclasses import dataclass

from .kv import all_full_attention_bytes, layer_groups
from .results import Result
from .spec import ModelSpec


@dataclass(frozen=True)
class LayerCell(Result):
    """One layer of the KV page's layer map: what it holds for one sequence at the context."""

    index: int  # 0-based; draft layers follow the decoder layers
    kind: str  # as `LayerGroup.kind`
    label: str
    draft: bool
    tokens_held: int
    kv_bytes: int
    state_bytes: int
    bytes: int  # kv + state
    index_bytes: int = 0  # the sparse-attention index keys among kv_bytes


@dataclass(frozen=True)
class LayerMap(Result):
    """Everything the layer map draws: one cell per layer, its legend, and the totals for one
    sequence (bytes, ints)."""

    context: int
    cells: tuple[LayerCell, ...]
    kv_bytes_per_sequence: int
    state_bytes_per_sequence: int
    cache_bytes_per_sequence: int
    all_full_attention_bytes_per_sequence: int
    is_hybrid: bool

    @property
    def legend(self) -> tuple[tuple[str, str], ...]:
        """Each distinct (kind, label) in layer order: a kind whose layers differ (DeepSeek-V4's
        compressed layers at three compression rates) has an entry per label."""
        return tuple(dict.fromkeys((c.kind, c.label) for c in self.cells))

    @property
    def uniform(self) -> bool:
        """Every layer holds the same (one kind, label and size): the map says nothing more."""
        return len({(c.kind, c.label, c.draft, c.bytes) for c in self.cells}) == 1


def layer_map(model: ModelSpec, context: int, kv_dtype: str = "auto", cache_layout: str = "latent", *,
              state_dtype: str = "auto", block_size: int | None = None, ssm_state_dtype: str = "auto") -> LayerMap:
    """The model's layers one by one at `context` tokens (one sequence), for the layer map, with
    what the same model would hold with every layer full attention of its attention shape.
    Raises MLAError on bad inputs."""
    groups = layer_groups(model, context, kv_dtype, cache_layout, state_dtype=state_dtype, block_size=block_size,
                          ssm_state_dtype=ssm_state_dtype)
    cells = sorted((LayerCell(i, g.kind, g.label, g.draft, g.tokens_held, g.kv_bytes_per_layer,
                              g.state_bytes_per_layer, g.bytes_per_layer, g.index_bytes_per_layer)
                    for g in groups for i in g.layer_indices), key=lambda c: c.index)
    kv = sum(c.kv_bytes for c in cells)
    state = sum(c.state_bytes for c in cells)
    full = all_full_attention_bytes(model, context, kv_dtype, cache_layout, block_size=block_size)
    return LayerMap(context, tuple(cells), kv, state, kv + state, full, model.is_hybrid)
