#!/usr/bin/env python3
"""Reads ptune's Markdown and CSV results files with the Python tools people read them with.

  results_files_check.py markdown EXPECTED.json FILE.md
      python-markdown (tables), markdown-it-py (commonmark + table) and mistune (mistune.html)
      each render FILE.md; in each, the first table must have EXPECTED["columns"] header cells,
      every row as many cells, and the row names (column 1) EXPECTED["names"], character for
      character (a <br> read as a newline); every text of EXPECTED["texts"] must be a paragraph
      or list item of the page, as rendered.
  results_files_check.py csv EXPECTED.json FILE.csv...
      every file loads with the csv module with exactly the columns EXPECTED["columns"], every
      row as many fields, numbers (or nothing) in EXPECTED["numeric"] columns, and the names
      EXPECTED["names"][FILE].

Prints "ok" and exits 0, or prints what differs and exits 1.
"""
import csv
import html.parser
import json
import sys


class Blocks(html.parser.HTMLParser):
    """The text of table cells (per row) and of paragraphs and list items of an HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows, self.texts, self.cell, self.block = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "br":
            if self.cell is not None:
                self.cell += "\n"
            elif self.block is not None:
                self.block += "\n"
        elif tag in ("p", "li"):
            self.block = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None
        elif tag in ("p", "li") and self.block is not None:
            self.texts.append(self.block)
            self.block = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        elif self.block is not None:
            self.block += data


def renderers():
    import markdown
    import markdown_it
    import mistune
    return {
        "python-markdown": lambda text: markdown.markdown(text, extensions=["tables"]),
        "markdown-it-py": lambda text: markdown_it.MarkdownIt("commonmark").enable("table").render(text),
        "mistune": lambda text: mistune.html(text),
    }


def check_markdown(expected, path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    for name, render in renderers().items():
        page = Blocks()
        page.feed(render(text))
        rows = page.rows
        if not rows:
            problems.append(f"{name}: no table")
            continue
        for i, row in enumerate(rows):
            if len(row) != expected["columns"]:
                problems.append(f"{name}: table row {i} has {len(row)} cells, not {expected['columns']}: {row!r}")
        names = [row[1] if len(row) > 1 else None for row in rows[1:]]
        if names != expected["names"]:
            problems.append(f"{name}: names {names!r}, expected {expected['names']!r}")
        for t in expected["texts"]:
            if t not in page.texts:
                problems.append(f"{name}: no paragraph or list item {t!r}; got {page.texts!r}")
    return problems


def check_csv(expected, paths):
    problems = []
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if not rows or rows[0] != expected["columns"]:
            problems.append(f"{path}: columns {rows[0] if rows else None!r}, expected {expected['columns']!r}")
            continue
        header = rows[0]
        for i, row in enumerate(rows[1:], 1):
            if len(row) != len(header):
                problems.append(f"{path}: row {i} has {len(row)} fields, not {len(header)}")
                continue
            for column, value in zip(header, row):
                if column in expected["numeric"] and value != "":
                    try:
                        float(value)
                    except ValueError:
                        problems.append(f"{path}: row {i}: {column} is not a number: {value!r}")
        with open(path, newline="", encoding="utf-8") as f:
            names = [r["name"] for r in csv.DictReader(f)]
        want = expected["names"].get(path)
        if want is not None and names != want:
            problems.append(f"{path}: names {names!r}, expected {want!r}")
    return problems


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("markdown", "csv"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2], encoding="utf-8") as f:
        expected = json.load(f)
    problems = check_markdown(expected, sys.argv[3]) if sys.argv[1] == "markdown" else check_csv(expected, sys.argv[3:])
    for p in problems:
        print(p)
    if problems:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
