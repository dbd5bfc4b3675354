#pragma once
/// `ptune analyze ... -o overview.html`: the profiler plugin's overview as one self-contained
/// page (inline SVG and CSS, the report's style; nothing from the network).

#include <string>

#include "analyze/compare.hpp"

namespace ptune::analyze {

/// The page: per version its step time as stacked bars of the split, one
/// `<g class="step-bar" data-step="NAME" data-ms="...">` per step; GPU busy, Tensor Core share,
/// copies and syncs; the largest kernels and operators; per-rank bars (communication and its
/// overlap) for a folder of ranks; peak memory per step where recorded; the verdict and notes.
/// For several versions, first the speedup chart (one `<rect class="speedup">` per version) and
/// the table with the changes per pair. Every text from the traces is HTML-escaped. Throws
/// nothing.
std::string overview_html(const Comparison& c);

}  // namespace ptune::analyze
