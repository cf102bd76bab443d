"""Prompt formatting (chat template, system prompt, Qwen3's thinking switch, plain template) and stop strings."""
import pytest
import torch

from nanoatr.data import Problem
from nanoatr.tokenizer import (apply_stop, check_template, cut_completion, find_stop, format_prompt, load_tokenizer,
                               stop_string_check, truncate_at_stop)
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


def test_stop_string_check_reads_each_rows_text(tok):
    assert stop_string_check(tok, []) is None
    check = stop_string_check(tok, ["=", "99"])
    rows = [tok.encode(t, add_special_tokens=False) for t in ["1+2=3", "12", "4 99"]]
    assert check(rows) == [True, False, True]


def test_truncate_at_stop_masks_only_later_tokens(tok):
    texts = ["12+3=15;\\boxed{15}0000", "1+1=2", "7;8;9"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    T = max(map(len, ids))
    tokens = torch.tensor([x + [0] * (T - len(x)) for x in ids])
    mask = torch.tensor([[j < len(x) for j in range(T)] for x in ids])
    new, stopped = truncate_at_stop(tok, tokens, mask, ["}", ";8"])
    kept = [tok.decode(t[m].tolist()) for t, m in zip(tokens, new)]
    assert kept == ["12+3=15;\\boxed{15}", "1+1=2", "7;8"]
    assert stopped.tolist() == [True, False, True]
    assert (new <= mask).all()  # never un-masks padding
    same, none = truncate_at_stop(tok, tokens, mask, [])
    assert torch.equal(same, mask) and not none.any()


def test_eval_rows_are_cut_and_graded_again(tok):
    row = {"completion": "\\boxed{4}junk\\boxed{5}", "gold": "4", "correct": False, "length": 20, "truncated": True}
    cut = apply_stop(row, tok, ["}"])
    assert cut["completion"] == "\\boxed{4}" and cut["correct"] and not cut["truncated"] and cut["length"] == 3
    assert apply_stop(row, tok, ["</answer>"]) is row
    assert cut_completion(tok, "1+1", ["</answer>"]) == ("1+1", None)
