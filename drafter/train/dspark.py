"""DSpark drafter (and its DFlash-style ablation) in PyTorch: the model, the training loss and the
inference primitives the reference loop (specloop.py) uses. Golden reference for flint's C drafter.

Layout and maths follow docs/research/dspark.md sections 1-3 and 6 (DeepSpec Qwen3DSparkModel):
- context: ctx = hidden_norm(fc(concat(taps))), taps = target residual stream after the layers in
  target_layer_ids; per draft layer K = RoPE(k_norm(Wk ctx)), V = Wv ctx at the context positions
  (no input_layernorm on ctx rows).
- block (anchor-first): ids [x0, MASK * (B-1)] at positions P..P+B-1, P = position of the anchor x0;
  slot j predicts the token at P+j+1. Queries see context positions < P and every slot of their own
  block (non-causal inside the block); blocks never see each other.
- layer: x += o(attn(q_norm(Wq ln_in(x)), [ctx K; block K], [ctx V; block V])); x += mlp(ln_post(x)).
  Block keys use the same k_proj/k_norm as context keys.
- head: hfin = norm(x); U = lm_head(hfin) (frozen copy of the target's tied embedding).
- Markov (vanilla): L_k = U_k + W2 W1[prev_k], prev_0 = anchor, prev_k = token of slot k-1.
- confidence: c_k = sigmoid(w . [hfin_k ; W1[prev_k]] + b).
- loss (DSpark): 0.1 CE + 0.9 L1(softmax L, softmax target) + 1.0 BCE(c, 1 - L1/2), each a mean
  weighted by exp(-k/4) over supervised slots; DFlash arm: CE only, no Markov, no confidence.
"""
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .qwen3 import MLP, Attention, RMSNorm, rope_cos_sin


@dataclass
class DSparkConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int  # draft layers
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    mask_token_id: int
    target_layer_ids: list = field(default_factory=list)
    num_target_layers: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    block_size: int = 7
    markov_rank: int = 0  # 0 = no Markov head (DFlash arm)
    markov_head_type: str = "vanilla"
    enable_confidence_head: bool = False
    confidence_head_with_markov: bool = True
    num_anchors: int = 512

    def to_dict(self):
        return asdict(self)


class DraftLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MarkovHead(nn.Module):
    def __init__(self, vocab, rank):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)  # prev token (target id) -> r
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)  # r -> V, stored [V, r]

    def forward(self, prev):
        return self.markov_w2(self.markov_w1(prev))


class ConfidenceHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 1)

    def forward(self, feats):
        return self.proj(feats).squeeze(-1)


class DSpark(nn.Module):
    def __init__(self, cfg: DSparkConfig, embed_weight=None):
        super().__init__()
        self.cfg = cfg
        d, V = cfg.hidden_size, cfg.vocab_size
        self.embed_tokens = nn.Embedding(V, d)
        self.layers = nn.ModuleList([DraftLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(d, cfg.rms_norm_eps)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, V, bias=False)
        self.markov_head = MarkovHead(V, cfg.markov_rank) if cfg.markov_rank > 0 else None
        self.confidence_head = None
        if cfg.enable_confidence_head:
            with_m = cfg.confidence_head_with_markov and self.markov_head is not None
            self.confidence_head = ConfidenceHead(d + (cfg.markov_rank if with_m else 0))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        if embed_weight is not None:
            self.set_shared_embedding(embed_weight)

    def set_shared_embedding(self, w):
        """Frozen copies of the target's (tied) embedding and LM head."""
        with torch.no_grad():
            self.embed_tokens.weight.copy_(w)
            self.lm_head.weight.copy_(w)
        self.embed_tokens.weight.requires_grad_(False)
        self.lm_head.weight.requires_grad_(False)

    # ---------------- shared pieces ----------------
    def _rope(self, pos, dtype):
        return rope_cos_sin(pos, self.cfg.head_dim, self.cfg.rope_theta, dtype)

    def context_kv(self, taps, pos):
        """taps [B,C,m*d], pos [B,C] -> per layer (K [B,Hkv,C,hd], V)."""
        ctx = self.hidden_norm(self.fc(taps))
        cos, sin = self._rope(pos, ctx.dtype)
        return [layer.self_attn.kv(ctx, cos, sin) for layer in self.layers]

    def backbone(self, block_ids, block_pos, ctx_kv, mask):
        """block_ids/pos [B,Q]; ctx_kv per layer (K,V) over Tc context rows; mask [B,1,Q,Tc+Q]
        (True = visible). Returns hfin [B,Q,d] (after the final norm)."""
        x = self.embed_tokens(block_ids)
        if ctx_kv and ctx_kv[0][0].dtype != x.dtype:
            x = x.to(ctx_kv[0][0].dtype)
        cos, sin = self._rope(block_pos, x.dtype)
        for layer, (ck, cv) in zip(self.layers, ctx_kv):
            h = layer.input_layernorm(x)
            a = layer.self_attn
            kb, vb = a.kv(h, cos, sin)
            k = torch.cat([ck.to(kb.dtype), kb], dim=2)
            v = torch.cat([cv.to(vb.dtype), vb], dim=2)
            x = x + a.attend(a.q(h, cos, sin), k, v, mask=mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)

    def packed_backbone(self, blk_ids, blk_pos, ctx_kv, ctx_vis, K):
        """Training form of backbone() for A blocks of K slots per row, without the dense mask:
        blk_ids/pos [B,A*K], ctx_vis [B,A*K,S] (context key visible to the query). Scores against
        the context and against the query's own block (K keys) share one softmax, so this equals
        backbone() with the DSpark mask exactly (up to rounding). Returns hfin [B,A*K,d]."""
        x = self.embed_tokens(blk_ids)
        if x.dtype != ctx_kv[0][0].dtype:
            x = x.to(ctx_kv[0][0].dtype)
        B, Q, _ = x.shape
        A = Q // K
        cos, sin = self._rope(blk_pos, x.dtype)
        neg = torch.finfo(torch.float32).min
        vis = ctx_vis.unsqueeze(1).unsqueeze(1)  # [B,1,1,Q,S]
        for layer, (ck, cv) in zip(self.layers, ctx_kv):
            h = layer.input_layernorm(x)
            a = layer.self_attn
            q = a.q(h, cos, sin)  # [B,H,Q,hd]
            kb, vb = a.kv(h, cos, sin)  # [B,G,Q,hd]
            G, R, hd = a.nkv, a.nh // a.nkv, a.hd
            qg = q.reshape(B, G, R, Q, hd)
            ck, cv, kb, vb = ck.to(q.dtype), cv.to(q.dtype), kb.to(q.dtype), vb.to(q.dtype)
            s_ctx = torch.einsum("bgrqd,bgsd->bgrqs", qg, ck).float()
            s_ctx = s_ctx.masked_fill(~vis, neg)
            s_blk = torch.einsum("bgrakd,bgajd->bgrakj", qg.reshape(B, G, R, A, K, hd), kb.reshape(B, G, A, K, hd))
            S = s_ctx.shape[-1]
            pr = (torch.cat([s_ctx, s_blk.float().reshape(B, G, R, Q, K)], dim=-1) * hd ** -0.5).softmax(-1).to(q.dtype)
            o = torch.einsum("bgrqs,bgsd->bgrqd", pr[..., :S], cv)
            o = o + torch.einsum("bgrakj,bgajd->bgrakd", pr[..., S:].reshape(B, G, R, A, K, K),
                                 vb.reshape(B, G, A, K, hd)).reshape(B, G, R, Q, hd)
            o = o.reshape(B, a.nh, Q, hd).transpose(1, 2).reshape(B, Q, a.nh * hd)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)

    def markov_logits(self, U, prev):
        """U [..., V] base logits, prev [...] previous token ids -> corrected logits."""
        if self.markov_head is None:
            return U
        return U + self.markov_head(prev).to(U.dtype)

    def confidence_logit(self, hfin, prev):
        if self.confidence_head is None:
            return None
        if self.markov_head is not None and self.cfg.confidence_head_with_markov:
            feats = torch.cat([hfin, self.markov_head.markov_w1(prev).to(hfin.dtype)], dim=-1)
        else:
            feats = hfin
        return self.confidence_head(feats).float()

    # ---------------- inference (batched, position-addressed context cache) ----------------
    def new_cache(self, B, T, device, dtype=torch.float32):
        c = self.cfg
        shape = (c.num_hidden_layers, B, c.num_key_value_heads, T, c.head_dim)
        return {"k": torch.zeros(shape, device=device, dtype=dtype), "v": torch.zeros(shape, device=device, dtype=dtype)}

    def write_context(self, cache, taps, pos):
        """Encode target taps of rows at positions pos [B,n] into the context cache."""
        kv = self.context_kv(taps.to(cache["k"].dtype), pos)
        B, n = pos.shape
        idx = pos.view(B, 1, n, 1).expand(B, self.cfg.num_key_value_heads, n, self.cfg.head_dim)
        for i, (k, v) in enumerate(kv):
            cache["k"][i].scatter_(2, idx, k.to(cache["k"].dtype))
            cache["v"][i].scatter_(2, idx, v.to(cache["v"].dtype))

    def draft_block(self, cache, anchor, P, n=None, Tc=None):
        """One backbone forward for the block [anchor, MASK*(n-1)] at positions P..P+n-1.
        Context = cached rows at positions < P (per row); Tc >= max(P) bounds the cache rows read
        (computed when not given). Returns U [B,n,V] and hfin [B,n,d]."""
        n = n or self.cfg.block_size
        B = anchor.shape[0]
        dev = anchor.device
        ids = torch.full((B, n), self.cfg.mask_token_id, dtype=torch.long, device=dev)
        ids[:, 0] = anchor
        pos = P.view(B, 1) + torch.arange(n, device=dev).view(1, n)
        Tc = max(Tc or int(P.max().item()), 1)
        keypos = torch.arange(Tc, device=dev)
        ctx_vis = (keypos.view(1, 1, 1, Tc) < P.view(B, 1, 1, 1)).expand(B, 1, n, Tc)
        mask = torch.cat([ctx_vis, torch.ones(B, 1, n, n, dtype=torch.bool, device=dev)], dim=-1)
        ctx_kv = [(cache["k"][i][:, :, :Tc], cache["v"][i][:, :, :Tc]) for i in range(self.cfg.num_hidden_layers)]
        hfin = self.backbone(ids, pos, ctx_kv, mask)
        return self.lm_head(hfin).float(), hfin

    # ---------------- training ----------------
    def train_blocks(self, ids, loss_mask, taps, gen, max_anchors=None):
        """Packed training forward: every valid anchor (token i and i+1 both in the response) of
        each row, up to max_anchors (random subset beyond, DeepSpec's sampler), one block each.
        Returns a dict with hfin [B,A,K,d], anchors/keep [B,A], labels/prev/slot_ok [B,A,K]."""
        cfg = self.cfg
        Bsz, S = ids.shape
        K = cfg.block_size
        dev = ids.device
        lm = loss_mask.bool()
        valid = torch.zeros_like(lm)
        valid[:, :-1] = lm[:, :-1] & lm[:, 1:]
        cnt = valid.sum(1)
        A = max(int(cnt.max().item()), 1)
        if max_anchors:
            A = min(A, max_anchors)
        r = torch.rand(Bsz, S, device=dev, generator=gen)
        r = torch.where(valid, r, torch.full_like(r, 2.0))
        anchors = r.argsort(dim=1)[:, :A].sort(dim=1).values
        keep = torch.arange(A, device=dev).view(1, A) < cnt.clamp(max=A).view(Bsz, 1)
        anchors = torch.where(keep, anchors, torch.zeros_like(anchors))

        j = torch.arange(K, device=dev)
        lab_idx = anchors.unsqueeze(-1) + 1 + j  # [B,A,K]
        safe = lab_idx.clamp(max=S - 1)
        labels = torch.gather(ids.unsqueeze(1).expand(Bsz, A, S), 2, safe)
        slot_ok = (lab_idx < S) & torch.gather(lm.unsqueeze(1).expand(Bsz, A, S), 2, safe) & keep.unsqueeze(-1)
        slot_ok = slot_ok.int().cumprod(-1).bool()
        anchor_tok = torch.gather(ids, 1, anchors)
        prev = torch.cat([anchor_tok.unsqueeze(-1), labels[:, :, :-1]], dim=-1)

        blk_ids = torch.full((Bsz, A, K), cfg.mask_token_id, dtype=torch.long, device=dev)
        blk_ids[:, :, 0] = anchor_tok
        blk_pos = anchors.unsqueeze(-1) + j
        Q = A * K
        ctx_pos = torch.arange(S, device=dev).view(1, S).expand(Bsz, S)
        ctx_kv = self.context_kv(taps, ctx_pos)
        qa = anchors.repeat_interleave(K, dim=1)  # anchor position of each query [B,Q]
        qk = keep.repeat_interleave(K, dim=1)
        m_ctx = (torch.arange(S, device=dev).view(1, 1, S) < qa.unsqueeze(-1)) & qk.unsqueeze(-1)
        hfin = self.packed_backbone(blk_ids.view(Bsz, Q), blk_pos.view(Bsz, Q), ctx_kv, m_ctx, K).view(Bsz, A, K, -1)
        return {"hfin": hfin, "anchors": anchors, "keep": keep, "labels": labels, "prev": prev,
                "slot_ok": slot_ok, "lab_idx": lab_idx}

    def train_loss(self, ids, loss_mask, taps, target_hidden, gen, alphas=(0.1, 0.9, 1.0), decay=4.0, max_anchors=None,
                   with_metrics=True):
        """ids/loss_mask [B,S]; taps [B,S,m*d] and target_hidden [B,S,d] (final normed) from the
        frozen target (target_hidden may be None when alphas[1] == 0 and there is no confidence
        head). Loss terms are means weighted by exp(-k/decay) over supervised slots."""
        K = self.cfg.block_size
        Bsz, S = ids.shape
        dev = ids.device
        o = self.train_blocks(ids, loss_mask, taps, gen, max_anchors)
        sel = o["slot_ok"]
        A = sel.shape[1]
        j = torch.arange(K, device=dev)
        h = o["hfin"][sel]  # [N,d]
        y = o["labels"][sel]
        pv = o["prev"][sel]
        w = torch.exp(-j.float() / decay).view(1, 1, K).expand(Bsz, A, K)[sel]
        slot = j.view(1, 1, K).expand(Bsz, A, K)[sel]
        logits = self.markov_logits(self.lm_head(h).float(), pv)
        ce = F.cross_entropy(logits, y, reduction="none")
        wsum = w.sum().clamp_min(1e-6)
        metrics = {"ce": (ce * w).sum() / wsum, "n_slots": int(sel.sum().item()), "n_anchors": int(o["keep"].sum().item())}
        loss = alphas[0] * metrics["ce"]
        if alphas[1] > 0 or self.confidence_head is not None:
            with torch.no_grad():
                tpos = (o["lab_idx"] - 1).clamp(max=S - 1)[sel]
                bidx = torch.arange(Bsz, device=dev).view(Bsz, 1, 1).expand(Bsz, A, K)[sel]
                p = torch.softmax(F.linear(target_hidden[bidx, tpos].float(), self.lm_head.weight.float()), -1)
            q = torch.softmax(logits, -1)
            l1 = (q - p).abs().sum(-1)
            metrics["l1"] = (l1 * w).sum() / wsum
            loss = loss + alphas[1] * metrics["l1"]
            acc = (1 - 0.5 * l1.detach()).clamp(0, 1)
            if with_metrics:
                metrics["accept_by_slot"] = _by_slot(acc, slot, K)
            if self.confidence_head is not None:
                c = self.confidence_logit(h, pv)
                bce = F.binary_cross_entropy_with_logits(c, acc, reduction="none")
                metrics["bce"] = (bce * w).sum() / wsum
                loss = loss + alphas[2] * metrics["bce"]
        if with_metrics:
            with torch.no_grad():
                metrics["top1_by_slot"] = _by_slot((logits.argmax(-1) == y).float(), slot, K)
        metrics["loss"] = loss
        return loss, metrics


def _by_slot(v, slot, K):
    s = torch.zeros(K, device=v.device).index_add_(0, slot, v.float())
    n = torch.zeros(K, device=v.device).index_add_(0, slot, torch.ones_like(v, dtype=torch.float))
    return (s / n.clamp_min(1)).tolist()


def expected_al(accept_by_slot):
    """1 + sum_k prod_{i<=k} a_i (a chain-rule estimate from per-slot mean acceptances)."""
    t, c = 1.0, 1.0
    for a in accept_by_slot:
        c *= a
        t += c
    return t
