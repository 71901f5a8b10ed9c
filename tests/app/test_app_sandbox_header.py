"""The app's header and the headless view say when the workers run without walls; a run
whose workers were walled in, or an older log that does not say, shows nothing extra."""

from __future__ import annotations

from kernelladder.app import view as v
from kernelladder.app.folding import build_view
from kernelladder.app.widgets.run_header import header_line
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.state import fold

OFF = "off (the kernel has no Landlock (ENOSYS; Linux < 5.13))"


def started(**fields) -> ev.RunStarted:
    return ev.RunStarted(run_id="r", op="rmsnorm", device="cpu", **fields)


def test_header_warns_when_the_sandbox_is_off():
    text = header_line(v.RunView(op="rmsnorm", device="cpu", sandbox=OFF)).plain
    assert f"sandbox: {OFF}" in text


def test_header_is_unchanged_when_walled_or_unknown():
    walled = header_line(v.RunView(op="rmsnorm", device="cpu", sandbox="on (Landlock ABI 7: x)"))
    unknown = header_line(v.RunView(op="rmsnorm", device="cpu"))
    assert walled.plain == unknown.plain and "sandbox" not in walled.plain


def test_the_fold_carries_the_sandbox_from_run_started_and_old_logs_have_none():
    assert fold([started(sandbox=OFF)]).sandbox == OFF
    old = ev.event_from_dict({k: val for k, val in started().to_dict().items() if k != "sandbox"})
    assert fold([old]).sandbox is None
    assert build_view(fold([started(sandbox=OFF)])).sandbox == OFF
