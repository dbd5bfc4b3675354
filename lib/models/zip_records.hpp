#pragma once
/// The zip archive's own check of torch.save files and ptune's checkpoints: every record against
/// the CRC-32 its central directory holds.

#include <string>

namespace ptune::models {

/// Checks every record of the zip archive at `path` (torch.save's and ptune's checkpoints)
/// against the CRC-32 its central directory holds (records stored with no check, CRC 0, are
/// not checked), before anything of it is used: a record whose bytes changed on disk or in a
/// copy is otherwise read as if whole. Throws DataError "<path>: damaged: record '<name>'
/// fails its CRC-32 check (...)", or "<path>: a damaged zip archive: <why>" when the directory
/// itself cannot be read.
void verify_records(const std::string& path);

}  // namespace ptune::models
