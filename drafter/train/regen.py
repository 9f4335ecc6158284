"""Drafter training data: the target's own answers to prompts it did not train on (one greedy and
several T = 1 / top-p samples per prompt), generated with the batched KV-cache loop."""
import numpy as np
import torch

from .common import Timer, log
from .specloop import plain_generate


def regenerate(target, prompts, *, n_sampled, temperature, top_p, max_new, eos_ids, seed, device, batch,
               pad_id, autocast):
    """prompts: list of token-id lists. Returns list of (prompt_idx, sample_idx, prompt ids, response ids)."""
    jobs = []  # (prompt idx, sample idx)
    for i in range(len(prompts)):
        for s in range(1 + n_sampled):
            jobs.append((i, s))
    jobs.sort(key=lambda j: (len(prompts[j[0]]), j))  # similar prompt lengths share a batch
    out = []
    timer = Timer()
    cache_dtype = torch.bfloat16 if autocast else torch.float32
    for b in range(0, len(jobs), batch):
        chunk = jobs[b : b + batch]
        res = plain_generate(target, [prompts[i] for i, _ in chunk], [i * 64 + s for i, s in chunk],
                             temperature=temperature, top_p=top_p, max_new=max_new, eos_ids=eos_ids, seed=seed,
                             device=device, cache_dtype=cache_dtype, pad_id=pad_id, autocast=autocast,
                             greedy_rows=[s == 0 for _, s in chunk])
        for (i, s), r in zip(chunk, res):
            out.append((i, s, prompts[i], r))
        log(f"regen: {min(b + batch, len(jobs))}/{len(jobs)} sequences, {timer():.0f}s")
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def save_regen(path, seqs, sources):
    toks, offs, plen, meta = [], [0], [], []
    for (i, s, p, r), src in zip(seqs, sources):
        toks.extend(p + r)
        offs.append(len(toks))
        plen.append(len(p))
        meta.append((i, s, src))
    np.savez_compressed(path, tokens=np.array(toks, dtype=np.int32), offsets=np.array(offs, dtype=np.int64),
                        prompt_len=np.array(plen, dtype=np.int32), meta=np.array(meta, dtype=np.int32))


def load_regen(path):
    z = np.load(path)
    t, o, pl, meta = z["tokens"], z["offsets"], z["prompt_len"], z["meta"]
    return [(t[o[k] : o[k + 1]], int(pl[k]), tuple(int(x) for x in meta[k])) for k in range(len(pl))]
