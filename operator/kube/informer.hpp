// An informer: a local cache of one resource kept current by list + watch.
//
// It lists (paginated, each page read item by item as it arrives: Note [Streamed lists] in
// kube/client.hpp), then watches from the list's resourceVersion with bookmarks;
// a watch that ends normally resumes from the last resourceVersion seen; 410 Gone (the
// version was compacted away) re-lists; errors back off exponentially (200 ms .. 30 s,
// with jitter). Handlers run on the informer's thread, after the cache is updated.
// stop() cancels an open watch (closing its connection) and joins the thread, so an
// informer never outlives its owner's objects.
//
// Note [Lean caches]
// The cache holds what the controller reads, not the objects: Informer<T> converts each
// object to a T (a few strings and numbers for a pod) as it arrives, after a Prune has kept
// the parser from building the parts no T needs (Note [Pruned parsing]). As nlohmann::json,
// a pod the controller had trimmed to its needs still took about 4.5 KB of heap (a map node
// per field, a heap block per string); at 10,000 pods that was most of the operator's
// memory (bench/operator/RESULTS.md). A list converts each item as it comes too: it holds one
// object's text and parse at a time (Note [Streamed lists] in kube/list_stream.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kube/client.hpp"
#include "kube/resource.hpp"

namespace lockstep::kube {

std::string object_key(const nlohmann::json& obj);  // namespace/name

// A watch event's envelope, for conversions that read an event's text themselves.
struct EventHead {
  std::string type;              // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  std::string key;               // namespace/name of its object
  std::string resource_version;  // of its object
};

// The list + watch loop, whatever the cache holds.
class InformerBase {
 public:
  struct Options {
    std::string ns;              // "" for all namespaces
    std::string label_selector;  // e.g. "lockstep.dev/job-name"
    Prune prune;                 // subtrees of each object never parsed (optional)
    // Called once, after the first complete list: what was decided before it from an
    // empty cache can be looked at again (optional).
    std::function<void()> on_synced;
    int page_size = 500;  // objects a list page: client-go's (Note [Streamed lists] in kube/list_stream.hpp)
    int watch_timeout_seconds = 240;
  };

  virtual ~InformerBase();
  void start();
  void stop();  // ends the watch at once and joins the thread; idempotent
  bool synced() const { return synced_.load(); }
  const Resource& resource() const { return resource_; }

 protected:
  InformerBase(Client& client, Resource resource, Options options);
  // A list: begin, each item (with kind and apiVersion set), end (replace the cache).
  virtual void list_begin() = 0;
  virtual void list_item(nlohmann::json& obj) = 0;
  // Instead of list_item, when reads_text(): each item's text, unparsed (Note [Pod text]).
  virtual bool reads_text() const { return false; }
  virtual void list_item_text(std::string_view) {}
  virtual void list_end() = 0;
  virtual void upsert(nlohmann::json& obj) = 0;
  virtual void erase(const nlohmann::json& obj) = 0;
  // One watch event's line: the cache updated, `rv` advanced. False ends the watch with
  // `error` (an ERROR event). This one parses the event (pruned) and upserts or erases.
  virtual bool watch_line(std::string_view line, std::string& rv, Response& error);
  const Prune* prune() const { return options_.prune.empty() ? nullptr : &options_.prune; }
  // Every event's version moves `rv` on (resuming after it); false for a bookmark, which has
  // nothing else to apply.
  static bool advance(const std::string& type, const std::string& version, std::string& rv);

 private:
  void run();
  bool list(std::string& resource_version);
  // One item of a list's page, alone, to list_item_text or list_item; false when it is no object.
  bool list_one(std::string_view item);
  void backoff(int& failures);

  Client& client_;
  Resource resource_;
  Options options_;
  std::atomic<bool> stop_{false}, synced_{false};
  // The backoff's jitter, drawn on the informer's thread alone. A member, not a thread_local:
  // a thread_local's space is set aside in every thread of the process (the listener's 256
  // among them: Note [Listener limits]), and an mt19937 is 5 KB of each one's stack.
  std::minstd_rand jitter_{std::random_device{}()};
  Cancellation cancel_;
  std::mutex thread_mu_;  // start() and stop() from different threads
  std::thread thread_;
};

template <class T>
class Informer : public InformerBase {
 public:
  using Ptr = std::shared_ptr<const T>;
  // old is null for an add, now is null for a delete.
  using Handler = std::function<void(const Ptr& old, const Ptr& now)>;
  struct Typed {
    std::function<T(nlohmann::json& obj)> convert;  // the object (pruned) to what is cached
    std::function<std::string(const T&)> index;     // optional secondary key
    // Optional, together (Note [Pod text] in controller/pod_event.hpp): a watch event's text,
    // and a list item's, straight to what is cached and the key and version (head), building no
    // document; false when the text is not an event or object. With them, convert is not used
    // and may be empty.
    std::function<bool(std::string_view line, EventHead& head, T& out)> from_event;
    std::function<bool(std::string_view object, EventHead& head, T& out)> from_text;
  };

  Informer(Client& client, Resource resource, Options options, Typed typed, Handler handler)
      : InformerBase(client, std::move(resource), std::move(options)), typed_(std::move(typed)),
        handler_(std::move(handler)) {
    if (static_cast<bool>(typed_.from_event) != static_cast<bool>(typed_.from_text))
      throw std::invalid_argument("Informer: from_event and from_text are given together or not at all");
    if (!typed_.convert && !typed_.from_text)
      throw std::invalid_argument("Informer: convert is needed unless objects are read from their text");
  }
  ~Informer() override { stop(); }  // before the cache goes: the thread writes it

  Ptr get(const std::string& ns, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(ns + "/" + name);
    return it == items_.end() ? nullptr : it->second;
  }
  std::vector<Ptr> by_index(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Ptr> out;
    auto it = index_.find(key);
    if (it == index_.end()) return out;
    for (const std::string* k : it->second) {
      auto obj = items_.find(*k);
      if (obj != items_.end()) out.push_back(obj->second);
    }
    return out;
  }
  std::vector<Ptr> list() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Ptr> out;
    out.reserve(items_.size());
    for (const auto& [k, v] : items_) out.push_back(v);
    return out;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 protected:
  void list_begin() override { listed_.clear(); }
  bool reads_text() const override { return static_cast<bool>(typed_.from_text); }
  void list_item_text(std::string_view object) override {
    EventHead head;
    T value{};
    if (!typed_.from_text(object, head, value)) return;  // not an object: nothing to cache
    listed_.emplace_back(std::move(head.key), std::make_shared<const T>(std::move(value)));
  }
  void list_item(nlohmann::json& obj) override {
    std::string key = object_key(obj);
    listed_.emplace_back(std::move(key), std::make_shared<const T>(typed_.convert(obj)));
  }
  void list_end() override {
    // Replace the cache: deletes for what vanished, upserts for the rest.
    std::set<std::string> seen;
    for (const auto& [k, v] : listed_) seen.insert(k);
    std::vector<std::pair<std::string, Ptr>> vanished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [k, v] : items_)
        if (!seen.count(k)) vanished.emplace_back(k, v);
    }
    for (const auto& [k, v] : vanished) remove(k);
    auto listed = std::move(listed_);
    listed_.clear();
    for (auto& [k, v] : listed) put(k, std::move(v));
  }
  void upsert(nlohmann::json& obj) override {
    std::string key = object_key(obj);
    put(key, std::make_shared<const T>(typed_.convert(obj)));
  }
  void erase(const nlohmann::json& obj) override { remove(object_key(obj)); }
  bool watch_line(std::string_view line, std::string& rv, Response& error) override {
    if (!typed_.from_event) return InformerBase::watch_line(line, rv, error);
    EventHead head;
    T value{};
    if (!typed_.from_event(line, head, value) || head.type.empty()) return true;
    if (head.type == "ERROR") {
      error = Client::watch_error(line);
      return false;
    }
    if (!advance(head.type, head.resource_version, rv)) return true;
    if (head.type == "DELETED") remove(head.key);
    else put(head.key, std::make_shared<const T>(std::move(value)));
    return true;
  }

 private:
  void put(const std::string& key, Ptr now) {
    Ptr old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = items_.find(key);
      std::string was;  // the old object's index key, when it had one
      if (it != items_.end()) {
        old = it->second;
        if (typed_.index) was = typed_.index(*old);
        it->second = now;
      } else {
        it = items_.emplace(key, now).first;
      }
      if (typed_.index) {
        std::string is = typed_.index(*now);
        if (!old || was != is) {  // an update under the same key (nearly every one) moves nothing
          if (old) unindex(was, key);
          index_[is].insert(&it->first);
        }
      }
    }
    if (handler_) handler_(old, now);
  }
  void remove(const std::string& key) {
    Ptr old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = items_.find(key);
      if (it == items_.end()) return;
      old = it->second;
      if (typed_.index) unindex(typed_.index(*old), key);  // first: the index points at it->first
      items_.erase(it);
    }
    if (handler_) handler_(old, nullptr);
  }
  void unindex(const std::string& index_key, const std::string& key) {  // under mu_
    auto idx = index_.find(index_key);
    if (idx == index_.end()) return;
    if (auto at = idx->second.find(key); at != idx->second.end()) idx->second.erase(at);
    if (idx->second.empty()) index_.erase(idx);
  }

  Typed typed_;
  Handler handler_;
  mutable std::mutex mu_;
  // The index holds each object's key as a pointer to items_'s own (a map's keys stay where they
  // are until erased, and remove() unindexes before it erases), ordered by the text: as a
  // string of its own it was 32 bytes and, for a key past 15 characters (a pod's "ns/name"
  // nearly always), a heap block of each cached object (bench/operator/RESULTS.md, 2026-11-30,
  // seventh session).
  struct KeyLess {
    using is_transparent = void;
    bool operator()(const std::string* a, const std::string* b) const { return *a < *b; }
    bool operator()(const std::string* a, const std::string& b) const { return *a < b; }
    bool operator()(const std::string& a, const std::string* b) const { return a < *b; }
  };
  std::map<std::string, Ptr> items_;                                    // ns/name -> what is cached
  std::map<std::string, std::set<const std::string*, KeyLess>> index_;  // index key -> items_'s keys
  std::vector<std::pair<std::string, Ptr>> listed_;                     // a list in progress (informer thread)
};

}  // namespace lockstep::kube
