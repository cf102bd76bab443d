"""Generate from a model directory, printing each token as soon as it is sampled.

    python sample.py "57+38-21"                       # the embedded default continues "57+38-21="
    python sample.py --temperature 0 --gold 74 "57+38-21"
    python sample.py --model runs/kl3-.../checkpoint < prompts.txt     # one prompt per line
    python sample.py --model Qwen3-1.7B/ --adapter runs/<lora run>/checkpoint --dtype bfloat16 "What is 2+2?"
    python sample.py --model Qwen3-1.7B-Base/ --stop "<|im_end|>" --stop "</answer>" "What is 2+2?"

Prompts are the positional arguments (or stdin, one per line); --stop takes ONE string each time and
is repeated for more, so a prompt after it is never taken for a stop string. A prompt goes through
the model's chat template (or --prompt-template), exactly as in training and eval.py, unless --raw.
Temperature, top-k and top-p default to the model's generation_config.json (the published Qwen3
instruct checkpoints: 0.6 / 20 / 0.95), else 1.0 / 0 / 1.0; a line on stderr says which were used.
stdout holds only completions (and --gold verdicts); the sampling line, a header per prompt (when
several are given) and a length line per completion go to stderr.
"""
import nanoatr

nanoatr.quiet_ctrl_c()  # before the imports below (seconds): Ctrl-C is one line, not a traceback
from dataclasses import dataclass

from nanoatr.machinery.flags import (DATA, OUTPUT, SAMPLING, ConfigError, DeviceFlags, ModelFlags,
                                     PromptFlags, SamplingFlags, arg, check_flags, die, override, read,
                                     resolve_sampling)


@dataclass
class SampleConfig(ModelFlags, PromptFlags, SamplingFlags, DeviceFlags):
    """sample.py's flags: its own below, then the shared groups'."""
    raw: bool = arg(False, "feed the prompt text as is: no chat template, no prompt template", DATA)
    max_new_tokens: int = arg(256, "stop after this many tokens if no stop token came (not given: 256, "
                              "or fewer where the model's positions leave less after the prompt)", SAMPLING,
                              ">=1")
    stop: list[str] = arg([], "a stop string besides EOS: the completion ends after it; one string per "
                          "--stop, repeat the flag for more (special tokens such as <|im_end|> work too)",
                          SAMPLING, repeat=True)
    gold: str | None = arg(None, "the correct answer: also print the verifier's verdict on each completion",
                           OUTPUT)
    seed: int = override(SamplingFlags, "seed", help="sampling seed (one generator for all prompts, in "
                         "order)")


def prompt_flags(parser):
    parser.add_argument("prompts", nargs="*", metavar="PROMPT",
                        help="prompts to complete (default: read stdin, one prompt per line)")


def read_flags(argv=None):
    return read(SampleConfig, argv, __doc__, prompt_flags, usage="%(prog)s [flags] [PROMPT ...]")


if __name__ == "__main__":  # --help and a bad flag answer now, before torch loads; main() reads them again
    read_flags()

import re
import sys

import torch

from nanoatr import lora
from nanoatr.machinery import distributed
from nanoatr.data import Problem
from nanoatr.model import ModelError
from nanoatr.rollout import SAMPLERS, draw, filter_logits, sampling_logprobs
from nanoatr.tokenizer import (TokenizerError, format_prompt, generation_defaults, load_tokenizer,
                               ignored_prompt_flags, make_stopper, eos_token_ids)
from nanoatr.verifier import verify


@torch.inference_mode()
def stream(model, prompt: list[int], max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
           top_k: int = 0, eos_ids=(), generator=None, sampler: str = SAMPLERS[0]):
    """Yield completion token ids one at a time (the stop token included), for a single prompt.

    The batch-of-one case of rollout.generate, token for token: same sampling distribution, same draws
    from `generator`, so a seeded stream reproduces the rollout of the same prompt.
    """
    device = model.lm_head.weight.device
    ids = torch.tensor([prompt], device=device)  # (1, P)
    cache = model.new_cache(1, len(prompt) + max_new_tokens)
    logits = model(ids, attention_mask=torch.ones_like(ids, dtype=torch.bool),
                   position_ids=torch.arange(len(prompt), device=device)[None], cache=cache)[:, -1]  # (1, V)
    for t in range(max_new_tokens):
        logp = sampling_logprobs(logits, temperature)
        if temperature > 0:
            token = draw(filter_logits(logp, top_k, top_p).exp(), generator, sampler)  # (1, 1)
        else:
            token = logp.argmax(-1, keepdim=True)
        yield int(token)
        if int(token) in eos_ids or t + 1 == max_new_tokens:
            return
        logits = model(token, attention_mask=torch.ones_like(token, dtype=torch.bool),
                       position_ids=torch.tensor([[len(prompt) + t]], device=device), cache=cache)[:, -1]


def print_stream(tokenizer, token_ids, out=None, stop=()) -> tuple[str, list[int], bool]:
    """Print the text of each new token as it arrives; returns (whole text, token ids, ended by a stop
    string).

    Text is decoded from the whole completion so far and only the new suffix is printed: a character
    can span several byte-level tokens, and it is held back until its last byte arrives. Stop strings
    are matched as rollout.generate matches them (tokenizer.StopStrings: text decoded WITH special
    tokens, so --stop "<|im_end|>" works): sampling ends with the token that completes one, and the
    completion is those tokens' text without special tokens, the text eval.py grades.
    """
    out = out or sys.stdout
    stopper = make_stopper(tokenizer, stop)
    tokens, shown = [], 0
    for token in token_ids:
        tokens.append(token)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if stopper is not None and stopper.holds([tokens])[0]:
            out.write(text[shown:])
            return text, tokens, True
        if not text.endswith("\ufffd"):  # else an incomplete character: wait for its next byte
            out.write(text[shown:])
            out.flush()
            shown = len(text)
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    out.write(text[shown:])
    return text, tokens, False


def read_prompts(positional: list[str]):
    """The positional prompts, else stdin one per line (lazily, so an interactive session answers each)."""
    if positional:
        yield from positional
        return
    if sys.stdin.isatty():
        print("reading prompts from stdin, one per line (Ctrl-D to end)", file=sys.stderr)
    if hasattr(sys.stdin, "reconfigure"):  # bytes that are no UTF-8 kept as surrogates, to be named below
        sys.stdin.reconfigure(errors="surrogateescape")
    for n, line in enumerate(sys.stdin, 1):
        if re.search("[\ud800-\udfff]", line):
            die(f"stdin, line {n}: not UTF-8 text (bytes that decode to no character)")
        if line.strip():
            yield line.rstrip("\n")


def check(cfg: SampleConfig) -> str | None:
    """The first thing wrong with the flags, as one line, or None."""
    try:
        check_flags(cfg)
    except ConfigError as e:
        return str(e)
    return None


def prompt_ids(cfg: SampleConfig, tok, text: str) -> list[int]:
    """The prompt's token ids: `text` through the chat template or --prompt-template (as is with --raw). An
    empty prompt is one error line."""
    if not cfg.raw:
        try:
            text = format_prompt(tok, Problem(text, cfg.gold or ""), template=cfg.prompt_template,
                                 system_prompt=cfg.system_prompt, enable_thinking=cfg.thinking)
        except (KeyError, IndexError, ValueError) as e:
            die(f"cannot fill --prompt-template: {e!r}")
    ids = tok.encode(text, add_special_tokens=False)
    if not ids:
        die("empty prompt: nothing to continue")
    return ids


def completion_budget(max_new_tokens: int, given: bool, prompt_len: int, positions: int) -> int:
    """The tokens a completion may take: --max-new-tokens as given (past the model's positions: one
    `error:` line), or when not given its default cut to what the positions leave after the prompt."""
    room = positions - prompt_len
    if max_new_tokens <= room:
        return max_new_tokens
    if given or room < 1:
        die(f"the prompt is {prompt_len} tokens; with --max-new-tokens {max_new_tokens} it needs "
            f"{prompt_len + max_new_tokens} positions, the model has {positions} (max_position_embeddings)")
    return room


def main(argv=None):
    cfg, extra, given = read_flags(argv)
    problem = check(cfg)
    if problem:
        die(problem)
    try:
        device = distributed.pick_device(cfg.device)
    except distributed.DeviceError as e:
        die(str(e))
    try:
        model, dirs = lora.load_model(cfg.model, cfg.adapter, getattr(torch, cfg.dtype), device, cfg.revision)
        tok = load_tokenizer(dirs.tokenizer)
        eos_ids = eos_token_ids(tok, dirs.tokenizer, dirs.base)
        defaults, source = generation_defaults(dirs.tokenizer, dirs.base)
        problem = None if cfg.raw else \
            ignored_prompt_flags(tok, cfg.prompt_template, cfg.system_prompt, cfg.thinking)
    except (ModelError, TokenizerError, lora.AdapterError) as e:
        die(str(e))
    if problem:
        die(problem)
    print(resolve_sampling(cfg, defaults, source), file=sys.stderr, flush=True)
    precision = distributed.precision(cfg.dtype, device)
    generator = torch.Generator(device=model.lm_head.weight.device).manual_seed(cfg.seed)
    prompts = list(extra["prompts"]) if extra["prompts"] else None
    nanoatr.ctrl_c_raises()  # from here a Ctrl-C ends the stream quietly (below)
    try:
        for i, text in enumerate(read_prompts(extra["prompts"])):
            if prompts and len(prompts) > 1:
                print(f"[{i + 1}/{len(prompts)}] {text}", file=sys.stderr, flush=True)
            ids = prompt_ids(cfg, tok, text)
            budget = completion_budget(cfg.max_new_tokens, "max_new_tokens" in given, len(ids),
                                       model.config.max_position_embeddings)
            with precision():
                tokens = stream(model, ids, budget, cfg.temperature, cfg.top_p, cfg.top_k, eos_ids,
                                generator, cfg.sampler)
                completion, tokens, by_string = print_stream(tok, tokens, stop=cfg.stop)
            print()
            stopped = by_string or tokens[-1] in eos_ids
            print(f"({len(tokens)} tokens, {'stopped' if stopped else 'hit --max-new-tokens'})",
                  file=sys.stderr)
            if cfg.gold is not None:
                print(f"[gold {cfg.gold}: {'correct' if verify(completion, cfg.gold) else 'wrong'}]",
                      flush=True)
    except KeyboardInterrupt:
        print(file=sys.stdout)
        raise SystemExit(130)


if __name__ == "__main__":
    main()
