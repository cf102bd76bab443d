"""A stand-in for the Hugging Face hub: the five datasets of data/get_paper_data.py in their real formats
(parquet or jsonl, the hub's paths, columns and types), holding the embedded arithmetic task, so that the
paper's chain (data -> SFT -> RL -> Table 2) runs offline on the tiny model.

    python tests/hub_fixtures.py /tmp/chain/hub      # then: data/get_paper_data.py --from-dir /tmp/chain/hub

DAPO-Math-17k holds data/arith/train.jsonl's prompts (each three times, as the hub's file repeats its
own), the benchmarks data/arith/heldout.jsonl's problems (AIME 2024: 30, AIME 2025: 30, AMC 2023: 40),
OpenMathReasoning make_default.py's worked solutions of other questions, in two shards, a few rows of
each kind get_paper_data.py must skip among them. Needs pyarrow.
"""
import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "data"))
import make_default  # noqa: E402
from nanoatr.data import arith_key, load_problems  # noqa: E402


def parquet(path: Path, rows: list[dict]):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def omr_row(problem: str, solution: str, answer: str, kind: str = "has_answer_extracted") -> dict:
    return {"expected_answer": answer, "problem_type": kind, "problem_source": "aops_c4_high_school_math",
            "generation_model": "DeepSeek-R1", "pass_rate_72b_tir": "0.75", "problem": problem,
            "generated_solution": solution, "inference_mode": "cot", "used_in_kaggle": False}


DAPO_TEMPLATE = ("Solve the following math problem step by step. The last line of your response should be of "
                 "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
                 '{}\n\nRemember to put your answer on its own line after "Answer:".')


def dapo_row(problem: str, truth: str, index: str = "0") -> dict:
    """A DAPO-Math-17k row as the hub's file holds it: the problem inside its answer-format template."""
    prompt = [{"content": DAPO_TEMPLATE.format(problem), "role": "user"}]
    return {"data_source": "math_dapo", "prompt": prompt,
            "ability": "MATH", "reward_model": {"ground_truth": truth, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": index}}


def write_hub(root, sft_rows: int = 2000, prompts: int = 1000) -> Path:
    root = Path(root)
    train = load_problems(ROOT / "data/arith/train.jsonl")[:prompts]
    heldout = load_problems(ROOT / "data/arith/heldout.jsonl")
    dapo = [{"data_source": "math_dapo", "prompt": [{"content": p.question, "role": "user"}], "ability": "MATH",
             "reward_model": {"ground_truth": p.answer, "style": "rule-lighteval/MATH_v2"},
             "extra_info": {"index": f"{i:08x}-0000-4000-8000-000000000000"}} for i, p in enumerate(train)]
    parquet(root / "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet", dapo * 3)
    parquet(root / "HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet",
            [{"id": 60 + i, "problem": p.question, "solution": "", "answer": p.answer, "url": "", "year": "2024"}
             for i, p in enumerate(heldout[:30])])
    path = root / "math-ai/aime25/test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"problem": p.question, "answer": p.answer, "id": str(i)}) + "\n"
                            for i, p in enumerate(heldout[30:60])))
    parquet(root / "math-ai/amc23/data/test-00000-of-00001.parquet",
            [{"id": i, "question": p.question, "answer": float(p.answer), "url": ""} for i, p in enumerate(heldout[60:100])])
    evaluation = {arith_key(p) for p in heldout + load_problems(ROOT / "data/arith/val.jsonl")}
    stream, rng = make_default.sft_stream(7, evaluation), random.Random(7)
    rows = []
    while len(rows) < sft_rows:
        question, solution = next(stream)
        answer = solution.rsplit("{", 1)[1].rstrip("}")
        skip = rng.random()  # one row in ten is of a kind get_paper_data.py leaves out
        rows.append(omr_row(question, solution.replace("\\boxed", "") if skip < 0.05 else solution, answer,
                            "converted_proof" if 0.05 <= skip < 0.1 else "has_answer_extracted"))
    half = len(rows) // 2
    for i, shard in enumerate((rows[:half], rows[half:])):
        parquet(root / f"nvidia/OpenMathReasoning/data/cot-{i:05d}-of-00002.parquet", shard)
    return root


if __name__ == "__main__":
    print(f"wrote {write_hub(sys.argv[1] if len(sys.argv) > 1 else 'hub')}")
