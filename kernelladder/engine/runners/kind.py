"""RunnerKind: what a runner's folder declares (runners/NAME/__init__.py's RUNNER), so the
registry (runners/registry.py) can offer it on the command line, build it for a run that
asks for it, and tell the rest of the engine whether it verifies on this machine.

Plain data: a folder's __init__.py imports this and run/rows.py (RunOption) only; its
runner's own modules (asyncssh, ray, ...) are imported by `make`, when a run asks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelladder.engine.run.rows import RunOption

if TYPE_CHECKING:
    from kernelladder.engine.protocols import Runner


@dataclass(frozen=True)
class RunnerKind:
    """One runner, declared once by its folder.

    name: its `--runner` choice (and how messages call it).
    make(options, device, per_gpu): the run's Runner (options: the RunOptions; per_gpu:
        the workers per GPU the run wants); it imports the runner's modules itself.
    rows: its options, as rows of the run's (RUN_OPTIONS): a plain flag is taken as given
        and recorded, and a resume changes it (resumable) or refuses to.
    chosen(options): whether a run's options ask for it; None: `--runner NAME` (the
        recorded options.runner).
    asked_by: how a person asks for it, when that is not `--runner NAME` (SSH: --remote);
        such a kind is no --runner choice.
    summary: what --runner's help says it is (with asked_by: what that flag is for).
    elsewhere: it verifies off this machine: no local workers kept after the run or
        started ahead of it, no check that this machine has the GPU --device names.
    device(options): its device when --device is not given; None: this machine's
        (cuda when it has a GPU, else the CPU interpreter).
    starting: what the app's header says while the runner starts ("" the local line).
    check(options): a line that stops a run before it starts ("" when none), for a
        run resumed from its record (a new run's flags are checked as they are read).
    place: its order among the kinds (--help's sections, which one make_runner asks
        first); a folder's kind without one comes after the built-in ones, by name.
    """

    name: str
    make: Callable[[Any, str, int], Runner]
    rows: tuple[RunOption, ...] = ()
    chosen: Callable[[Any], bool] | None = None
    asked_by: str = ""
    summary: str = ""
    elsewhere: bool = False
    device: Callable[[Any], str] | None = None
    starting: str = ""
    check: Callable[[Any], str] | None = None
    place: int = 1000

    def asks(self, options: Any) -> bool:
        """Whether a run's options ask for this runner."""
        if self.chosen is not None:
            return bool(self.chosen(options))
        return getattr(options, "runner", None) == self.name

    @property
    def ask(self) -> str:
        """How a person asks for it: --remote, or --runner NAME."""
        return self.asked_by or f"--runner {self.name}"
