"""A reduced model in torch, timed on this device: the check that composing a step from the
kernel table (`bench --profile`) predicts what the step itself takes (issue 18, section 3).

`reduced_spec(model)` keeps two or three of the model's own decoder layers, one of each kind it
has (mixer: MLA, GQA, sliding, or a recurrent Mamba-2 / Gated DeltaNet / KDA layer; block: MoE with
routed and shared experts, dense MLP, or none), at the model's own widths. On a CPU the routed
experts are cut to fit memory (their per-expert shape and top-k kept), and the input embedding and
lm_head are left out by default (with 2-3 layers the vocabulary GEMM would be most of the step);
both are said in `notes`. The result is a ModelSpec like any other, so that the estimate composed
for it reads the same fields a full model has.

`ReducedModel(spec)` holds real weights at random values (std 1/sqrt(fan-in)) and runs, per layer,
exactly the ops `bench --profile` measures, through the same functions (`mla_core.bench.kernels`):
    mixer    MLA   RMSNorm; q_proj (or q_a_proj, RMSNorm, q_b_proj); kv_a_proj_with_mqa; RMSNorm of
                   the latent; RoPE of q_pe and k_pe; the cache write; decode: mla_absorbed
                   (W_UK / W_UV absorbed); prefill: kv_b_proj at m = tokens, the K assembly,
                   mla_mha attention per sequence; o_proj; the residual add
             GQA / sliding   RMSNorm; qkv_proj; RoPE of q and k; the cache write (a sliding layer:
                   a ring of `window` slots); attention (decode: SDPA over the cache; prefill: causal,
                   per sequence); o_proj; the residual add
             Mamba-2   RMSNorm; in_proj (z, xBC, dt); conv + scan (`kernels.recurrent_mix`);
                   gated RMSNorm (y silu(z)); out_proj; the residual add
             GDN   RMSNorm; in_proj_qkvz; in_proj_ba; conv + delta-rule scan; RMSNorm of y per head
                   times silu(z); out_proj; the residual add
             KDA   RMSNorm; q_proj, k_proj, v_proj; f_a_proj, f_b_proj (the forget gate per channel);
                   b_proj (beta); conv + delta-rule scan; g_a_proj, g_b_proj (the output gate);
                   RMSNorm of y per head times sigmoid(gate); o_proj; the residual add
    block    MoE   RMSNorm; gate (the router GEMM); the routed experts (`kernels.moe_routed`); the
                   shared expert's gate_up, SiLU x up, down (Qwen: times sigmoid(shared_expert_gate));
                   the residual add
             MLP   RMSNorm; gate_up_proj; SiLU x up; down_proj; the residual add
The run is one GPU of TP 1 (no collectives). A decode step of B sequences at context T writes the
new token's K/V at position T - 1 and attends over T tokens; a prefill chunk of B sequences x P new
tokens (no prefix) runs the GEMMs over B P rows and attention per sequence.

With `trace=[]`, every op appends (family, shape) as the profile's rows key it (`trace_estimate`
sums the table's latencies over that list: the composition the table itself implies, a check of
the table, not of a composer).

`reduced_check(...)` profiles the reduced model, times it at several batches and contexts, and
compares with an `estimate(model, profile_table, phase, batch, context) -> seconds` callable:
rows {model, layers, phase, batch, context, measured_s, estimate_s, error}, median |error| and the
worst point. The issue's goal once wired: median |error| <= 10%, every point within 25%.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

import torch
import torch.nn.functional as F

from . import device as _dev
from . import kernels as _k
from . import timing as _timing
from .errors import BenchError
from .profile_plan import DTYPE_BYTES, attention_dims, attention_heads, recurrent_dims, shared_expert_width

RECURRENT_SUPPORTED = ("mamba2", "gdn", "kda")
EXPERT_BYTES_CPU = 1 << 30  # one reduced MoE layer's routed experts on a CPU, at most
DEFAULT_POINTS = {"decode": ((1, 512), (4, 512), (16, 512), (1, 2048), (4, 2048), (16, 2048)),
                  "prefill": ((1, 64), (1, 256), (2, 64), (2, 256))}


# ---------------------------------------------------------------------------------------------
# The reduced spec.

def _block_kind(model, i: int) -> str:
    moe = model.moe
    if moe is not None and i < len(moe.moe_layers) and moe.moe_layers[i]:
        return "moe"
    has_mlp = model.mlp_layers[i] if model.mlp_layers is not None else True
    return "dense" if (has_mlp and model.intermediate_size) else "none"


def _mixer_kind(model, layer) -> str:
    if layer.recurrent:
        return model.recurrent.kind
    if not any(c.attends for c in layer.caches):
        return "none"
    if model.is_mla:
        return "mla_absorbed"
    return "sliding" if layer.window else "gqa"


def layer_kinds(model) -> list[str]:
    """Per decoder layer of `model`, "<mixer>+<block>" (e.g. "mla_absorbed+moe", "gdn+moe",
    "gqa+none", "none+dense")."""
    return [f"{_mixer_kind(model, layer)}+{_block_kind(model, i)}"
            for i, layer in enumerate(layer for layer in model.layers if not layer.draft)]


def reduced_spec(model, *, max_layers: int = 3, expert_bytes: int | None = EXPERT_BYTES_CPU, dtype: str = "fp32",
                 lm_head: bool = False) -> tuple:
    """(ModelSpec, notes): the first decoder layer of each kind "<mixer>+<block>" of `model`, at
    most `max_layers` (attention, recurrent and MoE kinds first), its own widths; routed experts
    cut by halves until one layer's fit `expert_bytes` at `dtype` (None: never cut; top-k kept);
    `lm_head` False drops the embedding and lm_head (vocab_size None). Raises BenchError for a
    recurrent kind the reduced model does not run (it runs Mamba-2, GDN and KDA)."""
    layers = [layer for layer in model.layers if not layer.draft]
    kinds = layer_kinds(model)
    first: dict[str, int] = {}
    for i, kind in enumerate(kinds):
        first.setdefault(kind, i)

    def rank(kind: str) -> tuple:
        mixer, block = kind.split("+")
        return (mixer == "none", block != "moe", block == "none", first[kind])

    chosen = sorted(sorted(first, key=rank)[:max_layers], key=first.__getitem__)
    idx = [first[k] for k in chosen]
    rec = model.recurrent
    if rec is not None and any(layers[i].recurrent for i in idx) and rec.kind not in RECURRENT_SUPPORTED:
        raise BenchError(f"the reduced model runs {', '.join(RECURRENT_SUPPORTED)} recurrent layers, not "
                         f"{rec.label} ({model.name})")
    notes = [f"{len(idx)} of {model.name}'s {len(layers)} decoder layers, one of each kind: {', '.join(chosen)} "
             f"(layers {', '.join(str(i) for i in idx)})"]
    moe = model.moe
    new_moe = None
    if moe is not None:
        flags = tuple(bool(i < len(moe.moe_layers) and moe.moe_layers[i]) for i in idx)
        e = moe.n_routed_experts
        per = 3 * model.hidden_size * moe.moe_intermediate_size * DTYPE_BYTES[dtype]
        if any(flags) and expert_bytes is not None:
            while e > 2 * moe.num_experts_per_tok and e * per > expert_bytes and e % 2 == 0:
                e //= 2
            if e != moe.n_routed_experts:
                notes.append(f"routed experts cut from {moe.n_routed_experts} to {e} a layer to fit "
                             f"{expert_bytes / 2**20:,.0f} MiB at {dtype} ({moe.n_routed_experts * per / 2**30:,.2f} GiB "
                             f"in full); each expert's shape and top-{moe.num_experts_per_tok} kept")
        new_moe = replace(moe, moe_layers=flags, n_routed_experts=e, zero_experts=0)
    mlp = None if model.mlp_layers is None else tuple(model.mlp_layers[i] for i in idx)
    if not lm_head:
        notes.append("no embedding or lm_head (vocab_size None): the step is the layers")
    spec = replace(model, name=f"{model.name} reduced", num_hidden_layers=len(idx),
                   layers=tuple(layers[i] for i in idx), moe=new_moe, mlp_layers=mlp,
                   vocab_size=model.vocab_size if lm_head else None, num_nextn_predict_layers=0, indexer=None,
                   extra_dense_mlps=0)
    return spec, notes


# ---------------------------------------------------------------------------------------------
# The torch model.

class ReducedModel:
    """The layers of a (reduced) ModelSpec in torch on one device, TP 1. `decode_state(B, T)`
    makes the caches and recurrent states; `decode_step(x, state)` runs one token per sequence
    (x [B, hidden]); `prefill(x, batch)` a chunk of `batch` sequences (x [batch * P, hidden]).
    Both return the hidden states after the last layer (and the final norm / lm_head when the
    spec has a vocabulary). Raises BenchError for a layer kind it does not run."""

    def __init__(self, spec, *, device: str = "cpu", dtype: str = "fp32", seed: int = 0, trace: list | None = None):
        kind = _dev.resolve_kind(device)
        self.spec, self.dev = spec, _dev.make_device(kind).torch_device
        self.dtype = dtype
        self.t = _dev.TORCH_DTYPES[dtype]
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(seed)
        self.trace = trace
        self.kinds = layer_kinds(spec)
        self.layers = [self._make_layer(i, k) for i, k in enumerate(self.kinds)]
        h = spec.hidden_size
        self.final_norm = torch.ones(h, dtype=self.t, device=self.dev)
        self.lm_head = self._w(spec.vocab_size, h) if spec.vocab_size else None

    # -- weights ---------------------------------------------------------------------------
    def _w(self, n: int, k: int) -> torch.Tensor:
        return torch.randn(n, k, dtype=self.t, device=self.dev, generator=self.gen).mul_(k ** -0.5)

    def _ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, dtype=self.t, device=self.dev)

    def _make_layer(self, i: int, kind: str) -> dict:
        spec, h = self.spec, self.spec.hidden_size
        mixer, block = kind.split("+")
        layer = {"mixer": mixer, "block": block, "norm1": self._ones(h), "norm2": self._ones(h)}
        a = spec.attention
        if mixer == "mla_absorbed":
            heads, _ = attention_heads(spec, 1)
            c, r, dn, dv = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
            if a.q_lora_rank:
                layer.update(q_a=self._w(a.q_lora_rank, h), q_a_norm=self._ones(a.q_lora_rank),
                             q_b=self._w(heads * (dn + r), a.q_lora_rank))
            else:
                layer["q"] = self._w(heads * (dn + r), h)
            layer.update(kv_a=self._w(c + r, h), kv_a_norm=self._ones(c), kv_b=self._w(heads * (dn + dv), c),
                         o=self._w(h, heads * dv))
            kv_b = layer["kv_b"].view(heads, dn + dv, c)
            layer["w_uk"], layer["w_uv"] = kv_b[:, :dn].contiguous(), kv_b[:, dn:].contiguous()
            layer["window"] = spec.layers[i].window
        elif mixer in ("gqa", "sliding"):
            heads, kv_heads = attention_heads(spec, 1)
            d = a.head_dim
            layer.update(qkv=self._w((heads + 2 * kv_heads) * d, h), o=self._w(h, heads * d),
                         window=spec.layers[i].window if mixer == "sliding" else None)
        elif mixer in RECURRENT_SUPPORTED:
            from .profile_plan import recurrent_projections

            dims = recurrent_dims(spec, 1)
            layer["dims"] = dims
            layer["rec"] = _k.recurrent_weights(dims, self.t, self.dev, self.gen)
            for name, n, k in recurrent_projections(spec, 1):
                for part in name.split("/"):  # KDA: q, k and v (and the two gates' halves) share a shape
                    layer[part] = self._w(n, k)
            layer["gnorm"] = self._ones(dims["heads"] * dims["head_dim"] if mixer == "mamba2" else dims["head_dim"])
        elif mixer != "none":
            raise BenchError(f"the reduced model does not run {mixer} layers")
        if block == "moe":
            moe = spec.moe
            e, inter = moe.n_routed_experts, moe.moe_intermediate_size
            layer["gate"] = self._w(e, h)
            layer["experts_gate_up"] = torch.randn(e, 2 * inter, h, dtype=self.t, device=self.dev,
                                                   generator=self.gen).mul_(h ** -0.5)
            layer["experts_down"] = torch.randn(e, h, inter, dtype=self.t, device=self.dev,
                                                generator=self.gen).mul_(inter ** -0.5)
            s = shared_expert_width(spec)
            if s:
                layer.update(shared_gate_up=self._w(2 * s, h), shared_down=self._w(h, s))
            if moe.shared_expert_gate:
                layer["shared_expert_gate"] = self._w(1, h)
        elif block == "dense":
            inter = spec.intermediate_size
            layer.update(gate_up=self._w(2 * inter, h), down=self._w(h, inter))
        return layer

    # -- the traced ops --------------------------------------------------------------------
    def _log(self, family: str, **key) -> None:
        if self.trace is not None:
            self.trace.append((family, key))

    def _gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        self._log("gemm", m=x.shape[0], n=w.shape[0], k=w.shape[1], dtype=self.dtype)
        return F.linear(x, w)

    def _ew(self, x: torch.Tensor) -> None:
        self._log("elementwise", bytes=x.numel() * x.element_size())

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        self._ew(x)
        return _k.rms_norm(x, w)

    def _add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self._ew(x)
        return x + y

    def _rope(self, x: torch.Tensor, rope: dict) -> torch.Tensor:
        """RoPE of x [rows, (heads,) d] at the rows' positions (cos / sin made with the state)."""
        self._ew(x)
        cos, sin = rope[x.shape[-1] // 2]
        if x.dim() == 3:
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _k.apply_rope(x, cos, sin)

    def _rope_tables(self, pos: torch.Tensor) -> dict:
        """{half width: (cos, sin) [rows, half]} at positions `pos` for every RoPE width the model
        has (rope_theta 10,000): engines keep such a table, so it is made outside the timed step."""
        a = self.spec.attention
        halves = {(a.qk_rope_head_dim if a.is_mla else a.head_dim) // 2}
        out = {}
        for half in halves:
            inv = 10000.0 ** (-torch.arange(half, device=self.dev, dtype=torch.float64) / half)
            freqs = pos.to(torch.float64).unsqueeze(-1) * inv
            out[half] = (freqs.cos().to(self.t), freqs.sin().to(self.t))
        return out

    # -- decode ----------------------------------------------------------------------------
    def decode_state(self, batch: int, context: int) -> dict:
        """Per layer: the K/V (or latent) cache of `context` tokens (random, as if prefilled), or
        the recurrent state and conv state (random); plus the positions of the new tokens."""
        out = {"batch": batch, "context": context, "layers": [],
               "rope": self._rope_tables(torch.full((batch,), context - 1, device=self.dev))}
        a = self.spec.attention
        for layer in self.layers:
            m = layer["mixer"]
            st = {}
            if m == "mla_absorbed":
                t = min(context, layer["window"]) if layer["window"] else context
                st["kv"] = self._rand(batch, t, a.kv_lora_rank)
                st["pe"] = self._rand(batch, t, a.qk_rope_head_dim)
            elif m in ("gqa", "sliding"):
                _, g = attention_heads(self.spec, 1)
                t = min(context, layer["window"]) if layer["window"] else context
                st["k"] = self._rand(batch, g, t, a.head_dim)
                st["v"] = self._rand(batch, g, t, a.head_dim)
            elif m in RECURRENT_SUPPORTED:
                state, conv = _k.recurrent_state(layer["dims"], batch, self.t, self.dev)
                state.normal_(generator=self.gen)
                if conv is not None:
                    conv.normal_(generator=self.gen)
                st.update(state=state, conv=conv)
            st["context"] = context
            out["layers"].append(st)
        return out

    def _rand(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, dtype=self.t, device=self.dev, generator=self.gen)

    def decode_step(self, x: torch.Tensor, state: dict) -> torch.Tensor:
        """One decode step: x [B, hidden] -> [B, hidden] (or [B, vocab] with an lm_head)."""
        pos = state["rope"]
        for layer, st in zip(self.layers, state["layers"]):
            m = layer["mixer"]
            if m == "mla_absorbed":
                x = self._mla_decode(layer, st, x, pos)
            elif m in ("gqa", "sliding"):
                x = self._gqa_decode(layer, st, x, pos)
            elif m in RECURRENT_SUPPORTED:
                x = self._recurrent(layer, x, 1, st["state"], st["conv"])
            x = self._block(layer, x)
        return self._head(x)

    def _q_mla(self, layer: dict, hn: torch.Tensor) -> torch.Tensor:
        if "q_a" in layer:
            return self._gemm(self._norm(self._gemm(hn, layer["q_a"]), layer["q_a_norm"]), layer["q_b"])
        return self._gemm(hn, layer["q"])

    def _mla_decode(self, layer, st, x, pos):
        a = self.spec.attention
        c, r, dn, dv = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        b = x.shape[0]
        hn = self._norm(x, layer["norm1"])
        q = self._q_mla(layer, hn).view(b, 1, -1, dn + r)
        heads = q.shape[2]
        q_nope, q_pe = q.split((dn, r), dim=-1)
        kva = self._gemm(hn, layer["kv_a"])
        lat, k_pe = kva.split((c, r), dim=-1)
        lat = self._norm(lat, layer["kv_a_norm"])
        q_pe = self._rope(q_pe.reshape(b, heads, r), pos).view(b, 1, heads, r)
        k_pe = self._rope(k_pe, pos)
        slot = (st["kv"].shape[1] - 1)
        self._ew(lat)
        st["kv"][:, slot] = lat
        st["pe"][:, slot] = k_pe
        t = st["kv"].shape[1]
        hd, _ = attention_heads(self.spec, 1)
        self._log("attention_decode", kind="mla_absorbed", batch=b, context=t, num_heads=hd, num_kv_heads=1,
                  k_dim=c + r, v_dim=c, kv_dtype=self.dtype)
        o = _k.mla_absorbed_decode(q_nope, q_pe, st["kv"], st["pe"], layer["w_uk"], layer["w_uv"], (dn + r) ** -0.5)
        o = self._gemm(o.reshape(b, heads * dv), layer["o"])
        return self._add(x, o)

    def _gqa_decode(self, layer, st, x, pos):
        a = self.spec.attention
        d = a.head_dim
        heads, g = attention_heads(self.spec, 1)
        b = x.shape[0]
        hn = self._norm(x, layer["norm1"])
        qkv = self._gemm(hn, layer["qkv"])
        q, k, v = qkv.split((heads * d, g * d, g * d), dim=-1)
        q = self._rope(q.reshape(b, heads, d), pos)
        k = self._rope(k.reshape(b, g, d), pos)
        t = st["k"].shape[2]
        slot = (st["context"] - 1) % t
        self._ew(k)
        st["k"][:, :, slot] = k
        st["v"][:, :, slot] = v.reshape(b, g, d)
        kind = "sliding" if layer["window"] else "gqa"
        self._log("attention_decode", kind=kind, batch=b, context=t, num_heads=heads, num_kv_heads=g, k_dim=d,
                  v_dim=d, kv_dtype=self.dtype)
        o = _sdpa(lambda: _k.sdpa_decode(q, st["k"], st["v"]), self.dev)
        o = self._gemm(o.reshape(b, heads * d), layer["o"])
        return self._add(x, o)

    def _recurrent(self, layer, x, tokens: int, state, conv):
        """A Mamba-2, GDN or KDA mixer over x [B * tokens, hidden] (B sequences of `tokens`)."""
        dims = layer["dims"]
        h, p, g, n = dims["heads"], dims["head_dim"], dims["groups"], dims["state"]
        b = x.shape[0] // tokens
        hn = self._norm(x, layer["norm1"])
        if layer["mixer"] == "mamba2":
            zxbcdt = self._gemm(hn, layer["in_proj"])
            z, mix, dt = zxbcdt.split((h * p, h * p + 2 * g * n, h), dim=-1)
            gates = dt
        elif layer["mixer"] == "kda":  # Kimi-Linear: q, k, v; a low-rank forget gate per channel; beta
            parts = [self._gemm(hn, layer[name]) for name in ("q_proj", "k_proj", "v_proj")]
            self._ew(parts[0])
            mix = torch.cat(parts, dim=-1)
            fg = self._gemm(self._gemm(hn, layer["f_a_proj"]), layer["f_b_proj"])
            beta = self._gemm(hn, layer["b_proj"])
            self._ew(fg)
            gates = torch.cat((fg, beta), dim=-1)
            z = self._gemm(self._gemm(hn, layer["g_a_proj"]), layer["g_b_proj"])  # the output gate
        else:
            qkvz = self._gemm(hn, layer["in_proj_qkvz"])
            mix, z = qkvz.split((2 * g * n + h * p, h * p), dim=-1)
            gates = self._gemm(hn, layer["in_proj_ba"])
        self._log("recurrent", kind=dims["kind"], batch=b, tokens=tokens, state_elements=self.spec.recurrent.elements(1))
        y = _k.recurrent_mix(dims, mix.reshape(b, tokens, -1), gates.reshape(b, tokens, -1), layer["rec"], state,
                             conv if tokens == 1 else None)
        y = y.reshape(b * tokens, h * p)
        zs = torch.sigmoid(z) if layer["mixer"] == "kda" else F.silu(z)
        self._ew(z)
        if layer["mixer"] == "mamba2":
            self._ew(y)
            y = self._norm(y * zs, layer["gnorm"])
        else:
            y = self._norm(y.view(-1, h, p), layer["gnorm"]).view(b * tokens, h * p)
            self._ew(y)
            y = y * zs
        return self._add(x, self._gemm(y, layer["o_proj" if layer["mixer"] == "kda" else "out_proj"]))

    def _block(self, layer, x):
        block = layer["block"]
        if block == "none":
            return x
        hn = self._norm(x, layer["norm2"])
        if block == "dense":
            gu = self._gemm(hn, layer["gate_up"])
            self._ew(gu)
            return self._add(x, self._gemm(_k.silu_mul(gu), layer["down"]))
        moe = self.spec.moe
        logits = self._gemm(hn, layer["gate"])
        e, inter = layer["experts_gate_up"].shape[0], layer["experts_down"].shape[2]
        self._log("moe", tokens=hn.shape[0], hidden=hn.shape[1], inter=inter, topk=moe.num_experts_per_tok,
                  num_experts=e, experts_local=e, dtype=self.dtype)
        y = _k.moe_routed(hn, logits, layer["experts_gate_up"], layer["experts_down"], moe.num_experts_per_tok)
        if "shared_gate_up" in layer:
            gu = self._gemm(hn, layer["shared_gate_up"])
            self._ew(gu)
            s = self._gemm(_k.silu_mul(gu), layer["shared_down"])
            if "shared_expert_gate" in layer:
                self._ew(s)
                s = s * torch.sigmoid(self._gemm(hn, layer["shared_expert_gate"]))
            self._ew(y)
            y = y + s
        return self._add(x, y)

    def _head(self, x):
        if self.lm_head is None:
            return x
        return self._gemm(self._norm(x, self.final_norm), self.lm_head)

    # -- prefill ---------------------------------------------------------------------------
    def prefill_state(self, batch: int, tokens: int) -> dict:
        """What a prefill chunk of `batch` x `tokens` starts from: per layer the recurrent state
        (zeros) or None, and the RoPE tables of positions 0..tokens - 1."""
        out = []
        for layer in self.layers:
            if layer["mixer"] in RECURRENT_SUPPORTED:
                state, _ = _k.recurrent_state(layer["dims"], batch, self.t, self.dev)
                out.append(state)
            else:
                out.append(None)
        pos = torch.arange(tokens, device=self.dev).repeat(batch)
        return {"layers": out, "rope": self._rope_tables(pos)}

    def prefill(self, x: torch.Tensor, batch: int, state: dict | None = None) -> torch.Tensor:
        """A prefill chunk: `batch` sequences of P = rows / batch new tokens each, no prefix.
        x [batch * P, hidden] -> [batch * P, hidden]."""
        tokens = x.shape[0] // batch
        state = state if state is not None else self.prefill_state(batch, tokens)
        pos = state["rope"]
        for layer, st in zip(self.layers, state["layers"]):
            m = layer["mixer"]
            if m == "mla_absorbed":
                x = self._mla_prefill(layer, x, batch, tokens, pos)
            elif m in ("gqa", "sliding"):
                x = self._gqa_prefill(layer, x, batch, tokens, pos)
            elif m in RECURRENT_SUPPORTED:
                x = self._recurrent(layer, x, tokens, st, None)
            x = self._block(layer, x)
        if self.lm_head is not None:  # logits of each sequence's last token only (as engines do)
            return self._head(x.view(batch, tokens, -1)[:, -1])
        return x

    def _mla_prefill(self, layer, x, batch, tokens, pos):
        a = self.spec.attention
        c, r, dn, dv = a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        rows = x.shape[0]
        hn = self._norm(x, layer["norm1"])
        q = self._q_mla(layer, hn).view(rows, -1, dn + r)
        heads = q.shape[1]
        q_nope, q_pe = q.split((dn, r), dim=-1)
        kva = self._gemm(hn, layer["kv_a"])
        lat, k_pe = kva.split((c, r), dim=-1)
        lat = self._norm(lat, layer["kv_a_norm"])
        q_pe = self._rope(q_pe, pos)
        k_pe = self._rope(k_pe, pos)
        kv = self._gemm(lat, layer["kv_b"]).view(rows, heads, dn + dv)
        k_nope, v = kv.split((dn, dv), dim=-1)
        self._ew(q)
        qf = torch.cat((q_nope, q_pe), dim=-1)
        self._ew(kv)
        kf = torch.cat((k_nope, k_pe.unsqueeze(1).expand(rows, heads, r)), dim=-1)
        window = layer["window"]
        outs = []
        for s in range(batch):
            sl = slice(s * tokens, (s + 1) * tokens)
            qs, ks, vs = (t[sl].transpose(0, 1).unsqueeze(0) for t in (qf, kf, v))
            self._log("attention_prefill", kind="mla_mha", tokens=tokens, prefix=0, num_heads=heads,
                      num_kv_heads=heads, k_dim=dn + r, v_dim=dv, window=window, dtype=self.dtype)
            outs.append(_sdpa(lambda: _k.sdpa_prefill(qs, ks, vs, window), self.dev)[0].transpose(0, 1))
        o = torch.cat(outs).reshape(rows, heads * dv)
        return self._add(x, self._gemm(o, layer["o"]))

    def _gqa_prefill(self, layer, x, batch, tokens, pos):
        a = self.spec.attention
        d = a.head_dim
        heads, g = attention_heads(self.spec, 1)
        rows = x.shape[0]
        hn = self._norm(x, layer["norm1"])
        qkv = self._gemm(hn, layer["qkv"])
        q, k, v = qkv.split((heads * d, g * d, g * d), dim=-1)
        q = self._rope(q.reshape(rows, heads, d), pos)
        k = self._rope(k.reshape(rows, g, d), pos)
        v = v.reshape(rows, g, d)
        window = layer["window"]
        kind = "sliding" if window else "gqa"
        outs = []
        for s in range(batch):
            sl = slice(s * tokens, (s + 1) * tokens)
            qs, ks, vs = (t[sl].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            self._log("attention_prefill", kind=kind, tokens=tokens, prefix=0, num_heads=heads, num_kv_heads=g,
                      k_dim=d, v_dim=d, window=window, dtype=self.dtype)
            outs.append(_sdpa(lambda: _k.sdpa_prefill(qs, ks, vs, window), self.dev)[0].transpose(0, 1))
        o = torch.cat(outs).reshape(rows, heads * d)
        return self._add(x, self._gemm(o, layer["o"]))


def _sdpa(fn, dev):
    """SDPA on the fused backends where they take the shape, else the math backend: the choice
    `bench --profile` makes for the same call (`profile._timed_sdpa`)."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if dev.type in ("cuda", "cpu"):
            try:
                with sdpa_kernel(_k.fused_sdpa_backends()):
                    return fn()
            except RuntimeError as e:
                if "no available kernel" not in str(e).lower():
                    raise
            with sdpa_kernel([SDPBackend.MATH]):
                return fn()
        return fn()


# ---------------------------------------------------------------------------------------------
# Timing and the comparison.

REDUCED_TIMING = {"cpu": dict(warmup=1, reps=10, min_reps=3, budget_s=0.5),
                  "gpu": dict(warmup=5, reps=50, min_reps=10, budget_s=0.5)}


def profile_grids(points: dict) -> dict:
    """The `bench --profile` grids that hold every shape the reduced model asks for at `points`
    ({"decode": [(batch, context)], "prefill": [(batch, tokens)]}): GEMM / MoE m = each decode
    batch and prefill batch x tokens; attention over the decode batches x contexts and the
    prefill tokens (prefix 0); recurrent scans of 1 and of the prefill tokens."""
    dec, pre = points.get("decode", ()), points.get("prefill", ())
    m = sorted({b for b, _ in dec} | {b * t for b, t in pre})
    batches = sorted({b for b, _ in dec} | {b for b, _ in pre})
    return {"m": tuple(m), "batches": tuple(batches), "contexts": tuple(sorted({t for _, t in dec})),
            "prefill_tokens": tuple(sorted({t for _, t in pre})), "prefixes": (0,),
            "recurrent_tokens": tuple(sorted({1} | {t for _, t in pre}))}


def time_reduced(spec, points: dict | None = None, *, device: str = "cpu", dtype: str = "fp32",
                 threads: int | None = None, timing: dict | None = None, seed: int = 0, progress=None,
                 statistic: str = "median", model: "ReducedModel | None" = None) -> list[dict]:
    """Time the reduced model's decode step and prefill chunk at `points` (default
    DEFAULT_POINTS; `model`: a ReducedModel of `spec` already built on `device`): rows {model, layers, phase, batch, context, measured_s, median_s, min_s,
    reps}, measured_s the median or, with statistic="min", the best of the repetitions (the
    statistic the profile it is compared with used). `context` of a prefill row is the tokens of
    each sequence's chunk."""
    from .profile import cpu_threads

    points = DEFAULT_POINTS if points is None else points
    kind = _dev.resolve_kind(device)
    settings = dict(REDUCED_TIMING["cpu" if kind == "cpu" else "gpu"], **(timing or {}))
    clock = _timing.make_clock(kind)
    rows = []
    from .profile import make_flush

    flush = make_flush(_dev.make_device(kind))
    todo = [("decode", b, t) for b, t in points.get("decode", ())] + [("prefill", b, t) for b, t in points.get("prefill", ())]
    with cpu_threads(threads), torch.no_grad():
        model = model if model is not None else ReducedModel(spec, device=device, dtype=dtype, seed=seed)
        for i, (phase, b, t) in enumerate(todo):
            if progress is not None:
                progress(i, len(todo), f"reduced {phase} B={b} T={t}")
            x = model._rand(b if phase == "decode" else b * t, spec.hidden_size)
            if phase == "decode":
                st = model.decode_state(b, t)
                fn = lambda: model.decode_step(x, st)  # noqa: E731
            else:
                st = model.prefill_state(b, t)
                fn = lambda: model.prefill(x, b, st)  # noqa: E731
            tm = _timing.measure(fn, clock, flush=flush, **settings)
            rows.append({"model": spec.name, "layers": list(model.kinds), "phase": phase, "batch": b, "context": t,
                         "measured_s": tm.median_s if statistic == "median" else tm.min_s, "median_s": tm.median_s,
                         "min_s": tm.min_s, "reps": len(tm.times_s)})
            del x, fn
        _dev.empty_cache(_dev.make_device(kind))
    return rows


def trace_ops(spec, phase: str, batch: int, context: int, *, dtype: str = "fp32") -> list[tuple[str, dict]]:
    """The ops the reduced model runs for one point, as (family, key) in the table's terms: runs
    it once, untimed (`spec` a ModelSpec: a model built on the CPU at `dtype`; or a ReducedModel,
    reused where it is)."""
    with torch.no_grad():
        model = spec if isinstance(spec, ReducedModel) else ReducedModel(spec, device="cpu", dtype=dtype)
        model.trace = trace = []
        try:
            x = model._rand(batch if phase == "decode" else batch * context, model.spec.hidden_size)
            if phase == "decode":
                model.decode_step(x, model.decode_state(batch, context))
            else:
                model.prefill(x, batch)
        finally:
            model.trace = None
    return trace


def lookup(table: dict, family: str, key: dict) -> float:
    """The table's latency for one op: the row with the same key; for a GEMM missing at its m, or
    an elementwise op at its bytes, interpolated in log-log between the nearest measured sizes of
    the same shape (below them: the smallest's latency; above: the largest's, scaled in
    proportion). Raises KeyError when the
    table holds no row of that shape."""
    rows = table["ops"][family]
    for r in rows:
        if all(r.get(k) == v for k, v in key.items()):
            return r["latency_s"]
    axis = {"gemm": "m", "elementwise": "bytes", "moe": "tokens"}.get(family)
    if axis is None:
        raise KeyError(f"no {family} row for {key}")
    same = sorted((r[axis], r["latency_s"]) for r in rows
                  if all(r.get(k) == v for k, v in key.items() if k != axis))
    if not same:
        raise KeyError(f"no {family} row of the shape {key}")
    x = key[axis]
    lo = [p for p in same if p[0] <= x]
    hi = [p for p in same if p[0] >= x]
    if lo and hi:
        (x0, y0), (x1, y1) = lo[-1], hi[0]
        if x0 == x1:
            return y0
        f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    if hi:  # below the smallest measured size: as fast as that (overhead-bound), not faster
        return hi[0][1]
    x0, y0 = lo[-1]
    return y0 * x / x0


def trace_estimate(spec, table: dict, phase: str, batch: int, context: int) -> float:
    """Seconds: the table's latencies summed over the reduced model's own op trace (`trace_ops`,
    `lookup`). What the table implies for this exact op list, with no overlap and no overhead."""
    return sum(lookup(table, family, key) for family, key in trace_ops(spec, phase, batch, context,
                                                                         dtype=_table_dtype(table)))


def _table_dtype(table: dict) -> str:
    for rows in table["ops"].values():
        for r in rows:
            if "dtype" in r:
                return r["dtype"]
    return "fp32"


def compare(rows: list[dict], estimate, model, table: dict) -> dict:
    """Each measured row beside `estimate(model, table, phase, batch, context)` (seconds):
    {"rows": [... estimate_s, error (estimate / measured - 1)], "median_abs_error", "worst"
    (the row of the largest |error|), "within_10pct_median", "all_within_25pct"}."""
    out = []
    for r in rows:
        est = float(estimate(model, table, r["phase"], r["batch"], r["context"]))
        out.append({**r, "estimate_s": est, "error": est / r["measured_s"] - 1.0})
    errs = [abs(r["error"]) for r in out]
    worst = max(out, key=lambda r: abs(r["error"])) if out else None
    med = statistics.median(errs) if errs else None
    return {"rows": out, "median_abs_error": med, "worst": worst,
            "within_10pct_median": med is not None and med <= 0.10,
            "all_within_25pct": bool(out) and max(errs) <= 0.25}


def reduced_check(model, *, points: dict | None = None, estimate=None, device: str = "cpu", dtype: str = "auto",
                  threads: int | None = None, expert_bytes: int | None = EXPERT_BYTES_CPU, progress=None,
                  profile_timing: dict | None = None, statistic: str | None = None, rounds: int | None = None,
                  exact: bool = True) -> dict:
    """The whole check in one run: `reduced_spec(model)`, `bench --profile` of it on this device
    at the grids its points need (`profile_grids`; with `exact`, only the shapes the reduced
    model's own op trace asks for, and every elementwise size), the reduced model timed at
    `points`, and the comparison with `trace_estimate` (always) and with `estimate` when given
    (the step composer: `estimate(model, profile_table, phase, batch, context) -> seconds`).

    `statistic` (default: "min" on a CPU, "median" on a GPU) is used on both sides; `rounds`
    (default 3 on a CPU, 1 on a GPU) repeats profile and model in turn and keeps, per row and per
    point, the best (min) or the median of the rounds: on a CPU that other work shares, a busy
    spell then hits both sides alike instead of one.
    Returns {"model", "spec_notes", "statistic", "rounds", "profile" (the ProfileRun, merged),
    "rows", "traces" ({(phase, batch, context): the op trace}), "trace", "composer"}."""
    from .profile import run_profile

    points = DEFAULT_POINTS if points is None else points
    kind = _dev.resolve_kind(device)
    dt = _dev.resolve_dtype(kind, dtype)
    statistic = statistic or ("min" if kind == "cpu" else "median")
    rounds = rounds or (3 if kind == "cpu" else 1)
    spec, notes = reduced_spec(model if not isinstance(model, str) else _load(model), dtype=dt,
                               expert_bytes=expert_bytes if kind == "cpu" else None)
    from .profile import cpu_threads

    with cpu_threads(threads):
        model_t = ReducedModel(spec, device=device, dtype=dt)
        traces = {(phase, b, t): trace_ops(model_t, phase, b, t) for phase, pts in points.items() for b, t in pts}
    select = None
    if exact:
        wanted = {(fam, _freeze(key)) for trace in traces.values() for fam, key in trace}
        select = lambda fam, key: fam == "elementwise" or (fam, _freeze(key)) in wanted  # noqa: E731
    profiles, timed = [], []
    for _ in range(rounds):
        profiles.append(run_profile(spec, device=device, dtype=dt, grids=profile_grids(points), threads=threads,
                                    timing=profile_timing, statistic=statistic, select=select,
                                    families=("gemm", "attention_decode", "attention_prefill", "moe", "elementwise",
                                              "recurrent")))
        timed.append(time_reduced(spec, points, device=device, dtype=dt, threads=threads, progress=progress,
                                  statistic=statistic, model=model_t))
    prof = _merge_profiles(profiles, statistic)
    rows = _merge_rows(timed, statistic)
    out = {"model": spec.name, "spec_notes": notes, "statistic": statistic, "rounds": rounds, "profile": prof,
           "rows": rows, "traces": traces,
           "trace": compare(rows, lambda m, table, phase, b, t: sum(lookup(table, f, k) for f, k in traces[(phase, b, t)]),
                            spec, prof.table)}
    del model_t
    _dev.empty_cache(_dev.make_device(kind))
    out["composer"] = compare(rows, estimate, spec, prof.table) if estimate is not None else None
    return out


def _freeze(key: dict) -> tuple:
    return tuple(sorted(key.items()))


def _pick(values: list[float], statistic: str) -> float:
    return min(values) if statistic == "min" else statistic_median(values)


def statistic_median(values: list[float]) -> float:
    return statistics.median(values)


def _merge_profiles(runs: list, statistic: str):
    """One ProfileRun from several of the same plan: each row's latency the min (or median) over
    the runs; meta of the first, wall_s summed, `rounds` added."""
    from .profile import ProfileRun

    first = runs[0]
    ops = {}
    for family, rows in first.table["ops"].items():
        merged = []
        for row in rows:
            key = _freeze({k: v for k, v in row.items() if k != "latency_s"})
            vals = [r["latency_s"] for run in runs for r in run.table["ops"][family]
                    if _freeze({k: v for k, v in r.items() if k != "latency_s"}) == key]
            merged.append({**row, "latency_s": _pick(vals, statistic)})
        ops[family] = merged
    meta = dict(first.meta, wall_s=round(sum(r.meta["wall_s"] for r in runs), 3), rounds=len(runs))
    return ProfileRun(dict(first.table, ops=ops), meta)


def _merge_rows(rounds: list[list[dict]], statistic: str) -> list[dict]:
    out = []
    for i, row in enumerate(rounds[0]):
        vals = [r[i]["measured_s"] for r in rounds]
        out.append({**row, "measured_s": _pick(vals, statistic), "rounds": len(rounds),
                    "min_s": min(r[i]["min_s"] for r in rounds)})
    return out


def _load(name: str):
    from ..presets import load_model

    return load_model(name)
