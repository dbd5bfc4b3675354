#pragma once
/// "Did you mean" support: the closest known word to a misspelled one.

#include <string>
#include <vector>

namespace ptune::config {

/// Levenshtein edit distance between two strings.
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` if it is close enough to be a likely typo (edit distance
/// at most max(2, |word|/3)), or "" when none is.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

/// ", did you mean 'X'?" for the closest candidate, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ptune::config
