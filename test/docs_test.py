#!/usr/bin/env python3
"""Docs that stay true: README.md and docs/*.md checked against the built ptune (stdlib only).

    python3 test/docs_test.py PATH/TO/ptune

- every ```json block is a config that `ptune check` accepts, unless its fence says what else it
  is (```json results, ```json analyze, ...: any word after `json`);
- every `ptune <command> --option` in a code block or code span names a command that
  `ptune --help` lists and options that the command's `--help` lists (after `ptune launch ... --`,
  the ranks' command is checked the same way);
- every relative link and image (and its #anchor) points at something that exists;
- README.md links every page in docs/;
- README.md, docs/, scripts/ and every --help text hold no word that only made sense on this
  project's own build machines (a `carry` list, `$OUT`, a `../shared` path, session history).
Prints every failure and exits 1 when there is one.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failures = []


def fail(where, what):
    failures.append("%s: %s" % (where, what))


def pages():
    out = [os.path.join(ROOT, "README.md")]
    d = os.path.join(ROOT, "docs")
    out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md"))
    return out


def rel(path):
    return os.path.relpath(path, ROOT)


FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


def split_fences(text):
    """(prose with fenced blocks blanked, [(info, body, line number)])."""
    prose, blocks = [], []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].lstrip())
        if m:
            fence, info, start = m.group(1), m.group(2).strip(), i + 1
            body = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(fence):
                body.append(lines[i])
                i += 1
            blocks.append((info, "\n".join(body), start))
            prose.extend([""] * (len(body) + 2))
            i += 1
            continue
        prose.append(lines[i])
        i += 1
    return "\n".join(prose), blocks


def code_spans(prose):
    """Inline code spans (single or double backticks), a span may continue on the next line."""
    return [m.group(2) for m in re.finditer(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", prose, re.S)]


# --- ptune's commands and options, from its --help --------------------------------------------

def run(args, **kw):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw)


class Cli:
    def __init__(self, exe):
        self.exe = exe
        top = run([exe, "--help"])
        self.helps = {"": top.stdout}
        section = top.stdout.split("Subcommands:", 1)
        self.commands = set(re.findall(r"^\s+([a-z][a-z-]*)\s", section[1], re.M)) if len(section) > 1 else set()
        if not self.commands:
            fail("ptune --help", "lists no subcommands:\n" + top.stdout + top.stderr)

    def help(self, command):
        if command not in self.helps:
            self.helps[command] = run([self.exe, command, "--help"]).stdout
        return self.helps[command]

    def options(self, command):
        opts = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", self.help(command)))
        if command:
            opts |= self.options("")  # --verbose, --quiet also follow a subcommand
        return opts


COMMAND = re.compile(r"(?:(?<=\s)|^|(?<=[`(]))(?:scripts/|build/apps/ptune/|bin/)?ptune[ \t]+(\S.*)", re.M)
END = re.compile(r"(?<!\\)\|(?!\|)|;|&&|\s#\s|\s>>?\s|\s2>|\)$")


def check_command_line(cli, where, words):
    """words: what follows `ptune` on a command line."""
    if not words:
        return
    i = 0
    command = ""
    if not words[0].startswith("-"):
        command = words[0].strip("`")
        if not re.match(r"^[a-z][a-z-]*$", command):
            return  # output or prose (`ptune analyze: ...`, ptune's), not a command line
        if command not in cli.commands:
            fail(where, "`ptune %s`: no such command (ptune --help lists %s)" % (command, ", ".join(sorted(cli.commands))))
            return
        i = 1
    known = cli.options(command)
    while i < len(words):
        w = words[i].strip("[]()'\",.")
        if command == "launch" and words[i] == "--":
            inner = [x for x in words[i + 1:]]
            if inner and not re.match(r"^(<|[A-Z]|\.\.\.)", inner[0]):
                check_command_line(cli, where, inner)
            return
        if re.match(r"^--?[A-Za-z]", w):
            opt = w.split("=", 1)[0]
            if opt not in known:
                fail(where, "`ptune %s ... %s`: `ptune %s --help` has no %s" % (command, opt, command, opt))
        i += 1


def command_words(line):
    """The words of what follows `ptune` on a command line, split at blanks; `ptune compare`'s
    split as a shell splits them, since its quoted arguments are commands of other programs
    (their options are not ptune's)."""
    words = line.split()
    if words and words[0] == "compare":
        try:
            return shlex.split(line)
        except ValueError:
            pass
    return words


def check_commands(cli, path, text):
    prose, blocks = split_fences(text)
    snippets = [(s, "code span") for s in code_spans(prose)]
    for info, body, line in blocks:
        kind = info.split()[0] if info else ""
        if kind in ("", "sh", "bash", "shell", "console"):
            snippets.append((body, "line %d" % line))
    for snippet, where in snippets:
        for logical in re.sub(r"\\\n\s*", " ", snippet).split("\n"):
            for m in COMMAND.finditer(logical):
                before = logical[:m.start()].split()
                if before and before[-1].startswith("--"):
                    continue  # a path given to another program's option (--ptune build/apps/ptune/ptune)
                rest = END.split(m.group(1), 1)[0]
                check_command_line(cli, "%s (%s)" % (rel(path), where), command_words(rest))


# --- config snippets -------------------------------------------------------------------------

def check_configs(cli, path, text, tmp):
    _, blocks = split_fences(text)
    for info, body, line in blocks:
        words = info.split()
        if not words or words[0] != "json" or len(words) > 1:
            continue
        f = os.path.join(tmp, "snippet.json")
        with open(f, "w") as out:
            out.write(body)
        r = run([cli.exe, "check", f], cwd=tmp)
        if r.returncode != 0:
            fail("%s:%d" % (rel(path), line),
                 "a ```json block that `ptune check` refuses (tag the fence, e.g. ```json results, when it is "
                 "not a config): %s" % r.stderr.strip().replace(f, "snippet.json"))


# --- links -----------------------------------------------------------------------------------

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        prose, _ = split_fences(open(path, encoding="utf-8").read())
        seen, out = {}, set()
        for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", prose, re.M):
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
        cache[path] = out
    return cache[path]


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text):
    prose, _ = split_fences(text)
    prose = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", prose, flags=re.S)
    return [m.group(1) for m in LINK.finditer(prose)]


def check_links(path, text):
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            fail(rel(path), "link to %s: no such file" % target)
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            fail(rel(path), "link to %s: %s has no heading with anchor #%s" % (target, rel(dest), anchor))


def check_readme_links_every_page():
    readme = os.path.join(ROOT, "README.md")
    linked = set()
    for target in links(open(readme, encoding="utf-8").read()):
        linked.add(os.path.normpath(os.path.join(ROOT, target.partition("#")[0])))
    for p in pages()[1:]:
        if p not in linked:
            fail("README.md", "does not link %s (every page in docs/ is one click away from README)" % rel(p))


# --- words a user cannot act on --------------------------------------------------------------

FORBIDDEN = [
    (re.compile(r"\bcarry\b", re.I), "`carry` (a remote-run tool's file list)"),
    (re.compile(r"\$\{?OUT\b"), "`$OUT` (say PTUNE_RESULTS_DIR / gpu-results/)"),
    (re.compile(r"\.\./shared"), "a `../shared` path"),
    (re.compile(r"\bsessions?\b", re.I), "`session` (the project's own history)"),
    (re.compile(r"so far had no GPU|device tool|remote-run", re.I), "the project's own history or tools"),
]


def check_words(where, text):
    for n, line in enumerate(text.split("\n"), 1):
        for pattern, what in FORBIDDEN:
            if pattern.search(line):
                fail("%s:%d" % (where, n), "%s: %s" % (what, line.strip()[:120]))


def scripts_files():
    for d, _, files in os.walk(os.path.join(ROOT, "scripts")):
        if "__pycache__" in d:
            continue
        for f in sorted(files):
            yield os.path.join(d, f)


def main():
    if len(sys.argv) != 2:
        print("usage: docs_test.py PATH/TO/ptune", file=sys.stderr)
        return 2
    cli = Cli(os.path.abspath(sys.argv[1]))
    with tempfile.TemporaryDirectory() as tmp:
        for p in pages():
            text = open(p, encoding="utf-8").read()
            check_configs(cli, p, text, tmp)
            check_commands(cli, p, text)
            check_links(p, text)
            check_words(rel(p), text)
    check_readme_links_every_page()
    for f in scripts_files():
        try:
            check_words(rel(f), open(f, encoding="utf-8").read())
        except UnicodeDecodeError:
            pass
    for command in [""] + sorted(cli.commands):
        check_words("ptune %s--help" % (command + " " if command else ""), cli.help(command))
    n_pages = len(pages())
    if failures:
        print("\n".join(failures))
        print("docs_test: %d failure(s) in README.md, docs/ (%d pages), scripts/ and --help" % (len(failures), n_pages))
        return 1
    print("docs_test: README.md and %d pages in docs/: configs check, commands and options exist, links resolve, "
          "no words a user cannot act on" % (n_pages - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
