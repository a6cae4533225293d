// RFC 3339 timestamps as the API server writes them (UTC, second precision).
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace lockstep::reconcile {

using Clock = std::chrono::system_clock;
using Time = Clock::time_point;

std::string format_time(Time t);                      // 2026-11-22T00:42:38Z
std::optional<Time> parse_time(const std::string& s);  // nullopt if not RFC 3339

}  // namespace lockstep::reconcile
