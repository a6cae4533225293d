// operator/metrics: the per-job gang restart series (Note [Restarts by kind]).
#include <gtest/gtest.h>

#include <regex>

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
