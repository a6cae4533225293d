// The repository's own consistency, which no compiler checks: the documents sources cite
// exist, every `Note [Name]` referred to is defined (and where a reference says it is), nothing
// cites the design document that lives outside the repository, shellcheck finds no warning
// in any shell script, and the set-up gate the tests wait behind (Note [Set-up gates]) keeps
// its word.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const fs::path kRoot = LOCKSTEP_SOURCE_DIR;

bool starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  " + s + "\n";
  return out;
}

// Every text file of the product, its tests, scripts and docs (the build and cache folders
// are outside these), as paths relative to the root.
std::vector<std::string> repository_files() {
  std::vector<std::string> out;
  for (const char* dir : {"cmake", "scripts", "docker", "cli", "common", "operator", "agent", "trainer", "tests", "charts",
                          "bench", "docs", "crds", "examples", "dashboards", ".ci"}) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(kRoot / dir, ec); it != fs::recursive_directory_iterator(); ++it) {
      if (!it->is_regular_file() || it->file_size() > 1000000) continue;
      const auto name = it->path().filename().string();
      if (ends(name, ".pyc") || ends(name, ".png") || ends(name, ".gz")) continue;
      out.push_back(fs::relative(it->path(), kRoot).string());
    }
  }
  for (const char* f : {"CMakeLists.txt", "README.md"}) out.push_back(f);
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// A line without its comment leader (//, #, *) and the blanks around it.
std::string leaderless(const std::string& line) {
  static const std::regex leader(R"(^\s*(//+|#+|\*+)?\s*)");
  return std::regex_replace(line, leader, "", std::regex_constants::format_first_only);
}

struct Mention {
  std::string name, file, where;  // where: the file a reference says the Note is in, if it says
  int line = 0;
};

// Note [Notes]: a Note is defined once, by a line holding only `Note [Name]` followed by its
// text (an underline of dashes, or a comment line with words), or by a comment line opening
// with `Note [Name]: ` and its text. A comment that points to a Note with a word on how it
// applies there opens with `See Note [Name]: `; any other mention is a reference too, and
// "Note [Name] in `path`" says which file defines it. So every Note has exactly one
// definition (Notes.EveryNoteIsDefinedExactlyOnce), and a reader finds it by its name.
void scan_notes(const std::string& file, const std::string& text, std::vector<Mention>& defs, std::vector<Mention>& refs) {
  static const std::regex alone(R"(^Note \[([^\]]+)\]\s*$)");
  static const std::regex opening(R"(^Note \[([^\]]+)\]: )");
  static const std::regex any(R"(Note \[([^\]]+)\]( in `([^`]+)`)?)");
  static const std::regex comment_with_words(R"(^\s*(//|#|\*).*[A-Za-z])");
  const auto lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string body = leaderless(lines[i]);
    std::smatch m;
    const int number = static_cast<int>(i) + 1;
    if (std::regex_match(body, m, alone)) {
      const std::string next = i + 1 < lines.size() ? lines[i + 1] : "";
      const bool defines = starts(leaderless(next), "----") || std::regex_search(next, comment_with_words);
      (defines ? defs : refs).push_back({m[1].str(), file, "", number});
      continue;
    }
    std::string rest = body;
    if (std::regex_search(body, m, opening)) {
      defs.push_back({m[1].str(), file, "", number});
      rest = m.suffix().str();
    } else {
      rest = lines[i];
    }
    for (auto r = std::sregex_iterator(rest.begin(), rest.end(), any); r != std::sregex_iterator(); ++r)
      refs.push_back({(*r)[1].str(), file, (*r)[3].str(), number});
  }
}

}  // namespace

// The docs' code maps (a table row `| `operator/kube/` | ... `client` ... |`) name a folder of
// the sources and, in backticks, the files in it by their stem: every one exists, so a renamed
// file cannot leave its old name in the map (docs/operator.md still named `exposition` after
// it became prometheus_text, and left out half of operator/controller/).
TEST(Docs, EveryFileTheCodeMapsNameExists) {
  static const std::regex row(R"(^\| `((?:operator|agent|trainer|cli|common|tests|bench|scripts)/[A-Za-z0-9_/]*/)` \| (.*)$)");
  static const std::regex name("`([a-z][a-z0-9_]*)`");
  std::vector<std::string> missing;
  int names = 0;
  for (const auto& entry : fs::directory_iterator(kRoot / "docs")) {
    if (entry.path().extension() != ".md") continue;
    for (const auto& line : lines_of(lockstep::test::read_file(entry.path().string()))) {
      std::smatch m;
      if (!std::regex_match(line, m, row)) continue;
      const fs::path dir = kRoot / m[1].str();
      const std::string what = m[2].str();
      if (!fs::is_directory(dir)) {
        missing.push_back(entry.path().filename().string() + ": " + m[1].str() + " is no folder");
        continue;
      }
      for (auto n = std::sregex_iterator(what.begin(), what.end(), name); n != std::sregex_iterator(); ++n) {
        const std::string stem = (*n)[1].str();
        ++names;
        bool found = fs::is_directory(dir / stem);
        for (const char* ext : {".hpp", ".cpp", ".h", ".c", ".py", ".sh"}) found |= fs::exists(dir / (stem + ext));
        if (!found) missing.push_back(entry.path().filename().string() + ": " + m[1].str() + " has no " + stem + ".*");
      }
    }
  }
  EXPECT_GT(names, 20) << "the code maps were not found (" << names << " names)";
  EXPECT_TRUE(missing.empty()) << join(missing);
}

// Build files, scripts and sources cite docs/*.md for their reasons: every cited file exists
// (cmake/LockstepTorch.cmake once cited a docs/dependencies.md that was never written).
TEST(Docs, EveryCitedDocumentExists) {
  static const std::regex cite(R"(docs/[A-Za-z0-9_-]+\.md)");
  std::vector<std::string> missing;
  int files = 0;
  for (const auto& f : repository_files()) {
    if (fs::path(f) == fs::relative(fs::path(__FILE__), kRoot)) continue;  // this comment's example
    ++files;
    const std::string text = lockstep::test::read_file((kRoot / f).string());
    for (auto m = std::sregex_iterator(text.begin(), text.end(), cite); m != std::sregex_iterator(); ++m)
      if (!fs::exists(kRoot / m->str())) missing.push_back(f + " cites " + m->str());
  }
  EXPECT_GT(files, 50);
  EXPECT_TRUE(missing.empty()) << join(missing);
}

TEST(Notes, EveryNoteReferredToIsDefinedWhereTheReferenceSays) {
  std::vector<Mention> defs, refs;
  const std::string self = fs::relative(fs::path(__FILE__), kRoot).string();  // its examples are made to fail
  for (const auto& f : repository_files())
    if (f != self) scan_notes(f, lockstep::test::read_file((kRoot / f).string()), defs, refs);
  std::map<std::string, std::set<std::string>> defined;  // name -> files
  for (const auto& d : defs) defined[d.name].insert(d.file);
  std::vector<std::string> problems;
  for (const auto& r : refs) {
    const auto it = defined.find(r.name);
    const std::string at = r.file + ":" + std::to_string(r.line) + ": Note [" + r.name + "]";
    if (it == defined.end()) {
      problems.push_back(at + " is not defined anywhere (a definition is a line holding only `Note [" + r.name +
                         "]` followed by its text, or a comment line opening with `Note [" + r.name + "]: `)");
    } else if (!r.where.empty() && !it->second.count(r.where)) {
      std::string files;
      for (const auto& f : it->second) files += (files.empty() ? "" : ", ") + f;
      problems.push_back(at + " is said to be in " + r.where + " but is defined in " + files);
    }
  }
  EXPECT_GT(defined.size(), 40u) << "the scan found too few Notes to be reading the tree";
  EXPECT_GT(refs.size(), 100u);
  EXPECT_TRUE(problems.empty()) << problems.size() << " unresolved:\n" << join(problems);
}

// See Note [Notes]: one definition per name; a second line that would define it (a pointer written
// `Note [Name]: ` instead of `See Note [Name]: `) is named with the first.
static std::vector<std::string> defined_twice(const std::vector<Mention>& defs) {
  std::map<std::string, std::vector<std::string>> where;  // name -> file:line of each definition
  for (const auto& d : defs) where[d.name].push_back(d.file + ":" + std::to_string(d.line));
  std::vector<std::string> problems;
  for (const auto& [name, places] : where) {
    if (places.size() < 2) continue;
    std::string at;
    for (const auto& p : places) at += (at.empty() ? "" : ", ") + p;
    problems.push_back("Note [" + name + "] is defined " + std::to_string(places.size()) + " times: " + at +
                       " (a pointer opens with `See Note [" + name + "]: `)");
  }
  return problems;
}

TEST(Notes, EveryNoteIsDefinedExactlyOnce) {
  std::vector<Mention> defs, refs;
  const std::string self = fs::relative(fs::path(__FILE__), kRoot).string();
  for (const auto& f : repository_files())
    if (f != self) scan_notes(f, lockstep::test::read_file((kRoot / f).string()), defs, refs);
  EXPECT_GT(defs.size(), 40u) << "the scan found too few Notes to be reading the tree";
  const auto problems = defined_twice(defs);
  EXPECT_TRUE(problems.empty()) << problems.size() << " Notes defined more than once:\n" << join(problems);
}

// The scan itself, on text made to fail it: a reference without a definition, one that names
// the wrong file, and the three forms that define.
TEST(Notes, TheScanTellsDefinitionsFromReferences) {
  std::vector<Mention> defs, refs;
  scan_notes("a.hpp",
             "// Note [Alone]\n// Its text.\n"
             "int x;  // Note [Alone]\n"
             "// Note [Opening]: its text on the same line.\n"
             "// Note [Pointer]\nint y;\n",
             defs, refs);
  scan_notes("b.py", "Note [Underlined]\n-----------------\ntext\n", defs, refs);
  scan_notes("c.md", "See Note [Opening] in `b.py` and Note [Missing].\n", defs, refs);
  std::set<std::string> def_names, ref_names;
  for (const auto& d : defs) def_names.insert(d.name + "@" + d.file);
  for (const auto& r : refs) ref_names.insert(r.name + "@" + r.file + (r.where.empty() ? "" : ">" + r.where));
  EXPECT_EQ(def_names, (std::set<std::string>{"Alone@a.hpp", "Opening@a.hpp", "Underlined@b.py"}));
  EXPECT_EQ(ref_names, (std::set<std::string>{"Alone@a.hpp", "Pointer@a.hpp", "Opening@c.md>b.py", "Missing@c.md"}));
}

// A pointer written as `See Note [X]: ` is a reference; written as `Note [X]: ` it is a second
// definition, which the check names with both places.
TEST(Notes, APointerThatDefinesAgainIsNamed) {
  std::vector<Mention> defs, refs;
  scan_notes("a.hpp", "// Note [Once]\n// Its text.\nint x;  // See Note [Once]: how it applies here.\n", defs, refs);
  scan_notes("b.cpp", "  // See Note [Once]: a pointer.\n", defs, refs);
  EXPECT_TRUE(defined_twice(defs).empty());
  EXPECT_EQ(refs.size(), 2u);
  scan_notes("c.cpp", "  // Note [Once]: a pointer written as a definition.\n", defs, refs);
  const auto problems = defined_twice(defs);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("a.hpp:1"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("c.cpp:1"), std::string::npos) << problems[0];
}

// DESIGN.md, the target architecture, lives beside the repository, not in it: a reader of the
// code cannot follow a reference to it. The contracts it held are in docs/ (metrics.md,
// agent.md, operator.md, security.md, development.md).
TEST(Notes, NothingCitesTheDesignDocumentOutsideTheRepository) {
  std::vector<std::string> hits;
  const std::string self = fs::relative(fs::path(__FILE__), kRoot).string();
  for (const auto& f : repository_files()) {
    if (f == self) continue;
    const auto lines = lines_of(lockstep::test::read_file((kRoot / f).string()));
    for (size_t i = 0; i < lines.size(); ++i)
      if (lines[i].find("DESIGN.md") != std::string::npos) hits.push_back(f + ":" + std::to_string(i + 1) + ": " + lines[i]);
  }
  EXPECT_TRUE(hits.empty()) << join(hits);
}

// common/include/lockstep/contract.hpp is the one definition of the environment the operator,
// the agent and the trainer pass each other: C++ names it by its constants, never by a string
// of its own; what cannot include it (the bundle's C launcher header, the Python probe) may only
// name variables it defines.
TEST(Contracts, EveryEnvironmentNameIsContractHppsOwn) {
  const std::string contract = lockstep::test::read_file((kRoot / "common/include/lockstep/contract.hpp").string());
  static const std::regex literal(R"re("((LOCKSTEP|PET)_[A-Z0-9_]*[A-Z0-9])")re");
  std::set<std::string> defined;
  for (auto m = std::sregex_iterator(contract.begin(), contract.end(), literal); m != std::sregex_iterator(); ++m)
    defined.insert((*m)[1].str());
  EXPECT_GT(defined.size(), 30u);
  std::vector<std::string> problems;
  size_t scanned = 0;
  for (const auto& f : repository_files()) {
    const bool product = starts(f, "agent/") || starts(f, "trainer/") || starts(f, "operator/") || starts(f, "cli/") ||
                         starts(f, "common/");
    if (!product || f == "common/include/lockstep/contract.hpp") continue;
    const bool cxx = ends(f, ".cpp") || ends(f, ".hpp");
    const bool other = ends(f, ".h") || ends(f, ".c") || ends(f, ".py");
    if (!cxx && !other) continue;
    ++scanned;
    const auto lines = lines_of(lockstep::test::read_file((kRoot / f).string()));
    for (size_t i = 0; i < lines.size(); ++i)
      for (auto m = std::sregex_iterator(lines[i].begin(), lines[i].end(), literal); m != std::sregex_iterator(); ++m) {
        const std::string name = (*m)[1].str(), at = f + ":" + std::to_string(i + 1) + ": ";
        if (cxx) problems.push_back(at + "\"" + name + "\": use its constant in lockstep/contract.hpp (add it there if new)");
        else if (!defined.count(name)) problems.push_back(at + name + " is not defined in lockstep/contract.hpp");
      }
  }
  EXPECT_GT(scanned, 50u);
  EXPECT_TRUE(problems.empty()) << join(problems);
}

// Why `program --version` does not run ("" when it does): a linter the set-up installs.
static std::string not_installed(const std::string& program) {
  try {  // run_capture throws when there is no such program
    auto version = lockstep::run_capture({program, "--version"}, {}, 30s);
    return version.status.success() ? "" : program + " --version: " + version.output;
  } catch (const std::exception& e) {
    return e.what();
  }
}

// shellcheck (Debian's, installed by scripts/setup.sh) over every shell script at warning level:
// unquoted expansions, arrays used as strings, unset variables, fragile loops.
TEST(Scripts, ShellcheckFindsNoWarningInAnyShellScript) {
  const std::string shellcheck = lockstep::test::env_or("LOCKSTEP_SHELLCHECK", "shellcheck");
  const std::string why = not_installed(shellcheck);
  if (!why.empty()) {
    const char* all = std::getenv("LOCKSTEP_REQUIRE_ALL");
    if (all && std::string(all) == "1") FAIL() << "shellcheck is not installed (scripts/setup.sh installs it): " << why;
    GTEST_SKIP() << "SKIPPED: shellcheck is not installed (apt-get install shellcheck; scripts/setup.sh does)";
  }
  std::vector<std::string> argv = {shellcheck, "--severity=warning", "--external-sources", "--format=gcc"};
  size_t scripts = 0;
  for (const auto& f : repository_files()) {
    const std::string head = lockstep::test::read_file((kRoot / f).string()).substr(0, 64);
    if (ends(f, ".sh") || starts(head, "#!/usr/bin/env bash") || starts(head, "#!/bin/bash") || starts(head, "#!/bin/sh")) {
      argv.push_back((kRoot / f).string());
      ++scripts;
    }
  }
  EXPECT_GT(scripts, 15u);
  auto r = lockstep::run_capture(argv, {}, 300s);
  EXPECT_TRUE(r.status.success()) << lockstep::shell_join(argv) << ":\n" << r.output;
}

// pyflakes (Debian's pyflakes3, installed by scripts/setup.sh) over every Python file git has or
// would add (tracked, or new and not ignored): unused and undefined names, imports shadowed or
// never used, f-strings without placeholders.
TEST(Python, PyflakesFindsNoWarningInAnyPythonFile) {
  const std::string pyflakes = lockstep::test::env_or("LOCKSTEP_PYFLAKES", "pyflakes3");
  const std::string why = not_installed(pyflakes);
  if (!why.empty()) {
    const char* all = std::getenv("LOCKSTEP_REQUIRE_ALL");
    if (all && std::string(all) == "1") FAIL() << "pyflakes3 is not installed (scripts/setup.sh installs it): " << why;
    GTEST_SKIP() << "SKIPPED: pyflakes3 is not installed (apt-get install pyflakes3; scripts/setup.sh does)";
  }
  auto listed = lockstep::run_capture(
      {"git", "-C", kRoot.string(), "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py"}, {}, 60s);
  if (!listed.status.success()) GTEST_SKIP() << "SKIPPED: " << kRoot << " is not a git checkout: " << listed.output;
  std::vector<std::string> argv = {pyflakes};
  for (const auto& f : lines_of(listed.output)) {
    if (fs::is_regular_file(kRoot / f)) argv.push_back((kRoot / f).string());  // not one deleted but not yet committed
  }
  EXPECT_GT(argv.size() - 1, 20u);
  auto r = lockstep::run_capture(argv, {}, 300s);
  EXPECT_TRUE(r.status.success()) << pyflakes << " over " << argv.size() - 1 << " Python files:\n" << join(lines_of(r.output));
}

// Note [Set-up gates] (tests/CMakeLists.txt): the set-up test a fixture's tests wait behind,
// against a background step played by this test: it waits while the step runs, passes when the
// step succeeded or reached the stage asked for, fails with the end of the step's output when it
// failed, ended short of the stage or vanished without an exit status, and passes at once
// outside scripts/test.sh.
TEST(Scripts, TheSetUpGateWaitsForItsStepAndFailsWithItsOutput) {
  const std::string gate = (kRoot / "tests/support/wait_setup.sh").string();
  const fs::path dir = fs::temp_directory_path() / ("lockstep-gate-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  const std::map<std::string, std::string> env = {{"LOCKSTEP_SETUP_STATUS", dir.string()}};

  // Outside scripts/test.sh: at once.
  auto outside = lockstep::run_capture({gate, "tools"}, {{"LOCKSTEP_SETUP_STATUS", ""}}, 10s);
  EXPECT_TRUE(outside.status.success()) << outside.output;

  // A step still running (its pid is this test's own) that succeeds 2 s later.
  write("tools.pid", std::to_string(::getpid()));
  write("tools.log", "building kube-apiserver\n");
  auto t0 = std::chrono::steady_clock::now();
  std::thread finish([&] {
    std::this_thread::sleep_for(2s);
    write("tools.rc", "0\n");
  });
  auto ok = lockstep::run_capture({gate, "tools"}, env, 30s);
  finish.join();
  EXPECT_TRUE(ok.status.success()) << ok.output;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s) << "it did not wait for the step";

  // A stage of a step still running: passes when the stage is marked, not waiting for the step.
  write("cluster.pid", std::to_string(::getpid()));
  t0 = std::chrono::steady_clock::now();
  std::thread mark([&] {
    std::this_thread::sleep_for(2s);
    write("control_plane.done", "");
  });
  auto staged = lockstep::run_capture({gate, "cluster", "control_plane"}, env, 30s);
  mark.join();
  EXPECT_TRUE(staged.status.success()) << staged.output;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s) << "it did not wait for the stage";
  // The step ended well but never reached the stage asked for (a stage setup.sh does not mark).
  write("cluster.log", "set-up complete\n");
  write("cluster.rc", "0\n");
  auto short_of = lockstep::run_capture({gate, "cluster", "kwok"}, env, 30s);
  EXPECT_FALSE(short_of.status.success());
  EXPECT_NE(short_of.output.find("without reaching the stage"), std::string::npos) << short_of.output;

  // A step that failed: the gate fails and shows the step's output.
  write("images.pid", std::to_string(::getpid()));
  write("images.log", "images: the trainer's Dockerfile names a package that is not installed\n");
  write("images.rc", "3\n");
  auto failed = lockstep::run_capture({gate, "images"}, env, 30s);
  EXPECT_FALSE(failed.status.success());
  EXPECT_NE(failed.output.find("failed (exit 3)"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("names a package that is not installed"), std::string::npos) << failed.output;

  // A step whose process is gone without an exit status (killed): failed, not waited for forever.
  write("roots.pid", "2147483646");  // no such process
  write("roots.log", "unpacking the Python torch\n");
  auto vanished = lockstep::run_capture({gate, "roots"}, env, 30s);
  EXPECT_FALSE(vanished.status.success());
  EXPECT_NE(vanished.output.find("without an exit status"), std::string::npos) << vanished.output;

  // A step scripts/test.sh never started: failed, and says so.
  auto unknown = lockstep::run_capture({gate, "kwok"}, env, 10s);
  EXPECT_FALSE(unknown.status.success());
  EXPECT_NE(unknown.output.find("no background step 'kwok'"), std::string::npos) << unknown.output;
  fs::remove_all(dir);
}

// The stages tests wait for (tests/CMakeLists.txt's lockstep_setup_stages) are the ones
// `setup.sh --tools` marks, in its order: a stage it never marks would fail every test behind it
// on a fresh machine only, and one marked early would let them start too soon.
TEST(Scripts, SetupMarksTheStagesTheTestsWaitForInTheirOrder) {
  std::vector<std::string> marked;
  std::istringstream setup(lockstep::test::read_file((kRoot / "scripts/setup.sh").string()));
  const std::regex mark_line(R"(^mark ([a-z_]+)\s*$)");
  for (std::string line; std::getline(setup, line);) {
    std::smatch m;
    if (std::regex_match(line, m, mark_line)) marked.push_back(m[1]);
  }
  const std::string cmake = lockstep::test::read_file((kRoot / "tests/CMakeLists.txt").string());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(set\(lockstep_setup_stages ([a-z_ ]+)\))")))
      << "no lockstep_setup_stages in tests/CMakeLists.txt";
  std::vector<std::string> stages;
  std::istringstream words(m[1].str());
  for (std::string w; words >> w;) stages.push_back(w);
  EXPECT_GE(stages.size(), 3u);
  EXPECT_EQ(marked, stages) << "scripts/setup.sh marks:\n" << join(marked) << "tests/CMakeLists.txt waits for:\n" << join(stages);
}
