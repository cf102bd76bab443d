"""train.py with the policy (and reference) in float64, for tests that compare two runs differing only
in rounding (tests/test_distributed.py): `python tests/float64_train.py ARGS`, also under torchrun.

With NANOATR_FIRST_STEP=path, rank 0 saves there, at the first optimizer step, the gradient it is about
to apply (before clipping: clip_grad_norm_'s input) and, per element, the sum of |the gradients that
backward passes added into it| (each micro-batch's, as a tensor hook on each trained parameter sees them:
on a rank of two, twice its micro-batch's, the loss being scaled by the world size), and how many such terms each element summed, at most."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402

load = Qwen3.from_pretrained.__func__
Qwen3.from_pretrained = classmethod(lambda cls, path, dtype=None, device="cpu": load(cls, path, torch.float64,
                                                                                      device))
OUT = os.environ.get("NANOATR_FIRST_STEP")
if OUT:
    clip, make_optimizer, parts, terms = torch.nn.utils.clip_grad_norm_, train.make_optimizer, {}, {}

    def recording_optimizer(cfg, trained):
        def add(p, g):  # returns None: the gradient passes on unchanged
            if p in parts:
                parts[p].add_(g.abs())
                terms[p] += 1
        for p in trained:
            parts[p], terms[p] = torch.zeros_like(p), 0
            p.register_hook(lambda g, p=p: add(p, g))
        return make_optimizer(cfg, trained)

    def recording_clip(params, *args, **kw):
        params = list(params)
        if parts and os.environ.get("RANK", "0") == "0":
            torch.save({"grad": [p.grad.clone() for p in params], "abs_parts": [parts[p] for p in params],
                        "terms": max(terms.values())}, OUT)
        parts.clear()  # the first optimizer step only
        return clip(params, *args, **kw)
    train.make_optimizer, torch.nn.utils.clip_grad_norm_ = recording_optimizer, recording_clip

if __name__ == "__main__":
    train.main(sys.argv[1:])
