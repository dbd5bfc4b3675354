#pragma once
/// One table model for every output that prints a table: columns (a header and an alignment)
/// and rows of text cells, written as aligned terminal text, Markdown or CSV, with one escaping
/// per format. What a cell says is the caller's; how a table looks is decided here.

#include <cstddef>
#include <string>
#include <vector>

namespace ptune::table {

struct Column {
  std::string header;
  bool right = false;  // numbers: right-aligned in text, "---:" in Markdown
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;  // a row shorter than the columns ends in empty cells
};

/// How aligned text is laid out.
struct TextStyle {
  std::string indent;      // before every line
  std::string gap = "  ";  // between two columns
};

/// The table as aligned text: the header line, then a line per row; each column as wide as its
/// widest cell (display_width), right-aligned columns padded on the left; no line ends in spaces.
/// Throws nothing.
std::string text(const Table& t, const TextStyle& style = {});

/// The table in Markdown (GitHub's pipe tables), every cell and header through markdown_escape.
/// Throws nothing.
std::string markdown(const Table& t);

/// The table as CSV (RFC 4180), every cell and header through csv_escape. Throws nothing.
std::string csv(const Table& t);

/// The columns a terminal gives `s`: its UTF-8 code points, ANSI colour sequences (ESC ... m)
/// not counted. Throws nothing.
size_t display_width(const std::string& s);

/// `s` as one Markdown table cell or line of text: `|`, `\`, `*`, `_`, `[`, `]` and backticks
/// backslash-escaped, `&`, `<`, `>`, `~` as character references, newlines as <br>, so that
/// python-markdown, markdown-it and mistune render it as the text it is. Throws nothing.
std::string markdown_escape(const std::string& s);

/// `s` as HTML text or an attribute's value: &, <, >, " and ' as character references. Throws
/// nothing.
std::string html_escape(const std::string& s);

/// A cell as CSV writes it (RFC 4180): quoted where it holds a comma, a quote or a line break
/// (\n or \r), its quotes doubled. Throws nothing.
std::string csv_escape(const std::string& s);

/// `v` printed with `format`, a printf format of one double ("%.1f"): a cell's text.
std::string fmt(const char* format, double v);

/// `s` cut to at most `n` bytes (n >= 4), ending in "..." where cut, never inside a UTF-8
/// character.
std::string shorten(const std::string& s, size_t n);

}  // namespace ptune::table
