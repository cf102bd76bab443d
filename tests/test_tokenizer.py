"""Prompt formatting (chat template, system prompt, Qwen3's thinking switch, plain template) and stop strings."""
import json

import pytest
import torch

from nanoatr.data import Problem
from nanoatr.tokenizer import (TokenizerError, check_template, completion_texts, eos_token_ids, find_stop,
                               format_prompt, generation_defaults, ignored_prompt_flags, load_tokenizer,
                               make_stopper)
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


def test_a_stopper_reads_each_rows_text(tok):
    assert make_stopper(tok, []) is None and make_stopper(tok, [""]) is None
    stopper = make_stopper(tok, ["=", "99", "<|endoftext|>"])  # a special token too: its text is read
    rows = [tok.encode(t, add_special_tokens=False) for t in ["1+2=3", "12", "4 99", "7<|endoftext|>"]]
    assert stopper.holds(rows) == [True, False, True, True]


def test_a_stopper_cuts_masks_only_later_tokens(tok):
    texts = ["12+3=15;\\boxed{15}0000", "1+1=2", "7;8;9"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    T = max(map(len, ids))
    tokens = torch.tensor([x + [0] * (T - len(x)) for x in ids])
    mask = torch.tensor([[j < len(x) for j in range(T)] for x in ids])
    new, stopped = make_stopper(tok, ["}", ";8"]).cut(tokens, mask)
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
    new, stopped = make_stopper(tok, ["<|endoftext|>"]).cut(tokens, mask)
    assert stopped.tolist() == [True] and new.sum().item() == len("1+1=2") + 1  # kept through the special token
    assert completion_texts(tok, tokens, new) == ["1+1=2"]


def test_stop_token_ids_from_every_place(tok, tmp_path):
    """The tokenizer's eos, config.json's and generation_config.json's (an int or a list), all of them."""
    with pytest.raises(TokenizerError, match=r"has no tokenizer \(tokenizer.json / tokenizer_config.json\)$"):
        load_tokenizer(tmp_path)  # a folder with neither file
    eos = tok.eos_token_id
    assert eos_token_ids(tok) == eos_token_ids(tok, tmp_path) == [eos]
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    assert eos_token_ids(tok, tmp_path) == sorted({eos, 7, 8})
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert eos_token_ids(tok, tmp_path) == sorted({eos, 7, 8, 9})
    other = tmp_path / "adapter"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"eos_token_id": [3]}))
    assert eos_token_ids(tok, other, tmp_path) == sorted({eos, 3, 7, 8, 9})
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": "</s>"}))
    with pytest.raises(TokenizerError, match="config.json: eos_token_id must be a token id"):
        eos_token_ids(tok, tmp_path)
    (tmp_path / "config.json").write_text("[")
    with pytest.raises(TokenizerError, match="cannot read .*config.json"):
        eos_token_ids(tok, tmp_path)


def test_generation_defaults_read_three_keys(tmp_path):
    assert generation_defaults(tmp_path) == ({}, None)
    gen = tmp_path / "generation_config.json"
    gen.write_text(json.dumps({"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": 1}))
    assert generation_defaults(None, tmp_path) == ({"temperature": 0.6, "top_k": 20, "top_p": 0.95}, gen)
    gen.write_text(json.dumps({"do_sample": False, "max_new_tokens": 2048}))  # a base model's
    assert generation_defaults(tmp_path) == ({}, gen)
    for bad in [{"top_p": 0}, {"top_k": 1.5}, {"temperature": -1}, {"temperature": "hot"}]:
        gen.write_text(json.dumps(bad))
        with pytest.raises(TokenizerError, match="is not a usable value"):
            generation_defaults(tmp_path)


def test_prompt_flags_a_tokenizer_would_ignore(tok, tmp_path):
    assert ignored_prompt_flags(tok, None, "S", False) is None  # QWEN3_LIKE has roles and the switch
    plain = load_tokenizer(make_model_dir(tmp_path / "plain", {"chat_template": None}))
    assert "--system-prompt needs a chat template" in ignored_prompt_flags(plain, None, "S", None)
    assert "--thinking would be ignored" in ignored_prompt_flags(plain, None, None, True)
    assert ignored_prompt_flags(plain, "Q: {question}", None, None) is None
    with pytest.raises(TokenizerError, match="--no-thinking would be ignored"):  # training encodes through it
        format_prompt(plain, Problem("1+1", "2"), enable_thinking=False)
