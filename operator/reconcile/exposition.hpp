// Prometheus text exposition (format 0.0.4), as an agent serves it on /metrics: just enough
// to read a few named series out of one scrape (Note [Progress]). HELP, TYPE and other
// comment lines are skipped; a line that does not parse is skipped too, so one odd series
// never hides the rest.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::reconcile {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // values unescaped
  double value = 0;
  // The value of label `key`, or nullopt when the series does not carry it.
  std::optional<std::string> label(const std::string& key) const;
};

// One sample line, or nullopt (a comment, a blank or a malformed line).
std::optional<Sample> parse_sample(const std::string& line);

// The samples of `text` whose metric name is one of `names`, in the order they appear. Lines
// of other series are not parsed beyond their name.
std::vector<Sample> samples_of(const std::string& text, const std::vector<std::string>& names);

}  // namespace lockstep::reconcile
