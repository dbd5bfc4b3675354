#include "core/table.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ptune::table {
namespace {

const std::string& cell_at(const std::vector<std::string>& row, size_t k) {
  static const std::string kEmpty;
  return k < row.size() ? row[k] : kEmpty;
}

std::vector<std::string> headers(const Table& t) {
  std::vector<std::string> h;
  for (const auto& c : t.columns) h.push_back(c.header);
  return h;
}

}  // namespace

size_t display_width(const std::string& s) {
  size_t n = 0;
  bool escape = false;
  for (unsigned char ch : s) {
    if (ch == 0x1b)
      escape = true;
    else if (escape)
      escape = ch != 'm';
    else
      n += (ch & 0xC0) != 0x80;
  }
  return n;
}

std::string text(const Table& t, const TextStyle& style) {
  const size_t n = t.columns.size();
  std::vector<size_t> width(n);
  for (size_t k = 0; k < n; ++k) width[k] = display_width(t.columns[k].header);
  for (const auto& row : t.rows)
    for (size_t k = 0; k < n; ++k) width[k] = std::max(width[k], display_width(cell_at(row, k)));
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = style.indent;
    for (size_t k = 0; k < n; ++k) {
      const std::string& c = cell_at(cells, k);
      const std::string pad(width[k] - display_width(c), ' ');
      s += (k ? style.gap : "") + (t.columns[k].right ? pad + c : c + pad);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(headers(t));
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::string markdown(const Table& t) {
  std::string out = "|";
  for (const auto& c : t.columns) out += " " + markdown_escape(c.header) + " |";
  out += "\n|";
  for (const auto& c : t.columns) out += c.right ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (size_t k = 0; k < t.columns.size(); ++k) out += " " + markdown_escape(cell_at(row, k)) + " |";
    out += "\n";
  }
  return out;
}

std::string csv(const Table& t) {
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t k = 0; k < t.columns.size(); ++k) s += (k ? "," : "") + csv_escape(cell_at(cells, k));
    return s + "\n";
  };
  std::string out = line(headers(t));
  for (const auto& row : t.rows) out += line(row);
  return out;
}

HtmlTable html_table(const Table& t, std::string cls) {
  HtmlTable h;
  h.cls = std::move(cls);
  h.columns = t.columns;
  for (const auto& row : t.rows) {
    HtmlRow r;
    r.cells.assign(row.begin(), row.end());
    h.rows.push_back(std::move(r));
  }
  return h;
}

namespace {

std::string class_attribute(const std::string& cls) {
  return cls.empty() ? std::string() : " class=\"" + html_escape(cls) + "\"";
}

std::string html_cell(const HtmlCell& c, bool right, bool header) {
  std::string cls = right && !c.words && !(c.text.empty() && c.cls.empty()) ? "n" : "";
  if (!c.cls.empty()) cls += (cls.empty() ? "" : " ") + c.cls;
  const char* tag = header ? "th" : "td";
  return std::string("<") + tag + class_attribute(cls) +
         (c.title.empty() ? std::string() : " title=\"" + html_escape(c.title) + "\"") + ">" +
         html_escape(c.text) + "</" + tag + ">";
}

}  // namespace

std::string html(const HtmlTable& t) {
  std::string out = t.scroll ? "<div class=\"scroll\">" : "";
  out += "<table" + class_attribute(t.cls) + ">";
  if (t.head) {
    out += "<thead><tr>";
    for (size_t k = 0; k < t.columns.size(); ++k) {
      const std::string swatch = k < t.swatches.size() ? t.swatches[k] : "";
      out += std::string("<th") + (t.columns[k].right ? " class=\"n\"" : "") + ">" +
             (swatch.empty()
                  ? ""
                  : "<span class=\"swatch\" style=\"background:" + html_escape(swatch) + "\"></span>") +
             html_escape(t.columns[k].header) + "</th>";
    }
    out += "</tr></thead>";
  }
  out += "<tbody>";
  for (const auto& row : t.rows) {
    out += "<tr" + class_attribute(row.cls);
    for (const auto& [name, value] : row.attributes) out += " " + name + "=\"" + html_escape(value) + "\"";
    out += ">";
    for (size_t k = 0; k < row.cells.size(); ++k)
      out +=
          html_cell(row.cells[k], k < t.columns.size() && t.columns[k].right, k == 0 && row.first_is_header);
    out += "</tr>";
  }
  return out + "</tbody></table>" + (t.scroll ? "</div>" : "");
}

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string markdown_escape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (std::strchr("|\\*_[]`", c) && c != '\0') {
      o += '\\';
      o += c;
    } else if (c == '&' || c == '<' || c == '>') {
      o += html_escape(std::string(1, c));
    } else if (c == '~') {
      o += "&#126;";
    } else if (c == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') continue;  // \r\n: one line break
      o += "<br>";
    } else if (c == '\n') {
      o += "<br>";
    } else {
      o += c == '\t' ? ' ' : c;
    }
  }
  return o;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

std::string one_line(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      o += "\\n";
    } else if (c == '\r') {
      o += "\\r";
    } else if (c == '\t') {
      o += "\\t";
    } else if ((u < 0x20 && u != 0x1b) || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

std::string shorten(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n > 3 ? n - 3 : 0;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a character's middle
  return s.substr(0, cut) + "...";
}

}  // namespace ptune::table
