// A Kubernetes REST client: JSON requests with bearer-token or client-certificate auth over
// TLS, a client-side token-bucket rate limit, and watch streams, on our own HTTP/1.1
// transport (kube/http.hpp, Note [Own HTTP client]).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kube/list_stream.hpp"
#include "kube/prune.hpp"
#include "kube/rest_config.hpp"

namespace lockstep::kube {

struct Response {
  int status = 0;               // HTTP status; 0 when the request never got an answer
  nlohmann::json body;          // parsed JSON body (null if none or not JSON)
  std::string error;            // transport error, when status == 0
  bool refused = false;         // never sent: the write gate said no (status 0)

  bool ok() const { return status >= 200 && status < 300; }
  bool not_found() const { return status == 404; }
  bool conflict() const { return status == 409; }
  bool gone() const { return status == 410; }
  std::string reason() const;   // Status.reason, e.g. AlreadyExists
  std::string message() const;  // Status.message, or the transport error
};

enum class PatchType { Merge, StrategicMerge, Json };

// Ends a watch from another thread, at once: cancel() closes the watch's connection, so a
// read blocked waiting for the next event returns. Copies share one state.
class Cancellation {
 public:
  Cancellation();
  void cancel();
  bool cancelled() const;

 private:
  friend class Client;
  struct State;
  std::shared_ptr<State> state_;
};

// Called for each request with its verb and HTTP status (0: no answer), for metrics.
using RequestObserver = std::function<void(const std::string& verb, int status)>;
// Asked before every write (POST, PUT, PATCH, DELETE): false refuses it without sending
// (Note [Fenced writes] in kube/leader_election.hpp).
using WriteGate = std::function<bool()>;

// Token bucket: `qps` tokens a second, up to `burst` banked. acquire() blocks for a token.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst);
  void acquire();

 private:
  std::mutex mu_;
  double qps_, burst_, tokens_;
  std::chrono::steady_clock::time_point last_;
};

// Note [Metadata answers]
// The API server answers a create, an update or a patch with the whole object it stored: a pod
// of the operator's is 7 KB of JSON (bench/operator/RESULTS.md), which the server encodes and
// the operator decrypts, to read nothing of it (kDiscardBody) or its metadata alone (a status
// write's resourceVersion). Where the prune says so (Prune::all or Prune::metadata_only) a
// POST, PUT or PATCH asks for the metadata alone: Accept `application/json;as=
// PartialObjectMetadata;g=meta.k8s.io;v=v1`, the form informers of metadata use, which the
// server answers with the object's kind PartialObjectMetadata and its metadata only, and an
// error with the usual Status. GETs and DELETEs keep Accept JSON: a list would need the List
// form, and a DELETE may answer with a Status rather than the object. A server that cannot
// answer so says 406 Not Acceptable before it does anything (kube-apiserver negotiates the
// answer's form first): the request is sent again asking for JSON, and the client asks for JSON
// from then on. operator_test's writes all go this way against the real API server;
// lockstep-bench-pod-proto measures a create so.
inline constexpr const char* kMetadataAnswer = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

class Client {
 public:
  explicit Client(RestConfig config);
  ~Client();

  const RestConfig& config() const { return config_; }
  void set_observer(RequestObserver observer) { observer_ = std::move(observer); }
  // Set before any request is made. A refused write answers status 0, `refused` true.
  void set_write_gate(WriteGate gate) { gate_ = std::move(gate); }

  // A prune (Note [Pruned parsing]) leaves subtrees of the answer's object(s) unbuilt;
  // `root` says where they are (a list's items, or the answer itself).
  Response get(const std::string& path, const Prune* prune = nullptr, PruneRoot root = PruneRoot::Document);
  // A list's page, read as it arrives (Note [Streamed lists]): a 200's body into `page`, which
  // hands each item on and keeps the page's metadata; the answer is then ok() when the whole
  // list was read, and status 0 with the reason in `error` when it was not, was cancelled, or no
  // answer came. An error's Status (at most kMaxStatus) is parsed as get() parses it.
  static constexpr size_t kMaxStatus = 1 << 20;
  Response list(const std::string& path, ListStream& page, const Cancellation& cancel);
  // `prune` (optional) applies to a successful answer; errors are always read whole.
  Response create(const std::string& path, const nlohmann::json& body, const Prune* prune = nullptr);
  Response replace(const std::string& path, const nlohmann::json& body);
  Response patch(const std::string& path, const nlohmann::json& body, PatchType type = PatchType::Merge,
                 const Prune* prune = nullptr);
  Response remove(const std::string& path, const nlohmann::json& options = nullptr, const Prune* prune = nullptr);
  // Creates in flight together without a thread each: every request is written, each on a
  // connection of its own, before any answer is read; the responses in order.
  // `prune` applies to each answer (a created object is sent back whole, and is rarely read).
  std::vector<Response> create_all(const std::string& path, const std::vector<nlohmann::json>& bodies,
                                   const Prune* prune = nullptr);
  // The same for deletes, with DeleteOptions per path (for example a UID precondition each;
  // null for none); the responses in order.
  std::vector<Response> remove_all(const std::vector<std::string>& paths, const std::vector<nlohmann::json>& options,
                                   const Prune* prune = nullptr);

  // One watch request: streams events to `on_event(type, object)` until the server ends the
  // stream (after timeout_seconds), `cancel` is cancelled, or an error. Returns the final
  // Response: 200 for a normal end; an ERROR event's Status code (410 when the
  // resourceVersion is too old); status 0 when cancelled or on a transport error. Each
  // event's object is parsed with `prune` (optional) applied.
  Response watch(const std::string& path, const std::string& resource_version, int timeout_seconds,
                 const std::function<void(const std::string& type, nlohmann::json& object)>& on_event,
                 const Cancellation& cancel, const Prune* prune = nullptr);
  // The same watch, each event handed on as its line of text, unparsed; `on_line` returns
  // false to end the watch (then the answer is 200, and the caller knows why it stopped).
  Response watch_lines(const std::string& path, const std::string& resource_version, int timeout_seconds,
                       const std::function<bool(std::string_view line)>& on_line, const Cancellation& cancel);
  // One event's line, parsed with `prune`, to on_event(type, object); an ERROR event's
  // Status goes to `error` instead, and false says the watch ends. A line that is not an
  // event is passed over. (watch() is watch_lines() through this.)
  static bool read_event(std::string_view line, const Prune* prune,
                         const std::function<void(const std::string& type, nlohmann::json& object)>& on_event,
                         Response& error);
  // An ERROR event's line as the watch's final Response: its Status, and the Status's code
  // as the status (410 when the resourceVersion is too old).
  static Response watch_error(std::string_view line);

  // Connections opened so far (a pooled connection is reused, not counted again).
  size_t connections_opened() const;

 private:
  struct Impl;
  Response request(const std::string& verb, const std::string& path, const nlohmann::json* body,
                   const char* content_type, const Prune* prune = nullptr, PruneRoot root = PruneRoot::Document);
  // Several requests of one verb in flight together; `bodies[i]` null for none.
  std::vector<Response> request_all(const std::string& verb, const std::vector<std::string>& paths,
                                    const std::vector<const nlohmann::json*>& bodies, const Prune* prune);
  RestConfig config_;
  RateLimiter limiter_;
  RequestObserver observer_;
  WriteGate gate_;
  std::unique_ptr<Impl> impl_;
};

// Query-string escaping for label selectors and the like: every byte but RFC 3986's
// unreserved characters as %XX.
std::string url_encode(const std::string& s);

}  // namespace lockstep::kube
