#pragma once
/// A sweep of programs from command lines, as `ptune compare` takes them: each command is a row,
/// the first the baseline, and the config built from them is the one a JSON file with the same
/// program rows gives (docs/commands.md).

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

namespace ptune::config {

/// A command as a POSIX shell reads a simple command: its words, and the NAME=VALUE words before
/// the first, which set variables for it.
struct SimpleCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

/// Splits `text` into words as a POSIX shell does for a simple command: blanks (space, tab,
/// newline) separate words; single quotes keep everything; double quotes keep everything but a
/// backslash before $ ` " \ or a newline; a backslash outside quotes keeps the next character
/// (a backslash-newline is removed); leading words NAME=VALUE (NAME unquoted, a letter or '_'
/// then letters, digits or '_') set variables. No shell runs the command, so what a shell would
/// do beyond that is refused rather than passed on as text: an unquoted | & ; < > ( ), $ or `
/// anywhere outside single quotes, an unquoted * ? [ (file name patterns), a word starting with
/// an unquoted ~ or #. Throws ConfigError (the message says what and how to quote it, or to name
/// a shell: sh -c '...') for those, an unclosed quote and a command with no word.
SimpleCommand split_command(const std::string& text);

/// One command of a comparison and what applies to its row alone.
struct CommandRow {
  std::string command;  // as typed: split_command's text
  std::string name;     // the row's name; "": the command, its blanks made single spaces
  /// Its own program keys ("program.env.NAME", "program.step_pattern", ...), over `every_row`'s.
  nlohmann::ordered_json set = nlohmann::ordered_json::object();
};

/// The config that times `rows` as a sweep: a program section with the first row's program, and
/// a sweep row per command (the first with no changes, each other with the program keys in which
/// it differs from the row before it, since sweep rows are cumulative). Each row's program is its
/// command's words (program.command; a command that starts with the first row's words is those
/// and program.args, the rest) and variables over `every_row`'s keys and its own `set`, on a config with
/// `sets` applied (--set PATH=VALUE: the measure and process keys, applied to every row). A row's
/// name defaults to its command; one that repeats an earlier row's gets " (row N)". Errors name
/// the row: "row 1 'python b.py': ...". Throws ConfigError for no rows, a command split_command
/// refuses, an empty or unprintable name, and a value a key does not allow (the rows are
/// validated; process settings are not checked against this machine here).
ExperimentConfig config_from_commands(const std::vector<CommandRow>& rows,
                                      const nlohmann::ordered_json& every_row,
                                      const std::vector<std::string>& sets);

}  // namespace ptune::config
