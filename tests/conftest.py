"""Tiny random Qwen3 checkpoints built in-process (no downloads), one CPU thread, the --slow option, and the
strict reading of the JSON files the project writes."""
import json
import os
from pathlib import Path

import pytest
import torch

# One torch thread, in this process and the commands the tests start (train.py's --threads 0 takes
# OMP_NUM_THREADS as the user's choice): tiny models gain nothing from a second, and beside other busy
# processes two threads of one process spin-wait on each other. Measured on this 2-core VM beside two
# one-thread training runs: test_train, test_loss and test_decode took 469 s with torch's default (2), 163 s
# with 1. A test of the thread logic sets its own (tests/test_distributed.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# loss.policy_loss compiles one function; each --clip method is its own graph of it. A run uses one
# method, but the tests loop over all of them: room for every method's graph (default 8).
torch._dynamo.config.recompile_limit = 64


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (about 45 s more on 2 cores; see README)")


# The core's tests, split off the way nanoatr/ is: the files that test what a student reads (the rules, the
# loss, the model, the rollout, the rewards and the verifier, grpo.py), run alone by `make test-core`
# (python -m pytest -q -m core) in the edit-run loop; every other file tests the machinery, the commands and
# the tools. CI runs them all. tests/test_structure.py checks that each name here is a file.
CORE_TESTS = {"test_advantages.py", "test_divergence.py", "test_loss.py", "test_model.py", "test_rollout.py",
              "test_temperature.py", "test_evaluate.py", "test_verifier.py",
              "test_tokenizer.py", "test_grpo.py"}


def pytest_ignore_collect(collection_path, config):
    """Under -m core the other test files are not even imported: collecting them all costs ~50 s."""
    if config.getoption("markexpr") == "core" and collection_path.name.startswith("test_") \
            and collection_path.suffix == ".py":
        return collection_path.name not in CORE_TESTS
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long end-to-end check, run with --slow (README: Test)")
    config.addinivalue_line("markers", "core: a test of the core (CORE_TESTS): make test-core runs these")


def pytest_collection_modifyitems(config, items):
    """The default run skips the few tests marked slow (`make test`, what CI runs: about 10.5 minutes of
    pytest on this 2-core VM with a worker per core, 2026-11-28); `python -m pytest -q --slow` runs them
    too. The core's files are marked core."""
    for item in items:
        if item.path.name in CORE_TESTS:
            item.add_marker(pytest.mark.core)
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _wandb_offline(monkeypatch, tmp_path_factory):
    """No test reaches wandb's servers (--report-to wandb runs offline, into a temporary folder unless the
    test names its own), and wandb, which keeps one service per process with the settings of its first run,
    is torn down after a test that ran it, so the next test's run writes where that test says."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                        "WANDB_DIR": str(tmp_path_factory.getbasetemp())}.items():
        monkeypatch.setenv(name, value)
    yield
    import sys
    wandb = sys.modules.get("wandb")  # None: a test that hides the package
    if wandb is not None:
        wandb.teardown()


def strict(text):
    """JSON as every parser but Python's reads it: no NaN or Infinity, which json.loads takes. The tests read
    each file the project writes (metrics.jsonl, samples.jsonl, config.json, results.json, eval.py's --out,
    a checkpoint's JSON) through this, strict_file or jsonl."""
    def refuse(token):
        raise ValueError(f"{token} is no JSON (a writer let a non-finite number through)")
    return json.loads(text, parse_constant=refuse)


def strict_file(path):
    return strict(Path(path).read_text())


def jsonl(path) -> list:
    return [strict(line) for line in Path(path).read_text().splitlines()]


def metrics(run_dir) -> list:
    return jsonl(Path(run_dir) / "metrics.jsonl")


def error_line(capsys, main, argv, code: int = 2, mid_run: bool = False) -> str:
    """main(argv) exits with `code` (2: a bad flag or file) after one line on stderr, "error: ...", and
    nothing else there (no traceback; mid_run: but the run's progress bar before it): that line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    if mid_run:
        bar, _, err = err.partition("\n")
        assert bar.startswith("\rtrain: "), bar
    assert e.value.code == code and err.count("\n") == 1 and err.startswith("error: "), (e.value.code, err)
    return err.rstrip("\n")


TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
            max_position_embeddings=256)


def make_hf_model(tie=False, theta=10000.0, seed=0, **overrides):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(**{**TINY, **overrides}, tie_word_embeddings=tie,
                      rope_parameters={"rope_type": "default", "rope_theta": theta})
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # HF zero-inits nothing we rely on, but make norms non-trivial
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="session", params=[False, True], ids=["untied", "tied"])
def hf_dir(request, tmp_path_factory):
    """A saved tiny transformers Qwen3ForCausalLM and the model object itself."""
    model = make_hf_model(tie=request.param)
    path = tmp_path_factory.mktemp("hf_tied" if request.param else "hf_untied")
    model.save_pretrained(path)
    return path, model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A one-layer tied model directory with the embedded task's tokenizer (tests/tiny.py); none changes it."""
    from tiny import make_model_dir
    return make_model_dir(tmp_path_factory.mktemp("tiny"), num_hidden_layers=1, tie_word_embeddings=True)


@pytest.fixture(scope="session")
def tiny_model():
    """Our Qwen3 with random weights (float32, eval mode)."""
    from nanoatr.model import Qwen3, Qwen3Config, init_weights
    cfg = Qwen3Config(**TINY, rope_theta=10000.0)
    model = Qwen3(cfg)
    init_weights(model, std=0.1, seed=1)
    return model.eval()
