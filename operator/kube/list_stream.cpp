#include "kube/list_stream.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace lockstep::kube {

using json = nlohmann::json;

// Note [Streamed lists], continued: ListStream reads the page a byte at a time, but for the
// strings, which hold nearly all of an object's bytes and are passed over to their next quote or
// backslash. It checks the list's own structure and the brackets and strings of each item; the
// item's reader (pod_from_text, parse_pruned) checks the rest, as it does for a watch's event.
namespace {

constexpr size_t kMaxKey = 64;  // a longer key is none that ListStream looks for

bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool scalar_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' || c == '.';
}
std::string shown(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  static const char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[(c >> 4) & 15] + kHex[c & 15];
}
std::string mib(size_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}
// A key as written (its escapes unread) as the name it stands for.
std::string member_name(const std::string& raw) {
  if (raw.size() > kMaxKey) return "";
  if (raw.find('\\') == std::string::npos) return raw;
  json name = json::parse("\"" + raw + "\"", nullptr, false);
  return name.is_string() ? name.get<std::string>() : "";
}

}  // namespace

ListStream::ListStream(OnItem on_item, size_t max_item) : on_item_(std::move(on_item)), max_item_(max_item) {}

bool ListStream::feed(std::string_view bytes) {
  if (state_ == State::Failed) return false;
  from_ = 0;
  for (size_t i = 0; i < bytes.size() && state_ != State::Failed;) i = step(bytes, i);
  if (state_ == State::Failed) return false;
  const bool in_value =
      state_ == State::Value || state_ == State::String || state_ == State::StringEscape || state_ == State::Scalar;
  if (in_value && role_ != Role::PassOver) {
    kept_.append(bytes.substr(from_));
    if (kept_.size() > max_item_) return fail(too_large(role_), offset_ + bytes.size());
  }
  offset_ += bytes.size();
  return true;
}

bool ListStream::finish() {
  if (state_ == State::Failed) return false;
  if (state_ != State::Done) return fail("the answer ended before its list did", offset_);
  return true;
}

std::string ListStream::too_large(Role role) const {
  if (role == Role::Metadata) return "the list's metadata is larger than " + mib(max_item_);
  return "item " + std::to_string(items_ + 1) + " of the list is larger than " + mib(max_item_) +
         ", the most one object may be here (the API server stores objects of about 1.5 MiB at most)";
}

bool ListStream::fail(const std::string& why, size_t at) {
  state_ = State::Failed;
  error_ = why + " (at byte " + std::to_string(at) + " of the answer)";
  return false;
}

// One step at bytes[i]: the index of the next byte to read (i itself when the byte is to be
// read again in the state it led to; the end of `bytes` after a failure).
size_t ListStream::step(std::string_view bytes, size_t i) {
  switch (state_) {
    case State::String:
    case State::Key: return in_string(bytes, i);
    case State::StringEscape:
    case State::KeyEscape:
    case State::Value:
    case State::Scalar: return in_value(bytes, i);
    case State::Failed: return bytes.size();
    default: return in_list(bytes, i);
  }
}

size_t ListStream::expected(const std::string& what, std::string_view bytes, size_t i) {
  fail("expected " + what + ", not " + shown(bytes[i]), offset_ + i);
  return bytes.size();
}

// In a string (a key's, or one within a value): on to its next quote or backslash at once.
size_t ListStream::in_string(std::string_view bytes, size_t i) {
  const bool key = state_ == State::Key;
  size_t j = i;
  while (j < bytes.size() && bytes[j] != '"' && bytes[j] != '\\') ++j;
  if (key) append_key(bytes.substr(i, j - i));
  if (j == bytes.size()) return j;
  if (bytes[j] == '\\') {
    if (key) append_key("\\");
    state_ = key ? State::KeyEscape : State::StringEscape;
  } else if (key) {
    state_ = State::AfterKey;
  } else if (closers_.empty()) {
    end_value(bytes, j + 1);  // a value that was one string
  } else {
    state_ = State::Value;
  }
  return j + 1;
}

// Within a value, outside its strings: only brackets matter, and where a scalar ends.
size_t ListStream::in_value(std::string_view bytes, size_t i) {
  const char c = bytes[i];
  switch (state_) {
    case State::KeyEscape:
      append_key(bytes.substr(i, 1));
      state_ = State::Key;
      break;
    case State::StringEscape: state_ = State::String; break;
    case State::Scalar:
      if (scalar_char(c)) break;
      end_value(bytes, i);
      return i;
    default:  // State::Value
      if (c == '"') {
        state_ = State::String;
      } else if (c == '{' || c == '[') {
        if (closers_.size() >= max_item_)
          return expected("at most " + std::to_string(max_item_) + " nested values", bytes, i);
        closers_ += c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (closers_.back() != c) return expected(closers_.back() == '}' ? "'}'" : "']'", bytes, i);
        closers_.pop_back();
        if (closers_.empty()) end_value(bytes, i + 1);
      }
  }
  return i + 1;
}

// Between the list's own tokens: its members, and the items of its "items".
size_t ListStream::in_list(std::string_view bytes, size_t i) {
  const char c = bytes[i];
  if (blank(c)) return i + 1;
  switch (state_) {
    case State::BeforeList:
      if (c != '{') return expected("a JSON object, the list", bytes, i);
      state_ = State::BeforeKey;
      first_ = true;
      break;
    case State::BeforeKey:
      if (c == '}' && first_) {
        state_ = State::Done;
        break;
      }
      if (c != '"') return expected("a member's key", bytes, i);
      key_.clear();
      state_ = State::Key;
      break;
    case State::AfterKey:
      if (c != ':') return expected("':'", bytes, i);
      state_ = State::BeforeValue;
      break;
    case State::BeforeValue: {
      const std::string name = member_name(key_);
      if (name == "items") {
        state_ = State::BeforeItems;
        return i;
      }
      return begin_value(name == "metadata" ? Role::Metadata : Role::PassOver, bytes, i);
    }
    case State::BeforeItems:
      if (c == 'n') return begin_value(Role::PassOver, bytes, i);  // null: no items
      if (c != '[') return expected("\"items\" to be an array or null", bytes, i);
      state_ = State::BeforeItem;
      first_ = true;
      break;
    case State::BeforeItem:
      if (c == ']' && first_) {
        state_ = State::AfterMember;
        break;
      }
      first_ = false;
      return begin_value(Role::Item, bytes, i);
    case State::AfterItem:
      if (c != ',' && c != ']') return expected("',' or ']' after an item", bytes, i);
      state_ = c == ',' ? State::BeforeItem : State::AfterMember;
      break;
    case State::AfterMember:
      if (c != ',' && c != '}') return expected("',' or '}' after a member of the list", bytes, i);
      state_ = c == ',' ? State::BeforeKey : State::Done;
      first_ = false;
      break;
    default:  // State::Done
      return expected("nothing after the list", bytes, i);
  }
  return i + 1;
}

// Keys are kept up to one byte past kMaxKey: a longer one is none that is read.
void ListStream::append_key(std::string_view part) {
  if (key_.size() <= kMaxKey) key_.append(part.substr(0, kMaxKey + 1 - key_.size()));
}

// The value whose first byte is bytes[i], read as `role`.
size_t ListStream::begin_value(Role role, std::string_view bytes, size_t i) {
  const char c = bytes[i];
  role_ = role;
  from_ = i;
  kept_.clear();
  closers_.clear();
  if (c == '{' || c == '[') {
    closers_ += c == '{' ? '}' : ']';
    state_ = State::Value;
  } else if (c == '"') {
    state_ = State::String;
  } else if (scalar_char(c)) {
    state_ = State::Scalar;
  } else {
    return expected("a value", bytes, i);
  }
  return i + 1;
}

// The value being read ends before bytes[end]: an item is handed on, the metadata read.
void ListStream::end_value(std::string_view bytes, size_t end) {
  const Role role = role_;
  role_ = Role::PassOver;
  state_ = role == Role::Item ? State::AfterItem : State::AfterMember;
  if (role == Role::PassOver) return;
  std::string_view text = bytes.substr(from_, end - from_);
  if (!kept_.empty()) {
    kept_.append(text);
    text = kept_;
  }
  if (text.size() > max_item_) {
    fail(too_large(role), offset_ + end);
    return;
  }
  if (role == Role::Metadata) {
    read_metadata(text, offset_ + end);
  } else {
    ++items_;
    largest_ = std::max(largest_, text.size());
    if (!on_item_(text)) fail("item " + std::to_string(items_) + " of the list could not be read (it is no JSON object)", offset_ + end);
  }
  kept_.clear();
}

void ListStream::read_metadata(std::string_view text, size_t at) {
  json md = json::parse(text, nullptr, false);
  if (md.is_discarded()) {
    fail("the list's metadata is not JSON", at);
    return;
  }
  if (!md.is_object()) return;
  if (auto it = md.find("continue"); it != md.end() && it->is_string()) continue_ = it->get<std::string>();
  if (auto it = md.find("resourceVersion"); it != md.end() && it->is_string()) version_ = it->get<std::string>();
}

}  // namespace lockstep::kube
