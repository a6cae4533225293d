#include "kube/informer.hpp"

#include <malloc.h>

#include <random>

#include "lockstep/log.hpp"

using json = nlohmann::json;

namespace lockstep::kube {

std::string object_key(const json& obj) {
  const auto& md = obj["metadata"];
  return md.value("namespace", "") + "/" + md.value("name", "");
}

Informer::Informer(Client& client, Resource resource, Options options, Handler handler)
    : client_(client), resource_(std::move(resource)), options_(std::move(options)), handler_(std::move(handler)) {}

Informer::~Informer() { stop(); }

void Informer::start() {
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (!stop_ && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Informer::stop() {
  stop_ = true;
  cancel_.cancel();
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (thread_.joinable()) thread_.join();
}

Object Informer::get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(ns + "/" + name);
  return it == items_.end() ? nullptr : it->second;
}

std::vector<Object> Informer::by_index(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Object> out;
  auto it = index_.find(key);
  if (it == index_.end()) return out;
  for (const auto& k : it->second) {
    auto obj = items_.find(k);
    if (obj != items_.end()) out.push_back(obj->second);
  }
  return out;
}

std::vector<Object> Informer::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Object> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(v);
  return out;
}

size_t Informer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

void Informer::upsert(json obj) {
  if (options_.trim) obj = options_.trim(std::move(obj));
  auto now = std::make_shared<const json>(std::move(obj));
  std::string key = object_key(*now);
  Object old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(key);
    if (it != items_.end()) {
      old = it->second;
      if (options_.index) index_[options_.index(*old)].erase(key);
    }
    items_[key] = now;
    if (options_.index) index_[options_.index(*now)].insert(key);
  }
  if (handler_) handler_(old, now);
}

void Informer::erase(const json& obj) {
  std::string key = object_key(obj);
  Object old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(key);
    if (it == items_.end()) return;
    old = it->second;
    items_.erase(it);
    if (options_.index) {
      auto idx = index_.find(options_.index(*old));
      if (idx != index_.end()) {
        idx->second.erase(key);
        if (idx->second.empty()) index_.erase(idx);
      }
    }
  }
  if (handler_) handler_(old, nullptr);
}

void Informer::backoff(int& failures) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  double base = std::min(30.0, 0.2 * (1 << std::min(failures, 8)));
  ++failures;
  double wait = base * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
  while (!stop_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

bool Informer::list_and_replace(std::string& resource_version) {
  std::string base = resource_.path(options_.ns) + "?limit=" + std::to_string(options_.page_size);
  if (!options_.label_selector.empty()) base += "&labelSelector=" + url_encode(options_.label_selector);
  std::vector<json> items;
  std::string cont;
  do {
    Response r = client_.get(base + (cont.empty() ? "" : "&continue=" + url_encode(cont)));
    if (!r.ok()) {
      LOCKSTEP_LOG(Warn, "informer", resource_.plural << ": list failed (will retry): " << r.message());
      return false;
    }
    for (auto& item : r.body["items"]) {
      // List items carry no kind/apiVersion; handlers and trims may want them.
      item["kind"] = resource_.kind;
      item["apiVersion"] = resource_.api_version();
      items.push_back(std::move(item));
    }
    const auto& md = r.body["metadata"];
    cont = md.value("continue", "");
    resource_version = md.value("resourceVersion", "");
  } while (!cont.empty() && !stop_);

  // Replace the cache: deletes for what vanished, upserts for the rest.
  std::set<std::string> seen;
  for (const auto& item : items) seen.insert(object_key(item));
  std::vector<Object> vanished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : items_)
      if (!seen.count(k)) vanished.push_back(v);
  }
  for (const auto& v : vanished) erase(*v);
  for (auto& item : items) upsert(std::move(item));
  items.clear();
  ::malloc_trim(0);  // a large list's parse leaves freed pages behind; give them back
  return true;
}

void Informer::run() {
  int failures = 0;
  while (!stop_) {
    std::string rv;
    if (!list_and_replace(rv)) {
      backoff(failures);
      continue;
    }
    if (!synced_.exchange(true) && options_.on_synced) options_.on_synced();
    failures = 0;
    std::string path = resource_.path(options_.ns);
    if (!options_.label_selector.empty()) path += "?labelSelector=" + url_encode(options_.label_selector);
    while (!stop_) {
      Response r = client_.watch(
          path, rv, options_.watch_timeout_seconds,
          [&](const std::string& type, json& obj) {
            std::string v = obj["metadata"].value("resourceVersion", "");
            if (!v.empty()) rv = v;
            if (type == "BOOKMARK") return;
            if (type == "DELETED") erase(obj);
            else upsert(std::move(obj));
          },
          cancel_);
      if (stop_) break;
      if (r.gone()) break;  // re-list
      if (r.status == 200) {
        failures = 0;
        continue;
      }
      LOCKSTEP_LOG(Warn, "informer", resource_.plural << ": watch ended (will retry): " << r.message());
      backoff(failures);
      if (failures > 5) break;  // persistent trouble: start over with a fresh list
    }
  }
}

}  // namespace lockstep::kube
