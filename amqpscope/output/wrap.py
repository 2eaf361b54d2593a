"""Lines for a terminal that wrap under their own text (a hanging indent), not at column 0.

Rich wraps a long printed line back to the first column, so a numbered cause or an event line runs
into the next one. ``print_hanging`` wraps the text after the first ``hang`` columns into the
console's width less ``hang`` and indents every continuation line by ``hang`` columns.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def hanging_lines(console: Console, text: Text, hang: int) -> list[Text]:
    """``text`` as lines of at most the console's width: the first ``hang`` cells stay on the first
    line, the rest wraps at word boundaries (a word longer than a line is folded, never cut)."""
    width = console.width
    if hang >= width - 8 or text.cell_len <= width:
        return [text]
    head, body = text[:hang], text[hang:]
    lines = body.wrap(console, width - hang, overflow="fold")
    out = []
    for i, line in enumerate(lines):
        line.rstrip()
        out.append(Text.assemble(head if i == 0 else " " * hang, line))
    return out


def print_hanging(console: Console, markup: str | Text, hang: int) -> None:
    """Print ``markup`` with a hanging indent of ``hang`` columns when it is longer than the console
    is wide."""
    text = Text.from_markup(markup) if isinstance(markup, str) else markup
    for line in hanging_lines(console, text, hang):
        console.print(line, soft_wrap=True, highlight=False)
