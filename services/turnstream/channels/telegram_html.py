"""The agent's Markdown as Telegram HTML (`parse_mode=HTML`), pure: fenced and inline
code, bold, italic, strikethrough and links; everything else escaped as text. Telegram
counts a message's limit (4,096) in the text its HTML shows, so a part split to the limit
before conversion still fits."""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"```([\w+-]*)\n?(.*?)```", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__", re.DOTALL)
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])|(?<!\w)_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.MULTILINE)


def to_html(markdown: str) -> str:
    """Telegram HTML for `markdown`."""
    kept: list[str] = []

    def keep(fragment: str) -> str:
        kept.append(fragment)
        return f"\x00{len(kept) - 1}\x00"

    def fence(m: re.Match[str]) -> str:
        lang, code = m.group(1), html.escape(m.group(2).rstrip("\n"), quote=False)
        attr = f' class="language-{lang}"' if lang else ""
        return keep(f"<pre><code{attr}>{code}</code></pre>")

    text = _FENCE.sub(fence, markdown)
    text = _INLINE_CODE.sub(
        lambda m: keep(f"<code>{html.escape(m.group(1), quote=False)}</code>"), text
    )
    text = _LINK.sub(
        lambda m: keep(
            f'<a href="{html.escape(m.group(2))}">{html.escape(m.group(1), quote=False)}</a>'
        ),
        text,
    )
    text = html.escape(text, quote=False)
    text = _HEADING.sub(r"<b>\1</b>", text)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    text = _STRIKE.sub(r"<s>\1</s>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text)
