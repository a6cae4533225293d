// Prometheus text exposition (format 0.0.4), as an agent serves it on /metrics: just enough
// to read a few named series out of one scrape (Note [Progress]). HELP, TYPE and other
// comment lines are skipped; a line that does not parse is skipped too, so one odd series
// never hides the rest.
//
// Note [Untrusted exposition]
// The text is whatever a pod's metrics port answered (Note [Reading agents]): any tenant's
// program may serve it. So, before any of it can reach a status, an Event or a log: a line
// longer than kMaxLineBytes is skipped unparsed (so is every label value, bounded by it); a
// label value that is not valid UTF-8 makes its line malformed (a JSON status write would
// throw on it); the value must be the line's last field but for a timestamp; and at most
// kMaxSamples samples are kept from one text, whatever it holds. The value is any double,
// NaN and the infinities included: each reader checks the range it needs (progress.cpp,
// in_place.cpp). An agent's real lines are under 512 bytes, its samples a few per rank.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::reconcile {

inline constexpr size_t kMaxLineBytes = 4096;
inline constexpr size_t kMaxSamples = 4096;

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool valid_utf8(const std::string& s);

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // values unescaped
  double value = 0;
  // The value of label `key`, or nullopt when the series does not carry it.
  std::optional<std::string> label(const std::string& key) const;
};

// One sample line, or nullopt (a comment, a blank or a malformed line).
std::optional<Sample> parse_sample(const std::string& line);

// The samples of `text` whose metric name is one of `names`, in the order they appear, at most
// kMaxSamples. Lines of other series are not parsed beyond their name.
std::vector<Sample> samples_of(const std::string& text, const std::vector<std::string>& names);

// Note [Host-network readings]
// A pod with spec.hostNetwork has its node's address for status.podIP, so reading its agent
// reads whatever listens on that port of the node: another job's hostNetwork agent there, or
// any process of the node. So what is read of such a pod counts only where the series say they
// are the job's: the lines whose labels carry namespace="<ns>" and trainingjob="<name>", as
// every series of the job's own agents does (agent/metrics.cpp); every other line is dropped
// before the readers see the text. (A pod with a network of its own is read as it serves.)
std::string series_of_job(const std::string& text, const std::string& ns, const std::string& name);

}  // namespace lockstep::reconcile
