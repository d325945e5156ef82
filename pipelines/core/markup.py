"""Untrusted text (agent and model names, file names, origins, reasons) as it goes into markup.

One place per contract: `md_escape` for Markdown and the HTML a Markdown renderer passes through
(Dagster metadata previews, the dataset card's body); `front_matter_card` and `card_body` for a card's
YAML front matter. Ingest already refuses names outside a safe character set; these still hold for a
value that reached the warehouse some other way (an origin is a file name, a reason quotes its row).
"""
from __future__ import annotations

import re
from typing import Any

_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")
"""Line breaks and other control characters, each run made one space: a newline would end a table row
or start a line of its own (`---`, `#`, `>`)."""
_MD_PUNCT = re.compile(r"([\\`*~\[\]|])")
"""Backslash-escaped, in one pass: escapes, code spans, emphasis, links and images, table cell ends."""


def md_escape(value: Any, max_chars: int | None = None) -> str:
    """`value` as inert inline Markdown text: one line, no HTML, no link, image, code span or table column.

    Renders as the original text (control characters become one space), cut to `max_chars` characters
    with an ellipsis before escaping, so an escape is never cut in half. None becomes the empty string."""
    s = "" if value is None else str(value)
    s = _BREAKS.sub(" ", s)
    if max_chars is not None and len(s) > max_chars:
        s = s[: max_chars - 1] + "…"
    # `<` as an entity: no tag, comment or autolink (`<javascript:...>`) can open; `&` so text stays text.
    s = s.replace("&", "&amp;").replace("<", "&lt;")
    return _MD_PUNCT.sub(r"\\\1", s)


def front_matter_card(front: dict[str, Any], body: str) -> str:
    """A card: YAML front matter between `---` lines, then the Markdown body.

    Values go through yaml.safe_dump only: it quotes every string it cannot write plainly (newlines,
    `---`, `: `, `|`) and indents whatever follows a mapping key, so no value can close the front matter
    or add a key; the body's own values go through md_escape."""
    import yaml  # a card is written once per release; the import stays out of the common path

    return "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n" + body


def card_body(card: str) -> str:
    """The Markdown body of a card written by front_matter_card (the text after the closing `---` line)."""
    if not card.startswith("---\n"):
        return card
    _, sep, body = card[4:].partition("\n---\n")
    return body.removeprefix("\n") if sep else card
