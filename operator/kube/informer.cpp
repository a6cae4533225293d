#include "kube/informer.hpp"

#include "kube/json_text.hpp"

#include <malloc.h>

#include <random>

#include "lockstep/log.hpp"

using json = nlohmann::json;

namespace lockstep::kube {

std::string object_key(const json& obj) {
  const auto& md = obj["metadata"];
  return md.value("namespace", "") + "/" + md.value("name", "");
}

InformerBase::InformerBase(Client& client, Resource resource, Options options)
    : client_(client), resource_(std::move(resource)), options_(std::move(options)) {}

InformerBase::~InformerBase() { stop(); }

void InformerBase::start() {
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (!stop_ && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void InformerBase::stop() {
  stop_ = true;
  cancel_.cancel();
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (thread_.joinable()) thread_.join();
}

void InformerBase::backoff(int& failures) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  double base = std::min(30.0, 0.2 * (1 << std::min(failures, 8)));
  ++failures;
  double wait = base * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
  while (!stop_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

bool InformerBase::list(std::string& resource_version) {
  std::string base = resource_.path(options_.ns) + "?limit=" + std::to_string(options_.page_size);
  if (!options_.label_selector.empty()) base += "&labelSelector=" + url_encode(options_.label_selector);
  const Prune* prune = options_.prune.empty() ? nullptr : &options_.prune;
  list_begin();  // each page is converted as it comes: a list never holds every object parsed
  std::string cont;
  do {
    const std::string page = base + (cont.empty() ? "" : "&continue=" + url_encode(cont));
    if (reads_text()) {
      std::string text;
      Response r = client_.get_text(page, text);
      if (!r.ok() || !list_page_text(text, cont, resource_version)) {
        LOCKSTEP_LOG(Warn, "informer", resource_.plural << ": list failed (will retry): "
                                                        << (r.ok() ? std::string("the answer is not a list") : r.message()));
        return false;
      }
      continue;
    }
    Response r = client_.get(page, prune, PruneRoot::ListItems);
    if (!r.ok()) {
      LOCKSTEP_LOG(Warn, "informer", resource_.plural << ": list failed (will retry): " << r.message());
      return false;
    }
    for (auto& item : r.body["items"]) {
      // List items carry no kind/apiVersion; conversions may want them.
      item["kind"] = resource_.kind;
      item["apiVersion"] = resource_.api_version();
      list_item(item);
    }
    const auto& md = r.body["metadata"];
    cont = md.value("continue", "");
    resource_version = md.value("resourceVersion", "");
  } while (!cont.empty() && !stop_);
  if (stop_) return false;
  list_end();
  ::malloc_trim(0);  // a large list's parse leaves freed pages behind; give them back
  return true;
}

bool InformerBase::list_page_text(const std::string& text, std::string& cont, std::string& resource_version) {
  namespace od = simdjson::ondemand;
  // A parser of its own: each item is read with the thread's (JsonText::for_this_thread), and
  // the items' texts are views into this one's copy of the page.
  JsonText page;
  od::document doc;
  od::object list;
  if (!page.iterate(text, doc) || doc.get_object().get(list)) return false;
  std::vector<std::string_view> items;
  cont.clear();
  for (auto member : list) {
    od::field field;
    std::string_view key;
    if (std::move(member).get(field) || field.unescaped_key().get(key)) return false;
    if (key == "metadata") {
      od::object md;
      if (field.value().get_object().get(md)) continue;
      for (auto m : md) {
        od::field f;
        std::string_view k, v;
        if (std::move(m).get(f) || f.unescaped_key().get(k)) return false;
        if (k == "continue" && !f.value().get_string().get(v)) cont.assign(v);
        else if (k == "resourceVersion" && !f.value().get_string().get(v)) resource_version.assign(v);
      }
    } else if (key == "items") {
      od::array arr;
      if (field.value().get_array().get(arr)) return false;
      for (auto item : arr) {
        od::value v;
        od::json_type type;
        std::string_view raw;
        if (std::move(item).get(v) || v.type().get(type)) return false;
        if (type != od::json_type::object) continue;
        od::object obj;
        if (v.get_object().get(obj) || obj.raw_json().get(raw)) return false;
        items.push_back(raw);
      }
    }
  }
  if (!JsonText::finished(doc)) return false;
  for (std::string_view item : items) list_item_text(item);
  return true;
}

bool InformerBase::watch_line(std::string_view line, std::string& rv, Response& error) {
  return Client::read_event(
      line, prune(),
      [&](const std::string& type, json& obj) {
        if (!obj.is_object()) return;
        if (!advance(type, obj["metadata"].value("resourceVersion", ""), rv)) return;
        if (type == "DELETED") erase(obj);
        else upsert(obj);
      },
      error);
}

bool InformerBase::advance(const std::string& type, const std::string& version, std::string& rv) {
  if (!version.empty()) rv = version;
  return type != "BOOKMARK";
}

void InformerBase::run() {
  int failures = 0;
  while (!stop_) {
    std::string rv;
    if (!list(rv)) {
      backoff(failures);
      continue;
    }
    if (!synced_.exchange(true) && options_.on_synced) options_.on_synced();
    failures = 0;
    std::string path = resource_.path(options_.ns);
    if (!options_.label_selector.empty()) path += "?labelSelector=" + url_encode(options_.label_selector);
    while (!stop_) {
      Response error;  // an ERROR event's Status
      Response r = client_.watch_lines(
          path, rv, options_.watch_timeout_seconds,
          [&](std::string_view line) { return watch_line(line, rv, error); }, cancel_);
      if (error.status != 0) r = error;
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
