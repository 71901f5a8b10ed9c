"""Where a run's attempts stand against the fastest library baseline over the whole suite
(verdict_report.standing_lines), printed by `replay` and at the end of `optimize`. Read
from the H200 runs committed under examples/ (their verdicts carry the speed gate's
rounds) and from copies of them with verdicts removed or damaged."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers import H200_RUNS, ROOT

from kernelladder.app.verdict_report import standing_lines

RMSNORM = H200_RUNS / "rmsnorm-search"
SOFTMAX = H200_RUNS / "softmax-search"
CPU_RUN = ROOT / "examples" / "cpu-rmsnorm-run"


def test_none_faster_everywhere_names_the_closest_not_the_best_by_speedup():
    text = standing_lines(RMSNORM, range(1, 28))
    lines = text.splitlines()
    assert lines[0].startswith("none of 27 attempts is faster than every baseline")
    # the run's best by speedup (#5) loses every round at 32768x8192: not among the closest
    # the closest by the run's rule: slower nowhere, then the highest vs best (#22)
    assert lines[1] == "  #22: faster at 3; tie at 32768x8192 bf16, tiny 1x1000 fp32"
    assert len(lines) == 4 and not any(line.startswith("  #5:") for line in lines)


def test_attempts_faster_everywhere_are_listed_with_their_count():
    text = standing_lines(SOFTMAX, range(1, 28))
    assert text.startswith("faster than every baseline at every shape: #1, #2, #4,")
    assert text.endswith("(21 of 27)")


def test_only_the_attempts_asked_for_and_readable_count(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RMSNORM, run)
    (run / "attempts" / "13.json").write_text("{not json")
    (run / "attempts" / "2.json").unlink()
    text = standing_lines(run, [2, 5, 13, 22])
    # #2 missing and #13 damaged leave #22 and #5 (which is slower at one shape)
    assert text.splitlines() == [
        "none of 2 attempts is faster than every baseline at every shape; the closest by "
        "the run's rule (slower nowhere, then vs best):",
        "  #22: faster at 3; tie at 32768x8192 bf16, tiny 1x1000 fp32",
        "  #5: faster at 3; tie at tiny 1x1000 fp32; slower at 32768x8192 bf16",
    ]


def test_no_standing_without_measured_speed():
    assert standing_lines(CPU_RUN, range(1, 13)) is None


def test_replay_prints_the_standing_after_the_best():
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder", "replay", str(RMSNORM)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    best = out.stdout.index("best #5 against the fastest library baseline")
    assert out.stdout.index("none of 27 attempts is faster", best) > best


def _verdict(run: Path, n: int):
    import json

    from kernelladder.verifier.contract.verdict import Verdict

    return Verdict.from_dict(json.loads((run / "attempts" / f"{n}.json").read_text()))


def test_each_verdict_line_says_where_the_attempt_stands():
    # the engine's one line per verdict (the live view, the app's tree and log, replay)
    from kernelladder.engine import verdict_line

    # vs best leads (against the fastest baseline per shape), the reference second
    assert verdict_line(_verdict(RMSNORM, 5)) == (
        "1.06x vs torch.compile (3 faster, 1 tie, 1 slower), 101% of floor; 8.22x over reference"
    )
    assert verdict_line(_verdict(RMSNORM, 13)).startswith(
        "1.07x vs torch.compile (3 faster, 2 tie), "
    )
    line = verdict_line(_verdict(SOFTMAX, 16))
    assert "(beats every baseline)" in line and line.endswith("over reference"), line


def _demo_with_standing():
    """The app's demo script with a standing on each passing verdict: #2 beats every
    baseline, the others tie at two shapes."""
    from dataclasses import replace

    from kernelladder.app.scripted import demo_script
    from kernelladder.engine.record import events as ev

    script = []
    for e in demo_script(attempts=3):
        if isinstance(e, ev.VerdictReady) and e.verdict == "pass":
            words = "beats every baseline" if e.attempt == 2 else "3 faster, 2 tie"
            e = replace(e, standing=words)
        script.append(e)
    return script


def test_the_standing_travels_in_the_verdict_event_and_folds_into_the_attempt():
    from dataclasses import replace

    from kernelladder.engine.record import events as ev
    from kernelladder.engine.record.state import apply, new_state

    script = [replace(e, seq=i, ts=float(i)) for i, e in enumerate(_demo_with_standing())]
    verdict = next(e for e in script if isinstance(e, ev.VerdictReady) and e.attempt == 2)
    assert ev.event_from_dict(verdict.to_dict()).standing == "beats every baseline"
    older = verdict.to_dict()
    del older["standing"]  # a log written before the field existed
    assert ev.event_from_dict(older).standing == ""
    state = new_state()
    for e in script:
        apply(state, ev.event_from_dict(e.to_dict()))
    assert state.attempts[2].standing == "beats every baseline"
    assert {state.attempts[n].standing for n in state.attempts if n != 2} <= {
        "3 faster, 2 tie",
        "",
    }


async def test_the_tree_marks_attempts_that_beat_every_baseline():
    from kernelladder.app.app import KernelLadderApp
    from kernelladder.app.scripted import ScriptedRun
    from kernelladder.app.widgets.strategy_tree import BEATS_MARK, StrategyTree

    app = KernelLadderApp(run=ScriptedRun(_demo_with_standing()), frozen=True, batch_interval=0.02)
    async with app.run_test(size=(150, 44)) as pilot:
        tree = app.main.query_one(StrategyTree)
        for _ in range(200):
            if len(tree._attempt_nodes) >= 3:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        labels = {n: str(node.label) for n, node in tree._attempt_nodes.items()}
        branches = {b: str(node.label) for b, node in tree._branch_nodes.items()}
    passed = [n for n, label in labels.items() if "✓" in label]
    # a branch whose best is #2 carries the mark after its best too
    assert all((BEATS_MARK in label) == ("best #2 " in label) for label in branches.values())
    assert any("best #2 " in label for label in branches.values()), branches
    assert 2 in passed and BEATS_MARK in labels[2], labels
    assert not any(BEATS_MARK in labels[n] for n in labels if n != 2), labels


def test_the_json_summary_names_the_attempts_that_beat_every_baseline():
    from dataclasses import replace

    from kernelladder.engine.record.log import read_events
    from kernelladder.engine.record.state import fold
    from kernelladder.engine.record.summary import summarize

    script = [replace(e, seq=i, ts=float(i)) for i, e in enumerate(_demo_with_standing())]
    summary = summarize(fold(script))
    assert summary["beats_every_baseline"] == [2]
    assert summary["best"]["standing"] in ("beats every baseline", "3 faster, 2 tie")
    # a log from before the field: its summary is what that run printed, unchanged
    older = summarize(fold(read_events(RMSNORM)))
    assert "beats_every_baseline" not in older and "standing" not in older["best"]
