"""Prompts: the tokenizer of a model directory, its chat template, and what stops a sample.

With a chat template the problem becomes a user message; otherwise (base models) `--prompt-template` is
filled in. A sample stops at an EOS token or after the first `--stop` string (StopStrings, which
rollout.generate applies). Where each comes from: docs/library.md#tokenizer"""
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer

# What a model directory carries besides its weights and config: copied into every checkpoint.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json", "chat_template.jinja")
DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.\n"


class TokenizerError(ValueError):
    """A tokenizer that cannot be used; the message is one line for the user."""


def load_tokenizer(path):
    """The Hugging Face fast tokenizer saved in a model directory (tokenizer.json + tokenizer_config.json)."""
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


def read_json(path: Path) -> dict:
    """A model directory's config.json / generation_config.json as a dict ({} when absent); TokenizerError
    (one line naming the file) when it is unreadable or not a JSON object."""
    if not path.is_file():
        return {}
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # not JSON or UTF-8, too many digits, too deep
        raise TokenizerError(f"cannot read {path}: {e}") from None
    if not isinstance(d, dict):
        raise TokenizerError(f"{path} is not a JSON object")
    return d


def eos_token_ids(tokenizer, *model_dirs) -> list[int]:
    """EOS ids: the tokenizer's, and those of every model directory given (a base and its adapter, say):
    the union of the tokenizer's, generation_config.json's and config.json's, so that a sample never runs
    past a token that any of them calls an end (docs/library.md#tokenizer)."""
    ids = {tokenizer.eos_token_id}
    for d in filter(None, model_dirs):
        for path in (Path(d, "generation_config.json"), Path(d, "config.json")):
            value = read_json(path).get("eos_token_id")
            found = value if isinstance(value, list) else [] if value is None else [value]
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in found):
                raise TokenizerError(f"{path}: eos_token_id must be a token id or a list of them (found "
                                     f"{value!r})")
            ids.update(found)
    return sorted(ids)


SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}


def generation_defaults(*model_dirs) -> tuple[dict, Path | None]:
    """(temperature / top_k / top_p of the first generation_config.json among model_dirs, that file).

    Only those three keys are read. Its do_sample is not: Mean@k needs samples (a published base
    model's do_sample false would make every sample the same greedy one). A key the file lacks keeps
    nanoatr's default (SAMPLING_DEFAULTS), not transformers' (top_k 50).
    """
    for d in filter(None, model_dirs):
        path = Path(d, "generation_config.json")
        if path.is_file():
            gen = read_json(path)
            found = {k: gen[k] for k in SAMPLING_DEFAULTS if gen.get(k) is not None}
            for k, v in found.items():
                if isinstance(v, bool) or not isinstance(v, int if k == "top_k" else (int, float)) or \
                        not (0 < v <= 1 if k == "top_p" else v >= 0):
                    raise TokenizerError(f"{path}: {k} {v!r} is not a usable value")
            return {k: v if k == "top_k" else float(v) for k, v in found.items()}, path
    return {}, None


def format_prompt(tokenizer, problem, template: str | None = None, system_prompt: str | None = None,
                  enable_thinking: bool | None = None) -> str:
    """The text the model continues. `problem` has .question and optionally .messages (chat rows)."""
    if ignored := ignored_prompt_flags(tokenizer, template, system_prompt, enable_thinking):
        raise TokenizerError(ignored)
    if template is not None or not getattr(tokenizer, "chat_template", None):  # no chat: the template's text
        return (template or DEFAULT_TEMPLATE).format(question=problem.question)
    messages = list(getattr(problem, "messages", None) or [{"role": "user", "content": problem.question}])
    if system_prompt is not None:
        messages = [{"role": "system", "content": system_prompt}] + \
            [m for m in messages if m["role"] != "system"]
    extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}  # Qwen3's switch
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)


def ignored_prompt_flags(tokenizer, template: str | None, system_prompt: str | None,
                         enable_thinking: bool | None) -> str | None:
    """A --system-prompt or --thinking / --no-thinking that this tokenizer's prompt would silently ignore,
    as one line, or None. (With --prompt-template both are errors already: flags.ignored_prompt_flag.)"""
    if template is not None:
        return None
    chat = getattr(tokenizer, "chat_template", None)
    if not chat and system_prompt is not None:
        return ("--system-prompt needs a chat template, and this tokenizer has none: put it into "
                "--prompt-template")
    if enable_thinking is not None and "enable_thinking" not in str(chat or ""):
        return (f"--{'' if enable_thinking else 'no-'}thinking would be ignored: this tokenizer's chat "
                "template has no enable_thinking switch (Qwen3's has)")
    return None


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


def find_stop(text: str, stop) -> int | None:
    """Where `text` ends if cut after its first stop string (the earliest end), or None if none occurs."""
    ends = [i + len(s) for s in stop if s and (i := text.find(s)) >= 0]
    return min(ends) if ends else None


class StopStrings:
    """What ends a sample besides EOS: the --stop strings (a list of strings is `stop` everywhere), as
    rollout.generate applies them (its `stop=`). An instance is a `stopper` (make_stopper).

    Text is decoded WITH special tokens, as transformers' stop strings see it, so a special token
    works as a stop string: `--stop "<|im_end|>"` ends a base model's invented chat turn.
      holds(rows)       rows of token ids -> whether each row's text holds a stop string (checked
                        every rollout.STOP_EVERY tokens, so that decoding ends early)
      cut(tokens, mask) (mask, stopped): every token after the one completing a row's first stop
                        string masked out; the kept tokens and their log-probs are the sampled ones."""

    def __init__(self, tokenizer, stop):
        self.tokenizer, self.stop = tokenizer, [s for s in stop if s]

    def text(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def holds(self, rows: list[list[int]]) -> list[bool]:
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=False)
        return [find_stop(t, self.stop) is not None for t in texts]

    def cut(self, tokens, mask):
        """The cut token is the shortest prefix whose text holds a stop string (binary search over prefix
        lengths: a prefix that holds one, every longer prefix does too)."""
        mask = mask.clone()
        stopped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
        for row, ids in enumerate(completion_ids(tokens, mask)):
            if find_stop(self.text(ids), self.stop) is None:
                continue
            lo, hi = 1, len(ids)  # the shortest prefix holding a stop string has length in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if find_stop(self.text(ids[:mid]), self.stop) is None:
                    lo = mid + 1
                else:
                    hi = mid
            mask[row, lo:] = False
            stopped[row] = True
        return mask, stopped


def make_stopper(tokenizer, stop) -> StopStrings | None:
    """The stopper of these stop strings (rollout.generate's `stop=`); None when there are none."""
    return StopStrings(tokenizer, stop) if any(stop) else None


def completion_ids(tokens, mask) -> list[list[int]]:
    """Each row's real completion tokens (the EOS included, when it ended on one), as lists of ids."""
    return [t[:n] for t, n in zip(tokens.tolist(), mask.sum(-1).tolist())]


def completion_texts(tokenizer, tokens, mask) -> list[str]:
    """The text of each row's real completion tokens, special tokens (EOS, <|im_end|>) left out: what
    the reward functions grade."""
    return tokenizer.batch_decode(completion_ids(tokens, mask), skip_special_tokens=True)
