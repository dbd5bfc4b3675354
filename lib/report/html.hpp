#pragma once
/// The HTML report: one self-contained page of one or more runs side by side, rows matched by
/// name. Inline SVG and CSS only: no script, and no font, image or style from anywhere else (a
/// Content-Security-Policy tells the browser so); it opens offline and prints cleanly.

#include <string>
#include <vector>

#include "report/run_file.hpp"

namespace ptune::report {

/// The report of `runs` (the first is the reference of every "vs" ratio), in this order:
/// samples/s per row as bars (one chart per measure.mode, and per model.arch when the rows
/// have several; one bar per run that has numbers,
/// each `<rect class="bar">` carrying data-run, data-row and data-value = samples_per_s), with
/// the speedup over the previous row and the baseline (and over the first run); the step split
/// as stacked bars (data wait, copy, compute; GPU busy and idle where measured) with peak
/// memory; the loss curves of convergence rows; the numbers as tables; diagnoses, notes and
/// statuses; the environments; each row's config as a diff against the first row's. Every
/// text from the files is HTML-escaped. Throws nothing for normalized runs (load_run).
std::string to_html(const std::vector<RunFile>& runs);

/// A self-contained page in the report's style (its CSS and Content-Security-Policy): `title`
/// as <title> and <h1>, `body` (HTML) as it is, `footer` (text, escaped). Throws nothing.
std::string html_page(const std::string& title, const std::string& body, const std::string& footer);

}  // namespace ptune::report
