#include "core/numbers.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace ptune::numbers {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent(double v) { return std::to_string(std::lround(v)) + "%"; }

std::string grouped(double v, int digits) {
  const std::string s = fixed(std::abs(v), digits);
  const size_t dot = s.find('.');
  const std::string whole = s.substr(0, dot), frac = dot == std::string::npos ? "" : s.substr(dot);
  std::string g;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i && (whole.size() - i) % 3 == 0) g += ',';
    g += whole[i];
  }
  return (v < 0 ? "-" : "") + g + frac;
}

std::string shortest(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace ptune::numbers
