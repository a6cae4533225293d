// Text that a component bounds or passes on: cut at a UTF-8 character boundary, and made valid
// UTF-8 where it arrives as raw bytes; and trimmed of surrounding whitespace. Header-only and standard library only, so the operator,
// the agent, the command line and the trainer use the same words.
//
// Note [UTF-8 text]
// nlohmann::json's dump() throws (type_error 316) on a string that is not valid UTF-8, and every
// object the operator sends the API server is dumped. An Event message cut at byte 1,024 in the
// middle of a character made the reconcile that recorded it throw, before the job's status
// write, on every retry. The rule: text is valid UTF-8 from where it enters, and every bound
// keeps it so.
//   - Where it enters. A JSON document (an object from the API server, a file) is valid UTF-8
//     or not read at all: simdjson and nlohmann::json::parse refuse it (the API server's own
//     encoder writes U+FFFD for bytes that are not UTF-8, a termination message's as the kubelet
//     read it). Other text is made valid, or refused, or escaped to ASCII where it arrives: a
//     worker's output is made valid (utf8_valid) in the agent's termination message
//     (agent/termination_message.cpp); a peer's text on the restart barrier is cleaned (clean_text in
//     agent/barrier/trust.hpp); a label of an agent's /metrics that is not UTF-8 makes its line
//     unread (Note [Untrusted exposition]); the node and Workload texts the operator quotes are
//     printable ASCII (printable in operator/reconcile/node.hpp); `lockstep validate` and
//     `lockstep run` refuse a manifest that is not UTF-8 (utf8_invalid_at).
//   - Every bound. utf8_head and utf8_tail cut at a character boundary, so valid text cut is
//     valid text; a substr() of a text at a byte count is a bug.
// Not the other way, dump(..., error_handler_t::replace) wherever text goes out: that hides a
// bad cut as U+FFFD instead of finding it, and every dump() to come would have to remember it.
// The agent's event log (Note [Event log] in agent/metrics.cpp) dumps with replace as well, a
// second guard on a line a peer's words reach.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lockstep::text {

// How many bytes the valid UTF-8 character at the start of `s` takes (1 to 4); 0 when `s` is
// empty or starts with no valid character: a continuation byte, a lead byte whose continuation
// bytes are missing, an overlong form, a surrogate (U+D800..U+DFFF), or past U+10FFFF.
inline size_t utf8_char_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto c = static_cast<unsigned char>(s[0]);
  if (c < 0x80) return 1;
  const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || s.size() < len) return 0;
  for (size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) return 0;
  const auto c1 = static_cast<unsigned char>(s[1]);
  if (len == 3 && ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0))) return 0;  // overlong; surrogate
  if (len == 4 && ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))) return 0;  // overlong; past U+10FFFF
  return len;
}

// The offset of the first byte of `s` that begins no valid character; npos when `s` is valid.
inline size_t utf8_invalid_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_char_length(s.substr(i));
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

// `s` as valid UTF-8: each byte that begins no valid character replaced with U+FFFD.
inline std::string utf8_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_char_length(s.substr(i));
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

namespace detail {
inline bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }
}  // namespace detail

// At most `max_bytes` bytes of `s`, its start kept, cut at a character boundary: a character
// that would not fit whole is left out (so the result may be up to 3 bytes shorter). On text
// that is not valid UTF-8 the cut moves at most 3 bytes from `max_bytes`: it stays bounded.
inline std::string utf8_head(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  for (int k = 0; k < 3 && end > 0 && detail::continuation(s[end]); ++k) --end;
  if (detail::continuation(s[end])) end = max_bytes;  // not UTF-8 here: no boundary to find
  return std::string(s.substr(0, end));
}

// At most `max_bytes` bytes of `s`, its end kept (a program's last words are at its end), cut at
// a character boundary, as utf8_head.
inline std::string utf8_tail(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t start = s.size() - max_bytes;
  for (int k = 0; k < 3 && start < s.size() && detail::continuation(s[start]); ++k) ++start;
  if (start < s.size() && detail::continuation(s[start])) start = s.size() - max_bytes;
  return std::string(s.substr(start));
}

// `s` without any of `chars` at either end; by default spaces and tabs (HTTP's optional
// whitespace around a header's value).
inline std::string_view trim(std::string_view s, std::string_view chars = " \t") {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return s.substr(s.size());
  return s.substr(b, s.find_last_not_of(chars) - b + 1);
}

// A decimal number of 1 to `max_digits` digits (at most 9, so it fits an int), no sign and
// nothing else: its value; -1 for anything else. For an index or a count a peer or an object
// says (a label, a field of a line), checked before it is believed.
inline int small_decimal(std::string_view s, size_t max_digits = 9) {
  if (s.empty() || s.size() > (max_digits < 9 ? max_digits : 9)) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// `n` bytes as 2n lowercase hex digits: a drawn secret, a MAC, a pod's barrier secret.
inline std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace lockstep::text
