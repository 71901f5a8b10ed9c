"""Event log: gap-free seq, durable attempt files, torn-tail tolerance and repair."""

from __future__ import annotations

import json

import pytest

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import (
    EventLog,
    LogError,
    read_attempt_source,
    read_log,
    repair_tail,
    sha256_text,
)


def test_append_assigns_seq_and_ts_and_reads_back(tmp_path):
    log = EventLog(tmp_path, clock=iter([10.0, 9.0, 12.0]).__next__)
    a = log.append(ev.Notice(message="one"))
    b = log.append(ev.Notice(message="two"))
    c = log.append(ev.BranchPruned(branch_id="b1", pruned=("b1", "b2")))
    assert (a.seq, b.seq, c.seq) == (0, 1, 2)
    assert (a.ts, b.ts, c.ts) == (10.0, 10.0, 12.0)  # never backwards
    log.close()
    events = read_log(tmp_path).events
    assert events == [a, b, c]
    assert events[2].pruned == ("b1", "b2")
    # reopening continues the numbering
    log2 = EventLog(tmp_path)
    assert log2.append(ev.Notice(message="three")).seq == 3
    assert [e.seq for e in log2.read_from(1)] == [1, 2, 3]
    log2.close()


def test_attempt_files_hash_matches(tmp_path):
    log = EventLog(tmp_path)
    h = log.write_source(7, "def kernel(x):\n    return x\n")
    assert h == sha256_text(read_attempt_source(tmp_path, 7))
    vh = log.write_verdict(7, {"verdict": "pass"})
    assert vh == sha256_text((tmp_path / "attempts" / "7.json").read_text())
    log.close()


@pytest.mark.parametrize(
    "tail", [b'{"kind":"notice","seq":2,"me', b'{"kind":"notice","seq":2}', b"\x00\x00garbage"]
)
def test_torn_tail_is_tolerated_then_repaired(tmp_path, tail):
    log = EventLog(tmp_path)
    log.append(ev.Notice(message="a"))
    log.append(ev.Notice(message="b"))
    log.close()
    with open(tmp_path / "events.jsonl", "ab") as f:
        f.write(tail)
    read = read_log(tmp_path)
    assert read.torn and len(read.events) == 2
    with pytest.raises(LogError, match="torn"):
        EventLog(tmp_path)
    assert repair_tail(tmp_path) is True
    assert repair_tail(tmp_path) is False
    log = EventLog(tmp_path)
    assert log.append(ev.Notice(message="c")).seq == 2
    log.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["message"] for x in lines] == ["a", "b", "c"]


def test_corrupt_middle_line_is_an_error(tmp_path):
    (tmp_path / "events.jsonl").write_text(
        '{"kind":"notice","seq":0,"message":"a"}\nnot json\n{"kind":"notice","seq":2}\n'
    )
    with pytest.raises(LogError, match="corrupt line"):
        read_log(tmp_path)


def test_missing_log_is_one_line_error(tmp_path):
    with pytest.raises(LogError, match="not a run directory"):
        read_log(tmp_path / "nope")
