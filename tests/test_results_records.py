"""The committed studies say what ran where: each run folder under results/ whose config.json carries its
provenance (commit, dirty flag and start of every sitting it ran in; since issue 46) is named in its study's
MACHINES.md in the row of the sitting it finished in, at that commit, clean as recorded; a resumed run's row
says from which checkpoint; the "In progress" count is the number of runs committed. Written after issue 47
found a run placed in the wrong sitting by hand."""
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import strict_file

ROOT = Path(__file__).resolve().parent.parent
# | 2026-11-28, from 13:26 UTC | machine | `f2e280a`, clean | run, run (annotation), ... |
ROW = re.compile(r"^\| (\d{4}-\d\d-\d\d), from (\d\d:\d\d) UTC \|[^|]*\| `([0-9a-f]{7,40})`, (clean|dirty)[^|]*\|"
                 r"(.*)\|$")


class Sitting:
    def __init__(self, match: re.Match):
        date, time, self.commit, state, self.runs = match.groups()
        self.start = datetime.fromisoformat(f"{date}T{time}:00+00:00")
        self.clean = state == "clean"

    def annotation(self, run: str) -> str | None:
        """The run's entry in the row: '' when named bare, its first parenthesis when it has one, None when the
        row does not name it."""
        m = re.search(rf"(?:^|,)\s*{re.escape(run)}(?: \(([^)]*)\))?\s*(?=,|\(|$)", self.runs.strip())
        return None if m is None else m.group(1) or ""


def sittings(machines: Path) -> list[Sitting]:
    return [Sitting(m) for line in machines.read_text().splitlines() if (m := ROW.match(line))]


def recorded_runs(study: Path) -> dict[str, list[dict]]:
    """run name -> its provenance, for the study's runs that record one."""
    runs = {}
    for config in sorted(study.glob("*/config.json")):
        provenance = strict_file(config).get("provenance")
        if provenance:
            runs[config.parent.name] = provenance
    return runs


STUDIES = [p.parent for p in sorted(ROOT.glob("results/*/MACHINES.md")) if recorded_runs(p.parent)]


def test_some_study_records_its_provenance():
    assert STUDIES, "no results/*/ run records its provenance: this file would check nothing"


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_each_run_sits_in_the_row_of_the_sitting_it_finished_in(study):
    rows = sittings(study / "MACHINES.md")
    assert rows, f"{study.name}/MACHINES.md: no sitting row (| date, from HH:MM UTC | machine | `commit`, ...)"
    assert [r.start for r in rows] == sorted(r.start for r in rows), "sittings out of order"
    wrong = []
    for run, provenance in recorded_runs(study).items():
        last = provenance[-1]  # the sitting that finished the run
        started = datetime.fromisoformat(last["started"]).astimezone(timezone.utc).replace(second=0)
        row = max((r for r in rows if r.start <= started), key=lambda r: r.start, default=None)
        named_in = [f"{r.start:%d %H:%M}" for r in rows if r.annotation(run) is not None]
        if row is None or row.annotation(run) is None or len(named_in) != 1:
            sitting = f"the sitting from {row.start:%d %H:%M}" if row else "no sitting of the table"
            wrong.append(f"{run}: finished in {sitting} (its last start {started:%d %H:%M}), named in the "
                         f"rows from {named_in}")
            continue
        if not last["commit"].startswith(row.commit) or row.clean == bool(last["dirty"]):
            wrong.append(f"{run}: ran {last['commit'][:7]} dirty={last['dirty']}, its row says {row.commit}")
        if last["step"] and f"checkpoint of step {last['step']} resumed" not in row.annotation(run):
            wrong.append(f"{run}: resumed from step {last['step']}, its row says ({row.annotation(run)})")
        steps = re.match(r"steps (\d+)-", row.annotation(run))
        if steps and int(steps.group(1)) != last["step"] + 1:
            wrong.append(f"{run}: resumed from step {last['step']}, so it ran from step {last['step'] + 1}, "
                         f"its row says ({row.annotation(run)})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_the_in_progress_count_is_the_runs_committed(study):
    text = " ".join((study / "MACHINES.md").read_text().split())
    count = re.search(r"In progress: (\d+) of (\d+) runs finished", text)
    if count is None:
        pytest.skip(f"{study.name}: finished (no 'In progress' line)")
    assert int(count.group(1)) == len(recorded_runs(study))


def test_a_run_in_the_wrong_sitting_is_found(tmp_path):
    """The check itself: a run that finished in the second sitting but is listed under the first fails."""
    study = tmp_path / "study"
    for run, started, step in [("a-s0", "2026-01-01T10:05:00+00:00", 0), ("b-s0", "2026-01-01T12:01:00+00:00", 4)]:
        (study / run).mkdir(parents=True)
        (study / run / "config.json").write_text(json.dumps({"provenance": [
            {"step": step, "started": started, "commit": "abcdef0123", "dirty": False}]}))
    head = "| sitting | machine | code | runs |\n|---|---|---|---|\n"
    first = "| 2026-01-01, from 10:00 UTC | VM | `abcdef0`, clean | a-s0, {} |\n"
    second = "| 2026-01-01, from 12:00 UTC | VM | `abcdef0`, clean | {} |\n"
    (study / "MACHINES.md").write_text(head + first.format("b-s0 (steps 5-9: its checkpoint of step 4 resumed)")
                                       + second.format("c-s0"))
    with pytest.raises(AssertionError, match=r"b-s0: finished in the sitting from 01 12:00 \(its last start 01 12:01\), named in the rows from \['01 10:00'\]"):
        test_each_run_sits_in_the_row_of_the_sitting_it_finished_in(study)
    (study / "MACHINES.md").write_text(head + first.format("c-s0")
                                       + second.format("b-s0 (steps 4-9: its checkpoint of step 4 resumed)"))
    with pytest.raises(AssertionError, match="so it ran from step 5"):
        test_each_run_sits_in_the_row_of_the_sitting_it_finished_in(study)
    (study / "MACHINES.md").write_text(head + first.format("c-s0")
                                       + second.format("b-s0 (steps 5-9: its checkpoint of step 4 resumed)"))
    test_each_run_sits_in_the_row_of_the_sitting_it_finished_in(study)
