#pragma once
/// A row's or a trial's overrides as every output prints them.

#include <string>

#include <nlohmann/json.hpp>

namespace ptune::report {

/// "loader.num_workers=4, optim.amp=bf16" (strings bare, other values as JSON); "-" for none
/// (an empty object, or not an object). Throws nothing.
std::string changes_text(const nlohmann::ordered_json& changes);

}  // namespace ptune::report
