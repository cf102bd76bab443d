"""Prompts: the tokenizer of a model directory, its chat template, and what stops a sample.

A model directory carries its own prompt format, as Qwen3 checkpoints do: when the tokenizer has a
chat template the problem becomes a user message; otherwise (base models) `--prompt-template` is
filled in. The embedded default's template is simply "question=".

A sample stops at an EOS token (the tokenizer's and generation_config.json's) or, for base models
that never emit one, after the first of the `--stop` strings. Stop strings are applied after
sampling: the completion is cut after the token that completes the string and later tokens are
masked out. The kept tokens are exactly the sampled ones, so their log-probs stay exact. While
sampling, `stop_string_check` lets the batch end once every row holds a stop string (checked every
rollout.STOP_EVERY tokens) instead of running to the budget.
"""
import json
import shutil
from pathlib import Path

import torch

# What a model directory carries besides its weights and config: copied into every checkpoint.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json", "chat_template.jinja")
DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.\n"


class TokenizerError(ValueError):
    """A tokenizer that cannot be used; the message is one line for the user."""


def load_tokenizer(path):
    """The Hugging Face fast tokenizer saved in a model directory (tokenizer.json + tokenizer_config.json)."""
    from transformers import AutoTokenizer
    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise TokenizerError(f"{path} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many types here; the user needs one line
        raise TokenizerError(f"cannot load the tokenizer in {path}: {str(e).splitlines()[0]}") from None
    if tok.eos_token_id is None:
        raise TokenizerError(f"the tokenizer in {path} has no EOS token: samples could never stop")
    return tok


def copy_tokenizer(src, dst):
    """Copy the tokenizer files (and generation_config.json) of model directory src into dst."""
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file():
            shutil.copy2(Path(src) / name, Path(dst) / name)


def stop_token_ids(tokenizer, model_dir=None) -> list[int]:
    """EOS ids: the tokenizer's, plus generation_config.json's (Qwen3 ends chat turns with <|im_end|>)."""
    ids = {tokenizer.eos_token_id}
    gen = Path(model_dir or "", "generation_config.json")
    if model_dir is not None and gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return sorted(ids)


def format_prompt(tokenizer, problem, template: str | None = None, system_prompt: str | None = None,
                  enable_thinking: bool | None = None) -> str:
    """The text the model continues. `problem` has .question and optionally .messages (chat rows)."""
    use_chat = template is None and getattr(tokenizer, "chat_template", None)
    if not use_chat:
        return (template or DEFAULT_TEMPLATE).format(question=problem.question)
    messages = list(getattr(problem, "messages", None) or [{"role": "user", "content": problem.question}])
    if system_prompt is not None:
        messages = [{"role": "system", "content": system_prompt}] + [m for m in messages if m["role"] != "system"]
    extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}  # Qwen3's switch
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)


def encode_prompts(tokenizer, problems, **kw) -> list[list[int]]:
    # The template already holds any special tokens, so none are added here.
    return [tokenizer.encode(format_prompt(tokenizer, p, **kw), add_special_tokens=False) for p in problems]


def check_template(template: str) -> str | None:
    """What is wrong with a --prompt-template, as one line, or None."""
    try:
        template.format(question="")
    except (KeyError, IndexError, ValueError) as e:
        return f"--prompt-template must be a format string whose only field is {{question}} ({e!r})"
    if "{question}" not in template:
        return "--prompt-template needs a {question} field"
    return None


def find_stop(text: str, stops) -> int | None:
    """Where `text` ends if cut after its first stop string (the earliest end), or None if none occurs."""
    ends = [i + len(s) for s in stops if s and (i := text.find(s)) >= 0]
    return min(ends) if ends else None


def cut_at_stop(text: str, stops) -> str:
    end = find_stop(text, stops)
    return text if end is None else text[:end]


def cut_completion(tokenizer, completion: str, stops) -> tuple[str, int | None]:
    """A decoded completion cut after its first stop string and its length in tokens (re-encoded, so
    approximate), or (completion, None) when no stop string occurs. For rows whose tokens are gone."""
    end = find_stop(completion, stops)
    if end is None:
        return completion, None
    return completion[:end], len(tokenizer.encode(completion[:end], add_special_tokens=False))


def apply_stop(row: dict, tokenizer, stops) -> dict:
    """An evaluation row (nanoatr.evaluate) cut after its first stop string and graded again."""
    from nanoatr.verifier import verify
    text, length = cut_completion(tokenizer, row["completion"], stops)
    if length is None:
        return row
    return {**row, "completion": text, "length": length, "truncated": False, "correct": bool(verify(text, row["gold"]))}


def stop_string_check(tokenizer, stops):
    """For rollout.generate(stop=...): rows of token ids -> whether each row's text holds a stop string.
    None when there are no stop strings (nothing to check)."""
    if not stops:
        return None
    return lambda rows: [find_stop(text, stops) is not None
                         for text in tokenizer.batch_decode(rows, skip_special_tokens=True)]


def truncate_at_stop(tokenizer, tokens, mask, stops):
    """Mask out every token after the one that completes a row's first stop string.

    tokens, mask (B, T); returns (mask, stopped): the new mask and a (B,) bool of rows cut by a stop
    string. The cut token is the shortest prefix whose text holds a stop string (binary search over
    prefix lengths: a prefix that holds one, every longer prefix does too).
    """
    mask = mask.clone()
    stopped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
    if not stops:
        return mask, stopped
    lengths = mask.sum(-1).tolist()
    for row, (ids, n) in enumerate(zip(tokens.tolist(), lengths)):
        ids = ids[:n]
        if find_stop(tokenizer.decode(ids, skip_special_tokens=True), stops) is None:
            continue
        lo, hi = 1, n  # the shortest prefix holding a stop string has length in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if find_stop(tokenizer.decode(ids[:mid], skip_special_tokens=True), stops) is None:
                lo = mid + 1
            else:
                hi = mid
        if lo < n:
            mask[row, lo:] = False
        stopped[row] = True
    return mask, stopped
