#pragma once
/// Numbers as text: the one place every table, note, report and message formats a number.

#include <string>

namespace ptune::numbers {

/// `v` printed with `format`, a printf format of one double ("%.1f", "%+.1f%%", "%g"). Throws
/// nothing.
std::string fmt(const char* format, double v);

/// `v` with `digits` decimals: fixed(2.345, 1) is "2.3". Throws nothing.
std::string fixed(double v, int digits);

/// `v` rounded to a whole percent: percent(61.6) is "62%". Throws nothing.
std::string percent(double v);

/// `v` with `digits` decimals and its thousands grouped: grouped(37957.5, 1) is "37,957.5".
/// Throws nothing.
std::string grouped(double v, int digits);

/// `v` in its shortest form of six significant digits ("%g" without an exponent for the sizes
/// a chart holds): shortest(410.0) is "410", shortest(0.5) "0.5". Throws nothing.
std::string shortest(double v);

}  // namespace ptune::numbers
