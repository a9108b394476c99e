"""The agent's Markdown as Slack mrkdwn, pure.

Slack's `text` is mrkdwn, not Markdown: `*bold*`, `_italic_`, `~strike~`, `<url|label>`, no
headings, and `&`, `<`, `>` must be escaped as entities (Slack reads `<…>` as a link or a
mention). Code spans and fences keep their content as it is (escaped only); everything else
is converted line by line.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_CODE = re.compile(r"`[^`\n]+`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)
_HOLD = "\x00{}\x00"
_HELD = re.compile(r"\x00(\d+)\x00")


def escape(text: str) -> str:
    """`&`, `<`, `>` as Slack's entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """`markdown` as Slack mrkdwn (see the module docstring)."""
    held: list[str] = []

    def hold(text: str) -> str:
        held.append(text)
        return _HOLD.format(len(held) - 1)

    text = _FENCE.sub(lambda m: hold(escape(m.group(0))), markdown)
    text = _CODE.sub(lambda m: hold(escape(m.group(0))), text)
    text = _LINK.sub(lambda m: hold(f"<{m.group(2)}|{escape(m.group(1))}>"), text)
    text = escape(text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _BOLD.sub(r"*\2*", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = _HEADING.sub(r"*\1*", text)
    text = _BULLET.sub(r"\1• ", text)
    while _HELD.search(text):
        text = _HELD.sub(lambda m: held[int(m.group(1))], text)
    return text
