"""sample.py: the token stream is rollout.generate's batch-of-one, printed as it is sampled."""

import pytest
import torch

import sample
from nanoatr.data import Problem
from nanoatr.model import Qwen3
from nanoatr.rollout import generate
from nanoatr.tokenizer import format_prompt, load_tokenizer, eos_token_ids, make_stopper
from conftest import error_line

PROMPT = "12+34-5"


@pytest.fixture(scope="module")
def loaded(model_dir):
    tok = load_tokenizer(model_dir)
    return Qwen3.from_pretrained(model_dir).eval(), tok, eos_token_ids(tok, model_dir)


def reference(loaded, text, max_new_tokens, temperature=0.0, seed=0, **kw):
    """rollout.generate's completion (tokens, text) for one prompt."""
    model, tok, eos_ids = loaded
    ids = tok.encode(text, add_special_tokens=False)
    out = generate(model, [ids], max_new_tokens, temperature=temperature, eos_token_id=eos_ids,
                   generator=torch.Generator().manual_seed(seed), pad_id=tok.pad_token_id, **kw)
    tokens = out.tokens[0, :int(out.mask[0].sum())].tolist()
    return tokens, tok.decode(tokens, skip_special_tokens=True)


@pytest.mark.parametrize("kw", [dict(), dict(top_k=5, top_p=0.9)])
def test_seeded_stream_equals_generate(loaded, kw):
    model, tok, eos_ids = loaded
    tokens, _ = reference(loaded, PROMPT, 16, temperature=1.0, seed=3, **kw)
    streamed = sample.stream(model, tok.encode(PROMPT, add_special_tokens=False), 16, temperature=1.0,
                             eos_ids=eos_ids, generator=torch.Generator().manual_seed(3), **kw)
    assert list(streamed) == tokens


def test_text_is_written_token_by_token_and_ends_after_a_stop_string(loaded):
    _, tok, _ = loaded
    writes = []
    out = type("Out", (), {"write": lambda self, s: writes.append(s), "flush": lambda self: None})()
    ids = tok.encode("1+2=3;4+5=9", add_special_tokens=False)
    text, tokens, by_stop = sample.print_stream(tok, iter(ids), out)
    assert text == "1+2=3;4+5=9" and tokens == ids and not by_stop
    assert [w for w in writes if w] == list(text)  # one character per token with this tokenizer
    writes.clear()
    consumed = []
    text, tokens, by_stop = sample.print_stream(tok, (consumed.append(i) or i for i in ids), out,
                                                stop=["=3;", "+5"])
    assert text == "1+2=3;" == "".join(writes) and by_stop  # "=3;" ends before "+5" does
    assert tokens == consumed == ids[:6]  # sampling stopped with the token that completed it


def test_prompts_from_stdin_each_get_a_gold_verdict(capsys, monkeypatch, model_dir):
    seen = []
    monkeypatch.setattr(sample, "verify", lambda completion, gold: seen.append((completion, gold)) or True)
    stdin = type("In", (), {"isatty": lambda _: False, "__iter__": lambda _: iter(["1+1\n", "\n", "2*3\n"])})
    monkeypatch.setattr("sys.stdin", stdin())
    sample.main(["--model", str(model_dir), "--temperature", "0", "--max-new-tokens", "8", "--gold", "2",
                 "--raw"])
    lines = capsys.readouterr().out.splitlines()  # each completion, then its verdict
    assert lines[1::2] == ["[gold 2: correct]"] * 2 and seen == [(lines[0], "2"), (lines[2], "2")]


def test_a_folder_that_is_not_an_adapter_is_one_line(capsys, model_dir, tmp_path):
    argv = ["--model", str(model_dir), "--adapter", str(tmp_path), PROMPT]
    assert error_line(capsys, sample.main, argv) == \
        f"error: {tmp_path} is not a LoRA adapter directory (adapter_config.json is missing)"


@pytest.mark.parametrize("text, why", [("9" * 5000, "Exceeds the limit (4300 digits)"),
                                       ("[" * 5000 + "]" * 5000, "maximum recursion depth exceeded")])
@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "adapter_config.json"])
def test_a_model_file_json_cannot_read_into_python_is_one_line_naming_it(capsys, model_dir, tmp_path, name,
                                                                         text, why):
    """An integer past Python's digit limit, nesting past json's recursion limit: one line naming the file."""
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    (folder / name).write_text(text)
    adapter = ["--adapter", str(folder)] if name == "adapter_config.json" else []
    err = error_line(capsys, sample.main, ["--model", str(model_dir if adapter else folder), *adapter,
                                           PROMPT])
    assert f"{folder / name}" in err and why in err, err


def test_greedy_stream_prints_the_rollout_text_and_stop_is_repeatable(capsys, model_dir, loaded):
    """The greedy stream prints rollout.generate's text. --stop takes one string each time: a prompt after it
    is a prompt, not a second stop string. The stream stops where rollout.generate's StopStrings cut."""
    _, tok, _ = loaded
    prompt = format_prompt(tok, Problem(PROMPT, ""))
    _, text = reference(loaded, prompt, 12)
    sample.main(["--model", str(model_dir), "--temperature", "0", "--max-new-tokens", "12", PROMPT])
    assert capsys.readouterr().out == text + "\n" and text  # the tiny model says something before EOS
    stop = [text[2:4], "never"]
    tokens, cut = reference(loaded, prompt, 12, stopper=make_stopper(tok, stop))
    assert len(cut) < len(text)
    sample.main(["--model", str(model_dir), "--temperature", "0", "--max-new-tokens", "12", "--stop", stop[0],
                 "--stop", stop[1], PROMPT])
    out, err = capsys.readouterr()
    assert out == cut + "\n" and f"({len(tokens)} tokens, stopped)" in err


def test_sampling_defaults_without_generation_config(capsys, model_dir):
    """No generation_config.json (the embedded default has none): 1.0 / 0 / 1.0 as always, and it says so.
    Two prompts: each is headed [i/n] on stderr."""
    sample.main(["--model", str(model_dir), "--max-new-tokens", "2", PROMPT, "1+1"])
    err = capsys.readouterr().err
    assert "sampling: temperature 1.0, top-k 0, top-p 1.0 (defaults: no generation_config.json)" in err
    assert f"[1/2] {PROMPT}\n" in err and "\n[2/2] 1+1\n" in err


@pytest.mark.parametrize("argv, message", [
    (["--temperature", "-1"], "--temperature must be >= 0"), (["--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--top-k", "-2"], "--top-k must be >= 0"), (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--seed", "-1"], "--seed must be >= 0"), (["--stop", ""], "--stop: empty stop string"),
    (["--raw", "--thinking"], "--thinking has no effect with --raw"),
    (["--raw", "--prompt-template", "Q{question}"], "--prompt-template has no effect with --raw"),
    (["--no-thinking"], "--no-thinking would be ignored: this tokenizer's chat template has no enable_thinking"),
    (["--adapter", "x"], "--adapter x: no such directory"),
])
def test_bad_flags_are_one_line(capsys, model_dir, argv, message):
    err = error_line(capsys, sample.main, ["--model", str(model_dir), *argv, PROMPT])
    assert err.startswith(f"error: {message}")


def test_the_help_examples_default_budget_fits_the_model(capsys):
    """`python sample.py "57+38-21"` (--help's first example, the embedded 256-position model): the default
    --max-new-tokens is cut to the positions the prompt leaves; a value given explicitly still errors."""
    sample.main(["--temperature", "0", "57+38-21"])
    err = capsys.readouterr().err
    assert "tokens, " in err.strip().splitlines()[-1]
    with pytest.raises(SystemExit) as e:
        sample.main(["--max-new-tokens", "256", "57+38-21"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and last.startswith("error: the prompt is 9 tokens; with --max-new-tokens 256 ")


def test_the_default_budget_is_cut_to_the_positions_left():
    assert sample.completion_budget(256, False, 9, 512) == sample.completion_budget(256, True, 9, 512) == 256
    assert sample.completion_budget(256, False, 9, 256) == 247
    with pytest.raises(SystemExit):
        sample.completion_budget(256, False, 256, 256)  # no position left for even one token
