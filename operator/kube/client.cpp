#include "kube/client.hpp"

#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <openssl/ssl.h>
#include <pplx/threadpool.h>

#include <stdexcept>
#include <thread>

namespace http = web::http;
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

namespace {

// Note [System CA bundle]
// cpprestsdk builds a fresh TLS context for every connection and loads the system CA bundle
// into it (set_default_verify_paths) before our callback runs: ~140 certificates through
// OpenSSL 3's decoders, about 20 ms of CPU and half a megabyte per connection
// (bench/operator). With the cluster's CA given, the API server must be verified by that CA
// alone, as client-go does, so the callback swaps in a store that holds only it: the
// system roots are no longer trusted for the cluster, and their memory is freed at once.
// The load's CPU is still spent, once per new connection (pooled connections are reused).
// Nothing here touches the process environment (SSL_CERT_FILE), which other TLS users of
// a process may rely on; lockstep-operator, whose only TLS peer is the API server, points
// it at an empty file itself when the CA is given (operator/main.cpp).
void trust_only(boost::asio::ssl::context& ctx, const std::string& ca_pem) {
  X509_STORE* store = X509_STORE_new();
  if (!store) throw std::runtime_error("cannot allocate an X509 store for the cluster CA");
  SSL_CTX_set_cert_store(ctx.native_handle(), store);  // frees the system bundle's store
  ctx.add_certificate_authority(boost::asio::buffer(ca_pem.data(), ca_pem.size()));
}

}  // namespace

struct Cancellation::State {
  pplx::cancellation_token_source source;
};

Cancellation::Cancellation() : state_(std::make_shared<State>()) {}
void Cancellation::cancel() { state_->source.cancel(); }
bool Cancellation::cancelled() const { return state_->source.get_token().is_canceled(); }

struct Client::Impl {
  http::client::http_client_config base_config;
  std::unique_ptr<http::client::http_client> client;
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
};

Client::Client(RestConfig config) : config_(std::move(config)), limiter_(config_.qps, config_.burst), impl_(new Impl) {
  auto& cfg = impl_->base_config;
  cfg.set_timeout(std::chrono::seconds(30));
  cfg.set_validate_certificates(!config_.insecure_skip_tls_verify);
  cfg.set_proxy(web::web_proxy(web::web_proxy::disabled));
  std::string ca = config_.ca_pem, cert = config_.client_cert_pem, key = config_.client_key_pem;
  cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
    if (!ca.empty()) trust_only(ctx, ca);
    if (!cert.empty()) {
      ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()));
      ctx.use_private_key(boost::asio::buffer(key.data(), key.size()), boost::asio::ssl::context::pem);
    }
  });
  impl_->client = std::make_unique<http::client::http_client>(utility::conversions::to_string_t(config_.server), cfg);
}

Client::~Client() = default;

struct Client::Pending {
  std::string verb;
  const Prune* prune = nullptr;
  PruneRoot root = PruneRoot::Document;
  pplx::task<std::pair<int, std::string>> task;
};

std::shared_ptr<Client::Pending> Client::start(const std::string& verb, const std::string& path, const json* body,
                                               const std::string& content_type, const Prune* prune, PruneRoot root) {
  limiter_.acquire();
  http::http_request req(verb);
  req.set_request_uri(path);
  req.headers().add("Accept", "application/json");
  std::string auth = impl_->auth_header(config_);
  if (!auth.empty()) req.headers().add("Authorization", auth);
  if (body && !body->is_null()) req.set_body(body->dump(), content_type);
  auto p = std::make_shared<Pending>();
  p->verb = verb;
  p->prune = prune;
  p->root = root;
  p->task = impl_->client->request(req).then([](http::http_response resp) {
    int status = resp.status_code();
    return resp.extract_utf8string(true).then([status](std::string text) { return std::make_pair(status, text); });
  });
  return p;
}

Response Client::finish(Pending& p) {
  Response r;
  try {
    auto [status, text] = p.task.get();
    r.status = status;
    // An error's Status is read whole: its message and reason are what the caller reports.
    r.body = parse_pruned(text, r.ok() ? p.prune : nullptr, p.root);
    if (r.body.is_discarded()) r.body = nullptr;
  } catch (const std::exception& e) {
    r.status = 0;
    r.error = e.what();
  }
  if (observer_) observer_(p.verb, r.status);
  return r;
}

Response Client::request(const std::string& verb, const std::string& path, const json* body,
                         const std::string& content_type, const Prune* prune, PruneRoot root) {
  auto p = start(verb, path, body, content_type, prune, root);
  return finish(*p);
}

std::vector<Response> Client::finish_all(const std::vector<std::shared_ptr<Pending>>& pending) {
  std::vector<Response> out;
  out.reserve(pending.size());
  for (const auto& p : pending) out.push_back(finish(*p));
  return out;
}

std::vector<Response> Client::create_all(const std::string& path, const std::vector<json>& bodies,
                                         const Prune* prune) {
  std::vector<std::shared_ptr<Pending>> pending;
  pending.reserve(bodies.size());
  for (const auto& b : bodies) pending.push_back(start("POST", path, &b, "application/json", prune));
  return finish_all(pending);
}

std::vector<Response> Client::remove_all(const std::vector<std::string>& paths, const std::vector<json>& options,
                                         const Prune* prune) {
  std::vector<std::shared_ptr<Pending>> pending;
  pending.reserve(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const json* o = i < options.size() && !options[i].is_null() ? &options[i] : nullptr;
    pending.push_back(start("DELETE", paths[i], o, "application/json", prune));
  }
  return finish_all(pending);
}

Response Client::get(const std::string& path, const Prune* prune, PruneRoot root) {
  return request("GET", path, nullptr, "", prune, root);
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
// A watch is one long response of newline-separated JSON events. cpprestsdk's read_line
// takes it a byte at a time through its task machinery, which at 10,000 pods cost more CPU
// than parsing the events (bench/operator/RESULTS.md). Here the stream is read in chunks of
// whatever has arrived (waiting only for the first byte of the next one) and split into
// lines in place; each complete line is parsed (pruned) and handed on.
Response Client::watch(const std::string& path, const std::string& resource_version, int timeout_seconds,
                       const std::function<void(const std::string&, json&)>& on_event,
                       const Cancellation& cancel, const Prune* prune) {
  limiter_.acquire();
  std::string query = path + (path.find('?') == std::string::npos ? "?" : "&") +
                      "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout_seconds);
  if (!resource_version.empty()) query += "&resourceVersion=" + url_encode(resource_version);
  auto cfg = impl_->base_config;
  cfg.set_timeout(std::chrono::seconds(timeout_seconds + 30));
  http::client::http_client client(utility::conversions::to_string_t(config_.server), cfg);
  http::http_request req(http::methods::GET);
  req.set_request_uri(query);
  std::string auth = impl_->auth_header(config_);
  if (!auth.empty()) req.headers().add("Authorization", auth);
  Response r;
  if (cancel.cancelled()) {
    r.error = "watch cancelled";
    return r;
  }
  try {
    // The token closes the connection when cancelled, ending a blocked read below.
    auto resp = client.request(req, cancel.state_->source.get_token()).get();
    r.status = resp.status_code();
    if (r.status != 200) {
      r.body = json::parse(resp.extract_utf8string(true).get(), nullptr, false);
      if (observer_) observer_("WATCH", r.status);
      return r;
    }
    if (observer_) observer_("WATCH", r.status);
    auto buf = resp.body().streambuf();
    using traits = concurrency::streams::streambuf<uint8_t>::traits;
    std::string data;     // bytes read and not yet handed on: at most a partial line
    std::vector<uint8_t> chunk(64 * 1024);
    while (!cancel.cancelled()) {
      size_t avail = buf.in_avail();
      if (avail == 0) {  // wait for the next byte (or the end), then take what came with it
        auto c = buf.bumpc().get();
        if (c == traits::eof()) break;
        data.push_back(static_cast<char>(c));
        avail = buf.in_avail();
      }
      if (avail > 0) {
        size_t n = buf.getn(chunk.data(), std::min(avail, chunk.size())).get();
        data.append(reinterpret_cast<const char*>(chunk.data()), n);
      }
      size_t start = 0;
      for (size_t nl; (nl = data.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(data.data() + start, nl - start);
        if (line.empty()) continue;
        json event = parse_pruned(line, prune, PruneRoot::WatchObject);
        if (!event.is_object() || !event.contains("type") || !event["type"].is_string()) continue;
        const std::string& type = event["type"].get_ref<const std::string&>();
        if (type == "ERROR") {  // the object is a Status, read whole; 410 means "re-list"
          r.body = json::parse(line, nullptr, false).value("object", json::object());
          r.status = r.body.value("code", 500);
          return r;
        }
        on_event(type, event["object"]);
      }
      data.erase(0, start);
    }
  } catch (const std::exception& e) {
    r.status = 0;
    r.error = cancel.cancelled() ? "watch cancelled" : e.what();
  }
  if (cancel.cancelled() && r.status == 200) {
    r.status = 0;
    r.error = "watch cancelled";
  }
  return r;
}

void init_http_threads(size_t threads) { crossplat::threadpool::initialize_with_threads(threads); }

std::string url_encode(const std::string& s) {
  return utility::conversions::to_utf8string(web::uri::encode_data_string(utility::conversions::to_string_t(s)));
}

}  // namespace lockstep::kube
