"""A small Qwen3 decoder (the target) with the exact Hugging Face Qwen3ForCausalLM maths and
parameter names, plus what the recipe needs beyond HF: a position-addressed KV cache for
batched speculative verification and residual-stream taps for the drafter.

Maths (== transformers Qwen3): RMSNorm in fp32 then * weight; per-head q_norm/k_norm before
neox (rotate-half) RoPE; GQA; SwiGLU MLP; tied embeddings (lm_head = embed_tokens).
Taps follow the output-of-layer convention: tap i is the residual stream after decoder layer i
(HF hidden_states[i + 1]); -1 is the embedding output.
"""
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TargetConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 10
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rope_cos_sin(pos, head_dim, theta, dtype):
    """pos [..., n] integer positions -> cos, sin [..., n, head_dim] (HF default rope)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.int64).float() / head_dim))
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    """x [B, H, n, hd]; cos/sin [B, n, hd]."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        d = cfg.hidden_size
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def q(self, h, cos, sin):
        B, n, _ = h.shape
        q = self.q_norm(self.q_proj(h).view(B, n, self.nh, self.hd)).transpose(1, 2)
        return apply_rope(q, cos, sin)

    def kv(self, h, cos, sin):
        B, n, _ = h.shape
        k = self.k_norm(self.k_proj(h).view(B, n, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(h).view(B, n, self.nkv, self.hd).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def attend(self, q, k, v, mask=None, causal=False):
        """q [B,H,n,hd], k/v [B,Hkv,T,hd]; mask [B,1,n,T] bool (True = visible) or causal."""
        rep = self.nh // self.nkv
        if q.dtype != k.dtype:
            k, v = k.to(q.dtype), v.to(q.dtype)
        B, _, n, _ = q.shape
        if mask is not None and rep > 1:
            # GQA without copying K/V: the rep query heads of a KV head become extra query rows
            qg = q.reshape(B, self.nkv, rep * n, self.hd)
            m = mask.repeat(1, 1, rep, 1)
            o = F.scaled_dot_product_attention(qg, k, v, attn_mask=m).reshape(B, self.nh, n, self.hd)
        else:
            k, v = repeat_kv(k, rep), repeat_kv(v, rep)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        return self.o_proj(o.transpose(1, 2).reshape(B, n, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class _Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3(nn.Module):
    """state_dict names == HF Qwen3ForCausalLM with tied embeddings (no lm_head.weight)."""

    def __init__(self, cfg: TargetConfig):
        super().__init__()
        assert cfg.tie_word_embeddings
        self.cfg = cfg
        self.model = _Inner(cfg)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def embed_weight(self):
        return self.model.embed_tokens.weight

    def logits(self, h):
        return F.linear(h, self.embed_weight)

    def forward(self, ids, taps=(), pos=None):
        """Full causal forward. Returns (final normed hidden [B,T,d], taps [B,T,m*d] or None)."""
        B, T = ids.shape
        x = self.model.embed_tokens(ids)
        if pos is None:
            pos = torch.arange(T, device=ids.device).unsqueeze(0).expand(B, T)
        cos, sin = rope_cos_sin(pos, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        tapped = {}
        if -1 in taps:
            tapped[-1] = x
        for i, layer in enumerate(self.model.layers):
            h = layer.input_layernorm(x)
            a = layer.self_attn
            k, v = a.kv(h, cos, sin)
            x = x + a.attend(a.q(h, cos, sin), k, v, causal=True)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if i in taps:
                tapped[i] = x
        h = self.model.norm(x)
        t = torch.cat([tapped[i] for i in taps], dim=-1) if taps else None
        return h, t

    # ---- cached, position-addressed forward (speculative verify / decode) ----
    def new_cache(self, B, T, device, dtype=torch.float32):
        c = self.cfg
        shape = (c.num_hidden_layers, B, c.num_key_value_heads, T, c.head_dim)
        return {"k": torch.zeros(shape, device=device, dtype=dtype), "v": torch.zeros(shape, device=device, dtype=dtype)}

    def forward_cached(self, ids, pos, cache, taps=(), kv_len=None):
        """ids/pos [B, n]. Writes this call's K/V at cache positions `pos` (per row), then every
        query at position p attends to cached keys at positions <= p. Stale entries beyond a row's
        committed prefix are harmless: they are overwritten before any query can see them.
        Returns (final normed hidden [B,n,d], taps [B,n,m*d] or None)."""
        B, n = ids.shape
        kv_len = kv_len or int(pos.max().item()) + 1  # callers that know max(pos) + 1 pass it (no sync)
        x = self.model.embed_tokens(ids).to(cache["k"].dtype)
        cos, sin = rope_cos_sin(pos, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        keypos = torch.arange(kv_len, device=ids.device)
        mask = (keypos.view(1, 1, 1, -1) <= pos.view(B, 1, n, 1))
        idx = pos.view(B, 1, n, 1).expand(B, self.cfg.num_key_value_heads, n, self.cfg.head_dim)
        tapped = {}
        if -1 in taps:
            tapped[-1] = x
        for i, layer in enumerate(self.model.layers):
            h = layer.input_layernorm(x)
            a = layer.self_attn
            k, v = a.kv(h, cos, sin)
            ck, cv = cache["k"][i], cache["v"][i]
            ck.scatter_(2, idx, k.to(ck.dtype))
            cv.scatter_(2, idx, v.to(cv.dtype))
            x = x + a.attend(a.q(h, cos, sin), ck[:, :, :kv_len], cv[:, :, :kv_len], mask=mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if i in taps:
                tapped[i] = x
        h = self.model.norm(x)
        t = torch.cat([tapped[i] for i in taps], dim=-1) if taps else None
        return h, t


def spread_taps(num_layers, m):
    """m tap ids spread over [1, L-2] (output-of-layer convention; the last layer is forbidden)."""
    if num_layers < 3:
        return list(range(max(0, num_layers - 1)))[:m] or [-1]
    lo, hi = 1, num_layers - 2
    m = min(m, hi - lo + 1)
    if m == 1:
        return [hi]
    ids = sorted({round(lo + (hi - lo) * j / (m - 1)) for j in range(m)})
    return ids
