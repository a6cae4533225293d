#include "barrier/trust.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <stdexcept>
#include <string_view>

#include "lockstep/text.hpp"

namespace lockstep::agent {

std::string barrier_proof_input(const std::string& nonce, int node, int attempt, const std::string& run_id) {
  return "lockstep-barrier-v1\n" + nonce + "\n" + std::to_string(node) + "\n" + std::to_string(attempt) + "\n" + run_id;
}

std::string barrier_proof(const std::string& secret, const std::string& nonce, int node, int attempt,
                          const std::string& run_id) {
  const std::string input = barrier_proof_input(nonce, node, attempt, run_id);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len))
    throw std::runtime_error("HMAC-SHA256 failed (OpenSSL)");
  return text::hex(mac, len);
}

bool proof_matches(const std::string& expected, const std::string& given) {
  // The length is public (64 hex digits); the bytes are compared in constant time.
  return !expected.empty() && expected.size() == given.size() &&
         CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

std::string clean_text(const std::string& s, size_t max_bytes, bool newlines, bool keep_end) {
  // Decoded strictly (Note [UTF-8 text]): no overlong forms, surrogates or code points past
  // U+10FFFF; each byte that begins no character becomes U+FFFD.
  std::string kept;
  kept.reserve(s.size());
  const std::string_view all(s);
  for (size_t i = 0; i < s.size();) {
    const size_t len = text::utf8_char_length(all.substr(i));
    const auto c = static_cast<unsigned char>(s[i]);
    if (len == 0) {
      kept += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (len == 1) {
      if (c == '\n' && newlines) kept += '\n';
      else if (c == '\t') kept += ' ';
      else if (c >= 0x20 && c != 0x7f) kept += static_cast<char>(c);
    } else if (!(len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0)) {  // C1 controls (U+0080..U+009F) dropped
      kept.append(s, i, len);
    }
    i += len;
  }
  return keep_end ? text::utf8_tail(kept, max_bytes) : text::utf8_head(kept, max_bytes);
}

std::string log_escape(const std::string& s, size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

Failure sanitize_failure(Failure f) {
  if (f.reason != "WorkerFailed" && f.reason != "Stall") f.reason = "WorkerFailed";
  if (f.code < 1 || f.code > 255) f.code = 1;  // a failure's shell code: 1..255
  f.what = clean_text(f.what, kFailureWhatBytes);
  f.tail = clean_text(f.tail, kFailureTailBytes, /*newlines=*/true, /*keep_end=*/true);
  return f;
}

}  // namespace lockstep::agent
