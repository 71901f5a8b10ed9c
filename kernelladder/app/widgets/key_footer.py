"""The footer that keeps the keys that matter on a narrow terminal.

Textual's Footer lays every shown binding out in a row and lets the row run off the
screen under the docked command-palette key: at 80 columns Target, Stop, Export, Help
and Quit were gone and a cut-off "e" showed after "^p Commands". This footer leaves
keys out until the row fits: first the ones that do not apply now (disabled), then the
enabled ones in the order the screen gives, then the palette's key; Help and Quit stay. Every key left out is still
in the help screen (?) and the command palette.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PALETTE_CELLS = 13  # the docked "^p Commands" key with its border and a blank after it
PALETTE_FROM = 80  # columns: a narrower footer leaves the palette's key out


@dataclass(frozen=True)
class FooterItem:
    binding_id: str
    enabled: bool
    cells: int  # key, a space, the description and the gap after it


def footer_cells(key_display: str, description: str) -> int:
    return cell_len(key_display) + 1 + cell_len(description) + 1


def fit_footer(
    items: Sequence[FooterItem], width: int, drop_order: Sequence[str]
) -> list[FooterItem]:
    """The items that fit in `width` cells, in their order: disabled items are left out
    first (in `drop_order`, then from the end), then enabled ones in `drop_order`; an
    enabled item not in `drop_order` is never left out."""
    kept = list(items)
    rank = {binding_id: i for i, binding_id in enumerate(drop_order)}
    last = len(drop_order)

    def total() -> int:
        return sum(item.cells for item in kept)

    disabled = sorted(
        (item for item in kept if not item.enabled),
        key=lambda item: (rank.get(item.binding_id, last), -kept.index(item)),
    )
    enabled = sorted(
        (item for item in kept if item.enabled and item.binding_id in rank),
        key=lambda item: rank[item.binding_id],
    )
    for item in [*disabled, *enabled]:
        if total() <= width:
            break
        kept.remove(item)
    return kept


class KeyFooter(Footer):
    def __init__(self, *, drop_order: Sequence[str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.drop_order = tuple(drop_order)
        self._fitted_width = -1

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        active_bindings = self.screen.active_bindings
        first: dict[str, tuple[Binding, bool, str]] = {}  # one key per action, as Footer
        for _, binding, enabled, tooltip in active_bindings.values():
            if binding.show:
                first.setdefault(binding.action, (binding, enabled, tooltip))
        width = self.app.size.width
        self._fitted_width = width
        # under 80 columns the keys that steer come before "^p Commands" (ctrl+p still
        # opens the palette; the help screen says so)
        palette = (
            self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and width >= PALETTE_FROM
        )
        items = {
            binding.id or binding.action: FooterItem(
                binding.id or binding.action,
                enabled,
                footer_cells(self.app.get_key_display(binding), binding.description),
            )
            for binding, enabled, _ in first.values()
        }
        room = width - (PALETTE_CELLS if palette else 0)
        fitted = fit_footer(list(items.values()), room, self.drop_order)
        if palette and sum(item.cells for item in fitted) > room:
            palette = False  # Help and Quit before "^p Commands" (ctrl+p still opens it)
            fitted = fit_footer(list(items.values()), width, self.drop_order)
        kept = {item.binding_id for item in fitted}
        for binding, enabled, tooltip in first.values():
            if (binding.id or binding.action) not in kept:
                continue
            yield self._key(binding, enabled, tooltip).data_bind(compact=Footer.compact)
        if palette:
            try:
                _node, binding, enabled, tooltip = active_bindings[self.app.COMMAND_PALETTE_BINDING]
            except KeyError:
                return
            tooltip = binding.tooltip or binding.description
            yield self._key(binding, enabled, tooltip, classes="-command-palette")

    def _key(self, binding: Binding, enabled: bool, tooltip: str, classes: str = "") -> FooterKey:
        return FooterKey(
            binding.key,
            self.app.get_key_display(binding),
            binding.description,
            binding.action,
            disabled=not enabled,
            tooltip=tooltip,
            classes=classes,
        )

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and self.app.size.width != self._fitted_width:
            self.call_after_refresh(self.recompose)
