// operator/metrics: the per-job gang restart series (Note [Restarts by kind]) and the /metrics
// page's sharing (Note [Metrics page]).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <thread>
#include <vector>

#include "metrics.hpp"

using lockstep::op::Metrics;

namespace {

// The value of lockstep_restarts_total{kind="gang"} of ns/job, -1 if there is none.
double gang(const Metrics& m, const std::string& ns, const std::string& job) {
  std::regex re("lockstep_restarts_total\\{kind=\"gang\",namespace=\"" + ns + "\",trainingjob=\"" + job +
                "\"\\} ([0-9.e+]+)");
  std::smatch match;
  std::string text = m.render();
  return std::regex_search(text, match, re) ? std::stod(match[1]) : -1;
}

}  // namespace

TEST(OperatorMetrics, AJobsGangRestartsFollowItsStatusAsACounter) {
  Metrics m;
  EXPECT_EQ(gang(m, "a", "tj"), -1);
  m.set_job_restarts({{"a", "tj", "u1", 0}, {"b", "tj", "u2", 2}});
  EXPECT_EQ(gang(m, "a", "tj"), 0) << "created at 0 for a new job";
  EXPECT_EQ(gang(m, "b", "tj"), 2) << "a job seen after its restarts (a new leader) starts at its count";
  EXPECT_NE(m.render().find("# TYPE lockstep_restarts_total counter"), std::string::npos);
  m.set_job_restarts({{"a", "tj", "u1", 1}, {"b", "tj", "u2", 2}});
  EXPECT_EQ(gang(m, "a", "tj"), 1);
  m.set_job_restarts({{"a", "tj", "u1", 0}, {"b", "tj", "u2", 2}});
  EXPECT_EQ(gang(m, "a", "tj"), 1) << "a counter never goes down";
  // b deleted: its series goes; recreated under the same name, it starts at its own count.
  m.set_job_restarts({{"a", "tj", "u1", 1}});
  EXPECT_EQ(gang(m, "b", "tj"), -1);
  m.set_job_restarts({{"a", "tj", "u3", 0}});
  EXPECT_EQ(gang(m, "a", "tj"), 0) << "another job of the same name";
  // The operator's own series are untouched.
  EXPECT_NE(m.render().find("lockstep_operator_gang_restarts_total 0"), std::string::npos);
}

// See Note [Metrics page]: one render a second, shared by every reader in it (the same text, not a
// copy), at most max_readers answers under way at once, a slot freed when its answer is done.
TEST(MetricsPage, RendersAtMostOncePerMaxAgeAndSharesTheText) {
  int renders = 0;
  lockstep::op::MetricsPage page([&] { return "page " + std::to_string(++renders); }, std::chrono::milliseconds(200), 3);
  auto a = page.read();
  auto b = page.read();
  ASSERT_TRUE(a.text && b.text);
  EXPECT_EQ(a.text.get(), b.text.get()) << "the second reader within max_age shares the first one's text";
  EXPECT_EQ(*a.text, "page 1");
  EXPECT_EQ(renders, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  auto c = page.read();
  ASSERT_TRUE(c.text);
  EXPECT_EQ(*c.text, "page 2") << "older than max_age: made afresh";
  EXPECT_EQ(*a.text, "page 1") << "a reader still writing the old text keeps it";
  EXPECT_EQ(page.renders(), 2);
}

TEST(MetricsPage, AdmitsAtMostMaxReadersAtOnce) {
  lockstep::op::MetricsPage page([] { return std::string(1000, 'x'); }, std::chrono::seconds(1), 3);
  std::vector<lockstep::op::MetricsPage::Answer> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(page.read());
    ASSERT_TRUE(held.back().text) << i;
  }
  EXPECT_EQ(page.readers(), 3);
  auto refused = page.read();
  EXPECT_FALSE(refused.text) << "a fourth reader while three answers are under way";
  EXPECT_FALSE(refused.slot);
  EXPECT_EQ(page.readers(), 3) << "a refused reader holds no slot";
  held.pop_back();  // one answer written: its slot goes back
  EXPECT_EQ(page.readers(), 2);
  EXPECT_TRUE(page.read().text) << "a slot is free again";
  EXPECT_EQ(page.readers(), 2) << "and given back once that answer is done";
}

// Readers that come while the page is being made wait for that one render instead of making
// their own.
TEST(MetricsPage, ConcurrentReadersShareOneRender) {
  std::atomic<int> renders{0};
  lockstep::op::MetricsPage page(
      [&] {
        ++renders;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return std::string("text");
      },
      std::chrono::seconds(10), 8);
  std::vector<std::thread> readers;
  std::atomic<int> answered{0};
  for (int i = 0; i < 8; ++i)
    readers.emplace_back([&] {
      if (page.read().text) ++answered;
    });
  for (auto& t : readers) t.join();
  EXPECT_EQ(answered.load(), 8);
  EXPECT_EQ(renders.load(), 1);
}
