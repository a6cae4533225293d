// A list page's items, one at a time, from its bytes as they arrive (Client::list).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::kube {

// Note [Streamed lists]
// A list's page was read whole: its text kept, copied for the parser and read as one document
// before any item was converted. The items are tenants' objects, each up to the API server's
// limit of about 1.5 MiB (etcd's request limit), and anyone may label a pod with a job's name:
// 10 such jobs took one list to 191 MiB and 50 to 471-942 MiB, past the chart's 128 MiB limit
// at every start, leader change and relist (#40). Now a page is read as it arrives
// (Client::list, on a connection of its own as a watch is, so stop() ends it at once):
// ListStream finds each element of the answer's top-level "items", following only strings,
// escapes and brackets, and hands the element's text on as soon as it is complete, to be parsed
// alone. It keeps at most one item: one that a single read brought whole is handed on where it
// lies, one split across reads is joined in a buffer. An item over kMaxItem (8 MiB, five times
// what the API server stores) fails the page as a transport error would, and so does a page
// that is not a list; an error's Status is read whole, up to kMaxStatus. The page's metadata
// (continue, resourceVersion) may come before or after its items.
// A list thus holds one item's text and parse at a time, whatever the size of its pages, so a
// page's size only weighs requests against the API server's work for each: the informers'
// default is client-go's 500. 10 suspended jobs and 50 labelled pods, each of the largest size,
// through a start, a restart and a relist: the operator's peak RSS 169.3 MiB read whole, 22.1 MiB
// streamed (operator_hostile_test, 2026-11-29).
class ListStream {
 public:
  static constexpr size_t kMaxItem = 8 << 20;
  // Takes each item's text, valid during the call; false stops the list (a failure).
  using OnItem = std::function<bool(std::string_view item)>;
  explicit ListStream(OnItem on_item, size_t max_item = kMaxItem);

  // The answer's next bytes, in order. False once the answer is no list, an item is larger than
  // the cap or on_item said stop (error() says which); whatever follows is then ignored.
  bool feed(std::string_view bytes);
  // The answer has ended: whether it was one whole list, every item handed on.
  bool finish();

  const std::string& error() const { return error_; }
  const std::string& continue_token() const { return continue_; }    // metadata.continue
  const std::string& resource_version() const { return version_; }  // metadata.resourceVersion
  size_t items() const { return items_; }                            // handed on so far
  size_t largest_item() const { return largest_; }                   // in bytes
  size_t bytes() const { return offset_; }                           // fed so far

 private:
  enum class State : unsigned char {
    BeforeList,    // whitespace, then '{'
    BeforeKey,     // whitespace, then a member's key, or '}' when the list has no member yet
    Key,           // in a member's key
    KeyEscape,     // after a backslash in the key
    AfterKey,      // whitespace, then ':'
    BeforeValue,   // whitespace, then the member's value
    BeforeItems,   // whitespace, then "items"' value: '[' (or null, passed over)
    BeforeItem,    // whitespace, then an item, or ']' when the array has none yet
    AfterItem,     // whitespace, then ',' or ']'
    AfterMember,   // whitespace, then ',' or '}'
    Value,         // in a value's objects and arrays, outside strings (closers_ says what is open)
    String,        // in a string within a value
    StringEscape,  // after a backslash there
    Scalar,        // in a number, true, false or null
    Done,          // the list has closed: whitespace only
    Failed,
  };
  enum class Role : unsigned char { PassOver, Item, Metadata };  // what the value being read is

  size_t step(std::string_view bytes, size_t i);
  size_t in_string(std::string_view bytes, size_t i);
  size_t in_value(std::string_view bytes, size_t i);
  size_t in_list(std::string_view bytes, size_t i);
  size_t expected(const std::string& what, std::string_view bytes, size_t i);  // fails
  void append_key(std::string_view part);
  size_t begin_value(Role role, std::string_view bytes, size_t i);
  void end_value(std::string_view bytes, size_t end);
  void read_metadata(std::string_view text, size_t at);
  std::string too_large(Role role) const;
  bool fail(const std::string& why, size_t at);  // false

  OnItem on_item_;
  size_t max_item_;
  State state_ = State::BeforeList;
  Role role_ = Role::PassOver;
  bool first_ = true;     // no member (no item) yet in the object (array) being read
  std::string key_;       // the member's key as written (escapes unread), cut a byte past 64
  std::string closers_;   // of the value's open objects and arrays, innermost last
  std::string kept_;      // the item or metadata being read, as far as earlier reads brought it
  size_t from_ = 0;       // where in the current read the value being kept began (0: in an earlier one)
  size_t offset_ = 0;     // bytes fed before the current read
  size_t items_ = 0, largest_ = 0;
  std::string continue_, version_, error_;
};

}  // namespace lockstep::kube
