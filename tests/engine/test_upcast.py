"""Old logs are upcast in one place (engine/record/upcast.py) as they are read: the fold, the
views and the search see only today's schema, and no other module keeps an old log's
fallback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_events
from kernelladder.engine.record.state import fold

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "tests" / "data" / "old-logs" / "rmsnorm-2026-12-01"
PACKAGE = ROOT / "kernelladder"


def test_new_events_carry_the_new_schema_and_old_ones_are_read_as_it():
    assert ev.SCHEMA_VERSION == 2
    assert ev.RunPaused().schema_version == 2
    raw = [json.loads(x) for x in (RMSNORM / "events.jsonl").read_text().splitlines()]
    assert {d["schema_version"] for d in raw} == {1}
    assert {e.schema_version for e in read_events(RMSNORM)} == {2}


def test_a_re_measure_slower_inside_the_margin_holds_only_through_the_upcast():
    raw = [
        ev.event_from_dict(json.loads(x))
        for x in (RMSNORM / "events.jsonl").read_text().splitlines()
    ]
    assert fold(raw).confirmations[8]["held"] is False  # the fold keeps no old rule
    assert fold(read_events(RMSNORM)).confirmations[8]["held"] is True


def test_an_old_search_proposal_gets_its_grid_point_from_its_source_header(tmp_path: Path):
    from kernelladder.ops.registry import catalog

    family = catalog()["rmsnorm"][0]
    source = family.render(family.start)
    run = tmp_path / "run"
    (run / "attempts").mkdir(parents=True)
    (run / "attempts" / "1.py").write_text(source)
    line = ev.ProposalReceived(
        branch_id="b1", attempt=1, parent_attempt=None, source_hash="x", strategy="s",
        move="m", undo_cost="low", undo_reason="r", proposer="search",
    ).to_dict()  # fmt: skip
    line["schema_version"] = 1
    (run / "events.jsonl").write_text(json.dumps(line) + "\n")
    (event,) = read_events(run)
    assert event.meta["family"] == family.name
    assert event.meta["params"] == dict(family.start)
    line["schema_version"] = 2  # a new log records its point itself: nothing is read back
    (run / "events.jsonl").write_text(json.dumps(line) + "\n")
    assert read_events(run)[0].meta == {}
    shutil.rmtree(run)


def test_no_module_but_the_upcast_knows_an_old_logs_words():
    """The old rule's wording and the search header's parse live in the upcast alone."""
    old_words = ("practical margin (recorded", "kernelladder-search: (\\{", "judged_rows(e.")
    found = [
        f"{p.relative_to(ROOT)}: {w}"
        for p in PACKAGE.rglob("*.py")
        if p.name != "upcast.py"
        for w in old_words
        if w in p.read_text()
    ]
    assert not found, found
