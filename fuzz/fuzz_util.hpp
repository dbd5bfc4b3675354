#pragma once
// Shared by the fuzz targets: only ptune's documented errors may leave the code under test.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "core/errors.hpp"

namespace ptune::fuzz {

/// Runs `body`; a ConfigError or DataError is the expected answer to a bad input. Any other
/// exception is a finding: its type and message are printed and the process aborts, so that
/// libFuzzer saves the input.
template <class F>
void expect_documented_errors(F&& body) {
  try {
    body();
  } catch (const ptune::ConfigError&) {
  } catch (const ptune::DataError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: undocumented exception %s: %s\n", typeid(e).name(),
                 ptune::message_of(e).c_str());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: undocumented exception of an unknown type\n");
    std::abort();
  }
}

}  // namespace ptune::fuzz
