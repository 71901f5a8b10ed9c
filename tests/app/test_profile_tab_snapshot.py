"""The Profile tab (key 5): a summary and a bar per throughput.

The committed example run is a CPU run (no profiles can exist there), so the profile
shown is attached to it here: a real Nsight Compute report of the plain rmsnorm kernel
captured on the H200 (tests/data/ncu), summarised by the same code a run uses."""

from __future__ import annotations

from dataclasses import replace

from helpers import EXAMPLES, ROOT

from kernelladder.app.app import KernelLadderApp
from kernelladder.app.replay import load_events
from kernelladder.app.screenshots import SIZE, settle
from kernelladder.app.widgets.profile_view import NOT_TAKEN, profile_content
from kernelladder.engine.record import events as ev
from kernelladder.verifier.host.profile import summarize

EXAMPLE = EXAMPLES / "cpu-rmsnorm-run"
NCU = ROOT / "tests" / "data" / "ncu"


def _profile_event(attempt: int, seq: int, ts: float) -> ev.ProfileReady:
    summary = summarize(
        (NCU / "rmsnorm_details.csv").read_text(), (NCU / "rmsnorm_raw.csv").read_text()
    )
    assert summary is not None
    return ev.ProfileReady(
        seq=seq, ts=ts, attempt=attempt, branch_id="b1", reason="new best",
        summary=summary.to_dict(), report=f"profiles/{attempt}.ncu-rep",
    )  # fmt: skip


def _events_with_profile_of_every_attempt() -> list[ev.Event]:
    events = list(load_events(EXAMPLE))
    judged = sorted({e.attempt for e in events if isinstance(e, ev.VerdictReady)})
    last = events[-1]
    extra = [_profile_event(n, last.seq + 1 + i, last.ts) for i, n in enumerate(judged)]
    # the profiles go before RunFinished, as a run records them
    return [*events[:-1], *extra, replace(last, seq=last.seq + 1 + len(extra))]


def test_profile_content_without_a_profile_says_when_profiles_are_taken():
    assert NOT_TAKEN in str(profile_content(3, None))
    # a profile in flight (beside its branch) is said as such, not as one never taken
    profiling = str(profile_content(3, None, profiling=True))
    assert "#3 is being profiled now" in profiling and NOT_TAKEN not in profiling
    text = str(profile_content(3, {"status": "unavailable", "reason": "ERR_NVGPUCTRPERM"}))
    assert "no profile (ERR_NVGPUCTRPERM)" in text


def test_profile_tab(snap_compare):
    app = KernelLadderApp(
        events=_events_with_profile_of_every_attempt(), run_dir=EXAMPLE, frozen=True, at_end=True
    )

    async def ready(pilot):
        await settle(app, pilot)
        await pilot.press("5")
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
