"""A small html.parser reader for report pages: every element's tag, attributes and text, and the placement table."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"br", "meta", "input", "img", "hr", "link"}


class Element:
    def __init__(self, tag: str, attrs: dict):
        self.tag, self.attrs, self.text = tag, attrs, ""

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Page(HTMLParser):
    """elements: every element in document order; texts are the element's own direct text, concatenated."""

    def __init__(self, html: str):
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        el = Element(tag, dict(attrs))
        self.elements.append(el)
        if tag not in VOID:
            self._open.append(el)

    def handle_startendtag(self, tag, attrs):
        self.elements.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop().tag == tag:
                break

    def handle_data(self, data):
        if self._open:
            self._open[-1].text += data

    def find(self, tag: str | None = None, cls: str | None = None, **attrs) -> list[Element]:
        out = []
        for el in self.elements:
            if tag and el.tag != tag or cls and cls not in el.classes():
                continue
            if all(el.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(el)
        return out

    def placement(self) -> dict[tuple[int, str], int]:
        """(group, device id) -> rows, read from the placement table's headers and cells (runs expanded)."""
        columns: list[list[str]] = []
        out: dict[tuple[int, str], int] = {}
        col = 0
        for el in self.elements:
            if el.tag == "th" and "cls" in el.classes():
                columns.append(el.attrs["data-devices"].split())
            elif el.tag == "tr":
                col = 0
            elif el.tag == "td" and "cell" in el.classes():
                a, b = (int(x) for x in el.attrs["data-groups"].split("-"))
                for g in range(a, b + 1):
                    for dev in columns[col]:
                        out[(g, dev)] = int(el.attrs["data-rows"])
                col += 1
        return out
