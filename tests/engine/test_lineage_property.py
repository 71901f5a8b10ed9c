"""Every move is recorded with the parent it was made from, for every proposer.

Real runs on the CPU (the Triton interpreter as the verifier), through the CLI a person
uses: the built-in search, a replay of that search, the `api` proposer with the real
anthropic SDK against a local stand-in of the Messages API (the real API is out of
reach here), and the `code` proposer with a stand-in `claude` executable (the real CLI
needs an account). For each proposal the log records:
- the parent: the attempt the proposer named as its base (search: meta base_attempt;
  replay: this run's replay of the saved parent; api/code: the parent the model was
  shown, whose source the prompt carried);
- a move that, applied to the parent, gives the proposal's source (search: the source
  regenerated from the parent's recorded parameters with the move's steps);
- a gate exactly for the moves that are high-undo against that parent (a family change
  against the parent's family, a fence concern, or the proposer's own "high") or that
  change their branch's line (a family other than the line's, whatever the parent).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fake_messages_server import FakeMessagesServer, message

from kernelladder.app.run_files import starting_candidate
from kernelladder.engine.record.upcast import search_header as parse_header
from kernelladder.engine.run.gating import fence_concerns
from kernelladder.ops.registry import catalog

pytestmark = pytest.mark.timeout(600)
START = starting_candidate("rmsnorm") or ""


CLI = "import sys; from kernelladder.cli import main; sys.exit(main(sys.argv[1:]))"


def optimize(run_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLI, "optimize", *args, "--device", "cpu",
         "--gate", "approve", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=500, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def source(run_dir: Path, n: int | None, op: str) -> str:
    if n is None:
        assert op == "rmsnorm", "a workspace's start is attempt #0"
        return START
    return (run_dir / "attempts" / f"{n}.py").read_text()


def proposals(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each proposal_received, with the parent its branch's request showed the proposer
    ("shown") and whether a gate was raised for it ("gated")."""
    shown: dict[str, Any] = {}
    gated = {e["attempt"] for e in log if e["kind"] == "gate_raised"}
    out = []
    for e in log:
        if e["kind"] == "proposal_requested":
            shown[e["branch_id"]] = e["parent_attempt"]
        elif e["kind"] == "proposal_received" and e.get("proposer") != "start":
            out.append({**e, "shown": shown.get(e["branch_id"]), "gated": e["attempt"] in gated})
    return out


def _moved(family, params: dict[str, Any], steps: str) -> dict[str, Any]:
    """`params` with a move line's steps ("ROWS 4->8, EPT 16->8") applied, each step's
    old value checked."""
    moved = dict(params)
    for step in steps.split(", "):
        name, change = step.split(" ", 1)
        old, new = change.split("->")
        assert str(moved[name]) == old.replace('""', ""), (step, moved[name])
        moved[name] = next(v for v in family.param(name).values if str(v) == new.replace('""', ""))
    return moved


def high_against_parent(p: dict[str, Any], by_number: dict[int, dict[str, Any]]) -> bool:
    """Is the move high-undo against its recorded parent, by the engine's own rules?"""
    parent = by_number.get(p["parent_attempt"])
    parent_family = parent.get("family") if parent else None
    family_change = bool(p.get("family") and parent_family and p["family"] != parent_family)
    return family_change or p["proposed_undo"] == "high" or bool(p["fence"])


@pytest.fixture(scope="module")
def search_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("lineage") / "search"
    # 17 attempts: 3 rewrites, steps, one family switch per branch, then steps from them
    optimize(run_dir, "rmsnorm", "--max-attempts", "17")
    return run_dir


def test_search_steps_are_recorded_from_their_base_and_gated_only_for_family_changes(
    search_run,
):
    log = events(search_run)
    families = {f.name: f for f in catalog()["rmsnorm"]}
    seen = proposals(log)
    by_number = {p["attempt"]: p for p in seen}
    entered_elsewhere = 0
    line: dict[str, str] = {}  # each branch's line's family so far (every gate approved)
    for p in seen:
        meta = p["meta"]
        assert p["parent_attempt"] == meta["base_attempt"], p["move"]
        family = families[meta["family"]]
        assert family.render(meta["params"]) == source(search_run, p["attempt"], "rmsnorm")
        parent_header = parse_header(source(search_run, p["parent_attempt"], "rmsnorm"))
        p["proposed_undo"] = "low"  # the search calls no move high: the engine rates
        p["line_change"] = p["branch_id"] in line and line[p["branch_id"]] != meta["family"]
        line[p["branch_id"]] = meta["family"]
        head = p["move"].split(": ", 1)[0]
        if p["move"].startswith("rewrite as "):
            # a rewrite into the branch's family replaces the parent it was shown
            assert p["parent_attempt"] == p["shown"]
        elif p["move"].startswith("family ") and " from #" in head:
            # a switch into a family another branch walked: made from that branch's point
            # of it (the run's best), moved as the line says after its colon
            assert head.endswith(f" from #{p['parent_attempt']}"), p["move"]
            assert parent_header is not None and parent_header["family"] == meta["family"]
            assert by_number[p["parent_attempt"]]["branch_id"] != p["branch_id"]
            moved = _moved(family, parent_header["params"], p["move"].split(": ", 1)[1])
            assert moved == meta["params"], p["move"]
            assert p["line_change"] and f"entered at #{p['parent_attempt']}" in p["undo_reason"]
            entered_elsewhere += 1
        elif p["move"].startswith("family "):
            # a family switch is made from an attempt of the family it leaves
            assert parent_header is not None, p["move"]
            assert p["move"].startswith(f"family {parent_header['family']} -> "), p["move"]
        else:
            # a step: the parent's recorded parameters, moved as the move line says
            assert parent_header is not None and parent_header["family"] == meta["family"]
            moved = _moved(family, parent_header["params"], p["move"].split(" (from #")[0])
            assert moved == meta["params"], p["move"]
        p["fence"] = fence_concerns(source(search_run, p["attempt"], "rmsnorm"))
        expected = high_against_parent(p, by_number) or p["line_change"]
        assert p["gated"] == expected, (p["attempt"], p["move"], p["undo_reason"])
        assert (p["undo_cost"] == "high") == expected, (p["attempt"], p["move"])
        if p["line_change"]:
            assert f"{p['branch_id']}'s line changes: " in p["undo_reason"], p["undo_reason"]
    # a branch went on in a family from another branch's point of it: a move made from an
    # attempt other than the one its branch was shown, the case that was wrong
    assert entered_elsewhere >= 1
    # no kernel was verified twice
    sources = [source(search_run, p["attempt"], "rmsnorm") for p in seen]
    assert len(set(sources)) == len(sources)
    assert any(p["gated"] for p in seen) and not all(p["gated"] for p in seen)


def test_tune_moves_are_recorded_from_the_attempt_they_edit_and_never_gated(tmp_path):
    from kernelladder.engine.proposers.tune.knobs import find, with_config

    workspace = Path(__file__).resolve().parents[2] / "examples" / "tune-softmax"
    run_dir = tmp_path / "tune"
    optimize(run_dir, str(workspace), "--proposer", "tune", "--max-attempts", "12")
    seen = proposals(events(run_dir))
    by_number = {p["attempt"]: p for p in seen}
    assert len(seen) == 11  # the start, attempt #0, is the twelfth
    off_the_shown_parent = 0
    for p in seen:
        assert p["parent_attempt"] == p["meta"]["base_attempt"], p["move"]
        parent_source = source(run_dir, p["parent_attempt"], "tune-softmax")
        knobs = {k.label: k for k in find(parent_source).knobs}
        new = {}
        for label, (old, value) in p["meta"]["changed"].items():
            assert knobs[label].value == old, (p["move"], label)  # the parent's own value
            new[knobs[label].key] = value
        assert with_config(parent_source, list(knobs.values()), new) == source(
            run_dir, p["attempt"], "tune-softmax"
        ), p["move"]
        p["proposed_undo"] = "low"
        p["fence"] = fence_concerns(source(run_dir, p["attempt"], "tune-softmax"))
        assert p["gated"] == high_against_parent(p, by_number) == False, p["move"]  # noqa: E712
        off_the_shown_parent += p["parent_attempt"] != p["shown"]
    assert off_the_shown_parent >= 1  # a branch stepped from another branch's attempt


def test_a_replayed_search_keeps_the_saved_lineage_renumbered(search_run, tmp_path):
    run_dir = tmp_path / "replayed"
    optimize(run_dir, "rmsnorm", "--proposer", "replay", "--replay-from", str(search_run),
             "--max-attempts", "17")  # fmt: skip
    saved = {p["attempt"]: p for p in proposals(events(search_run))}
    seen = proposals(events(run_dir))
    renumbered = {p["meta"]["replayed_attempt"]: p["attempt"] for p in seen}
    assert len(seen) == len(saved)
    for p in seen:
        original = saved[p["meta"]["replayed_attempt"]]
        assert source(run_dir, p["attempt"], "rmsnorm") == source(
            search_run, original["attempt"], "rmsnorm"
        )
        want = original["parent_attempt"]
        assert p["parent_attempt"] == (None if want is None else renumbered[want]), p["move"]
        assert p["family"] == original["family"]
        assert p["gated"] == original["gated"], p["move"]


REPLIES = (
    ("rows 1->4", "low only the tile", ""),
    ("one program per row, wider", "high a new algorithm", "# a new loop\n"),
    ("num_warps 4->8", "low only warps", "# warps\n"),
    ("read the environment", "low it is fine", "import os\n_FLAG = os.environ.get('X')\n"),
)


def _kernel(extra: str, i: int) -> str:
    start = START
    return f"# proposal {i}\n{extra}{start}"


def _reply(i: int) -> str:
    move, undo, extra = REPLIES[i % len(REPLIES)]
    return f"```python\n{_kernel(extra, i)}```\nMOVE: {move}\nUNDO: {undo}\n"


def _model_run_checks(run_dir: Path, prompts: list[str]) -> None:
    seen = proposals(events(run_dir))
    assert len(seen) == len(prompts) == len(REPLIES)
    by_number = {p["attempt"]: p for p in seen}
    for i, p in enumerate(seen):
        assert p["parent_attempt"] == p["shown"], p["move"]
        # the model was shown the parent it is recorded with: the prompt carried its source
        parent_source = source(run_dir, p["parent_attempt"], "rmsnorm")
        body = parent_source.strip().splitlines()
        assert all(line in prompts[i] for line in body[:3] + body[-3:])
        p["proposed_undo"] = REPLIES[i][1].split()[0]
        p["fence"] = fence_concerns(source(run_dir, p["attempt"], "rmsnorm"))
        assert p["gated"] == high_against_parent(p, by_number), p["move"]
    assert [p["gated"] for p in seen] == [False, True, False, True]


def test_api_replies_are_recorded_from_the_parent_they_were_shown(tmp_path):
    with FakeMessagesServer() as server:
        for i in range(len(REPLIES)):
            server.script(message(_reply(i)))
        run_dir = tmp_path / "api"
        optimize(run_dir, "rmsnorm", "--proposer", "api", "--branches", "1",
                 "--max-attempts", str(len(REPLIES)),
                 env={"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-test"})  # fmt: skip
        prompts = [r.prompt for r in server.messages]
    _model_run_checks(run_dir, prompts)


STAND_IN = textwrap.dedent(
    """\
    #!{python}
    # test double for the Claude Code CLI: answers the next scripted reply, keeps the prompt
    import json, os, sys
    prompt = sys.stdin.read()
    folder = os.environ["KL_FAKE_CLAUDE_DIR"]
    i = len([f for f in os.listdir(folder) if f.startswith("prompt-")])
    open(os.path.join(folder, f"prompt-{{i}}.txt"), "w").write(prompt)
    text = open(os.path.join(folder, f"reply-{{i}}.txt")).read()
    print(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
                      "result": text, "num_turns": 1, "session_id": "s",
                      "total_cost_usd": 0.01,
                      "usage": {{"input_tokens": 10, "output_tokens": 10}}}}))
    """
)


def test_code_replies_are_recorded_from_the_parent_they_were_shown(tmp_path):
    folder = tmp_path / "claude"
    folder.mkdir()
    exe = folder / "claude"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    for i in range(len(REPLIES)):
        (folder / f"reply-{i}.txt").write_text(_reply(i))
    run_dir = tmp_path / "code"
    optimize(run_dir, "rmsnorm", "--proposer", "code", "--branches", "1",
             "--max-attempts", str(len(REPLIES)),
             env={"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
                  "KL_FAKE_CLAUDE_DIR": str(folder)})  # fmt: skip
    prompts = [(folder / f"prompt-{i}.txt").read_text() for i in range(len(REPLIES))]
    _model_run_checks(run_dir, prompts)
