#include "kube/client.hpp"

#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "kube/http.hpp"

using json = nlohmann::json;

namespace lockstep::kube {

std::string Response::reason() const {
  if (body.is_object() && body.contains("reason") && body["reason"].is_string()) return body["reason"];
  return "";
}

std::string Response::message() const {
  if (status == 0) return error.empty() ? "no response" : error;
  if (body.is_object() && body.contains("message") && body["message"].is_string()) return body["message"];
  return "HTTP " + std::to_string(status);
}

RateLimiter::RateLimiter(double qps, int burst)
    : qps_(qps > 0 ? qps : 1e9), burst_(burst > 0 ? burst : 1), tokens_(burst_), last_(std::chrono::steady_clock::now()) {}

void RateLimiter::acquire() {
  std::chrono::duration<double> wait{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
    tokens_ -= 1;  // may go negative: the debt is the wait, and orders waiters fairly
    if (tokens_ < 0) wait = std::chrono::duration<double>(-tokens_ / qps_);
  }
  if (wait.count() > 0) std::this_thread::sleep_for(wait);
}

struct Cancellation::State {
  http::Interrupt interrupt;
};

Cancellation::Cancellation() : state_(std::make_shared<State>()) {}
void Cancellation::cancel() { state_->interrupt.interrupt(); }
bool Cancellation::cancelled() const { return state_->interrupt.interrupted(); }

namespace {

http::TlsConfig tls_of(const RestConfig& c) {
  http::TlsConfig t;
  t.ca_pem = c.ca_pem;
  t.cert_pem = c.client_cert_pem;
  t.key_pem = c.client_key_pem;
  t.insecure_skip_verify = c.insecure_skip_tls_verify;
  return t;
}

// The Accept header of a request (Note [Metadata answers]): "" for JSON.
std::string_view accept_for(const std::string& verb, const Prune* prune, bool metadata_answers) {
  const bool writes_object = verb == "POST" || verb == "PUT" || verb == "PATCH";
  return metadata_answers && writes_object && prune && (prune->all || prune->metadata_only) ? kMetadataAnswer
                                                                                              : std::string_view();
}

// A server that cannot answer with the metadata alone says 406 before it does anything (the
// answer's form is negotiated first): the request is sent again asking for JSON.
bool refused_metadata_answer(const http::Request& req, const http::Reply& reply) {
  return reply.status == 406 && !req.accept.empty();
}

Response refused_write() {
  Response r;
  r.refused = true;
  r.error = "write refused: this replica no longer leads (its lease was not renewed within --renew-deadline)";
  return r;
}

}  // namespace

struct Client::Impl {
  explicit Impl(const RestConfig& c)
      : transport(c.server, tls_of(c), c.request_timeout, std::string("lockstep-operator/") + LOCKSTEP_VERSION) {}
  http::Transport transport;
  // See Note [Metadata answers]: off for good once the server says 406 to one.
  std::atomic<bool> metadata_answers{true};
  std::mutex token_mu;
  std::string token;
  std::chrono::steady_clock::time_point token_read{};

  std::string auth_header(const RestConfig& c) {
    if (c.token_file.empty()) return c.token.empty() ? "" : "Bearer " + c.token;
    std::lock_guard<std::mutex> lock(token_mu);
    auto now = std::chrono::steady_clock::now();
    if (token.empty() || now - token_read > std::chrono::minutes(1)) {  // projected tokens rotate
      token = c.bearer_token();
      token_read = now;
    }
    return "Bearer " + token;
  }

  static Response finish(const std::string& verb, http::Reply&& reply, const Prune* prune, PruneRoot root,
                         const RequestObserver& observer) {
    Response r;
    r.status = reply.status;
    if (r.status == 0) {
      r.error = std::move(reply.error);
    } else {
      // An error's Status is read whole: its message and reason are what the caller reports.
      r.body = parse_pruned(reply.body, r.ok() ? prune : nullptr, root);
      if (r.body.is_discarded()) r.body = nullptr;
    }
    if (observer) observer(verb, r.status);
    return r;
  }
};

Client::Client(RestConfig config)
    : config_(std::move(config)), limiter_(config_.qps, config_.burst), impl_(std::make_unique<Impl>(config_)) {}

Client::~Client() = default;

size_t Client::connections_opened() const { return impl_->transport.connections_opened(); }

Response Client::request(const std::string& verb, const std::string& path, const json* body,
                         const char* content_type, const Prune* prune, PruneRoot root) {
  limiter_.acquire();
  // After the limiter's wait, which may be long: leadership is judged as the request leaves.
  if (verb != "GET" && gate_ && !gate_()) return refused_write();
  std::string payload = body && !body->is_null() ? body->dump() : std::string();
  std::string auth = impl_->auth_header(config_);
  http::Request req{verb, path, payload.empty() ? "" : content_type, payload, auth, prune && prune->all};
  req.accept = accept_for(verb, prune, impl_->metadata_answers);
  http::Reply reply = impl_->transport.round_trip(req);
  if (refused_metadata_answer(req, reply)) {
    impl_->metadata_answers = false;
    req.accept = {};
    reply = impl_->transport.round_trip(req);
  }
  return Impl::finish(verb, std::move(reply), prune, root, observer_);
}

std::vector<Response> Client::request_all(const std::string& verb, const std::vector<std::string>& paths,
                                          const std::vector<const json*>& bodies, const Prune* prune) {
  std::vector<std::string> payloads(paths.size());
  std::vector<http::Request> reqs(paths.size());
  std::string auth = impl_->auth_header(config_);
  for (size_t i = 0; i < paths.size(); ++i) {
    if (i < bodies.size() && bodies[i] && !bodies[i]->is_null()) payloads[i] = bodies[i]->dump();
    reqs[i] = http::Request{verb, paths[i], payloads[i].empty() ? "" : "application/json", payloads[i], auth,
                            prune && prune->all};
    reqs[i].accept = accept_for(verb, prune, impl_->metadata_answers);
  }
  // Every token first, then the gate, then the batch: no write of it leaves after a refusal.
  for (size_t i = 0; i < reqs.size(); ++i) limiter_.acquire();
  if (gate_ && !gate_()) return std::vector<Response>(reqs.size(), refused_write());
  auto replies = impl_->transport.round_trip_all(reqs);
  std::vector<http::Request> again;
  std::vector<size_t> again_at;
  for (size_t i = 0; i < replies.size(); ++i)
    if (refused_metadata_answer(reqs[i], replies[i])) {
      again.push_back(reqs[i]);
      again.back().accept = {};
      again_at.push_back(i);
    }
  if (!again.empty()) {
    impl_->metadata_answers = false;
    auto second = impl_->transport.round_trip_all(again);
    for (size_t j = 0; j < second.size(); ++j) replies[again_at[j]] = std::move(second[j]);
  }
  std::vector<Response> out;
  out.reserve(replies.size());
  for (auto& reply : replies) out.push_back(Impl::finish(verb, std::move(reply), prune, PruneRoot::Document, observer_));
  return out;
}

std::vector<Response> Client::create_all(const std::string& path, const std::vector<json>& bodies,
                                         const Prune* prune) {
  std::vector<std::string> paths(bodies.size(), path);
  std::vector<const json*> ptrs;
  ptrs.reserve(bodies.size());
  for (const auto& b : bodies) ptrs.push_back(&b);
  return request_all("POST", paths, ptrs, prune);
}

std::vector<Response> Client::remove_all(const std::vector<std::string>& paths, const std::vector<json>& options,
                                         const Prune* prune) {
  std::vector<const json*> ptrs(paths.size(), nullptr);
  for (size_t i = 0; i < paths.size() && i < options.size(); ++i) ptrs[i] = &options[i];
  return request_all("DELETE", paths, ptrs, prune);
}

Response Client::get(const std::string& path, const Prune* prune, PruneRoot root) {
  return request("GET", path, nullptr, "", prune, root);
}
Response Client::list(const std::string& path, ListStream& page, const Cancellation& cancel) {
  limiter_.acquire();
  Response r;
  if (cancel.cancelled()) {
    r.error = "list cancelled";
    return r;
  }
  const std::string auth = impl_->auth_header(config_);
  http::Request req{"GET", path, "", "", auth};
  req.max_body = kMaxStatus;
  http::Reply reply;
  try {
    reply = impl_->transport.stream(req, config_.request_timeout, cancel.state_->interrupt,
                                    [&page](std::string_view piece) { return page.feed(piece); });
  } catch (const std::exception& e) {  // thrown by the page's reader of items
    r.error = std::string("list: ") + e.what();
    return r;
  }
  if (cancel.cancelled()) {
    r.error = "list cancelled";
    return r;
  }
  r.status = reply.status;
  if (observer_) observer_("GET", r.status);
  if (r.status == 200 && !page.finish()) {
    r.status = 0;
    r.error = page.error();
  } else if (r.status == 0) {
    r.error = std::move(reply.error);
  } else if (r.status != 200) {
    r.body = json::parse(reply.body, nullptr, false);
    if (r.body.is_discarded()) r.body = nullptr;
    if (r.ok()) {  // a list is answered 200, its items in the body
      r.error = "HTTP " + std::to_string(r.status) + " to a list, not 200";
      r.status = 0;
    }
  }
  return r;
}
Response Client::create(const std::string& path, const json& body, const Prune* prune) {
  return request("POST", path, &body, "application/json", prune);
}
Response Client::replace(const std::string& path, const json& body) {
  return request("PUT", path, &body, "application/json");
}
Response Client::patch(const std::string& path, const json& body, PatchType type, const Prune* prune) {
  const char* ct = type == PatchType::Merge            ? "application/merge-patch+json"
                   : type == PatchType::StrategicMerge ? "application/strategic-merge-patch+json"
                                                       : "application/json-patch+json";
  return request("PATCH", path, &body, ct, prune);
}
Response Client::remove(const std::string& path, const json& options, const Prune* prune) {
  return request("DELETE", path, options.is_null() ? nullptr : &options, "application/json", prune);
}

// Note [Reading a watch]
// A watch is one long chunked answer of newline-separated JSON events, on a connection of its
// own (http::Transport::stream). The body is handed on as the transport reads it, usually an
// event per chunk; each complete line is handed on where it lies, and only a line split across
// reads is copied, to be joined.
Response Client::watch_lines(const std::string& path, const std::string& resource_version, int timeout_seconds,
                             const std::function<bool(std::string_view line)>& on_line, const Cancellation& cancel) {
  limiter_.acquire();
  std::string query = path + (path.find('?') == std::string::npos ? "?" : "&") +
                      "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout_seconds);
  if (!resource_version.empty()) query += "&resourceVersion=" + url_encode(resource_version);
  std::string auth = impl_->auth_header(config_);
  Response r;
  if (cancel.cancelled()) {
    r.error = "watch cancelled";
    return r;
  }
  std::string partial;  // the start of a line whose end has not arrived yet
  auto sink = [&](std::string_view piece) {
    for (size_t nl; (nl = piece.find('\n')) != std::string_view::npos; piece.remove_prefix(nl + 1)) {
      bool more = true;
      if (partial.empty()) {
        if (nl > 0) more = on_line(piece.substr(0, nl));
      } else {
        partial.append(piece.substr(0, nl));
        more = on_line(partial);
        partial.clear();
      }
      if (!more) return false;
    }
    partial.append(piece);
    return !cancel.cancelled();
  };
  http::Reply reply;
  try {
    reply = impl_->transport.stream(http::Request{"GET", query, "", "", auth}, std::chrono::seconds(timeout_seconds + 30),
                                    cancel.state_->interrupt, sink);
  } catch (const std::exception& e) {  // thrown by on_line
    r.status = 0;
    r.error = e.what();
    return r;
  }
  if (cancel.cancelled()) {
    r.error = "watch cancelled";
    return r;
  }
  r.status = reply.status;
  if (observer_) observer_("WATCH", r.status);
  if (r.status == 0) r.error = std::move(reply.error);
  else if (r.status != 200) r.body = json::parse(reply.body, nullptr, false);
  return r;
}

Response Client::watch_error(std::string_view line) {
  Response r;
  json event = json::parse(line, nullptr, false);
  r.body = event.is_object() ? event.value("object", json::object()) : json::object();
  r.status = r.body.is_object() ? r.body.value("code", 500) : 500;
  return r;
}

bool Client::read_event(std::string_view line, const Prune* prune,
                        const std::function<void(const std::string&, json&)>& on_event, Response& error) {
  json event = parse_pruned(line, prune, PruneRoot::WatchObject);
  if (!event.is_object() || !event.contains("type") || !event["type"].is_string()) return true;
  const std::string& type = event["type"].get_ref<const std::string&>();
  if (type == "ERROR") {  // the object is a Status, read whole; 410 means "re-list"
    error = watch_error(line);
    return false;
  }
  on_event(type, event["object"]);
  return true;
}

Response Client::watch(const std::string& path, const std::string& resource_version, int timeout_seconds,
                       const std::function<void(const std::string&, json&)>& on_event,
                       const Cancellation& cancel, const Prune* prune) {
  Response error;  // an ERROR event's Status
  Response r = watch_lines(
      path, resource_version, timeout_seconds,
      [&](std::string_view line) { return read_event(line, prune, on_event, error); }, cancel);
  return error.status != 0 ? error : r;
}

std::string url_encode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace lockstep::kube
