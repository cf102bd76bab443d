"""Prompts: the tokenizer of a model directory, its chat template, and what stops a sample.

A model directory carries its own prompt format, as Qwen3 checkpoints do: when the tokenizer has a
chat template the problem becomes a user message; otherwise (base models) `--prompt-template` is
filled in. The embedded default's template is simply "question=".

A sample stops at an EOS token (the tokenizer's and generation_config.json's) or, for base models
that never emit one, after the first of the `--stop` strings (StopStrings, which rollout.generate
applies: its completions come back finished).
"""
import json
import shutil
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import AutoTokenizer

# What a model directory carries besides its weights and config: copied into every checkpoint.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json", "chat_template.jinja")
DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.\n"


class TokenizerError(ValueError):
    """A tokenizer that cannot be used; the message is one line for the user."""


def char_tokenizer(chars: str, special=("<|pad|>", "<|endoftext|>", "<|unk|>"), words=()) -> Tokenizer:
    """A character-level tokenizer (a BPE model with no merges) that transformers loads: the special
    tokens, then one token per character, then whole `words` (e.g. "\\boxed{") as single tokens. The
    embedded tasks' models use it (data/make_*.py); so do the tests' tiny model directories."""
    vocab = {t: i for i, t in enumerate(special)}
    vocab.update({c: len(special) + i for i, c in enumerate(chars)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=special[-1]))
    tok.decoder = decoders.Fuse()  # characters join without spaces
    tok.add_special_tokens([AddedToken(t, special=True) for t in special])
    tok.add_tokens([AddedToken(w, normalized=False) for w in words])
    return tok


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


class StopStrings:
    """Stop strings besides EOS, as rollout.generate applies them (`stop=`).

    Text is decoded WITH special tokens, as transformers' stop strings see it, so a special token
    works as a stop string: `--stop "<|im_end|>"` ends a base model's invented chat turn.
      holds(rows)       rows of token ids -> whether each row's text holds a stop string (lets
                        decoding end early; checked every rollout.STOP_EVERY tokens)
      cut(tokens, mask) mask out every token after the one that completes a row's first stop string;
                        returns (mask, stopped). The kept tokens are exactly the sampled ones, so
                        their log-probs stay exact.
    """

    def __init__(self, tokenizer, stops):
        self.tokenizer, self.stops = tokenizer, [s for s in stops if s]

    def text(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def holds(self, rows: list[list[int]]) -> list[bool]:
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=False)
        return [find_stop(t, self.stops) is not None for t in texts]

    def cut(self, tokens, mask):
        """The cut token is the shortest prefix whose text holds a stop string (binary search over prefix
        lengths: a prefix that holds one, every longer prefix does too)."""
        mask = mask.clone()
        stopped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
        for row, (ids, n) in enumerate(zip(tokens.tolist(), mask.sum(-1).tolist())):
            ids = ids[:n]
            if find_stop(self.text(ids), self.stops) is None:
                continue
            lo, hi = 1, n  # the shortest prefix holding a stop string has length in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if find_stop(self.text(ids[:mid]), self.stops) is None:
                    lo = mid + 1
                else:
                    hi = mid
            mask[row, lo:] = False
            stopped[row] = True
        return mask, stopped


def stop_strings(tokenizer, stops) -> StopStrings | None:
    """The `stop=` of rollout.generate for these stop strings; None when there are none."""
    return StopStrings(tokenizer, stops) if any(stops) else None


def completion_texts(tokenizer, tokens, mask) -> list[str]:
    """The text of each row's real completion tokens, special tokens (EOS, <|im_end|>) left out: what
    the verifier grades."""
    return tokenizer.batch_decode([t[:n] for t, n in zip(tokens.tolist(), mask.sum(-1).tolist())],
                                  skip_special_tokens=True)
