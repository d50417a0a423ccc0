"""A page as a browser's tokenizer reads it: its scripts, tags, attributes and visible text,
and the check that nothing in it can run (for the tests of pages made from hostile notebooks)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["Page", "assert_inert", "TEMPLATE_SCRIPT_SRC"]

#: The scripts nbgrader's feedback template (nbconvert's mathjax macro) puts on every page.
TEMPLATE_SCRIPT_SRC = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"


class Page(HTMLParser):
    """What a browser would make of a page: its scripts, tags, attributes and visible text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self.tags: list[tuple[str, dict]] = []
        self.text_parts: list[str] = []
        self._script: dict | None = None
        self._script_body: list[str] = []
        self.feed(text)
        self.close()
        self.text = "".join(self.text_parts)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "script":
            self._script, self._script_body = attrs, []

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._script_body)))
            self._script = None

    def handle_data(self, data):
        (self._script_body if self._script is not None else self.text_parts).append(data)

    def links(self) -> list[dict]:
        """The ``<a>`` tags, but the anchor links nbconvert puts in headings."""
        return [attrs for tag, attrs in self.tags if tag == "a" and attrs.get("class") != "anchor-link"]

    def handlers(self) -> list[tuple[str, str, str]]:
        return [(tag, k, v) for tag, attrs in self.tags for k, v in attrs.items() if k.startswith("on")]

    def urls(self) -> list[str]:
        keys = ("href", "src", "action", "formaction", "xlink:href", "data", "srcdoc", "style", "background")
        return [re.sub(r"[\x00-\x20\s]+", "", v or "").lower() for _, attrs in self.tags for k, v in attrs.items()
                if k in keys]


def assert_inert(page: Page) -> None:
    """No script but the template's, no event handler, no script URL, no frame or SVG markup."""
    foreign = [(a, body[:80]) for a, body in page.scripts
               if not ((a.get("src") or "").startswith(TEMPLATE_SCRIPT_SRC) and not body.strip())
               and not (a.get("type") == "text/x-mathjax-config" and "alert" not in body)]
    assert foreign == [], "scripts that are not the template's"
    assert page.handlers() == [], "event handlers"
    assert [u for u in page.urls() if "javascript:" in u or "vbscript:" in u or u.startswith("data:text")] == []
    assert {t for t, _ in page.tags} & {"iframe", "svg", "object", "embed", "form", "base", "frame", "math"} == set()
