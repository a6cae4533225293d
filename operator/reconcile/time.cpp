#include "reconcile/time.hpp"

#include "lockstep/time_text.hpp"

namespace lockstep::reconcile {

// The API server's timestamps (lockstep/time_text.hpp, the one RFC 3339 formatter).
std::string format_time(Time t) { return time_text::rfc3339(t); }

std::optional<Time> parse_time(const std::string& s) { return time_text::parse_rfc3339(s); }

}  // namespace lockstep::reconcile
