"""Padding or packing for the SFT (sft.py) on the CPU, with the embedded tasks' tiny models.

    python bench/sft_packing.py            # ~1 minute on one core

The same 64 worked solutions per step in three layouts, forward + backward of the completion loss,
the layouts interleaved step by step (a busy machine slows all three alike), median seconds over
--repeats steps after one warm-up step:
    padding   one row per example, right-padded to the batch's longest (sft.py's layout)
    packed    the examples concatenated into rows of --pack-len tokens, positions restarting at each
              example, plain causal attention over the row: examples see the ones before them in
              their row, so this is the cheapest packing, not a correct one
    masked    the same rows through SDPA's boolean-mask path, what a correct packing (each example
              attending to itself only) costs; model.hidden takes no such mask, so the mask here only
              has the right shape, not the block structure
Prints the pad-token fraction and time per step of each, and the ratios to padding.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "data"))
import make_countdown  # noqa: E402
from countdown_puzzle import Spec  # noqa: E402
import make_default  # noqa: E402
from nanoatr.model import Qwen3  # noqa: E402
from sft import encode, pad_batch  # noqa: E402
from nanoatr.tokenizer import load_tokenizer  # noqa: E402


def packed(examples, pad_id: int, length: int):
    """(ids, positions, loss mask) of the examples concatenated into rows of `length` tokens."""
    rows, row = [], []
    for prompt, completion in examples:
        seq = [(t, i, False) for i, t in enumerate(prompt)] + \
              [(t, len(prompt) + i, True) for i, t in enumerate(completion)]
        if len(seq) > length:  # it would not fit a row of its own (a RuntimeError deep in the copy)
            print(f"error: --pack-len {length} is shorter than an example ({len(seq)} tokens)",
                  file=sys.stderr)
            raise SystemExit(2)
        if len(row) + len(seq) > length:
            rows.append(row)
            row = []
        row += seq
    rows.append(row)
    ids = torch.full((len(rows), length), pad_id)
    pos = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor([t for t, _, _ in row])
        pos[r, :len(row)] = torch.tensor([p for _, p, _ in row])
        mask[r, :len(row)] = torch.tensor([float(m) for _, _, m in row])
    return ids, pos, mask


def step_seconds(model, ids, mask, positions=None, masked: bool = False) -> float:
    t0 = time.perf_counter()
    pos = positions[:, :-1] if positions is not None else None
    keys = None
    if masked:  # any mask that is not all-true takes SDPA's boolean-mask path: a correct packing's cost
        keys = torch.ones(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
        keys[:, -1] = False
    logits = model(ids[:, :-1], attention_mask=keys, position_ids=pos)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    loss = (nll * mask[:, 1:].flatten()).sum() / mask[:, 1:].sum()
    model.zero_grad(set_to_none=True)
    loss.backward()
    return time.perf_counter() - t0


def compare(name: str, model_dir: Path, stream, batch: int, pack_len: int, repeats: int):
    model, tok = Qwen3.from_pretrained(model_dir), load_tokenizer(model_dir)
    batches = [encode(tok, [next(stream) for _ in range(batch)]) for _ in range(repeats + 1)]
    pad, pack, masked, real, padded_tokens, packed_tokens = [], [], [], 0, 0, 0
    for examples in batches:
        ids, mask = pad_batch(examples, tok.pad_token_id)
        p_ids, p_pos, p_mask = packed(examples, tok.pad_token_id, pack_len)
        pad.append(step_seconds(model, ids, mask))
        pack.append(step_seconds(model, p_ids, p_mask, p_pos))
        masked.append(step_seconds(model, p_ids, p_mask, p_pos, masked=True))
        real += sum(len(p) + len(c) for p, c in examples)
        padded_tokens, packed_tokens = padded_tokens + ids.numel(), packed_tokens + p_ids.numel()
    a, b, c = (statistics.median(t[1:]) * 1e3 for t in (pad, pack, masked))
    print(f"{name}: padding {a:.0f} ms/step ({100 * (1 - real / padded_tokens):.0f}% pad tokens); "
          f"packed into {pack_len} ({100 * (1 - real / packed_tokens):.0f}% pad tokens) {b:.0f} ms/step "
          f"= {b / a:.2f}x, masked {c:.0f} ms/step = {c / a:.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64, help="examples per step (the warm-starts' batch)")
    ap.add_argument("--pack-len", type=int, default=256,
                    help="length of a packed row (the models' positions)")
    ap.add_argument("--repeats", type=int, default=20, help="timed steps")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    compare("arithmetic", ROOT / "data/tiny-qwen3", make_default.sft_stream(1, set()), args.batch,
            args.pack_len, args.repeats)
    compare("countdown", ROOT / "data/tiny-qwen3-countdown",
            make_countdown.sft_stream(1, set(), Spec()), args.batch, args.pack_len,
            args.repeats)


if __name__ == "__main__":
    main()
