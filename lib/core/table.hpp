#pragma once
/// One table model for every output that prints a table: columns (a header and an alignment)
/// and rows of text cells, written as aligned terminal text, Markdown, CSV or HTML, with one
/// escaping per format. What a cell says is the caller's; how a table looks is decided here.

#include <cstddef>
#include <string>
#include <utility>
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

/// An HTML table's cell: its text (escaped when written), a class added to its column's ("n" for a
/// right-aligned column: numbers), and a title shown on hover.
struct HtmlCell {
  std::string text;
  std::string cls;     // "" none
  std::string title;   // "" none
  bool words = false;  // words in a column of numbers ("not measured"): without its "n"
  HtmlCell(std::string text = {}, std::string cls = {}, std::string title = {})  // NOLINT: a text is a cell
      : text(std::move(text)), cls(std::move(cls)), title(std::move(title)) {}
  HtmlCell(const char* text) : text(text) {}  // NOLINT: a text is a cell
};

/// An HTML table's row: its cells (a row shorter than the columns ends there), and what only HTML
/// shows: its first cell as a header cell (<th>), a class, and more attributes (data-*).
struct HtmlRow {
  std::vector<HtmlCell> cells;
  bool first_is_header = false;
  std::string cls;                                              // "" none
  std::vector<std::pair<std::string, std::string>> attributes;  // name, value (escaped when written)
  HtmlRow(std::vector<HtmlCell> cells = {}, bool first_is_header = false, std::string cls = {})  // NOLINT
      : cells(std::move(cells)), first_is_header(first_is_header), cls(std::move(cls)) {}
};

/// A table as the HTML pages show it: the columns' headers (with a colour swatch before a header
/// where `swatches` gives one), the rows, the table's class.
struct HtmlTable {
  std::string cls;  // "" none
  std::vector<Column> columns;
  std::vector<HtmlRow> rows;
  std::vector<std::string> swatches;  // by column: a CSS colour, "" none
  bool head = true;                   // false: no header row (a table of key/value rows)
  bool scroll = true;                 // in <div class="scroll"> (scrolls sideways when wide)
};

/// A table of text cells as an HTML table with the same columns and cells.
HtmlTable html_table(const Table& t, std::string cls = {});

/// The table as HTML: <table>, a <thead> of <th> (class "n" where right-aligned), a <tbody> of
/// rows whose cells have the class "n" in right-aligned columns plus their own (an empty cell with
/// no class of its own gets none), every text and attribute through html_escape. Throws nothing.
std::string html(const HtmlTable& t);

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

/// `s` on one line: \n, \r and \t as those two characters, other control characters (but ESC,
/// which starts a colour) as \xNN. Throws nothing.
std::string one_line(const std::string& s);

/// `s` cut to at most `n` bytes (n >= 4), ending in "..." where cut, never inside a UTF-8
/// character.
std::string shorten(const std::string& s, size_t n);

}  // namespace ptune::table
