"""Prompts: the tokenizer of a model directory, its chat template, and the token ids that stop a sample.

A model directory carries its own prompt format, as Qwen3 checkpoints do: when the tokenizer has a
chat template the problem becomes a user message; otherwise (base models) `--prompt-template` is
filled in. The embedded default's template is simply "question=".
"""
import json
from pathlib import Path

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
