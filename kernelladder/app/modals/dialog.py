"""What every dialog does on a small terminal: its buttons, its field and its keys stay on
the screen, and its long text scrolls.

Below TIGHT_BELOW rows a dialog drops its blank rows and its buttons and fields take one
row each; below NARROW_BELOW columns its buttons are as wide as their labels. The part
of a dialog marked `dialog-body` (its long text) gets the rows the rest leaves, and
scrolls: at 60x20 the gate prompt's buttons and the trust dialog's Cancel were below the
screen's edge, where tab still landed on them."""

from __future__ import annotations

from typing import TypeVar

from textual import events
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input

T = TypeVar("T")

TIGHT_BELOW = 24  # rows
NARROW_BELOW = 64  # columns
BODY = "dialog-body"
TITLE = "dialog-title"  # a title with a blank row under it


class Dialog(ModalScreen[T]):
    """A modal box in the middle of the screen: a Vertical of wrapped labels, with its
    buttons in a row on the right. A dialog's own CSS sets its width and border colour."""

    DEFAULT_CSS = """
    Dialog {
        align: center middle;
    }
    Dialog > Vertical {
        width: 64;
        max-width: 100%;  /* a narrow terminal: the question fits, its buttons show */
        height: auto;
        max-height: 100%;
        border: thick $primary 80%;
        background: $panel;
        padding: 1 2;
    }
    Dialog Vertical > Label {
        width: 1fr;  /* wrap: a Label of auto width is cut at the border */
    }
    Dialog Horizontal {
        height: auto;
        margin-top: 1;
        align-horizontal: right;
    }
    Dialog Button {
        margin-left: 2;
    }
    Dialog .dialog-title {
        text-style: bold;
        margin-bottom: 1;
    }
    Dialog .dialog-body {
        height: auto;
        scrollbar-size-vertical: 1;
    }
    Dialog .dialog-body > Label {
        width: 1fr;  /* wrap, never cut */
    }
    Dialog.-tight > Vertical {
        padding: 0 1;
    }
    Dialog.-tight Label, Dialog.-tight Input, Dialog.-tight Horizontal,
    Dialog.-tight .dialog-body {
        margin-top: 0;
        margin-bottom: 0;
    }
    Dialog.-narrow Button {
        min-width: 0;
        width: auto;
        margin-left: 1;
    }
    """

    # ctrl+c is the app's quit everywhere (a focused field still copies with it): over the
    # quit question it answers it (KernelLadderApp.action_quit)
    BINDINGS = [Binding("ctrl+c", "app.quit(True)", "Quit", show=False, id="dialog.quit")]

    def on_mount(self) -> None:
        self._lay_out(self.app.size.width, self.app.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out(event.size.width, event.size.height)

    def narrowed(self, narrow: bool) -> None:
        """A narrow terminal: a dialog whose button labels carry their keys shortens them."""

    def _lay_out(self, width: int, height: int) -> None:
        tight = height < TIGHT_BELOW
        self.set_class(tight, "-tight")
        self.set_class(width < NARROW_BELOW, "-narrow")
        for widget in (*self.query(Button), *self.query(Input)):
            widget.compact = tight
        self.narrowed(width < NARROW_BELOW)
        self.call_after_refresh(self._fit_body)

    def _fit_body(self) -> None:
        """The body gets the rows that the dialog's other parts leave."""
        bodies = self.query(f".{BODY}")
        if not bodies or not self.children:
            return
        body = bodies.first()
        box = body.parent
        if not isinstance(box, Widget):
            return
        others = box.styles.gutter.height  # its border and padding
        for child in box.children:
            if child is not body and child.display:
                others += child.outer_size.height + child.styles.margin.height
        others += body.styles.margin.height
        limit = max(1, int(self.size.height * self._height_share()) - others)
        if body.styles.max_height is None or body.styles.max_height.value != limit:
            body.styles.max_height = limit

    def _height_share(self) -> float:
        """The share of the screen's rows the dialog may take (the help takes 90%)."""
        return 1.0
