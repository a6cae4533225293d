// lockstep run's report.html (cli/report.cpp), in a real headless browser: a short real run
// of 2 nodes x 2 workers, then Debian's chromium loads the page and the test reads what it
// rendered (the DOM after the script ran, a screenshot, the console). Without chromium it
// says SKIPPED, or FAILS under LOCKSTEP_REQUIRE_ALL=1 (scripts/test.sh; scripts/setup.sh
// installs chromium).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "local_run.hpp"
#include "lockstep/process.hpp"
#include "lockstep/straggler.hpp"
#include "report.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using lockstep::test::env_or;
using lockstep::test::read_file;

namespace {

constexpr int kSteps = 12, kWorld = 4;

std::string cli() { return env_or("LOCKSTEP_CLI_BIN", "lockstep"); }
bool require_all() { return env_or("LOCKSTEP_REQUIRE_ALL", "") == "1"; }

std::string chromium() {
  if (const std::string c = env_or("LOCKSTEP_CHROMIUM", ""); !c.empty()) return c;
  std::istringstream path(env_or("PATH", ""));
  for (std::string dir; std::getline(path, dir, ':');)
    for (const char* name : {"chromium", "chromium-browser"})
      if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  return "";
}

#define REQUIRE_CHROMIUM()                                                                              \
  do {                                                                                                  \
    if (chromium().empty()) {                                                                           \
      const std::string why = "chromium not found on PATH (LOCKSTEP_CHROMIUM names one); "               \
                              "scripts/setup.sh installs Debian's chromium";                            \
      if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";                                  \
      GTEST_SKIP() << "SKIPPED: " << why;                                                               \
    }                                                                                                   \
  } while (0)

struct Rendered {
  std::string dom;      // document.documentElement.outerHTML after the scripts ran
  std::string console;  // chromium's log on stderr (console messages and uncaught errors)
  std::string png;      // the screenshot's bytes
};

// Loads `page` in headless chromium twice: once dumping the DOM, once for a screenshot.
Rendered render(const std::string& page, const std::string& work) {
  fs::create_directories(work);
  const std::string common = "'" + chromium() + "' --headless --no-sandbox --disable-gpu --no-first-run "
                             "--disable-extensions --disable-background-networking --enable-logging=stderr --v=0 "
                             "--user-data-dir='" + work + "/profile' --window-size=1200,2600 ";
  Rendered r;
  auto dom = lockstep::run_capture({"/bin/sh", "-c", common + "--dump-dom 'file://" + page + "' >'" + work +
                                                          "/dom.html' 2>'" + work + "/console.log'"},
                                   {}, 120s);
  EXPECT_EQ(dom.status.shell_code(), 0) << dom.output;
  auto shot = lockstep::run_capture({"/bin/sh", "-c", common + "--screenshot='" + work + "/shot.png' 'file://" + page +
                                                           "' 2>>'" + work + "/console.log'"},
                                    {}, 120s);
  EXPECT_EQ(shot.status.shell_code(), 0) << shot.output;
  r.dom = read_file(work + "/dom.html");
  r.console = read_file(work + "/console.log");
  r.png = read_file(work + "/shot.png");
  return r;
}

// The console lines that report a page error: chromium logs console messages and uncaught
// exceptions as "...:CONSOLE(line)] "message", source: ..." on stderr.
std::vector<std::string> console_errors(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos) out.push_back(line);
  return out;
}

// The page's script ran to its end and caught no error: it marks <body> either way, and
// leaves the error box hidden.
void expect_rendered_cleanly(const Rendered& r) {
  std::smatch body;
  ASSERT_TRUE(std::regex_search(r.dom, body, std::regex("<body([^>]*)>"))) << r.dom;
  EXPECT_NE(body[1].str().find("data-rendered=\"ok\""), std::string::npos) << "the page's script did not finish: " << body[0];
  EXPECT_EQ(body[1].str().find("data-errors"), std::string::npos) << "the page's script caught an error: " << body[0];
  EXPECT_NE(r.dom.find("<pre id=\"errors\" hidden"), std::string::npos) << "the error box is showing";
  std::string errors;
  for (const auto& l : console_errors(r.console)) errors += l + "\n";
  EXPECT_TRUE(errors.empty()) << "console errors:\n" << errors;
}

// The attributes of every <path class="series"> of the chart `id` in the rendered DOM.
using Attrs = std::map<std::string, std::string>;
std::vector<Attrs> series_of(const std::string& dom, const std::string& id) {
  std::vector<Attrs> out;
  const std::string open = "data-chart=\"" + id + "\"";
  auto at = dom.find(open);
  if (at == std::string::npos) return out;
  const std::string svg = dom.substr(at, dom.find("</svg>", at) - at);
  static const std::regex path_tag(R"(<path ([^>]*)>)"), attr(R"(([\w-]+)="([^"]*)\")");
  for (auto p = std::sregex_iterator(svg.begin(), svg.end(), path_tag); p != std::sregex_iterator(); ++p) {
    Attrs a;
    const std::string tag = (*p)[1];
    for (auto m = std::sregex_iterator(tag.begin(), tag.end(), attr); m != std::sregex_iterator(); ++m) a[(*m)[1]] = (*m)[2];
    if (a["class"] == "series") out.push_back(a);
  }
  return out;
}

std::vector<double> numbers(const std::string& csv) {
  std::vector<double> out;
  std::istringstream in(csv);
  for (std::string x; std::getline(in, x, ',');) out.push_back(std::stod(x));
  return out;
}

// Vertices drawn in an SVG path: its M and L commands.
size_t vertices(const std::string& d) { return static_cast<size_t>(std::count_if(d.begin(), d.end(), [](char c) { return c == 'M' || c == 'L'; })); }

// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what chromium's --screenshot writes) and
// counts its strongly coloured pixels: the charts' lines and areas, never the grey and white
// page around them. -1 when the file is not such a PNG.
long coloured_pixels(const std::string& png) {
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return -1;
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24) | (static_cast<uint8_t>(png[at + 1]) << 16) |
           (static_cast<uint8_t>(png[at + 2]) << 8) | static_cast<uint8_t>(png[at + 3]);
  };
  uint32_t width = 0, height = 0;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = be32(at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) return -1;
    if (type == "IHDR") {
      width = be32(at + 8);
      height = be32(at + 12);
      const int depth = png[at + 16], color = png[at + 17], interlace = png[at + 20];
      if (depth != 8 || interlace != 0 || (color != 2 && color != 6)) return -1;
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  if (!channels) return -1;
  const size_t stride = width * channels;
  std::vector<uint8_t> raw((stride + 1) * height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    return -1;
  std::vector<uint8_t> prev(stride, 0), row(stride);
  long coloured = 0;
  for (uint32_t y = 0; y < height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<size_t>(channels) ? row[x - channels] : 0, b = prev[x],
                c = x >= static_cast<size_t>(channels) ? prev[x - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
      }
      row[x] = static_cast<uint8_t>(in[x] + pred);
    }
    for (uint32_t x = 0; x < width; ++x) {
      const uint8_t* px = &row[x * channels];
      if (std::max({px[0], px[1], px[2]}) - std::min({px[0], px[1], px[2]}) > 80) ++coloured;
    }
    prev.swap(row);
  }
  return coloured;
}

// One real run for the suite: 2 nodes x 2 workers, kSteps steps, rank 0 logging every step.
class ReportRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // As `lockstep run` will name it (the working directory, no doubled slash).
    dir_ = fs::path(::testing::TempDir() + "/report-" + std::to_string(::getpid())).lexically_normal().string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ + "/job.yaml")
        << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: report-job}\n"
           "spec:\n  nodes: 2\n  procsPerNode: 2\n  strategy: DDP\n"
           "  template: {spec: {containers: [{name: trainer, image: lockstep/trainer:0.1.0}]}}\n"
           "  trainer:\n    command: [lockstep-trainer]\n"
           "    args: [--model=tiny, --device=cpu, --steps=" << kSteps << ", --batch-size=4, --log-every=1]\n";
    run_ = new lockstep::RunResult(lockstep::test::lockstep_run(cli(), dir_, "job.yaml", 540s));
  }
  static void TearDownTestSuite() {
    delete run_;
    const auto* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    if (suite && !suite->Failed()) fs::remove_all(dir_);  // kept for a look when something failed
  }
  static std::string run_dir() { return dir_ + "/lockstep-runs/report-job"; }
  static std::string report() { return run_dir() + "/report.html"; }
  static std::string dir_;
  static lockstep::RunResult* run_;
};
std::string ReportRun::dir_;
lockstep::RunResult* ReportRun::run_ = nullptr;

}  // namespace

TEST_F(ReportRun, TheSummaryNamesTheReport) {
  ASSERT_EQ(run_->status.shell_code(), 0) << run_->output;
  EXPECT_NE(run_->output.find("report: " + report()), std::string::npos) << run_->output;
  EXPECT_TRUE(fs::exists(report()));
  for (int rank = 0; rank < kWorld; ++rank)
    EXPECT_TRUE(fs::exists(run_dir() + "/steps/rank-" + std::to_string(rank) + ".jsonl")) << "rank " << rank;
}

// No network: nothing the page loads or links comes from anywhere but the file itself.
TEST_F(ReportRun, ThePageIsSelfContained) {
  ASSERT_EQ(run_->status.shell_code(), 0) << run_->output;
  const std::string page = read_file(report());
  ASSERT_FALSE(page.empty());
  for (const char* banned : {"http://", "https://", "<script src", "<link", "src=", "@import", "url(", "fetch(",
                             "XMLHttpRequest", "<iframe", "<img"})
    EXPECT_EQ(page.find(banned), std::string::npos) << "report.html contains '" << banned << "'";
}

TEST_F(ReportRun, ChromiumRendersTheRunsStepsWithoutAnError) {
  REQUIRE_CHROMIUM();
  ASSERT_EQ(run_->status.shell_code(), 0) << run_->output;
  const Rendered r = render(report(), dir_ + "/chromium");
  expect_rendered_cleanly(r);
  EXPECT_NE(r.dom.find("<h1>report-job</h1>"), std::string::npos);
  // (&middot; is a middle dot, U+00B7, once parsed.)
  EXPECT_TRUE(std::regex_search(r.dom, std::regex("2 node\\(s\\) x 2 worker\\(s\\), DDP \u00b7 " + std::to_string(kSteps) + " of " +
                                                  std::to_string(kSteps) + " steps \u00b7 final loss [0-9.]+ \u00b7 finished in")))
      << r.dom.substr(0, 3000);

  // Loss and step time: one series per rank, every step drawn.
  for (const char* chart : {"loss", "step-time"}) {
    SCOPED_TRACE(chart);
    auto series = series_of(r.dom, chart);
    ASSERT_EQ(series.size(), static_cast<size_t>(kWorld));
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_EQ(series[rank]["data-rank"], std::to_string(rank));
      EXPECT_EQ(series[rank]["data-points"], std::to_string(kSteps));
      EXPECT_EQ(vertices(series[rank]["d"]), static_cast<size_t>(kSteps));
      EXPECT_EQ(series[rank]["data-first-step"], "1");
      EXPECT_EQ(series[rank]["data-last-step"], std::to_string(kSteps));
    }
  }
  // Rank 0's loss as drawn is the loss its progress lines logged, step by step.
  std::map<int, double> logged;
  static const std::regex progress(R"(\[rank 0\] step\s+(\d+)/\d+\s+loss ([0-9.]+))");
  const std::string log = read_file(run_dir() + "/node-0.log");
  for (auto m = std::sregex_iterator(log.begin(), log.end(), progress); m != std::sregex_iterator(); ++m)
    logged[std::stoi((*m)[1])] = std::stod((*m)[2]);
  ASSERT_EQ(logged.size(), static_cast<size_t>(kSteps)) << log;
  auto drawn = numbers(series_of(r.dom, "loss")[0]["data-values"]);
  ASSERT_EQ(drawn.size(), static_cast<size_t>(kSteps));
  for (int step = 1; step <= kSteps; ++step)
    EXPECT_NEAR(drawn[step - 1], logged[step], 6e-5) << "step " << step;

  // Compute against exposed communication: one chart per rank, both parts of every step.
  for (int rank = 0; rank < kWorld; ++rank) {
    auto series = series_of(r.dom, "comm-" + std::to_string(rank));
    ASSERT_EQ(series.size(), 2u) << "rank " << rank;
    EXPECT_EQ(series[0]["data-name"], "compute");
    EXPECT_EQ(series[1]["data-name"], "exposed comm");
    for (auto& s : series) {
      EXPECT_EQ(s["data-points"], std::to_string(kSteps));
      for (double v : numbers(s["data-values"])) EXPECT_GE(v, 0);
    }
  }

  // The screenshot: a PNG with the charts' colours in it.
  const long coloured = coloured_pixels(r.png);
  EXPECT_GT(coloured, 5000) << "a " << r.png.size() << "-byte screenshot with " << coloured
                            << " coloured pixels (-1: not a PNG this test reads)";
}

// A run that restarted (a step run twice) and a hostile job name: the page escapes the name,
// draws each step once with its latest figures, marks the restart, and still renders cleanly.
TEST(Report, EscapesTheNameAndDrawsARestartedRun) {
  lockstep::cli::RunSummary run;
  run.job = "</script><b>x&y\"'";
  run.nodes = 1;
  run.procs_per_node = 2;
  run.total_steps = 10;
  run.outcome = "FAILED";
  run.in_place_restarts = 1;
  std::vector<lockstep::cli::StepRecord> records;
  auto add = [&](int rank, int generation, long long step, double loss) {
    lockstep::cli::StepRecord s;
    s.rank = rank;
    s.generation = generation;
    s.step = step;
    s.step_s = 0.1;
    s.compute_s = 0.08;
    s.exposed_comm_s = 0.02;
    s.loss = loss;
    records.push_back(s);
  };
  for (int rank : {0, 1}) {
    for (int step = 1; step <= 5; ++step) add(rank, 0, step, 10 - step);
    for (int step = 4; step <= 6; ++step) add(rank, 1, step, 1);  // resumed from step 3's checkpoint
  }
  const std::string page = lockstep::cli::report_html(run, records);
  EXPECT_EQ(page.find("</script><b>"), std::string::npos) << "the job name must be escaped";
  EXPECT_NE(page.find("<h1>&lt;/script&gt;&lt;b&gt;x&amp;y&quot;&#39;</h1>"), std::string::npos);
  EXPECT_NE(page.find("6 of 10 steps &middot; final loss 1.0000 &middot; FAILED"), std::string::npos);

  REQUIRE_CHROMIUM();
  const std::string dir = ::testing::TempDir() + "/report-unit-" + std::to_string(::getpid());
  fs::create_directories(dir);
  std::ofstream(dir + "/report.html") << page;
  const Rendered r = render(dir + "/report.html", dir + "/chromium");
  expect_rendered_cleanly(r);
  auto loss = series_of(r.dom, "loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0]["data-points"], "6");
  EXPECT_EQ(loss[0]["data-values"], "9,8,7,1,1,1") << "steps 4 and 5 show the run after the restart";
  EXPECT_NE(r.dom.find("in-place restart (generation 1)"), std::string::npos);
  EXPECT_NE(r.dom.find("<h1>&lt;/script&gt;&lt;b&gt;x&amp;y\"'</h1>"), std::string::npos) << "shown as text";
  fs::remove_all(dir);
}

// An unmodified torchrun-style Python DDP script (tests/agent/python/ddp_train.py) under
// `lockstep run`: it prints no lockstep-trainer progress lines, so its steps come from the
// agent's Python probe, through the step logs, into the live line, the summary and the page.
// Needs LOCKSTEP_PYTHON_TORCH (a Python tree with torch 2.11; tests/agent/probe_test.cpp).
TEST(ReportPython, AnUnmodifiedDdpScriptsStepsReachTheSummaryAndThePage) {
  const std::string torch = env_or("LOCKSTEP_PYTHON_TORCH", "");
  if (torch.empty() || !fs::exists(torch + "/torch/__init__.py")) {
    const std::string why = "LOCKSTEP_PYTHON_TORCH names no Python tree with torch (got '" + torch + "')";
    if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";
    GTEST_SKIP() << "SKIPPED: " << why;
  }
  const std::string dir =
      fs::path(::testing::TempDir() + "/report-python-" + std::to_string(::getpid())).lexically_normal().string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/out");
  // The torch tree comes with the pod's env, as an image's PYTHONPATH would; the probe goes
  // before it.
  std::ofstream(dir + "/job.yaml")
      << "apiVersion: lockstep.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: python-ddp}\n"
         "spec:\n  nodes: 2\n  procsPerNode: 2\n  strategy: DDP\n"
         "  template:\n    spec:\n      containers:\n      - name: trainer\n        image: python:3.11\n"
         "        env: [{name: PYTHONPATH, value: '" << torch << "'}]\n"
         "  trainer:\n    command: [python3, '" << LOCKSTEP_SOURCE_DIR << "/tests/agent/python/ddp_train.py', --out, '"
      << dir << "/out']\n";
  const auto run = lockstep::test::lockstep_run(cli(), dir, "job.yaml", 600s);
  ASSERT_EQ(run.status.shell_code(), 0) << run.output;
  constexpr int kPythonSteps = 16;  // ddp_train.py's: 1024 samples / 4 ranks / 16 a batch / 2 per step x 2 epochs
  EXPECT_NE(run.output.find("ddp_train rank 0/4: " + std::to_string(kPythonSteps) + " optimizer steps"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("python-ddp finished: " + std::to_string(kPythonSteps) + " steps in "), std::string::npos)
      << run.output;
  // The live line (a line a report, output being a pipe here) followed rank 0's step log.
  EXPECT_TRUE(std::regex_search(run.output, std::regex("\nstep " + std::to_string(kPythonSteps) +
                                                       R"(  [0-9.]+ ms/step  comm \d+% \(exposed \d+%\)\n)")))
      << run.output;

  // The page: every rank's 16 steps in its table row and in its data.
  const std::string page = read_file(dir + "/lockstep-runs/python-ddp/report.html");
  for (int rank = 0; rank < kWorld; ++rank)
    EXPECT_NE(page.find("<tr><td>" + std::to_string(rank) + "</td><td>" + std::to_string(kPythonSteps) + "</td>"),
              std::string::npos)
        << "rank " << rank;
  EXPECT_NE(page.find(std::to_string(kPythonSteps) + " steps &middot;"), std::string::npos);

  REQUIRE_CHROMIUM();
  const Rendered r = render(dir + "/lockstep-runs/python-ddp/report.html", dir + "/chromium");
  expect_rendered_cleanly(r);
  // Step time: steps 2..16 (the probe gives the first step none: Note [The Python probe]).
  auto step_time = series_of(r.dom, "step-time");
  ASSERT_EQ(step_time.size(), static_cast<size_t>(kWorld));
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(step_time[rank]["data-rank"], std::to_string(rank));
    EXPECT_EQ(step_time[rank]["data-last-step"], std::to_string(kPythonSteps));
    EXPECT_EQ(step_time[rank]["data-points"], std::to_string(kPythonSteps - 1));
    // Compute against exposed communication, which DDP measured (Note [DDP's statistics]).
    auto comm = series_of(r.dom, "comm-" + std::to_string(rank));
    ASSERT_EQ(comm.size(), 2u) << "rank " << rank;
    for (auto& s : comm) {
      EXPECT_EQ(s["data-last-step"], std::to_string(kPythonSteps)) << s["data-name"];
      for (double v : numbers(s["data-values"])) EXPECT_GE(v, 0);
    }
  }
  fs::remove_all(dir);
}

namespace {

using lockstep::cli::StragglerVerdict;

nlohmann::json raised_line() {
  return {{"node", 0}, {"attempt", 0}, {"time", 1764000030.5}, {"event", "straggler"}, {"rank", 5},
          {"node_rank", 2}, {"slowdown", 1.42}, {"window_s", 30}, {"throttle", "power"}};
}

}  // namespace

// Node 0's straggler events as contract.md writes them are read whole; every field out of its
// bounds is refused with an error naming it and what is valid; other kinds of event are not
// straggler events and no error (a world of 8 ranks, 2 a node, so rank 5 is on node 2).
TEST(Report, StragglerEventsAreCheckedFieldByField) {
  std::string error;
  auto ok = lockstep::cli::straggler_event(raised_line(), 8, 2, &error);
  ASSERT_TRUE(ok) << error;
  EXPECT_TRUE(ok->raised);
  EXPECT_EQ(ok->verdict.rank, 5);
  EXPECT_EQ(ok->verdict.node_rank, 2);
  EXPECT_DOUBLE_EQ(ok->verdict.slowdown, 1.42);
  EXPECT_DOUBLE_EQ(ok->verdict.window_s, 30);
  EXPECT_EQ(ok->verdict.throttle, static_cast<unsigned>(lockstep::straggler::kThrottlePower));
  EXPECT_DOUBLE_EQ(ok->verdict.raised_at, 1764000030.5);
  auto none = raised_line();
  none.erase("throttle");
  ASSERT_TRUE(lockstep::cli::straggler_event(none, 8, 2, &error)) << error;
  const nlohmann::json cleared = {{"node", 0}, {"time", 1764000090.0}, {"event", "straggler_cleared"}, {"rank", 5}, {"node_rank", 2}};
  auto c = lockstep::cli::straggler_event(cleared, 8, 2, &error);
  ASSERT_TRUE(c) << error;
  EXPECT_FALSE(c->raised);
  EXPECT_DOUBLE_EQ(c->verdict.raised_at, 1764000090.0);
  for (const char* other : {"in_place_restart", "stragglers", ""}) {
    auto line = raised_line();
    line["event"] = other;
    EXPECT_FALSE(lockstep::cli::straggler_event(line, 8, 2, &error)) << other;
    EXPECT_EQ(error, "") << other;
  }
  struct Bad {
    const char* key;
    nlohmann::json value;  // null: the key removed
    const char* says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"rank", 8, "rank: expected a whole number in [0, 8), got 8"},
           {"rank", -1, "rank: expected a whole number in [0, 8), got -1"},
           {"rank", 5.5, "rank: expected a whole number in [0, 8), got 5.5"},
           {"rank", "5", "rank: expected a whole number in [0, 8)"},
           {"rank", nullptr, "rank: expected a whole number in [0, 8), got none"},
           {"node_rank", 4, "node_rank: expected a whole number in [0, 4), got 4"},
           {"node_rank", 1, "node_rank: rank 5 is on node 2, not 1"},
           {"slowdown", 0.9, "slowdown: expected a number in [1, 1000], got 0.9"},
           {"slowdown", 1001, "slowdown: expected a number in [1, 1000], got 1001"},
           {"slowdown", "1.4", "slowdown: expected a number in [1, 1000]"},
           {"slowdown", nullptr, "slowdown: expected a number in [1, 1000], got none"},
           {"window_s", 0, "window_s: expected a number in [1, 3600], got 0"},
           {"window_s", 1e6, "window_s: expected a number in [1, 3600]"},
           {"throttle", "power,banana", "throttle: expected comma-separated reasons of "},
           {"throttle", "power,", "throttle: expected comma-separated reasons of "},
           {"throttle", 1, "throttle: expected comma-separated reasons of "},
           {"time", -5, "time: expected a number in [1, "},
           {"time", nullptr, "time: expected a number in [1, "},
       }) {
    auto line = raised_line();
    if (b.value.is_null()) line.erase(b.key);
    else line[b.key] = b.value;
    SCOPED_TRACE(line.dump());
    EXPECT_FALSE(lockstep::cli::straggler_event(line, 8, 2, &error));
    EXPECT_NE(error.find(b.says), std::string::npos) << error;
  }
  // A hostile slowdown (not finite once scaled) and a long value are cut, never echoed whole.
  auto line = raised_line();
  line["throttle"] = std::string(10000, 'x');
  EXPECT_FALSE(lockstep::cli::straggler_event(line, 8, 2, &error));
  EXPECT_LT(error.size(), 200u) << error;
}

TEST(Report, SaysAVerdictAsTheRunSaysIt) {
  StragglerVerdict v;
  v.rank = 5;
  v.node_rank = 2;
  v.slowdown = 1.4249;
  v.window_s = 30;
  EXPECT_EQ(lockstep::cli::describe_verdict(v), "rank 5 (node 2): work 1.42x the gang's typical rank over the last 30 s");
  v.throttle = lockstep::straggler::kThrottlePower | lockstep::straggler::kThrottleHwSlowdown;
  v.window_s = 12.5;
  EXPECT_EQ(lockstep::cli::describe_verdict(v), "rank 5 (node 2): work 1.42x the gang's typical rank over the last 12.5 s; "
                                                "GPU clocks throttled: " + lockstep::straggler::throttle_words(v.throttle));
  EXPECT_EQ(lockstep::cli::run_clock(0), "00:00");
  EXPECT_EQ(lockstep::cli::run_clock(65.9), "01:05");
  EXPECT_EQ(lockstep::cli::run_clock(4503), "75:03");
  EXPECT_EQ(lockstep::cli::run_clock(-3), "00:00");
}

// The page names each verdict in a banner (its text escaped like everything else) and marks it
// on the step-time chart at the first step its rank reported at or after it: rank 1's steps
// arrive every 0.5 s from t0, so a verdict at t0 + 10.2 s is marked at step 22 (t0 + 10.5 s).
// A run without a verdict has no banner and no mark.
TEST(Report, FlagsEachStragglerVerdictAndMarksItOnTheStepTimeChart) {
  lockstep::cli::RunSummary run;
  run.job = "slow";
  run.nodes = 2;
  run.procs_per_node = 1;
  run.total_steps = 40;
  run.outcome = "finished";
  const double t0 = 1764000000;
  run.started_at = t0 - 5;
  std::vector<lockstep::cli::StepRecord> records;
  for (int rank : {0, 1})
    for (int step = 1; step <= 40; ++step) {
      lockstep::cli::StepRecord s;
      s.rank = rank;
      s.step = step;
      s.step_s = 0.5;
      s.compute_s = rank == 1 && step > 12 ? 0.45 : 0.25;
      s.exposed_comm_s = 0.5 - *s.compute_s;
      s.time = t0 + 0.5 * (step - 1);
      s.loss = 4.0 / step;
      records.push_back(s);
    }
  const std::string plain = lockstep::cli::report_html(run, records);
  EXPECT_EQ(plain.find("id=\"stragglers\""), std::string::npos);
  EXPECT_NE(plain.find("\"stragglers\":[]"), std::string::npos);

  StragglerVerdict v;
  v.rank = 1;
  v.node_rank = 1;
  v.slowdown = 1.8;
  v.window_s = 10;
  v.throttle = lockstep::straggler::kThrottleThermal;
  v.raised_at = t0 + 10.2;
  v.cleared_at = t0 + 19.9;
  run.stragglers = {v};
  const std::string page = lockstep::cli::report_html(run, records);
  EXPECT_NE(page.find("<p class=\"straggler\" data-rank=\"1\" data-node=\"1\"><strong>Straggler:</strong> rank 1 (node 1): "
                      "work 1.80x the gang&#39;s typical rank over the last 10 s; GPU clocks throttled: " +
                      lockstep::straggler::throttle_words(v.throttle) +
                      " &middot; raised at 00:15 into the run (step 22), cleared at 00:24</p>"),
            std::string::npos)
      << page.substr(page.find("<body>"), 1500);
  EXPECT_NE(page.find("\"stragglers\":[{\"label\":\"straggler: rank 1\",\"rank\":1,\"step\":22}]"), std::string::npos);

  REQUIRE_CHROMIUM();
  const std::string dir = ::testing::TempDir() + "/report-straggler-" + std::to_string(::getpid());
  fs::create_directories(dir);
  std::ofstream(dir + "/report.html") << page;
  const Rendered r = render(dir + "/report.html", dir + "/chromium");
  expect_rendered_cleanly(r);
  const auto chart = r.dom.find("data-chart=\"step-time\"");
  ASSERT_NE(chart, std::string::npos);
  const std::string svg = r.dom.substr(chart, r.dom.find("</svg>", chart) - chart);
  EXPECT_NE(svg.find("<line class=\"straggler\" data-step=\"22\""), std::string::npos) << svg.substr(0, 2000);
  EXPECT_NE(svg.find(">straggler: rank 1</text>"), std::string::npos);
  const auto loss = r.dom.find("data-chart=\"loss\"");
  ASSERT_NE(loss, std::string::npos);
  EXPECT_EQ(r.dom.substr(loss, r.dom.find("</svg>", loss) - loss).find("class=\"straggler\""), std::string::npos)
      << "the mark is the step-time chart's";
  fs::remove_all(dir);
}
