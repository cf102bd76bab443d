"""Prompt formatting (chat template, system prompt, Qwen3's thinking switch, plain template) and stop strings."""
import pytest
import torch

from nanoatr.data import Problem
from nanoatr.tokenizer import (check_template, completion_texts, find_stop, format_prompt, load_tokenizer,
                               stop_strings)
from tiny import make_model_dir

# The part of Qwen3's chat template that matters here: messages in ChatML, and with enable_thinking
# false an empty think block after the assistant header (transformers#37949).
QWEN3_LIKE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
              "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(make_model_dir(tmp_path_factory.mktemp("tok"), {"chat_template": QWEN3_LIKE}))


def test_chat_template_system_prompt_and_thinking(tok):
    p = Problem("1+1", "2")
    plain = format_prompt(tok, p)
    assert plain == "<|im_start|>user\n1+1<|im_end|>\n<|im_start|>assistant\n"
    assert format_prompt(tok, p, enable_thinking=True) == plain  # thinking on adds nothing
    assert format_prompt(tok, p, enable_thinking=False).endswith("assistant\n<think>\n\n</think>\n\n")
    system = format_prompt(tok, p, system_prompt="Be brief. /no_think")
    assert system.startswith("<|im_start|>system\nBe brief. /no_think<|im_end|>\n<|im_start|>user\n1+1")


def test_prompt_template_replaces_the_chat_template(tok):
    assert format_prompt(tok, Problem("1+1", "2"), template="Q: {question}\nA:") == "Q: 1+1\nA:"
    assert check_template("Q: {question}") is None
    assert "needs a {question} field" in check_template("Q:")
    assert "only field is {question}" in check_template("{question} {other}")


def test_find_stop_takes_the_earliest_end():
    assert find_stop("abc</answer>def", ["</answer>"]) == len("abc</answer>")
    assert find_stop("x=1;y=2", ["y=2", "=1"]) == 3  # "=1" ends first
    assert find_stop("nothing here", ["</answer>"]) is None and find_stop("abc", []) is None


def test_stop_strings_read_each_rows_text(tok):
    assert stop_strings(tok, []) is None and stop_strings(tok, [""]) is None
    stop = stop_strings(tok, ["=", "99"])
    rows = [tok.encode(t, add_special_tokens=False) for t in ["1+2=3", "12", "4 99"]]
    assert stop.holds(rows) == [True, False, True]


def test_stop_strings_cut_masks_only_later_tokens(tok):
    texts = ["12+3=15;\\boxed{15}0000", "1+1=2", "7;8;9"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    T = max(map(len, ids))
    tokens = torch.tensor([x + [0] * (T - len(x)) for x in ids])
    mask = torch.tensor([[j < len(x) for j in range(T)] for x in ids])
    new, stopped = stop_strings(tok, ["}", ";8"]).cut(tokens, mask)
    kept = [tok.decode(t[m].tolist()) for t, m in zip(tokens, new)]
    assert kept == ["12+3=15;\\boxed{15}", "1+1=2", "7;8"]
    assert stopped.tolist() == [True, False, True]
    assert (new <= mask).all()  # never un-masks padding
    assert completion_texts(tok, tokens, new) == kept


def test_a_special_token_is_a_stop_string(tok):
    """--stop "<|endoftext|>" matches although the verifier's text leaves special tokens out (issue 16)."""
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    ids = tok.encode("1+1=2", add_special_tokens=False) + [eos] + tok.encode("junk", add_special_tokens=False)
    tokens, mask = torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool)
    new, stopped = stop_strings(tok, ["<|endoftext|>"]).cut(tokens, mask)
    assert stopped.tolist() == [True] and new.sum().item() == len("1+1=2") + 1  # kept through the special token
    assert completion_texts(tok, tokens, new) == ["1+1=2"]
