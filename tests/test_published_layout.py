"""Like a published checkpoint (issue 16): Qwen3's real tokenizer and chat template on tiny random-weight
Qwen3 directories laid out as Qwen3-1.7B (tied), Qwen3-8B (untied, sharded) and Qwen3-1.7B-Base are
(tests/qwen3_dirs.py). Prompts equal apply_chat_template; samples stop where transformers' generate
stops, at EOS ids from every place it reads them, and at special-token stop strings; greedy ids equal
transformers.generate; LoRA adapters and merges round-trip through peft and transformers; full
fine-tuning and LoRA steps run in bfloat16 on CPU; checkpoints keep the special-token ids."""
import json

import pytest
import torch

import eval as eval_cli
import sample
import train
from nanoatr import lora
from nanoatr.data import Problem
from nanoatr.model import Qwen3
from nanoatr.rollout import generate
from nanoatr.tokenizer import encode_prompts, load_tokenizer, eos_token_ids
from qwen3_dirs import CHAT, ENDOFTEXT, IM_END, NO_THINKING, hf_model, script, write_dir
from rounding import qwen3_float64, within
from conftest import error_line, jsonl, strict_file

PROBLEMS = [("What is 1+1?", "2"), ("Compute 7 - 5, please, and explain every step of it carefully.", "2")]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3")
    out = {"instruct": write_dir(root / "instruct", hf_model(tie=True)),                     # Qwen3-1.7B
           "instruct-8b": write_dir(root / "instruct-8b", hf_model(tie=False, seed=1), shard=True)}  # Qwen3-8B
    out["base"] = write_dir(root / "base", script(hf_model(tie=False, seed=2)), kind="base")  # Qwen3-1.7B-Base
    # The case: config.json's eos is a list, and there is no generation_config.json.
    out["config-eos"] = write_dir(root / "config-eos", None, config={"eos_token_id": [IM_END, ENDOFTEXT]},
                                  generation={}, weights_from=out["base"])
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "problems.jsonl"
    path.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in PROBLEMS))
    return str(path)


@pytest.fixture(scope="module")
def tok(dirs):
    return load_tokenizer(dirs["instruct"])


def hf(path, dtype=torch.float32):
    from transformers import Qwen3ForCausalLM
    return Qwen3ForCausalLM.from_pretrained(path, dtype=dtype).eval()


def chat_ids(tok, question, system=None, **kw):
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": question}]
    return list(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True,
                                        **kw)["input_ids"])


def hf_greedy(path, prompt, max_new_tokens, dtype=torch.float32):
    """transformers' generate, greedy, with the directory's own EOS settings: the new token ids."""
    with torch.no_grad():
        out = hf(path, dtype).generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens,
                                       temperature=None, top_p=None, top_k=None)
    return out[0, len(prompt):].tolist()


def ours_greedy(path, tok, prompt, max_new_tokens, stop=(), dtype=torch.float32):
    from nanoatr.tokenizer import make_stopper
    out = generate(Qwen3.from_pretrained(path, dtype=dtype).eval(), [prompt], max_new_tokens, temperature=0.0,
                   eos_token_id=eos_token_ids(tok, path), pad_id=tok.pad_token_id, stopper=make_stopper(tok, stop))
    return out.tokens[0, :int(out.mask[0].sum())].tolist()


class Recorder:
    """Wraps rollout.generate where a command calls it; keeps every prompt it was given."""

    def __init__(self, monkeypatch, *where):
        self.prompts = []
        for module in where:
            monkeypatch.setattr(module, "generate", self)

    def __call__(self, model, prompts, *args, **kw):
        self.prompts += [list(p) for p in prompts]
        return generate(model, prompts, *args, **kw)


# ----------------------------------------------------------------------------
# Prompts

FLAGS = {"default": ([], {}), "--thinking": (["--thinking"], dict(enable_thinking=True)),
         "--no-thinking": (["--no-thinking"], dict(enable_thinking=False)),
         "--system-prompt": (["--system-prompt", "Be brief."], dict(system="Be brief."))}


@pytest.mark.parametrize("case", [*FLAGS, "--prompt-template"])
def test_prompts_equal_apply_chat_template_in_evaluation(case, dirs, data, tok, tmp_path, monkeypatch):
    import nanoatr.evaluate
    record = Recorder(monkeypatch, nanoatr.evaluate)
    template = "Question: {question}\nAnswer:"
    flags = ["--prompt-template", template] if case == "--prompt-template" else FLAGS[case][0]
    eval_cli.main(["--model", str(dirs["instruct"]), "--data", data, "--k", "1", "--max-new-tokens", "1",
                   "--out", str(tmp_path / "o.jsonl"), *flags])
    if case == "--prompt-template":
        expected = [tok.encode(template.format(question=q), add_special_tokens=False) for q, _ in PROBLEMS]
    else:
        expected = [chat_ids(tok, q, **FLAGS[case][1]) for q, _ in PROBLEMS]
    assert record.prompts == expected
    kw = {"template": template} if case == "--prompt-template" else \
        {"system_prompt": FLAGS[case][1].get("system"), "enable_thinking": FLAGS[case][1].get("enable_thinking")}
    assert encode_prompts(tok, [Problem(q, a) for q, a in PROBLEMS], **kw) == expected  # what training encodes


def test_ignored_prompt_flags_are_errors(dirs, capsys):
    for argv, message in [(["--thinking", "--prompt-template", "Q: {question}"], "--thinking has no effect with "
                                                                                 "--prompt-template"),
                          (["--system-prompt", "S", "--raw"], "--system-prompt has no effect with --raw")]:
        assert error_line(capsys, sample.main, ["--model", str(dirs["instruct"]), *argv, "hi"]).startswith(
            f"error: {message}")
    with pytest.raises(SystemExit):
        train.main(["--model", str(dirs["instruct"]), "--no-thinking", "--prompt-template", "Q: {question}"])
    assert "--no-thinking has no effect with --prompt-template" in capsys.readouterr().err


# ----------------------------------------------------------------------------
# Stops: EOS ids from every place transformers reads them, special-token stop strings

EOS_PLACES = {  # config.json's special-token ids, generation_config.json ({} = none)
    "tokenizer only": ({"bos_token_id": None, "eos_token_id": None}, {}),
    "config.json list": ({"eos_token_id": [IM_END, ENDOFTEXT]}, {}),
    "config.json int": ({"eos_token_id": ENDOFTEXT}, {}),
    "generation_config.json list": ({"eos_token_id": IM_END}, {"eos_token_id": [IM_END, ENDOFTEXT]}),
    "generation_config.json int": ({"eos_token_id": None}, {"eos_token_id": ENDOFTEXT}),
}


@pytest.mark.parametrize("place", EOS_PLACES)
def test_eos_ids_from_every_place_stop_where_transformers_stops(place, dirs, tok, tmp_path):
    config, generation = EOS_PLACES[place]
    path = write_dir(tmp_path / "m", None, config=config, generation=generation, weights_from=dirs["base"])
    theirs = hf(path).generation_config.eos_token_id
    theirs = set(theirs if isinstance(theirs, list) else [] if theirs is None else [theirs])
    assert set(eos_token_ids(tok, path)) == theirs | {IM_END}  # the instruct tokenizer's eos is <|im_end|>
    prompt = chat_ids(tok, "Hi?", enable_thinking=False)  # the scripted model then says " Hi there" <|endoftext|>
    expected = hf_greedy(path, prompt, 8)
    assert ours_greedy(path, tok, prompt, 8) == expected
    assert (expected == NO_THINKING[1:4]) == (ENDOFTEXT in theirs)


def test_config_eos_list_without_generation_config_stops_sample(dirs, capsys):
    """The issue's case: transformers stops at config.json's <|endoftext|>; sample.py ran on to the budget."""
    sample.main(["--model", str(dirs["config-eos"]), "--no-thinking", "--temperature", "0", "--max-new-tokens",
                 "12", "Hi?"])
    out, err = capsys.readouterr()
    assert out == " Hi there\n" and "(3 tokens, stopped)" in err


@pytest.mark.parametrize("stop, text, end, correct", [
    (["--stop", "<|im_end|>"], " The answer is 4", IM_END, False),  # the invented turn's \\boxed{2} unseen
    ([], " The answer is 4 \\boxed{2}", ENDOFTEXT, True)], ids=["stop", "own-eos"])
def test_special_token_stop_string_in_sample_and_eval(dirs, data, tmp_path, capsys, stop, text, end, correct):
    """--stop "<|im_end|>" on a base model (eos <|endoftext|>): the invented next turn is neither printed nor
    graded; the length counts the tokens kept (the special token included), never the text re-encoded without
    it. sample.py's prompt comes after --stop and is still a prompt (--stop takes one string)."""
    sample.main(["--model", str(dirs["base"]), "--temperature", "0", "--max-new-tokens", "20", *stop,
                 "What is 2+2?"])
    out, err = capsys.readouterr()
    assert out == text + "\n" and f"({CHAT.index(end)} tokens, stopped)" in err
    eval_cli.main(["--model", str(dirs["base"]), "--data", data, "--k", "2", "--max-new-tokens", "20",
                   "--out", str(tmp_path / "e.jsonl"), *stop])
    rows = jsonl(tmp_path / "e.jsonl")[1:]
    assert {(r["completion"], r["length"], r["correct"], r["truncated"]) for r in rows} == \
        {(text, CHAT.index(end), correct, False)}


def test_special_token_stop_string_in_training(dirs, data, tmp_path):
    """A base model's rollout with --stop "<|im_end|>": the tokens after it (an invented turn holding the
    right answer) are neither trained on nor graded."""
    train.main(["--model", str(dirs["base"]), "--data", data, "--eval-data", "--stop", "<|im_end|>",
                "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "16", "--steps", "1",
                "--no-compile", "--out-dir", str(tmp_path), "--name", "r"])
    row = jsonl(tmp_path / "r/metrics.jsonl")[-1]
    assert (row["completion_len"], row["reward_mean"], row["truncated"]) == (CHAT.index(IM_END), 0.0, 0.0)


# ----------------------------------------------------------------------------
# Greedy parity, LoRA through peft, merges

@pytest.mark.parametrize("layout", ["instruct", "instruct-8b"])
def test_greedy_ids_equal_transformers_generate(layout, dirs, tok):
    """In float64: two float32 forwards' argmax over 151,936 random logits could part on a near-tie."""
    prompt = chat_ids(tok, PROBLEMS[1][0])
    expected = hf_greedy(dirs[layout], prompt, 12, torch.float64)
    assert len(expected) == 12  # random weights: no EOS, the whole budget compared
    assert ours_greedy(dirs[layout], tok, prompt, 12, dtype=torch.float64) == expected


@pytest.mark.parametrize("layout", ["instruct", "instruct-8b"])
def test_lora_adapter_and_merge_round_trip_through_peft(layout, dirs, tmp_path):
    """test_lora's round trip on the published layouts (the 8B's: untied and sharded), the base recorded by
    its hub name; the merge keeps generation_config.json and config.json's special-token ids."""
    from test_lora import assert_merged_is_base_plus_adapter, hf_logits, ours64, randomize_lora_b, vs_hf
    base = dirs[layout]
    ours = Qwen3.from_pretrained(base)
    peft_model = lora.add_adapters(ours, 4, 8.0, lora.TARGETS, base="Qwen/Qwen3-1.7B")
    randomize_lora_b(peft_model)
    lora.save_adapter(peft_model, tmp_path / "adapter")
    assert strict_file(tmp_path / "adapter/adapter_config.json")["base_model_name_or_path"] == \
        "Qwen/Qwen3-1.7B"
    ids = torch.randint(0, 151_000, (2, 9), generator=torch.Generator().manual_seed(0))
    expected = ours64(ours, ids)
    within(hf_logits(base, tmp_path / "adapter", ids), expected, vs_hf(expected, ours.config), "peft adapter")
    lora.merge(base, tmp_path / "adapter", tmp_path / "merged")
    assert_merged_is_base_plus_adapter(base, tmp_path / "adapter", tmp_path / "merged")
    merged = ours64(Qwen3.from_pretrained(tmp_path / "merged"), ids)
    within(hf_logits(tmp_path / "merged", None, ids), merged, vs_hf(merged, ours.config), "merged")
    assert hf(tmp_path / "merged").generation_config.eos_token_id == [IM_END, ENDOFTEXT]
    config = strict_file(tmp_path / "merged/config.json")
    assert (config["bos_token_id"], config["eos_token_id"]) == (ENDOFTEXT, IM_END)


# ----------------------------------------------------------------------------
# Training steps in bfloat16 on CPU, and what their checkpoints carry

def test_paper_preset_full_fine_tuning_step_in_bf16(dirs, data, tmp_path, capsys):
    """--preset paper --lora-rank 0: float32 weights under bf16 autocast, prompts of different lengths (the
    prefill's padding-skipping MLP crashed). The checkpoint keeps config.json's EOS list, so transformers'
    generate on it stops (no generation_config.json came along)."""
    train.main(["--preset", "paper", "--lora-rank", "0", "--model", str(dirs["config-eos"]), "--data", data,
                "--eval-data", "--steps", "1", "--max-new-tokens", "8", "--no-compile", "--out-dir", str(tmp_path),
                "--name", "full"])
    assert "held-out" not in capsys.readouterr().out  # --eval-data with no file: no evaluation
    run = tmp_path / "full"
    assert strict_file(run / "config.json")["dtype"] == "bfloat16"
    ckpt = run / "checkpoint"
    assert strict_file(ckpt / "config.json")["eos_token_id"] == [IM_END, ENDOFTEXT]
    assert not (ckpt / "generation_config.json").exists()
    tok = load_tokenizer(ckpt)
    assert hf_greedy(ckpt, chat_ids(tok, "Hi?", enable_thinking=False), 12) == NO_THINKING[1:4]


def test_lora_step_in_bf16_records_the_base_name(dirs, data, tok, tmp_path, monkeypatch, capsys):
    record = Recorder(monkeypatch, train)
    train.main(["--model", str(dirs["instruct"]), "--data", data, "--eval-data", "--lora-rank", "4",
                "--dtype", "bfloat16", "--base-name", "Qwen/Qwen3-1.7B", "--merge", "--system-prompt", "Be brief.",
                "--no-thinking", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "6",
                "--steps", "1", "--no-compile", "--out-dir", str(tmp_path), "--name", "lora"])
    assert sorted(map(tuple, record.prompts)) == sorted(tuple(chat_ids(tok, q, system="Be brief.",
                                                                       enable_thinking=False))
                                                        for q, _ in PROBLEMS for _ in range(2))
    ckpt, merged = tmp_path / "lora/checkpoint", tmp_path / "lora/merged"
    assert strict_file(ckpt / "adapter_config.json")["base_model_name_or_path"] == "Qwen/Qwen3-1.7B"
    assert strict_file(merged / "config.json")["eos_token_id"] == IM_END
    assert strict_file(merged / "generation_config.json")["eos_token_id"] == [IM_END, ENDOFTEXT]
    capsys.readouterr()
    err = error_line(capsys, sample.main, ["--model", str(ckpt), "hi"])  # its base is a name, not a directory
    assert f"pass --model BASE --adapter {ckpt}" in err
    sample.main(["--model", str(dirs["instruct"]), "--adapter", str(ckpt), "--max-new-tokens", "3", "hi"])
    assert "temperature 0.6, top-k 20, top-p 0.95 (from " in capsys.readouterr().err  # the checkpoint's copy


# ----------------------------------------------------------------------------
# Sampling defaults from generation_config.json

def test_sampling_defaults_come_from_generation_config(dirs, data, tmp_path, capsys):
    sample.main(["--model", str(dirs["instruct"]), "--max-new-tokens", "2", "hi"])
    err = capsys.readouterr().err
    assert f"sampling: temperature 0.6, top-k 20, top-p 0.95 (from {dirs['instruct']}/generation_config.json)" in err
    sample.main(["--model", str(dirs["instruct"]), "--max-new-tokens", "2", "--temperature", "0", "hi"])
    assert "sampling: temperature 0.0 (--temperature), top-k 20 (generation_config.json), top-p 0.95 " \
           "(generation_config.json)" in capsys.readouterr().err
    sample.main(["--model", str(dirs["base"]), "--max-new-tokens", "2", "hi"])  # Base: do_sample false, no values
    assert "sampling: temperature 1.0, top-k 0, top-p 1.0 (defaults; " in capsys.readouterr().err
    eval_cli.main(["--model", str(dirs["instruct"]), "--data", data, "--k", "1", "--max-new-tokens", "2",
                   "--top-p", "0.9", "--out", str(tmp_path / "o.jsonl")])
    settings = jsonl(tmp_path / "o.jsonl")[0]["settings"]
    assert (settings["temperature"], settings["top_k"], settings["top_p"]) == (0.6, 20, 0.9)
