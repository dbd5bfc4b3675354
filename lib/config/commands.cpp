#include "config/commands.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/errors.hpp"

namespace ptune::config {
namespace {

using Json = nlohmann::ordered_json;

/// What a shell would do with `c` that ptune, running the command without one, cannot: the
/// error for it. Throws ConfigError.
[[noreturn]] void refuse(char c, const std::string& what) {
  throw ConfigError(std::string("'") + c + "' " + what +
                    ", and ptune runs the command without a shell: put it in single quotes, or name a shell "
                    "(sh -c '...')");
}

/// A word as it is read: its text, and whether it can still be a NAME=VALUE assignment.
struct Word {
  std::string text;
  bool started = false;               // a word has begun (quotes alone make an empty word)
  bool quoted = false;                // a quote or backslash came before any unquoted '='
  size_t equals = std::string::npos;  // where the first unquoted '=' is in `text`
};

/// The words of a simple command, read as a POSIX shell reads them (split_command).
class Splitter {
 public:
  explicit Splitter(const std::string& text) : text_(text) {}

  std::vector<Word> words() {
    for (i_ = 0; i_ < text_.size(); ++i_) {
      const char c = text_[i_];
      if (c == ' ' || c == '\t' || c == '\n')
        end_word();
      else if (c == '\'')
        single_quoted();
      else if (c == '"')
        double_quoted();
      else if (c == '\\')
        escaped();
      else
        plain(c);
    }
    end_word();
    return words_;
  }

 private:
  void end_word() {
    if (word_.started) words_.push_back(word_);
    word_ = Word{};
  }

  void quote() {
    word_.started = true;
    if (word_.equals == std::string::npos) word_.quoted = true;
  }

  /// From the opening quote to the closing one: every character as it is.
  void single_quoted() {
    quote();
    const size_t close = text_.find('\'', i_ + 1);
    if (close == std::string::npos) throw ConfigError("a single quote (') that is not closed");
    word_.text += text_.substr(i_ + 1, close - i_ - 1);
    i_ = close;
  }

  /// From the opening quote to the closing one: a backslash keeps $ ` " \ (and removes a newline).
  void double_quoted() {
    quote();
    for (size_t j = i_ + 1; j < text_.size(); ++j) {
      const char c = text_[j];
      if (c == '"') {
        i_ = j;
        return;
      }
      if (c == '$' || c == '`') refuse(c, "in double quotes is a shell expansion");
      if (c == '\\' && j + 1 < text_.size() && std::strchr("$`\"\\\n", text_[j + 1]) != nullptr) {
        if (text_[++j] != '\n') word_.text += text_[j];
        continue;
      }
      word_.text += c;
    }
    throw ConfigError("a double quote (\") that is not closed");
  }

  /// A backslash outside quotes keeps the next character; before a newline it joins the lines;
  /// at the end it is itself.
  void escaped() {
    if (i_ + 1 == text_.size()) {
      word_.started = true;
      word_.text += '\\';
      return;
    }
    if (text_[++i_] == '\n') return;
    quote();
    word_.text += text_[i_];
  }

  void plain(char c) {
    if (!word_.started && c == '~') refuse(c, "at the start of a word is a home folder");
    if (!word_.started && c == '#') refuse(c, "at the start of a word starts a comment");
    if (std::strchr("|&;<>()", c) != nullptr) refuse(c, "is a shell operator");
    if (c == '$' || c == '`') refuse(c, "is a shell expansion");
    if (std::strchr("*?[", c) != nullptr) refuse(c, "is a file name pattern");
    if (c == '=' && word_.equals == std::string::npos && !word_.quoted) word_.equals = word_.text.size();
    word_.started = true;
    word_.text += c;
  }

  const std::string& text_;
  size_t i_ = 0;
  Word word_;
  std::vector<Word> words_;
};

/// A shell's variable name: a letter or '_', then letters, digits or '_'.
bool is_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool is_assignment(const Word& w) {
  return w.equals != std::string::npos && !w.quoted && is_name(w.text.substr(0, w.equals));
}

/// "row N 'COMMAND'": how errors name a row.
std::string row_text(size_t i, const std::string& command) {
  return "row " + std::to_string(i) + " '" + command + "'";
}

/// `text` with each run of blanks made one space, without blanks at either end.
std::string single_spaced(const std::string& text) {
  std::string out;
  bool blank = false;
  for (const char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      blank = !out.empty();
      continue;
    }
    if (blank) out += ' ';
    blank = false;
    out += c;
  }
  return out;
}

/// The rows' names: each given one, else its command single-spaced, with " (row N)" where it
/// repeats an earlier row's.
std::vector<std::string> row_names(const std::vector<CommandRow>& rows) {
  std::vector<std::string> names;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string name = rows[i].name.empty() ? single_spaced(rows[i].command) : rows[i].name;
    if (name.empty()) throw ConfigError(row_text(i, rows[i].command) + ": an empty name");
    if (has_control_characters(name))
      throw ConfigError(row_text(i, rows[i].command) +
                        ": its name has a control character; a row's name is "
                        "printed (name it with --name)");
    if (rows[i].name.empty() && std::find(names.begin(), names.end(), name) != names.end())
      name += " (row " + std::to_string(i) + ")";
    names.push_back(name);
  }
  return names;
}

/// The words every command starts with, less any trailing option (a word starting with '-': its
/// value may be what differs, and the two read best together): the rows' program.command, each
/// row's other words its program.args. Empty where even their first words differ.
std::vector<std::string> common_words(const std::vector<SimpleCommand>& commands) {
  std::vector<std::string> common = commands.front().argv;
  for (const SimpleCommand& c : commands) {
    const auto end = std::mismatch(common.begin(), common.end(), c.argv.begin(), c.argv.end()).first;
    common.erase(end, common.end());
  }
  while (!common.empty() && common.back().rfind('-', 0) == 0) common.pop_back();
  return common;
}

/// The program.command and program.args of `argv`: `common` (common_words) and the rest, as a
/// sweep row of the same program writes it; its words where no word is common to every row.
void put_words(Json& patch, const std::vector<std::string>& argv, const std::vector<std::string>& common) {
  patch["program.command"] = common.empty() ? argv : common;
  patch["program.args"] =
      common.empty() ? std::vector<std::string>()
                     : std::vector<std::string>(argv.begin() + static_cast<long>(common.size()), argv.end());
}

/// Row `i`'s config: `base` with the command's words and variables over `every_row`'s keys and
/// the row's own, validated.
ExperimentConfig row_config(const ExperimentConfig& base, size_t i, const CommandRow& row,
                            const SimpleCommand& command, const std::vector<std::string>& common,
                            const Json& every_row) {
  Json patch = Json::object();
  put_words(patch, command.argv, common);
  for (auto it = every_row.begin(); it != every_row.end(); ++it) patch[it.key()] = it.value();
  for (auto it = row.set.begin(); it != row.set.end(); ++it) patch[it.key()] = it.value();
  for (const auto& [name, value] : command.env) patch["program.env." + name] = value;
  ExperimentConfig cfg = base;
  const std::string at = row_text(i, row.command);
  apply_patch(cfg, patch, at);
  validate(cfg, at);
  return cfg;
}

/// The keys whose values differ from `before` to `after` ("section.key": the value after).
Json changes(const ExperimentConfig& before, const ExperimentConfig& after) {
  const Json a = to_json(before), b = to_json(after);
  Json set = Json::object();
  for (auto s = b.begin(); s != b.end(); ++s) {
    if (s.key() == "sweep") continue;
    if (!s.value().is_object()) {
      if (a.at(s.key()) != s.value()) set[s.key()] = s.value();
      continue;
    }
    for (auto k = s.value().begin(); k != s.value().end(); ++k)
      if (a.at(s.key()).at(k.key()) != k.value()) set[s.key() + "." + k.key()] = k.value();
  }
  return set;
}

}  // namespace

SimpleCommand split_command(const std::string& text) {
  SimpleCommand c;
  for (const Word& w : Splitter(text).words()) {
    if (c.argv.empty() && is_assignment(w))
      c.env[w.text.substr(0, w.equals)] = w.text.substr(w.equals + 1);
    else
      c.argv.push_back(w.text);
  }
  if (c.argv.empty())
    throw ConfigError(c.env.empty()
                          ? "an empty command; name a program and its arguments, e.g. 'python3 train.py'"
                          : "variables but no command after them; name a program, e.g. 'NAME=VALUE "
                            "python3 train.py'");
  return c;
}

ExperimentConfig config_from_commands(const std::vector<CommandRow>& rows, const Json& every_row,
                                      const std::vector<std::string>& sets) {
  if (rows.empty())
    throw ConfigError(
        "no commands; give each command as one argument, the baseline first, e.g. 'python3 train.py' "
        "'python3 train.py --workers 4'");
  std::vector<SimpleCommand> commands;
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      commands.push_back(split_command(rows[i].command));
    } catch (const ConfigError& e) {
      throw ConfigError(row_text(i, rows[i].command) + ": " + e.what());
    }
  }
  const std::vector<std::string> names = row_names(rows);
  ExperimentConfig base;
  base.name = "compare";
  base.program.command = commands[0].argv;  // --set sees a config with a program
  for (const auto& s : sets) {
    // Each row's program and its arguments are its command's words: a --set of either would be
    // overwritten by them, or added to some rows and not to others.
    const std::string key = s.substr(0, s.find('='));
    if (key == "program.command" || key == "program.args")
      throw ConfigError("--set " + key +
                        ": the commands are the rows' programs and their arguments; put them in each "
                        "command instead, e.g. 'python3 train.py --workers 4'");
    apply_set(base, s);
  }
  const std::vector<std::string> common = common_words(commands);
  std::vector<ExperimentConfig> programs;
  for (size_t i = 0; i < rows.size(); ++i)
    programs.push_back(row_config(base, i, rows[i], commands[i], common, every_row));
  ExperimentConfig cfg = programs[0];
  for (size_t i = 0; i < rows.size(); ++i)
    cfg.sweep.push_back(SweepRow{names[i], i == 0 ? Json::object() : changes(programs[i - 1], programs[i])});
  return cfg;
}

}  // namespace ptune::config
