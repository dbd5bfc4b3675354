#include "report/svg.hpp"

#include <sstream>

#include "core/numbers.hpp"
#include "core/table.hpp"

namespace ptune::report::svg {

std::string open(const std::string& tag, const std::vector<Attr>& attrs) {
  std::string s = "<" + tag;
  for (const auto& [name, value] : attrs) s += " " + name + "=\"" + table::html_escape(value) + "\"";
  return s + ">";
}

std::string element(const std::string& tag, const std::vector<Attr>& attrs, const std::string& inner) {
  std::string s = open(tag, attrs);
  if (inner.empty()) return s.insert(s.size() - 1, "/");
  return s + inner + "</" + tag + ">";
}

std::string title(const std::string& text) { return "<title>" + table::html_escape(text) + "</title>"; }

std::string num(double v) { return numbers::shortest(v); }

}  // namespace ptune::report::svg
