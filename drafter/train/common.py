"""Shared helpers of the training recipe: logging, timing, seeding, JSON."""
import json
import os
import random
import sys
import time

import numpy as np
import torch

_LOG_FILES = []
_T0 = time.time()


def log_to(path):
    """Also append every log line to `path` (a file per stage or model)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _LOG_FILES.append(open(path, "a", encoding="utf-8"))


def log_close(path=None):
    for f in list(_LOG_FILES):
        if path is None or os.path.abspath(f.name) == os.path.abspath(path):
            f.close()
            _LOG_FILES.remove(f)


def log(*args):
    line = "[%7.1fs] " % (time.time() - _T0) + " ".join(str(a) for a in args)
    print(line, flush=True)
    for f in _LOG_FILES:
        f.write(line + "\n")
        f.flush()


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def save_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path):
    """JSON lines; split on '\\n' only (some sets hold U+2028 inside strings)."""
    with open(path, encoding="utf-8") as f:
        data = f.read()
    return [json.loads(line) for line in data.split("\n") if line.strip()]


class Timer:
    def __init__(self):
        self.t = time.time()

    def __call__(self):
        return time.time() - self.t


def env_info():
    import transformers
    import tokenizers

    d = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
    }
    if torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name(0)
    return d


def param_count(module, trainable_only=False):
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
