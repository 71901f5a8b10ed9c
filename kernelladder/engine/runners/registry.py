"""The runners, one folder each, found rather than listed: every folder of the runners
package whose __init__.py declares `RUNNER = RunnerKind(...)` (runners/kind.py), in the
order of their `place` (then by name). A new runner is a new folder.

From them: the --runner choices and its row, the runners' rows of the run's options
(run/options.py adds them to its own), and which kind a run's options ask for
(make_runner builds it; the local pool when none does). Importing this imports each
folder's light __init__.py only, never a runner's own modules."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kernelladder.engine.run.rows import RunOption
from kernelladder.engine.runners.kind import RunnerKind

LOCAL = "local"  # the default: the verifier's worker pool on this machine (runners/local.py)
LOCAL_SUMMARY = "local workers (default{asked})"


def _discover() -> tuple[RunnerKind, ...]:
    import kernelladder.engine.runners as package

    found: dict[str, tuple[int, str, RunnerKind]] = {}
    for root in map(Path, package.__path__):
        for folder in sorted(root.iterdir()):
            if folder.name.startswith(("_", ".")) or not (folder / "__init__.py").is_file():
                continue
            module = importlib.import_module(f"{package.__name__}.{folder.name}")
            kind = getattr(module, "RUNNER", None)
            if not isinstance(kind, RunnerKind):
                raise ImportError(f"{folder}/__init__.py declares no RUNNER = RunnerKind(...)")
            if kind.name == LOCAL or kind.name in found:
                raise ImportError(f"{folder}: a runner called {kind.name!r} is declared already")
            found[kind.name] = (kind.place, folder.name, kind)
    return tuple(kind for _, _, kind in sorted(found.values(), key=lambda t: t[:2]))


KINDS: tuple[RunnerKind, ...] = _discover()


def kind_named(name: str) -> RunnerKind | None:
    return next((k for k in KINDS if k.name == name), None)


def chosen_kinds(options: Any) -> list[RunnerKind]:
    """The kinds a run's options ask for (one, or none for the local pool; the command
    line refuses more)."""
    return [k for k in KINDS if k.asks(options)]


def chosen_kind(options: Any) -> RunnerKind | None:
    """The kind a run's options ask for; None: the local pool."""
    return next(iter(chosen_kinds(options)), None)


def verifies_elsewhere(options: Any) -> bool:
    """Whether a run's candidates are verified off this machine (SSH, Ray): no local
    workers kept or started ahead for it, no local GPU asked for."""
    kind = chosen_kind(options)
    return kind is not None and kind.elsewhere


def runner_choices() -> tuple[str, ...]:
    """--runner's choices: local, then each kind asked for by its name."""
    return (LOCAL, *(k.name for k in KINDS if not k.asked_by))


def _runner_help() -> str:
    """--runner's help, from the kinds' summaries: "where candidates are verified: local
    workers (default; --remote for SSH) or Ray actors, one per GPU of the cluster"."""
    asked = "".join(f"; {k.asked_by} for {k.summary}" for k in KINDS if k.asked_by)
    parts = [LOCAL_SUMMARY.format(asked=asked)]
    parts += [k.summary or k.name for k in KINDS if not k.asked_by]
    listed = parts[0] if len(parts) == 1 else " or ".join(parts)
    if len(parts) > 2:
        listed = "; ".join(parts[:-1]) + "; or " + parts[-1]
    return f"where candidates are verified: {listed}"


def runner_rows() -> tuple[RunOption, ...]:
    """The runners' rows of the run's options, in the kinds' order: --runner (recorded as
    `runner`) before the rows of the first kind it chooses, in that kind's section of
    --help, then each kind's own."""
    rows: list[RunOption] = []
    placed = False
    for kind in KINDS:
        if not placed and not kind.asked_by and kind.rows:
            rows.append(_runner_row(kind.rows[0].group))
            placed = True
        rows += kind.rows
    if not placed:
        rows.append(_runner_row(""))
    return tuple(rows)


def _runner_row(group: str) -> RunOption:
    # the choice recorded, so a resume builds the same runner; composed by the command
    # line (cli/run_arguments.py): the SSH and Ray runners are recorded by their settings
    return RunOption("runner", "--runner", _runner_help(), choices=runner_choices(),
                     group=group, composed=True)  # fmt: skip
