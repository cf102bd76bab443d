"""Hub ids work where a path works (--model Qwen/Qwen3-1.7B, as transformers and TRL users write it): resolved
through huggingface_hub's cache, tested without a network against a cache built here in its own layout
(models--ORG--NAME/snapshots/<commit>/..., refs/<branch or tag>), HF_HUB_OFFLINE=1."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from nanoatr.model import ModelError, Qwen3, files
from tiny import make_model_dir
from conftest import error_line, strict_file

ROOT = Path(__file__).resolve().parent.parent
REPO = "tiny-org/tiny-qwen3"
MAIN, V1 = "a" * 40, "b" * 40


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A hub cache holding REPO at two commits: main (seed 0) and the tag v1 (seed 1)."""
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / ("models--" + REPO.replace("/", "--"))
    for commit, ref, seed in ((MAIN, "main", 0), (V1, "v1", 1)):
        make_model_dir(repo / "snapshots" / commit, seed=seed)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return cache


@pytest.fixture
def offline(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    return hub_cache


def env(cache):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "OMP_NUM_THREADS": "1"}


def test_a_hub_id_resolves_to_its_snapshot_at_a_revision(offline):
    main = files.local_dir(REPO)
    assert main == offline / "models--tiny-org--tiny-qwen3" / "snapshots" / MAIN
    assert files.local_dir(REPO, revision="v1").name == V1
    weights = [Qwen3.from_pretrained(files.local_dir(REPO, r)).lm_head.weight for r in (None, "v1")]
    assert not (weights[0] == weights[1]).all(), "two revisions, two models"


def test_a_local_directory_wins_and_has_no_revision(tmp_path, offline):
    assert files.local_dir(tmp_path) == tmp_path
    with pytest.raises(ModelError, match="is a local directory, which has no revisions"):
        files.local_dir(tmp_path, revision="v1")


@pytest.mark.parametrize("name, revision, message", [
    ("tiny-org/absent", None, "--model tiny-org/absent is not in the local hub cache and HF_HUB_OFFLINE is set: "
                              "download it where there is a network \\((hf|huggingface-cli) download tiny-org/absent\\), "
                              "or pass a local model directory"),
    (REPO, "v9", f"--model {REPO} at revision v9 is not in the local hub cache"),
    ("no/such/dir", None, "--model no/such/dir: no such directory"),
    ("nohub", None, "--model nohub: no such directory"),
])
def test_what_cannot_be_found_is_one_line_saying_which(offline, name, revision, message):
    with pytest.raises(ModelError, match=message) as e:
        files.local_dir(name, revision)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("error, message", [
    (RepositoryNotFoundError, "no such model on the hub \\(a private one needs (hf auth|huggingface-cli) login\\)"),
    (GatedRepoError, "is gated on the hub: accept its license there and log in"),
])
def test_the_hubs_own_refusals_are_one_line(monkeypatch, error, message):
    """Online answers the sandbox cannot get (no such repo, a gated one): huggingface_hub's own exceptions."""
    response = type("Response", (), {"headers": {}, "request": None, "status_code": 404})()  # what the error reads

    def refuse(*a, **kw):
        raise error("refused", response=response)
    monkeypatch.setattr(files, "snapshot_download", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(ModelError, match=message):
        files.local_dir("some-org/some-model")


def run(script, *args, cache, cwd):
    return subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True, text=True, cwd=cwd,
                          env=env(cache), timeout=600)


def test_train_eval_sample_and_merge_take_a_hub_id(hub_cache, tmp_path):
    """train.py --model ORG/NAME (LoRA: the adapter records the hub id as its base); eval.py on that run's
    checkpoint finds the base through the hub cache; sample.py and merge_adapter.py too; --revision."""
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(4)))
    out = run("train.py", "--model", REPO, "--revision", "v1", "--data", str(data), "--eval-data", "--steps", "1",
              "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--lora-rank", "2",
              "--no-compile", "--out-dir", str(tmp_path / "runs"), "--name", "r", cache=hub_cache, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "runs" / "r"
    assert strict_file(run_dir / "config.json")["model"] == REPO  # as given, not the cache path
    assert strict_file(run_dir / "checkpoint/adapter_config.json")["base_model_name_or_path"] == REPO
    ev = run("eval.py", "--model", str(run_dir / "checkpoint"), "--data", str(data), "--k", "1",
             "--max-new-tokens", "4", "--out", str(tmp_path / "e.jsonl"), cache=hub_cache, cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    sa = run("sample.py", "--model", REPO, "--max-new-tokens", "3", "1+1=", cache=hub_cache, cwd=tmp_path)
    assert sa.returncode == 0, sa.stderr
    merged = run("scripts/merge_adapter.py", "--adapter", str(run_dir / "checkpoint"), "--out", str(tmp_path / "m"),
                 cache=hub_cache, cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert (tmp_path / "m" / "model.safetensors").is_file()
    bad = run("sample.py", "--model", "tiny-org/absent", "1+1=", cache=hub_cache, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: --model tiny-org/absent")
    shutil.rmtree(tmp_path / "runs")


def test_sft_takes_a_hub_id_and_names_a_missing_directory(offline, tmp_path, capsys):
    """sft.py resolves --model as train.py and sample.py do: the hub id from the cache (its LoRA adapter
    records the id as its base, the merged model is written); a missing directory is "no such directory"."""
    import sft
    data = tmp_path / "sft.jsonl"
    rows = [{"problem": f"{i}+1", "solution": f"{i}+1={i + 1}", "answer": str(i + 1)} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sft.main(["--model", REPO, "--data", str(data), "--lora-rank", "2", "--steps", "1", "--batch-size", "2",
              "--max-len", "64", "--out-dir", str(tmp_path), "--name", "s"])
    assert strict_file(tmp_path / "s/config.json")["model"] == REPO
    adapter = strict_file(tmp_path / "s/checkpoint/adapter_config.json")
    assert adapter["base_model_name_or_path"] == REPO
    assert (tmp_path / "s/model/model.safetensors").is_file()
    capsys.readouterr()
    missing = tmp_path / "models/Qwen3-1.7B"
    argv = ["--model", str(missing), "--data", str(data), "--out-dir", str(tmp_path), "--name", "m"]
    assert error_line(capsys, sft.main, argv) == f"error: --model {missing}: no such directory"
    assert not (tmp_path / "m").exists()


def test_the_older_cli_where_hf_is_not_installed(monkeypatch):
    monkeypatch.setattr(files.shutil, "which", lambda *a, **kw: None)  # huggingface_hub < 0.34 has no `hf`
    assert [files.hub_cli(a) for a in ("download o/m", "login")] == ["huggingface-cli download o/m", "huggingface-cli login"]


@pytest.mark.parametrize("action", ["download tiny-org/absent", "login"])
def test_the_hub_command_the_errors_name_is_installed(action):
    """The download / login command a hub error tells the user to run is one this environment has and
    knows (its --help runs): huggingface_hub 1.0 dropped `huggingface-cli` for `hf`, and the message
    named the old one."""
    cli, *words = files.hub_cli(action).split()
    found = shutil.which(cli, path=str(Path(sys.executable).parent)) or shutil.which(cli)
    assert found, f"the errors name {cli}, which is not installed here"
    subcommand = words[:-1] if action.startswith("download") else words  # without the model's name
    help_ = subprocess.run([found, *subcommand, "--help"], capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0, help_.stdout + help_.stderr
