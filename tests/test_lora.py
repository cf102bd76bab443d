"""LoRA: adapters in peft's format that transformers loads, merging, LoRA training and its resume,
gradient checkpointing, the reference policy with adapters off, the KL estimator, and bad adapters."""
import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

import eval as eval_cli
import sample
import train
from nanoatr import lora
from nanoatr.model import Qwen3
from nanoatr.loss import kl_to_reference
from nanoatr.scoring import Reference, score
from rounding import U32, U64, qwen3_float64, sum_orders, within
from tiny import make_model_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import merge_adapter  # noqa: E402  (scripts/merge_adapter.py)
from conftest import error_line, jsonl, strict_file  # noqa: E402
from same_run import wall_clock  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY_QWEN3 = ROOT / "data/tiny-qwen3"


def hf_logits(base_dir, adapter_dir, ids):
    """Logits of transformers' Qwen3ForCausalLM with the adapter applied by peft, in float64: the weights as
    stored, so that against ours in float64 only rounding.qwen3_float64's rounding is left."""
    from peft import PeftModel
    from transformers import Qwen3ForCausalLM
    model = Qwen3ForCausalLM.from_pretrained(base_dir, dtype=torch.float64)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits


def ours64(model, ids):
    """Our logits in float64, of a copy of `model` (adapters and all)."""
    with torch.no_grad():
        return copy.deepcopy(model).double().eval()(ids)


def vs_hf(ours_logits, config):
    """The bound between our float64 logits and transformers' (its RMSNorm is other float32 code)."""
    return qwen3_float64(config, same_code=False) * float(ours_logits.abs().max())


def assert_merged_is_base_plus_adapter(base_dir, adapter_dir, merged_dir):
    """The merged checkpoint's weights are W + (alpha / r) B A, computed and stored in float32 (lora.merge):
    within one rounding of the sum (U32 of |W| + s |B| |A|) and the rank-r product's (sum_orders(r) of
    s |B| |A|) of it in float64; every other weight is the base's, bit for bit."""
    base, merged = ({k: v for f in sorted(Path(d).glob("model*.safetensors")) for k, v in
                     load_file(f).items()} for d in (base_dir, merged_dir))  # a sharded checkpoint's files too
    adapter = load_file(adapter_dir / "adapter_model.safetensors")
    config = strict_file(adapter_dir / "adapter_config.json")
    r, s = config["r"], config["lora_alpha"] / config["r"]
    changed = 0
    for key in base.keys() & merged.keys():
        name = "base_model.model." + key.removesuffix(".weight")
        if name + ".lora_A.weight" not in adapter:
            assert torch.equal(merged[key], base[key]), key
            continue
        w, a, b = (t.double() for t in (base[key], adapter[name + ".lora_A.weight"],
                                        adapter[name + ".lora_B.weight"]))
        bound = (U32 + sum_orders(r, U32)) * (w.abs() + s * b.abs() @ a.abs())
        assert ((merged[key].double() - (w + s * b @ a)).abs() <= bound).all(), key
        changed += 1
    layers = strict_file(base_dir / "config.json")["num_hidden_layers"]
    assert changed == layers * len(config["target_modules"]), changed  # every adapted projection


def randomize_lora_b(peft_model, seed=0):
    """lora_B starts at zero; random values make the adapter change the logits (or no test could fail)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


@pytest.mark.filterwarnings("error::UserWarning")  # saving and loading an adapter warn of nothing
def test_adapter_and_merge_load_in_transformers_with_the_same_logits(hf_dir, tmp_path):
    base, _ = hf_dir
    ours = Qwen3.from_pretrained(base)
    peft_model = lora.add_adapters(ours, 4, 8.0, lora.TARGETS, base=str(base))
    randomize_lora_b(peft_model)
    lora.save_adapter(peft_model, tmp_path / "adapter")
    config = strict_file(tmp_path / "adapter/adapter_config.json")
    assert (config["base_model_name_or_path"], config["r"], config["lora_alpha"], config["lora_dropout"],
            config["task_type"], sorted(config["target_modules"])) == (str(base), 4, 8.0, 0.0, "CAUSAL_LM",
                                                                       sorted(lora.TARGETS))
    keys = load_file(tmp_path / "adapter/adapter_model.safetensors").keys()
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys  # transformers' key names

    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    expected = ours64(ours, ids)  # compared in float64, the weights as stored
    assert (hf_logits(base, None, ids) - expected).abs().max() > 1e-2  # the adapter matters
    within(hf_logits(base, tmp_path / "adapter", ids), expected, vs_hf(expected, ours.config), "peft adapter")

    reloaded, tok_dir = lora.load_model(tmp_path / "adapter")  # the base comes from adapter_config.json
    within(ours64(reloaded, ids), expected, qwen3_float64(ours.config) * expected.abs().max(), "reloaded")

    # merged in float32 (lora.merge): its weights, then transformers' logits of them against ours
    lora.merge(base, tmp_path / "adapter", tmp_path / "merged")
    assert_merged_is_base_plus_adapter(base, tmp_path / "adapter", tmp_path / "merged")
    merged = ours64(Qwen3.from_pretrained(tmp_path / "merged"), ids)
    within(hf_logits(tmp_path / "merged", None, ids), merged, vs_hf(merged, ours.config), "merged")


LORA_RUN = ["--model", str(TINY_QWEN3), "--data", str(ROOT / "data/arith/train.jsonl"),
            "--eval-data", str(ROOT / "data/arith/heldout.jsonl"), "--eval-limit", "1", "--eval-k", "1",
            "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "32", "--no-compile",
            "--lora-rank", "4", "--lr", "2e-2", "--beta", "0.05", "--stop", "}", "--save-every", "1"]


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    """A 3-step LoRA run (with --merge) and a 2-step one resumed to 3 steps."""
    out = tmp_path_factory.mktemp("lora_runs")
    train.main([*LORA_RUN, "--out-dir", str(out), "--name", "whole", "--steps", "3", "--merge"])
    train.main([*LORA_RUN, "--out-dir", str(out), "--name", "part", "--steps", "2"])
    train.main(["--resume", str(out / "part"), "--steps", "3"])
    return out


def step_rows(run_dir):
    return {r["step"]: r for r in jsonl(run_dir / "metrics.jsonl") if "loss" in r}


def test_lora_checkpoint_is_an_adapter_and_resume_continues_the_run(lora_runs):
    ckpt = lora_runs / "whole/checkpoint"
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt", "tokenizer.json"} <= \
        {p.name for p in ckpt.iterdir()}
    assert not (ckpt / "model.safetensors").exists()  # the adapter, not the whole model
    whole, part = step_rows(lora_runs / "whole"), step_rows(lora_runs / "part")
    step_3 = [{k: v for k, v in rows[3].items() if not wall_clock(k)} for rows in (whole, part)]
    assert step_3[0] == step_3[1]  # the resumed step, exactly
    torch.testing.assert_close(load_file(lora_runs / "part/checkpoint/adapter_model.safetensors"),
                               load_file(ckpt / "adapter_model.safetensors"), rtol=0, atol=0)
    assert all(r["kl_ref"] >= 0 for r in whole.values()) and whole[3]["kl_ref"] > 0  # moved off the reference


def test_trained_adapter_and_merged_run_load_in_transformers(lora_runs):
    ckpt = lora_runs / "whole/checkpoint"
    assert max(v.abs().max().item() for k, v in load_file(ckpt / "adapter_model.safetensors").items()
               if "lora_B" in k) > 0  # training moved B off zero
    ours, _ = lora.load_model(ckpt)
    ids = torch.randint(0, 31, (2, 10), generator=torch.Generator().manual_seed(1))
    expected = ours64(ours, ids)  # in float64, the weights as stored
    within(hf_logits(TINY_QWEN3, ckpt, ids), expected, vs_hf(expected, ours.config), "trained adapter")
    assert_merged_is_base_plus_adapter(TINY_QWEN3, ckpt, lora_runs / "whole/merged")
    merged = ours64(Qwen3.from_pretrained(lora_runs / "whole/merged"), ids)
    within(hf_logits(lora_runs / "whole/merged", None, ids), merged, vs_hf(merged, ours.config), "merged run")
    # the adapter matters, far beyond what rounding can explain
    assert (hf_logits(TINY_QWEN3, None, ids) - expected).abs().max() > 100 * vs_hf(expected, ours.config)


def test_merge_command_writes_the_merged_run(lora_runs, tmp_path, capsys):
    merge_adapter.main(["--adapter", str(lora_runs / "whole/checkpoint"), "--out", str(tmp_path / "m")])
    assert f"into {TINY_QWEN3}" in capsys.readouterr().out  # the base named in adapter_config.json
    a, b = load_file(tmp_path / "m/model.safetensors"), load_file(lora_runs / "whole/merged/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "m/tokenizer.json").is_file()


def test_eval_and_sample_take_a_lora_checkpoint(lora_runs, tmp_path, capsys):
    ckpt = lora_runs / "whole/checkpoint"
    data = ["--data", str(ROOT / "data/arith/heldout.jsonl"), "--limit", "1", "--k", "1", "--max-new-tokens", "8"]
    eval_cli.main(["--model", str(ckpt), *data, "--out", str(tmp_path / "a.jsonl")])
    eval_cli.main(["--model", str(TINY_QWEN3), "--adapter", str(ckpt), *data, "--out", str(tmp_path / "b.jsonl")])
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert "whole" in capsys.readouterr().out  # the table names the run
    sample.main(["--model", str(TINY_QWEN3), "--adapter", str(ckpt), "--max-new-tokens", "8", "--temperature", "0",
                 "12+34"])
    assert capsys.readouterr().out.strip()


def test_gradient_checkpointing_gives_lora_the_same_gradients(tiny_model):
    model = copy.deepcopy(tiny_model).train()
    peft_model = lora.add_adapters(model, 4, 8.0, lora.TARGETS, base="tiny")
    randomize_lora_b(peft_model)
    g = torch.Generator().manual_seed(0)
    prompt, tokens = torch.randint(0, 97, (3, 5), generator=g), torch.randint(0, 97, (3, 7), generator=g)
    grads = []
    for checkpointing in (False, True):
        model.gradient_checkpointing = checkpointing
        peft_model.zero_grad(set_to_none=True)
        logp = score(model, prompt, torch.ones_like(prompt, dtype=torch.bool), tokens, 1.0).logp
        logp.sum().backward()
        grads.append({n: p.grad.clone() for n, p in peft_model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    for name in grads[0]:
        assert grads[1][name].abs().max() > 0, f"{name} got no gradient under checkpointing"
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def test_reference_is_the_base_with_adapters_off(tiny_model):
    base, model = copy.deepcopy(tiny_model), copy.deepcopy(tiny_model)
    peft_model = lora.add_adapters(model, 4, 8.0, lora.TARGETS, base="tiny")
    randomize_lora_b(peft_model)
    g = torch.Generator().manual_seed(0)
    prompt, tokens = torch.randint(0, 97, (2, 4), generator=g), torch.randint(0, 97, (2, 6), generator=g)
    mask = torch.ones_like(prompt, dtype=torch.bool)
    ref = Reference(model, peft_model.disable_adapter).logprobs(prompt, mask, tokens, 1.0)
    with torch.no_grad():
        assert torch.allclose(ref, score(base, prompt, mask, tokens, 1.0).logp, atol=1e-6)
        assert (ref - score(model, prompt, mask, tokens, 1.0).logp).abs().max() > 1e-3  # adapters back on


def test_kl_estimator_is_unbiased_for_kl_to_reference_with_its_gradient():
    """Exactly, over every action of one categorical state: E_old[w k3(rho)] = KL(pi || ref), and so are
    the gradients; plain k3(rho) on pi_old's samples is neither."""
    g, f64 = torch.Generator().manual_seed(0), torch.float64
    old = torch.randn(6, generator=g, dtype=f64).log_softmax(-1)
    ref = torch.randn(6, generator=g, dtype=f64).log_softmax(-1)
    theta = (old + 0.3 * torch.randn(6, generator=g, dtype=f64)).requires_grad_()
    logp = theta.log_softmax(-1)
    p_old = old.exp()
    per_action = kl_to_reference(logp[None], old[None], ref[None], torch.ones(1, 6))[0]
    estimate = (p_old * per_action).sum()
    exact = (logp.exp() * (logp - ref)).sum()
    # In float64. Each side, and each gradient, is a few elementwise operations (within 2 U64 apiece; a
    # dozen at most) and sums of 6 terms of size <= 10 (|log p| < 5, checked): within 6 x 10 x
    # (sum_orders(6) + 24 U64) of the exact value, and of each other within twice that, ~4e-13
    assert max(old.abs().max(), ref.abs().max(), logp.abs().max()) < 5
    tol = 2 * 6 * 10 * (sum_orders(6, U64) + 24 * U64)
    within(estimate, exact, tol, "KL estimate")
    grad_estimate, = torch.autograd.grad(estimate, theta, retain_graph=True)
    grad_exact, = torch.autograd.grad(exact, theta)
    within(grad_estimate, grad_exact, tol, "KL gradient")
    log_rho = ref - logp.detach()
    plain = (p_old * (log_rho.exp() - 1 - log_rho)).sum()
    assert abs(plain - exact.detach()) > 1e-3


def test_full_fine_tuning_reference_is_a_frozen_copy(tmp_path):
    """--beta with --lora-rank 0: the reference is --model as loaded; at the first minibatch of the
    first step the policy is still that model, so the penalty is exactly 0; once the policy has moved
    (a step with a correct sample among incorrect ones), it is not. On the CPU, so that the draws are
    the ones this test was written for (CUDA's generator draws others)."""
    i = LORA_RUN.index("--lora-rank")
    train.main([*LORA_RUN[:i], *LORA_RUN[i + 2:], "--out-dir", str(tmp_path), "--name", "f", "--steps", "3",
                "--minibatches", "1", "--lr", "1e-2", "--beta", "0.1", "--device", "cpu"])
    rows = step_rows(tmp_path / "f")
    assert rows[1]["kl_ref"] == 0 and max(rows[2]["kl_ref"], rows[3]["kl_ref"]) > 0


@pytest.mark.parametrize("case", ["another base", "lm_head target", "adapter as --model", "merge without lora"])
def test_bad_adapter_input_is_one_line(case, tmp_path, capsys, hf_dir):
    small = make_model_dir(tmp_path / "small")  # hidden size 32; hf_dir's model has 64
    if case == "another base":
        base, _ = hf_dir
        peft_model = lora.add_adapters(Qwen3.from_pretrained(base), 4, 8.0, lora.TARGETS, base=str(base))
        lora.save_adapter(peft_model, tmp_path / "adapter")
        main, args = eval_cli.main, ["--model", str(small), "--adapter", str(tmp_path / "adapter"),
                                     "--data", str(ROOT / "data/arith/heldout.jsonl"), "--out", str(tmp_path / "o")]
        message = f"was made for {base}: "
    else:
        (tmp_path / "adapter_dir").mkdir()
        (tmp_path / "adapter_dir/adapter_config.json").write_text("{}")
        args = {"lm_head target": ["--lora-rank", "4", "--lora-targets", "q_proj", "lm_head"],
                "adapter as --model": ["--model", str(tmp_path / "adapter_dir")],
                "merge without lora": ["--merge"]}[case]
        main, args = train.main, [*args, "--out-dir", str(tmp_path), "--steps", "1"]
        message = {"lm_head target": "lm_head is not supported", "adapter as --model": "is a LoRA adapter",
                   "merge without lora": "--merge needs a LoRA run"}[case]
    assert message in error_line(capsys, main, args)


@pytest.mark.parametrize("rank, held", [(0, "an adapter"), (4, "full weights")])  # swapped by hand: --resume
def test_a_checkpoint_of_the_other_kind_is_one_line(rank, held, tmp_path):  # refuses another --lora-rank
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(lora.AdapterError, match=f"holds {held} but the run has --lora-rank {rank}$"):
        lora.load_policy(SimpleNamespace(model="m", lora_rank=rank), TINY_QWEN3, tmp_path if rank == 0 else
                         TINY_QWEN3, "cpu")


def test_adapter_records_the_model_as_given_and_a_moved_base_says_what_to_pass(tmp_path, monkeypatch, capsys):
    """The base is recorded as --model was given (relative stays relative: the project folder can move), or
    as --base-name. A base that is not a directory here is one line saying --model BASE --adapter DIR."""
    monkeypatch.chdir(ROOT)
    i = LORA_RUN.index("--model")
    argv = [*LORA_RUN[:i], "--model", "data/tiny-qwen3", *LORA_RUN[i + 2:]]
    train.main([*argv, "--out-dir", str(tmp_path), "--name", "rel", "--steps", "1", "--eval-data"])
    ckpt = tmp_path / "rel/checkpoint"
    assert lora.read_config(ckpt)["base_model_name_or_path"] == "data/tiny-qwen3"
    assert lora.locate(ckpt).base == Path("data/tiny-qwen3")
    monkeypatch.chdir(tmp_path)  # elsewhere, the relative base is not there
    capsys.readouterr()
    data = ["--data", str(ROOT / "data/arith/heldout.jsonl"), "--limit", "1", "--k", "1", "--max-new-tokens", "4"]
    for main, args in [(eval_cli.main, ["--model", str(ckpt), *data, "--out", str(tmp_path / "o.jsonl")]),
                       (sample.main, ["--model", str(ckpt), "1+1"]),
                       (merge_adapter.main, ["--adapter", str(ckpt), "--out", str(tmp_path / "m")])]:
        err = error_line(capsys, main, args)
        assert "trained on data/tiny-qwen3" in err and f"pass --model BASE --adapter {ckpt}" in err
    assert "--adapter DIR and --out DIR" in error_line(capsys, merge_adapter.main, ["--adapter", str(ckpt)])
    eval_cli.main(["--model", str(TINY_QWEN3), "--adapter", str(ckpt), *data, "--out", str(tmp_path / "o.jsonl")])
    merge_adapter.main(["--adapter", str(ckpt), "--model", str(TINY_QWEN3), "--out", str(tmp_path / "m")])
    assert (tmp_path / "m/model.safetensors").is_file() and "note:" not in capsys.readouterr().err
