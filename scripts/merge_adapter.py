"""Merge a LoRA adapter into its base model: a full Hugging Face checkpoint directory.

    python scripts/merge_adapter.py --adapter runs/<lora run>/checkpoint --out merged/ [--model BASE]

The base defaults to the one the adapter names (its base_model_name_or_path), which must then be a
directory here; if it moved, or the adapter records a name (--base-name), pass --model BASE. Merged in
float32 by default (see nanoatr.lora.merge for why); the tokenizer files, generation_config.json and
config.json's special-token ids travel along.
"""
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing
from nanoatr import lora  # noqa: E402
from nanoatr.machinery.flags import arg, die, parse  # noqa: E402
from nanoatr.model import ModelError  # noqa: E402
from nanoatr.model.files import local_dir  # noqa: E402


@dataclass
class MergeConfig:
    adapter: str | None = arg(None, "LoRA adapter directory (a LoRA run's checkpoint/ works as is)")
    out: str | None = arg(None, "output directory: a full Hugging Face checkpoint")
    model: str | None = arg(None, "base model directory or hub id (default: the adapter's "
                            "base_model_name_or_path)")
    revision: str | None = arg(None, "the hub revision (branch, tag or commit) of --model when it is "
                               "a hub id")
    dtype: str = arg("float32", "dtype of the merged weights", choices=["float32", "bfloat16"])


def main(argv=None):
    cfg, _, _ = parse(MergeConfig, argv, __doc__)
    if not cfg.adapter or not cfg.out:
        die("merge needs --adapter DIR and --out DIR")
    try:
        adapter = local_dir(cfg.adapter, what="--adapter")
        if not lora.is_adapter_dir(adapter):
            die(f"{cfg.adapter} is not a LoRA adapter directory ({lora.CONFIG} is missing)")
        # the base: --model, else the one the adapter records (a directory here, or a hub id)
        base = lora.locate(cfg.model, adapter, cfg.revision).base if cfg.model else lora.locate(adapter).base
        out = lora.merge(base, adapter, cfg.out, dtype=getattr(torch, cfg.dtype))
    except (lora.AdapterError, ModelError) as e:
        die(str(e))
    print(f"merged {cfg.adapter} into {base}: {out}")


if __name__ == "__main__":
    main()
