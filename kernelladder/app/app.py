"""The KernelLadder app: watch and steer a live run, or replay a saved one.

The App owns the event source (an EngineBridge for a live run, a ReplayController for
a saved one), the fold, the run's notices as toasts, deploys and quitting; the main
screen owns the widgets and the selection, and asks the app by message to send a command
or move the replay. Steering goes through the engine's RunControl commands only, so each
action is an event in the log and shows up in replays.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from textual.app import App
from textual.notifications import Notification, Notify
from textual.worker import Worker, WorkerState

from kernelladder.app import view as v
from kernelladder.app.actions import app_bindings
from kernelladder.app.bridge import EngineBridge, SteerableRun
from kernelladder.app.commands import SteeringCommands
from kernelladder.app.deploys import DeployBoard, run_deploy_process
from kernelladder.app.folding import RunFold
from kernelladder.app.messages import (
    DeployFinished,
    DeployProgress,
    DeployRequested,
    EventsArrived,
    HostKeyQuestion,
    ReplaySeekRequested,
    ReplaySpeedRequested,
    ReplayToggled,
    SteerRequested,
)
from kernelladder.app.modals.confirm import ConfirmScreen
from kernelladder.app.modals.leave_run import DETACH, STOP, LeaveRunScreen
from kernelladder.app.modals.trust_host_key import TrustHostKeyScreen
from kernelladder.app.notices import GATE_NOTE, NOTICES_PER_BATCH, event_notes, gate_announcement
from kernelladder.app.playback import ReplayPlayback
from kernelladder.app.remote_start import start_remote_runner
from kernelladder.app.replay import ReplayController
from kernelladder.app.run_files import RunFiles
from kernelladder.app.screens.main import MainScreen
from kernelladder.engine import chosen_kind
from kernelladder.engine import events as ev
from kernelladder.themes import DEFAULT_THEME, PROJECT_THEMES, STYLESHEET

QUIT_ID = "quit-question"  # the stop-and-quit dialog (ctrl+c again answers it)
QUIT_WAIT_S = 30.0  # after a stop, how long quitting waits for the log to be closed


def starting_line(run: Any) -> str:
    """What the header says before a live run's first event: the runner is starting its
    verifier worker (torch and Triton load, or an SSH connection opens), which takes
    seconds."""
    if run is None:
        return ""
    options = getattr(run, "options", None)
    op = getattr(getattr(run, "op", None), "name", None) or "the run"
    kind = chosen_kind(options)
    if kind is not None and kind.starting:  # SSH's box, Ray's cluster
        return f"{op}: {kind.starting}…"
    device = getattr(options, "device", None)
    where = f" on {device}" if device else ""
    return f"{op}{where}: starting the verifier worker (it loads torch and Triton)…"


def owner_line(run: Any) -> str:
    """Who owns an attached run: "pid 4242 on gpu-box"."""
    owner = getattr(run, "owner", None)
    return f"pid {owner.pid} on {owner.host}" if owner is not None else "another process"


class KernelLadderApp(ReplayPlayback, App[int]):
    """`kernelladder-tui`: a live run (give `run`) or a replay (give `events`)."""

    TITLE = "KernelLadder"
    CSS_PATH = str(STYLESHEET)
    # the palette lists the app's own commands (app/actions.py), not Textual's generic
    # Keys / Maximize / Screenshot entries
    COMMANDS = {SteeringCommands}
    BINDINGS = app_bindings()  # app/actions.py

    def __init__(
        self,
        *,
        run: SteerableRun | None = None,
        run_dir: str | Path | None = None,
        events: Sequence[ev.Event] | None = None,
        speed: float = 1.0,
        theme: str | None = None,
        clock: Callable[[], float] | None = None,
        frozen: bool = False,
        own_loop: bool = False,
        at_end: bool = False,
        batch_interval: float | None = None,
        read_only: bool = False,
        log_ending: str = "",
        opening_note: str = "",
    ) -> None:
        super().__init__()
        self.read_only = read_only  # watch only (kernelladder serve --read-only): no steering
        self.opening_note = opening_note  # said first (a page of a run that is not running)
        self.in_browser = False  # drawn in a browser page (kernelladder serve), set on mount
        if (run is None) == (events is None):
            raise ValueError("give either a live run or the events of a saved run")
        for project_theme in PROJECT_THEMES:
            self.register_theme(project_theme)
        theme = theme or DEFAULT_THEME
        if theme not in self.available_themes:
            raise ValueError(
                f"unknown theme {theme!r} (try: {', '.join(sorted(self.available_themes))})"
            )
        self.theme = theme
        self.clock = clock or time.time
        self.frozen = frozen  # tests and screenshots: no cursor blink
        self.replay_mode = events is not None
        self.files = RunFiles(run_dir if run_dir is not None else getattr(run, "run_dir", None))
        self.fold = RunFold()
        self.run_over = False
        self._show_pending = False  # a live batch waits for the main screen (_show_live)
        self.detached = False  # left an attached run running
        self.commands_sent: list[tuple[str, tuple[Any, ...]]] = []
        self.bridge: EngineBridge | None = None
        self.player: ReplayController | None = None
        self._trust_answers: list[concurrent.futures.Future[bool]] = []
        self._held_notes: list[tuple[str, str, str]] = []  # (message, title, severity)
        # the toast that announces the gates waiting, and its gates (title, move): a new
        # gate replaces it with one naming all of them
        self._gate_toast: Notification | None = None
        self._gate_toast_gates: list[tuple[str, str]] = []
        self._at_end = at_end
        self.log_ending = log_ending  # a replay's log that never finished: why (replay.py)
        self._last_tick = time.monotonic()
        # a resumed run: its earlier sessions are folded here, so the first frame shows
        # them as they ended (no gate announced again, no old "finished" while it resumes)
        self.resuming = False
        if run is not None:
            kwargs: dict[str, Any] = {} if batch_interval is None else {"interval": batch_interval}
            session_start = int(getattr(run, "session_start_seq", 0) or 0)
            read_from = getattr(getattr(run, "log", None), "read_from", None)
            if session_start > 0 and callable(read_from):
                self.fold.apply_all(read_from(0, session_start))
                self.resuming = True
                kwargs["from_seq"] = session_start
            self.bridge = EngineBridge(run, own_loop=own_loop, **kwargs)
            if getattr(getattr(run, "options", None), "remote", False):
                self.bridge.prepare = self._start_remote_runner
        else:
            self.player = ReplayController(events or (), speed=speed)
        logs = self.player.timeline.logs if self.player else self.fold.logs
        self.deploys = DeployBoard()  # deploys started here (the d key)
        self.main = MainScreen(
            deploys=self.deploys,
            replay=self.replay_mode,
            files=self.files,
            logs=logs,
            clock=self.clock,
            starting=starting_line(run),
            attached=owner_line(run) if getattr(run, "attached", False) else "",
        )

    # --- start ------------------------------------------------------------------------

    def on_mount(self) -> None:
        # What exists now (imports, the DOM) lives as long as the app: keep the garbage
        # collector's full passes off it, or they stall the screen under a busy run.
        gc.freeze()
        self.in_browser = self.is_web
        self.push_screen(self.main)
        if self.opening_note:
            self.notify(self.opening_note, title="not running", severity="warning", timeout=30)
        if self.bridge is not None:
            self._start_bridge(self.bridge)
        else:
            self.call_after_refresh(self._start_replay)

    def on_unmount(self) -> None:
        gc.unfreeze()  # what was kept off the collector may go now
        for answer in self._trust_answers:  # quitting with a host key question open: no
            if not answer.done():
                answer.set_result(False)

    def _start_bridge(self, bridge: EngineBridge) -> None:
        if bridge.own_loop:
            self.run_worker(
                bridge.engine_thread_main,
                name="engine",
                group="engine",
                description="the run",
                exit_on_error=False,
                thread=True,
            )
        else:
            self.run_worker(
                bridge.engine_main(),
                name="engine",
                group="engine",
                description="the run",
                exit_on_error=False,
            )
        self.run_worker(
            bridge.flush_loop(self._deliver),
            name="pump",
            group="bridge",
            description="the event pump",
            exit_on_error=False,
        )

    async def _start_remote_runner(self) -> None:
        """On the engine's loop, before the run: start the remote runner, asking about
        an unknown host key (remote_start.py)."""
        assert self.bridge is not None
        await start_remote_runner(self.bridge.run, self._ask_trust)

    async def _ask_trust(self, error: Any) -> bool:
        """From the engine's loop (maybe another thread): the person's answer."""
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._trust_answers.append(answer)
        self.post_message(HostKeyQuestion(error, answer))
        return await asyncio.wrap_future(answer)

    def on_host_key_question(self, message: HostKeyQuestion) -> None:
        e, answer = message.error, message.answer

        def dismissed(yes: bool | None) -> None:
            if not answer.done():
                answer.set_result(bool(yes))

        self.push_screen(
            TrustHostKeyScreen(e.host, e.port, e.fingerprint, e.known_hosts), dismissed
        )

    def _deliver(self, batch: tuple[ev.Event, ...], finished: bool) -> None:
        self.post_message(EventsArrived(batch, finished=finished))

    # --- live events ------------------------------------------------------------------

    def live_view(self) -> v.RunView:
        """The folded live run; a resumed run reads 'resuming' until it reopens."""
        view = self.fold.view()
        return v.resuming_view(view) if self.resuming else view

    def on_events_arrived(self, message: EventsArrived) -> None:
        try:
            self.fold.apply_all(message.events)
            reopened = any(isinstance(e, ev.RunReopened) for e in message.events)
            if message.finished or reopened:
                self.resuming = False
            if reopened and self.bridge is not None and getattr(self.bridge.run, "attached", 0):
                self.main.set_attached(owner_line(self.bridge.run))  # the new session's
            self._show_live()
            self._notify_events(message.events)
            if message.finished:
                self.run_over = True
                self.main.bindings_may_change()
        finally:
            if self.bridge is not None:
                self.bridge.batch_handled()

    def _show_live(self) -> None:
        """The main screen brought up to the live fold; on a busy machine a batch can
        arrive before the screen's widgets exist: shown once they do (the fold has it).
        A batch handled while the app closes (its widgets are being removed) is folded
        and not shown."""
        if not self.is_running:
            return
        if self.main.is_mounted:
            self.main.show(self.live_view())
        elif not self._show_pending:
            self._show_pending = True
            self.call_after_refresh(self._show_when_mounted)

    def _show_when_mounted(self) -> None:
        self._show_pending = False
        self._show_live()

    def _notify_events(self, events: Sequence[ev.Event]) -> None:
        notes = event_notes(events, recorded=self.replay_mode, gates=self.main.view.gates)
        self._held_notes.extend(notes)
        self.show_held_notes()

    def hold_visible_notes(self) -> None:
        """A dialog opens (MainScreen is covered): the toasts on screen would draw over
        it, so they wait with the run's notices until it closes; the gates the last
        announcement named are announced again then, with any newer ones, if they still
        wait."""
        visible = [n for n in self._notifications if n is not self._gate_toast]
        again: list[tuple[str, str, str]] = []
        shown = self._gate_toast
        if shown is not None and shown in self._notifications:
            again = [(move, title, GATE_NOTE) for title, move in self._gate_toast_gates]
        self._gate_toast = None
        self.clear_notifications()
        self._held_notes[:0] = again + [(str(n.message), n.title, n.severity) for n in visible]

    def _toast(self, message: str, title: str, severity: str) -> Notification:
        notification = Notification(message, title, severity, self.NOTIFICATION_TIMEOUT)  # type: ignore[arg-type]
        self.post_message(Notify(notification))
        return notification

    def show_held_notes(self) -> None:
        """The run's notices as toasts, once no dialog is open: a toast drawn over a
        dialog hides its buttons, so while one is open they wait (MainScreen calls this
        again when it is back on top). Gates that wait for the person are one toast: a
        new gate while an announcement is on screen replaces it with one naming both."""
        if not self._held_notes or self.screen is not self.main:
            return
        held, self._held_notes = self._held_notes, []
        shown = self._gate_toast
        if (
            any(n[2] == GATE_NOTE for n in held)
            and shown is not None
            and shown in self._notifications
        ):
            held[:0] = [(move, title, GATE_NOTE) for title, move in self._gate_toast_gates]
            self._unnotify(shown)
            self._gate_toast = None
        # only gates still waiting: an attached app's first batch holds the run's whole
        # history, and a gate may be decided while a dialog was open
        view = self.live_view() if self.bridge is not None else self.main.view
        waiting = {f"gate {g.gate_id}" for g in view.gates}
        gates: list[tuple[str, str]] = []
        for move, title, severity in held:
            gate = title.removesuffix(" still")
            if severity == GATE_NOTE and gate in waiting:
                waiting.discard(gate)  # one line a gate, however often it was noted
                gates.append((title, move))
        notes = [n for n in held if n[2] != GATE_NOTE]
        if gates:  # what a, v, g and enter act on when no gated attempt is selected
            self.main.named_gates = tuple(title.split()[1] for title, _ in gates)
            self.main.bindings_may_change()
        if gates:
            decides = not self.read_only and self.bridge is not None
            self._gate_toast = self._toast(*gate_announcement(gates, decides=decides))
            self._gate_toast_gates = [(title.removesuffix(" still"), m) for title, m in gates]
        for message, title, severity in notes[: NOTICES_PER_BATCH - bool(gates)]:
            self.notify(message, title=title, severity=severity)  # type: ignore[arg-type]
        if len(notes) > NOTICES_PER_BATCH - bool(gates):
            self.notify(
                f"{len(notes) - NOTICES_PER_BATCH + bool(gates)} more notices in the log",
                severity="information",
            )

    # --- steering ---------------------------------------------------------------------

    def steer(self, command: str, *args: Any, on_done: Callable[[Any], None] | None = None) -> None:
        """Send a RunControl command to the engine; a refusal becomes a notice."""
        bridge = self.bridge
        if bridge is None:
            self.notify("This is a replay: steering is off.", severity="warning")
            return
        if self.read_only:
            self.notify("This is a read-only view: steering is off.", severity="warning")
            return
        self.commands_sent.append((command, args))

        async def send() -> None:
            try:
                result = await bridge.send(command, *args)
            except ValueError as exc:
                self.notify(str(exc), title=f"{command} refused", severity="warning")
                return
            if on_done is not None:
                on_done(result)

        self.run_worker(
            send(), group="steering", description=f"steering: {command}", exit_on_error=False
        )

    def on_steer_requested(self, message: SteerRequested) -> None:
        self.steer(message.command, *message.args, on_done=message.on_done)

    def on_replay_toggled(self, message: ReplayToggled) -> None:
        self.replay_toggle()

    def on_replay_seek_requested(self, message: ReplaySeekRequested) -> None:
        self.replay_seek(message.position, relative=message.relative)

    def on_replay_speed_requested(self, message: ReplaySpeedRequested) -> None:
        self.replay_speed(faster=message.faster)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.ERROR:
            error = worker.error
            line = f"{type(error).__name__}: {error}".splitlines()[0] if error else "failed"
            self.notify(line, title=f"{worker.description} failed", severity="error", timeout=15)
            if worker.group == "engine":
                self.run_over = True
                self.main.bindings_may_change()
            if worker.group == "deploy":  # its DeployFinished never comes
                for n in list(self.deploys.running):
                    self.deploys.running.pop(n)
                    self.deploys.failed[n] = line
                self.main.refresh_deploys()
        elif event.state == WorkerState.SUCCESS and worker.group == "engine":
            self.run_over = True

    # --- deploying an attempt's kernel into a model -------------------------------------

    def on_deploy_requested(self, message: DeployRequested) -> None:
        n = message.attempt
        if self.deploys.running:
            busy = ", ".join(f"#{a}" for a in self.deploys.running)
            self.notify(f"A deploy is running ({busy}): one at a time.", severity="warning")
            return
        run_dir = self.files.run_dir
        if run_dir is None:
            return
        self.deploys.failed.pop(n, None)
        self.deploys.running[n] = "starting kernelladder deploy (torch, transformers load)"
        self.main.refresh_deploys()
        self.notify(f"Deploying #{n} into a model: the Deploy tab follows it.")

        async def deploy() -> None:
            try:
                record, error = await run_deploy_process(
                    run_dir, n, lambda line: self.post_message(DeployProgress(n, line))
                )
            except OSError as exc:
                record, error = None, f"cannot start kernelladder deploy: {exc}"
            self.post_message(DeployFinished(n, record, error))

        self.run_worker(deploy(), group="deploy", description=f"deploy #{n}", exit_on_error=False)

    def on_deploy_progress(self, message: DeployProgress) -> None:
        if message.attempt in self.deploys.running:
            self.deploys.running[message.attempt] = message.line
            self.main.refresh_deploys()

    def on_deploy_finished(self, message: DeployFinished) -> None:
        n = message.attempt
        self.deploys.running.pop(n, None)
        if message.record is None:
            self.deploys.failed[n] = message.error
            self.notify(message.error, title=f"deploy of #{n} failed", severity="error", timeout=15)
        else:
            self.deploys.done.setdefault(n, []).append(message.record)
            status = message.record.get("status")
            severity = "information" if status == "match" else "warning"
            self.notify(str(message.record.get("summary", "")), title=f"deploy of #{n}: {status}",
                        severity=severity, timeout=10)  # fmt: skip
        self.main.refresh_deploys()

    # --- quitting ---------------------------------------------------------------------

    async def action_quit(self, again_confirms: bool = False) -> None:
        """q, ctrl+q or ctrl+c: asks whether to stop a running run (or to detach from
        one another process owns); ctrl+c pressed again while it asks says yes (detach,
        for an attached run: that leaves it running)."""
        question = self.screen
        if again_confirms and isinstance(question, ConfirmScreen) and question.id == QUIT_ID:
            question.dismiss(True)
            return
        if again_confirms and isinstance(question, LeaveRunScreen):
            question.dismiss(DETACH)
            return
        if self.bridge is None or self.run_over or self.main.view.state == v.RUN_FINISHED:
            self.exit(0)
            return
        if self.read_only:  # watching only: leaving never stops the run
            self.detached = True
            self.exit(0)
            return
        if getattr(self.bridge.run, "attached", False):  # another process owns the run
            self._ask_leave_attached(self.bridge.run)
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._stop_in_background()

        self.push_screen(
            ConfirmScreen(
                "Stop the run and quit?",
                "The run is still going. Quitting stops it: in-flight attempts finish "
                "and are recorded, and the log is complete either way"
                + (
                    f" (in {self.files.run_dir}/; --resume goes on)." if self.files.run_dir else "."
                ),
                id=QUIT_ID,
                yes="Stop and quit",
                no="Keep watching",
                keys="ctrl+c again: stop and quit",
            ),
            answer,
        )

    def _ask_leave_attached(self, run: Any) -> None:
        """Attached to a run another process owns: quitting may leave it running."""

        def answer(choice: str | None) -> None:
            if choice == DETACH:
                self.detached = True
                self.exit(0)
            elif choice == STOP:
                self._stop_in_background()

        self.push_screen(
            LeaveRunScreen(owner_line(run), str(getattr(run, "run_dir", "RUN_DIR"))), answer
        )

    def _stop_in_background(self) -> None:
        self.run_worker(
            self._stop_and_exit(),
            group="steering",
            description="stopping the run",
            exit_on_error=False,
        )

    async def _stop_and_exit(self) -> None:
        bridge = self.bridge
        assert bridge is not None
        self.notify("Stopping: waiting for in-flight attempts to be recorded…")
        self.commands_sent.append(("stop", ("user",)))
        try:
            await bridge.send("stop", "user")
        except ValueError:
            pass  # already stopping or stopped
        deadline = time.monotonic() + QUIT_WAIT_S
        # an attached app's tail goes on past the end (a resume may follow): the end is
        # when it has read the run's RunFinished
        while not (bridge.finished or getattr(bridge.run, "finished_seen", False)):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        self.exit(0)
