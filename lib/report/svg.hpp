#pragma once
/// SVG elements for the report's charts: a tag with its attributes (values escaped) and what it
/// holds, so that a chart says what it draws, not how markup is spelled.

#include <string>
#include <utility>
#include <vector>

namespace ptune::report::svg {

/// An attribute: its name and its value as text (numbers through num() or a fixed format).
using Attr = std::pair<std::string, std::string>;

/// `<tag name="value" ...>inner</tag>`, or `<tag .../>` when `inner` is empty; the values are
/// escaped, `inner` is markup already (text in it through table::html_escape()). Throws nothing.
std::string element(const std::string& tag, const std::vector<Attr>& attrs, const std::string& inner = "");

/// `<tag name="value" ...>`: the start of a container (svg, g) closed by the caller.
std::string open(const std::string& tag, const std::vector<Attr>& attrs);

/// `<title>text</title>`: the tooltip of the element that holds it.
std::string title(const std::string& text);

/// `v` as C++ streams print a double by default ("250", "14", "12.5").
std::string num(double v);

}  // namespace ptune::report::svg
