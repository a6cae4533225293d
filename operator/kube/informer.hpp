// An informer: a local cache of one resource kept current by list + watch.
//
// It lists (paginated), then watches from the list's resourceVersion with bookmarks;
// a watch that ends normally resumes from the last resourceVersion seen; 410 Gone (the
// version was compacted away) re-lists; errors back off exponentially (200 ms .. 30 s,
// with jitter). Objects pass through a `trim` function before they are cached, so the
// cache holds only what the controller reads. Handlers run on the informer's thread,
// after the cache is updated. stop() cancels an open watch (closing its connection) and
// joins the thread, so an informer never outlives its owner's objects.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.hpp"
#include "kube/resource.hpp"

namespace lockstep::kube {

using Object = std::shared_ptr<const nlohmann::json>;

class Informer {
 public:
  struct Options {
    std::string ns;              // "" for all namespaces
    std::string label_selector;  // e.g. "lockstep.dev/job-name"
    std::function<nlohmann::json(nlohmann::json)> trim;       // optional
    std::function<std::string(const nlohmann::json&)> index;  // optional secondary key
    // Called once, after the first complete list: what was decided before it from an
    // empty cache can be looked at again (optional).
    std::function<void()> on_synced;
    int page_size = 500;
    int watch_timeout_seconds = 240;
  };
  // old is null for an add, now is null for a delete.
  using Handler = std::function<void(const Object& old, const Object& now)>;

  Informer(Client& client, Resource resource, Options options, Handler handler);
  ~Informer();

  void start();
  void stop();  // ends the watch at once and joins the thread; idempotent
  bool synced() const { return synced_.load(); }
  const Resource& resource() const { return resource_; }

  Object get(const std::string& ns, const std::string& name) const;
  std::vector<Object> by_index(const std::string& key) const;
  std::vector<Object> list() const;
  size_t size() const;

 private:
  void run();
  bool list_and_replace(std::string& resource_version);
  void upsert(nlohmann::json obj);
  void erase(const nlohmann::json& obj);
  void backoff(int& failures);

  Client& client_;
  Resource resource_;
  Options options_;
  Handler handler_;
  mutable std::mutex mu_;
  std::map<std::string, Object> items_;                 // ns/name -> object
  std::map<std::string, std::set<std::string>> index_;  // index key -> ns/name
  std::atomic<bool> stop_{false}, synced_{false};
  Cancellation cancel_;
  std::mutex thread_mu_;  // start() and stop() from different threads
  std::thread thread_;
};

std::string object_key(const nlohmann::json& obj);  // namespace/name

}  // namespace lockstep::kube
