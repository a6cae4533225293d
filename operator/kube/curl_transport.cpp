#include "kube/curl_transport.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace lockstep::kube::http {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("curl_global_init failed");
  });
}

}  // namespace

// One request in flight: its easy handle, what it sends, and what has come back so far.
struct Call {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  const Request* request = nullptr;
  const Sink* sink = nullptr;           // a stream's: a 200's body goes here
  Interrupt* interrupt = nullptr;       // a stream's
  bool discard_ok_body = false;
  bool stopped_by_sink = false;
  bool done = false;                    // under Impl::mu
  Reply reply;
  char error[CURL_ERROR_SIZE] = {0};
};

struct CurlTransport::Impl {
  std::string base;  // scheme://host[:port][/prefix]
  bool tls = true;
  TlsConfig tls_config;
  std::chrono::milliseconds timeout;
  std::string user_agent;
  CURLM* multi = nullptr;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Call*> pending;  // under mu: handed over, not yet added to the multi
  std::vector<Call*> active;   // the loop thread's
  bool stop = false;           // under mu
  std::atomic<size_t> connects{0};
  std::mutex easy_mu;
  std::vector<CURL*> spare;    // easy handles to reuse (their connections stay in the multi's cache)

  static size_t on_data(char* data, size_t size, size_t n, void* user) {
    auto* call = static_cast<Call*>(user);
    const size_t len = size * n;
    long code = 0;
    curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &code);
    if (call->sink && code == 200) {
      if (!(*call->sink)(std::string_view(data, len))) {
        call->stopped_by_sink = true;
        return 0;  // curl ends the transfer (CURLE_WRITE_ERROR), which is the stream's end
      }
      return len;
    }
    if (call->discard_ok_body && code >= 200 && code < 300) return len;
    call->reply.body.append(data, len);
    return len;
  }

  CURL* take_easy() {
    {
      std::lock_guard<std::mutex> lock(easy_mu);
      if (!spare.empty()) {
        CURL* e = spare.back();
        spare.pop_back();
        curl_easy_reset(e);
        return e;
      }
    }
    CURL* e = curl_easy_init();
    if (!e) throw std::runtime_error("curl_easy_init failed");
    return e;
  }

  void give_back(CURL* e) {
    std::lock_guard<std::mutex> lock(easy_mu);
    if (spare.size() < 64) spare.push_back(e);
    else curl_easy_cleanup(e);
  }

  // The call's easy handle, set up for its request; `read_timeout` bounds each wait for data.
  void prepare(Call& c, std::chrono::seconds read_timeout) {
    const Request& r = *c.request;
    c.easy = take_easy();
    CURL* e = c.easy;
    std::string url = base;
    url.append(r.target);
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, &c);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c.error);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c);
    curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent.c_str());
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");  // every encoding this libcurl decodes
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::max<long long>(1, read_timeout.count())));
    if (tls) {
      curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
      curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, tls_config.insecure_skip_verify ? 0L : 1L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, tls_config.insecure_skip_verify ? 0L : 2L);
      if (!tls_config.ca_pem.empty()) {
        curl_blob ca{const_cast<char*>(tls_config.ca_pem.data()), tls_config.ca_pem.size(), CURL_BLOB_NOCOPY};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
      }
      if (!tls_config.cert_pem.empty()) {
        curl_blob cert{const_cast<char*>(tls_config.cert_pem.data()), tls_config.cert_pem.size(), CURL_BLOB_NOCOPY};
        curl_blob key{const_cast<char*>(tls_config.key_pem.data()), tls_config.key_pem.size(), CURL_BLOB_NOCOPY};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
      }
    }
    c.headers = curl_slist_append(c.headers, "Accept: application/json");
    c.headers = curl_slist_append(c.headers, "Expect:");  // no 100-continue round trip for a large body
    if (!r.authorization.empty())
      c.headers = curl_slist_append(c.headers, ("Authorization: " + std::string(r.authorization)).c_str());
    if (!r.content_type.empty())
      c.headers = curl_slist_append(c.headers, ("Content-Type: " + std::string(r.content_type)).c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c.headers);
    if (r.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      if (r.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, std::string(r.method).c_str());
      if (!r.body.empty() || r.method == "POST") {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());  // the caller's, alive until the call ends
      }
    }
    c.discard_ok_body = r.discard_ok_body;
  }

  // Runs the calls and returns when every one has ended.
  void run(const std::vector<Call*>& calls) {
    std::unique_lock<std::mutex> lock(mu);
    for (Call* c : calls) pending.push_back(c);
    curl_multi_wakeup(multi);
    cv.wait(lock, [&] { return std::all_of(calls.begin(), calls.end(), [](Call* c) { return c->done; }); });
  }

  void end(Call* c) {  // on the loop thread: the call is over; its caller wakes
    curl_multi_remove_handle(multi, c->easy);
    long n = 0;
    if (curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK) connects += static_cast<size_t>(n);
    curl_slist_free_all(c->headers);
    c->headers = nullptr;
    give_back(c->easy);
    c->easy = nullptr;
    active.erase(std::remove(active.begin(), active.end(), c), active.end());
    std::lock_guard<std::mutex> lock(mu);
    c->done = true;
    cv.notify_all();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      for (Call* c : pending) {
        curl_multi_add_handle(multi, c->easy);
        active.push_back(c);
      }
      pending.clear();
      lock.unlock();
      std::vector<Call*> interrupted;
      for (Call* c : active)
        if (c->interrupt && c->interrupt->interrupted()) interrupted.push_back(c);
      for (Call* c : interrupted) {
        c->reply.status = 0;
        c->reply.error = "interrupted";
        end(c);
      }
      int running = 0;
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Call* c = nullptr;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&c));
        long code = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        if (msg->data.result == CURLE_OK || (msg->data.result == CURLE_WRITE_ERROR && c->stopped_by_sink)) {
          c->reply.status = static_cast<int>(code);
        } else {
          c->reply.status = 0;
          c->reply.error = std::string(curl_easy_strerror(msg->data.result)) + (c->error[0] ? std::string(": ") + c->error : "");
        }
        end(c);
      }
      curl_multi_poll(multi, nullptr, 0, 50, nullptr);  // woken by a new call, else an interrupt's 50 ms
      lock.lock();
    }
  }
};

CurlTransport::CurlTransport(const std::string& server, const TlsConfig& tls, std::chrono::milliseconds timeout,
                             std::string user_agent)
    : impl_(std::make_unique<Impl>()) {
  global_init();
  size_t sep = server.find("://");
  if (sep == std::string::npos) throw std::invalid_argument("server '" + server + "': no scheme; expected https://HOST[:PORT][/PATH]");
  std::string scheme = server.substr(0, sep);
  if (scheme != "https" && scheme != "http")
    throw std::invalid_argument("server '" + server + "': scheme '" + scheme + "' is neither https nor http");
  impl_->tls = scheme == "https";
  impl_->base = server;
  while (!impl_->base.empty() && impl_->base.back() == '/') impl_->base.pop_back();
  impl_->tls_config = tls;
  impl_->timeout = timeout;
  impl_->user_agent = std::move(user_agent);
  impl_->multi = curl_multi_init();
  if (!impl_->multi) throw std::runtime_error("curl_multi_init failed");
  curl_multi_setopt(impl_->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  impl_->thread = std::thread([this] { impl_->loop(); });
}

CurlTransport::~CurlTransport() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  curl_multi_wakeup(impl_->multi);
  impl_->thread.join();
  for (CURL* e : impl_->spare) curl_easy_cleanup(e);
  curl_multi_cleanup(impl_->multi);
}

Reply CurlTransport::round_trip(const Request& request) {
  Call c;
  c.request = &request;
  impl_->prepare(c, std::chrono::duration_cast<std::chrono::seconds>(impl_->timeout));
  impl_->run({&c});
  return std::move(c.reply);
}

std::vector<Reply> CurlTransport::round_trip_all(const std::vector<Request>& requests,
                                                 const std::function<void(size_t)>& before_send) {
  std::vector<Call> calls(requests.size());
  std::vector<Call*> ptrs;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (before_send) before_send(i);
    calls[i].request = &requests[i];
    impl_->prepare(calls[i], std::chrono::duration_cast<std::chrono::seconds>(impl_->timeout));
    ptrs.push_back(&calls[i]);
  }
  impl_->run(ptrs);
  std::vector<Reply> out;
  out.reserve(calls.size());
  for (auto& c : calls) out.push_back(std::move(c.reply));
  return out;
}

Reply CurlTransport::stream(const Request& request, std::chrono::seconds timeout, Interrupt& interrupt, const Sink& sink) {
  if (interrupt.interrupted()) return Reply{0, "", "interrupted"};
  Call c;
  c.request = &request;
  c.sink = &sink;
  c.interrupt = &interrupt;
  impl_->prepare(c, timeout);
  impl_->run({&c});
  return std::move(c.reply);
}

size_t CurlTransport::connections_opened() const { return impl_->connects; }

}  // namespace lockstep::kube::http
