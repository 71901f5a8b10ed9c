"""Under a stream: a scripted engine emits 1,000 events a second for 4 seconds into the
real bridge and app; every key press is answered and every event reaches the fold.

The engine here is ScriptedRun (kernelladder/app/scripted.py), a test double: the real
engine on this machine cannot produce such a stream on cue. The rate the app keeps up
with and how quickly keys answer are figures of the machine as much as of the app: they
come from `python bench/tui_load.py` (5,000 events a second for 10 seconds, latency
percentiles), not from this test, which shares its machine with the rest of the suite.
"""

from __future__ import annotations

from kernelladder.app.scripted import measure_load, percentiles


async def test_keys_answer_and_nothing_is_dropped_under_a_stream_of_events():
    result = await measure_load(rate=1_000, seconds=4)
    assert result["events_emitted"] == 4_001
    assert result["events_folded"] == result["events_emitted"] == result["events_pumped"]
    # coalesced: about 15 batches a second, not one message per event
    assert result["batches"] < 400
    lat = percentiles(result["latencies_ms"])
    print("key-press latency ms:", {k: round(v, 1) for k, v in lat.items()})
    assert len(result["latencies_ms"]) >= 5  # keys pressed while the events stream
    # every key answered: measure_load gives up on a key after 5 s
    assert lat[100] < 5_000, lat
