"""Generate from a model directory, printing each token as soon as it is sampled.

    python sample.py "57+38-21"                       # the embedded default continues "57+38-21="
    python sample.py --temperature 0 --gold 74 "57+38-21"
    python sample.py --model runs/kl3-.../checkpoint < prompts.txt     # one prompt per line
    python sample.py --model Qwen3-1.7B/ --adapter runs/<lora run>/checkpoint --dtype bfloat16 "What is 2+2?"

A prompt goes through the model's chat template (or --prompt-template), exactly as in training and
eval.py, unless --raw. stdout holds only completions (and --gold verdicts); a header per prompt
(when several are given) and a length line per completion go to stderr.
"""
import sys

import torch

from nanoatr import distributed, lora
from nanoatr.config import ConfigError, SampleConfig, check_ranges, die, parse
from nanoatr.data import Problem
from nanoatr.model import ModelError
from nanoatr.rollout import filter_logits, sampling_logprobs
from nanoatr.tokenizer import TokenizerError, check_template, find_stop, format_prompt, load_tokenizer, stop_token_ids
from nanoatr.verifier import verify


@torch.inference_mode()
def stream(model, prompt: list[int], max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
           top_k: int = 0, stop_ids=(), generator=None):
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
            tok = torch.multinomial(filter_logits(logp, top_k, top_p).exp(), 1, generator=generator)  # (1, 1)
        else:
            tok = logp.argmax(-1, keepdim=True)
        yield int(tok)
        if int(tok) in stop_ids or t + 1 == max_new_tokens:
            return
        logits = model(tok, attention_mask=torch.ones_like(tok, dtype=torch.bool),
                       position_ids=torch.tensor([[len(prompt) + t]], device=device), cache=cache)[:, -1]


def print_stream(tokenizer, token_ids, out=None, stops=()) -> tuple[str, list[int]]:
    """Print the text of each new token as it arrives; returns (whole text, token ids).

    Text is decoded from the whole completion so far and only the new suffix is printed: a character
    can span several byte-level tokens, and it is held back until its last byte arrives. Sampling
    ends with the token that completes a stop string; the text ends with the stop string itself.
    """
    out = out or sys.stdout
    tokens, shown = [], 0
    for tok in token_ids:
        tokens.append(tok)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        end = find_stop(text, stops)
        if end is not None:
            out.write(text[shown:end])
            return text[:end], tokens
        if not text.endswith("\ufffd"):  # else an incomplete character: wait for its next byte
            out.write(text[shown:])
            out.flush()
            shown = len(text)
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    out.write(text[shown:])
    return text, tokens


def read_prompts(positional: list[str]):
    """The positional prompts, else stdin one per line (lazily, so an interactive session answers each)."""
    if positional:
        yield from positional
        return
    if sys.stdin.isatty():
        print("reading prompts from stdin, one per line (Ctrl-D to end)", file=sys.stderr)
    for line in sys.stdin:
        if line.strip():
            yield line.rstrip("\n")


def prompt_flags(parser):
    parser.add_argument("prompts", nargs="*", metavar="PROMPT",
                        help="prompts to complete (default: read stdin, one prompt per line)")


def main(argv=None):
    cfg, extra, _ = parse(SampleConfig, argv, __doc__, prompt_flags)
    try:
        check_ranges(cfg)
    except ConfigError as e:
        die(str(e))
    if cfg.prompt_template is not None and check_template(cfg.prompt_template):
        die(check_template(cfg.prompt_template))
    device = distributed.pick_device(cfg.device)
    try:
        model, tok_dir = lora.load_model(cfg.model, cfg.adapter, getattr(torch, cfg.dtype), device)
        tok = load_tokenizer(tok_dir)
    except (ModelError, TokenizerError, lora.AdapterError) as e:
        die(str(e))
    stop_ids = stop_token_ids(tok, tok_dir)
    precision = distributed.precision(cfg.dtype, device)
    generator = torch.Generator(device=model.lm_head.weight.device).manual_seed(cfg.seed)
    prompts = list(extra["prompts"]) if extra["prompts"] else None
    try:
        for i, text in enumerate(read_prompts(extra["prompts"])):
            if prompts and len(prompts) > 1:
                print(f"[{i + 1}/{len(prompts)}] {text}", file=sys.stderr, flush=True)
            if not cfg.raw:
                try:
                    text = format_prompt(tok, Problem(text, cfg.gold or ""), template=cfg.prompt_template,
                                         system_prompt=cfg.system_prompt, enable_thinking=cfg.thinking)
                except (KeyError, IndexError, ValueError) as e:
                    die(f"cannot fill --prompt-template: {e!r}")
            ids = tok.encode(text, add_special_tokens=False)
            if not ids:
                die("empty prompt: nothing to continue")
            with precision():
                tokens = stream(model, ids, cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.top_k, stop_ids,
                                generator)
                completion, tokens = print_stream(tok, tokens, stops=cfg.stop)
            print()
            stopped = tokens[-1] in stop_ids or find_stop(completion, cfg.stop) is not None
            print(f"({len(tokens)} tokens, {'stopped' if stopped else 'hit --max-new-tokens'})", file=sys.stderr)
            if cfg.gold is not None:
                print(f"[gold {cfg.gold}: {'correct' if verify(completion, cfg.gold) else 'wrong'}]", flush=True)
    except KeyboardInterrupt:
        print(file=sys.stdout)
        raise SystemExit(130)


if __name__ == "__main__":
    main()
