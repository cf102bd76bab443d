"""The paper's chain end to end, a few steps of each stage on the CPU (docs/real-scale.md, "The chain on a
CPU"): the hub's files (tests/hub_fixtures.py, offline) -> data/get_paper_data.py -> sft.py on the
embedded tiny model -> train.py from the SFT's model -> Table 2, from the run (scripts/runs_table.py) and
afresh (eval.py).

Run: python -m pytest tests/test_pipeline.py -q
"""
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import eval as eval_cmd  # noqa: E402
import sft as sft_cmd  # noqa: E402
import train  # noqa: E402
from hub_fixtures import write_hub  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
get_paper_data = pytest.importorskip("get_paper_data")  # data/ is on the path through hub_fixtures
sys.path.insert(0, str(ROOT / "scripts"))
import runs_table  # noqa: E402
from conftest import jsonl  # noqa: E402


def test_data_sft_rl_table(tmp_path, capsys):
    hub, data, runs = write_hub(tmp_path / "hub", sft_rows=200, prompts=64), tmp_path / "data", tmp_path / "runs"
    get_paper_data.main(["--from-dir", str(hub), "--out", str(data), "--sft-size", "64", "--sft-heldout", "8"])
    benchmarks = [str(data / f"{n}.jsonl") for n in ("amc23", "aime24", "aime25")]
    sft_cmd.main(["--model", str(ROOT / "data/tiny-qwen3"), "--data", str(data / "omr-sft.jsonl"),
                  "--eval-data", str(data / "omr-heldout.jsonl"), "--lora-rank", "4", "--steps", "2",
                  "--batch-size", "8", "--max-len", "64", "--eval-k", "2", "--out-dir", str(runs), "--name", "sft"])
    train.main(["--model", str(runs / "sft/model"), "--data", str(data / "dapo-math-17k.jsonl"), "--eval-data",
                *benchmarks, "--eval-limit", "4", "--eval-k", "2", "--steps", "2", "--eval-every", "1",
                "--prompts-per-step", "2", "--group-size", "4", "--lora-rank", "4", "--no-compile",
                "--out-dir", str(runs), "--name", "rl"])
    capsys.readouterr()
    runs_table.main([str(runs / "rl")])
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["Method", "amc23", "aime24", "aime25", "Average"]
    assert [line.split("  ")[0] for line in table[2:5]] == ["Base model (step 0)", "kl3 (delta=0.07) final",
                                                            "kl3 (delta=0.07) best"]
    summary = eval_cmd.main(["--model", str(runs / "rl/checkpoint"), "--data", *benchmarks, "--limit", "4",
                             "--k", "2", "--out", str(tmp_path / "eval.jsonl")])
    assert set(summary) == {"amc23", "aime24", "aime25"}
    sft_rows = jsonl(runs / "sft/metrics.jsonl")
    assert [r["step"] for r in sft_rows if "eval/mean@2" in r] == [0, 2]
