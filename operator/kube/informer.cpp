#include "kube/informer.hpp"

#include "kube/json_text.hpp"

#include <malloc.h>

#include <algorithm>
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
  double base = std::min(30.0, 0.2 * (1 << std::min(failures, 8)));
  ++failures;
  double wait = base * std::uniform_real_distribution<double>(0.5, 1.0)(jitter_);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
  while (!stop_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// See Note [Streamed lists]: each page is read as it arrives and each item converted alone, so a
// list never holds more than one object's text and parse, nor every object converted.
bool InformerBase::list(std::string& resource_version) {
  std::string base = resource_.path(options_.ns) + "?limit=" + std::to_string(options_.page_size);
  if (!options_.label_selector.empty()) base += "&labelSelector=" + url_encode(options_.label_selector);
  list_begin();
  std::string cont;
  size_t items = 0, pages = 0, bytes = 0, largest = 0;
  do {
    const std::string page_path = base + (cont.empty() ? "" : "&continue=" + url_encode(cont));
    ListStream page([this](std::string_view item) { return !stop_ && list_one(item); });
    Response r = client_.list(page_path, page, cancel_);
    if (stop_) return false;
    if (!r.ok()) {
      LOCKSTEP_LOG(Warn, "informer", resource_.plural << ": list failed (will retry): " << r.message());
      return false;
    }
    cont = page.continue_token();
    resource_version = page.resource_version();
    items += page.items();
    bytes += page.bytes();
    largest = std::max(largest, page.largest_item());
    ++pages;
  } while (!cont.empty() && !stop_);
  if (stop_) return false;
  list_end();
  // Big items were read with buffers of their own (JsonText::kKept); a list's parses leave
  // freed pages behind: give both back.
  JsonText::for_this_thread().release();
  ::malloc_trim(0);
  LOCKSTEP_LOG(Debug, "informer", resource_.plural << ": listed " << items << " in " << pages << " page(s) of "
                                                   << bytes << " bytes, the largest item " << largest << " bytes");
  return true;
}

bool InformerBase::list_one(std::string_view item) {
  if (item.empty() || item.front() != '{') return false;  // a list's items are objects
  if (reads_text()) {
    list_item_text(item);
    return true;
  }
  json obj = parse_pruned(item, prune(), PruneRoot::Document);
  if (!obj.is_object()) return false;
  // List items carry no kind/apiVersion; conversions may want them.
  obj["kind"] = resource_.kind;
  obj["apiVersion"] = resource_.api_version();
  list_item(obj);
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
