#include "kube/leader_election.hpp"

#include <ctime>
#include <thread>

#include "kube/resource.hpp"
#include "lockstep/log.hpp"
#include "lockstep/time_text.hpp"

using json = nlohmann::json;

namespace lockstep::kube {
namespace {

std::string micro_time() {  // metav1.MicroTime: RFC 3339 with microseconds
  return time_text::rfc3339(std::chrono::system_clock::now(), 6);
}

bool sleep_unless(const std::atomic<bool>& stop, std::chrono::milliseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (stop) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !stop;
}

}  // namespace

LeaderElector::LeaderElector(Client& client, Options options) : client_(client), options_(std::move(options)) {}

LeaderElector::~LeaderElector() { stop_renewing(); }

LeaderElector::Attempt LeaderElector::try_acquire_or_renew() {
  const auto& res = resources::kLeases;
  std::string now = micro_time();
  int duration_s = static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(options_.lease_duration).count());
  Response r = client_.get(res.path(options_.ns, options_.name));
  if (r.not_found()) {
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                  {"spec",
                   {{"holderIdentity", options_.identity}, {"leaseDurationSeconds", duration_s},
                    {"acquireTime", now}, {"renewTime", now}, {"leaseTransitions", 0}}}};
    return client_.create(res.path(options_.ns), lease).ok() ? Attempt::Held : Attempt::Failed;
  }
  if (!r.ok()) {
    LOCKSTEP_LOG(Debug, "leader-election", "reading Lease " << options_.ns << "/" << options_.name << ": " << r.message());
    return Attempt::Failed;
  }
  json lease = r.body;
  json& spec = lease["spec"];
  std::string holder = spec.value("holderIdentity", "");
  std::string record = spec.dump();
  auto local_now = std::chrono::steady_clock::now();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = local_now;
  }
  bool mine = holder == options_.identity;
  int their_duration = spec.value("leaseDurationSeconds", duration_s);
  bool expired = holder.empty() || local_now >= observed_at_ + std::chrono::seconds(their_duration);
  if (!mine && !expired) {
    LOCKSTEP_LOG(Debug, "leader-election", "Lease held by " << holder);
    return Attempt::Taken;
  }
  if (!mine) {
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
    spec["acquireTime"] = now;
  }
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = now;
  // PUT carries metadata.resourceVersion: a concurrent writer makes this a 409, not a tie.
  Response u = client_.replace(res.path(options_.ns, options_.name), lease);
  if (!u.ok()) {
    LOCKSTEP_LOG(Debug, "leader-election", "writing Lease " << options_.ns << "/" << options_.name << ": " << u.message());
    return Attempt::Failed;
  }
  observed_record_ = u.body["spec"].dump();
  observed_at_ = std::chrono::steady_clock::now();
  return Attempt::Held;
}

bool LeaderElector::acquire(const std::atomic<bool>& stop) {
  LOCKSTEP_LOG(Info, "leader-election", "waiting to lead via Lease " << options_.ns << "/" << options_.name
                                                                      << " as " << options_.identity);
  while (!stop) {
    auto start = std::chrono::steady_clock::now();
    if (try_acquire_or_renew() == Attempt::Held) {
      valid_until_ = (start + options_.renew_deadline).time_since_epoch().count();
      LOCKSTEP_LOG(Info, "leader-election", "became leader (" << options_.identity << ")");
      renewer_ = std::thread([this, &stop] { renew_loop(stop); });
      return true;
    }
    if (!sleep_unless(stop, options_.retry_period)) break;
  }
  return false;
}

// See Note [Fenced writes]: a renewal counts from when it was sent, not from when its answer came.
void LeaderElector::renew_loop(const std::atomic<bool>& stop) {
  while (!stop_renewing_ && sleep_unless(stop, options_.retry_period) && !stop_renewing_) {
    auto start = std::chrono::steady_clock::now();
    Attempt a = try_acquire_or_renew();
    if (a == Attempt::Taken) {
      lost_ = true;
      LOCKSTEP_LOG(Error, "leader-election", "lost the lease: another replica holds it");
      return;
    }
    if (!leading()) {  // a renewal that ends after the deadline does not reopen the gate
      lost_ = true;
      LOCKSTEP_LOG(Error, "leader-election", "lost the lease: no renewal within the renew deadline ("
                                                 << options_.renew_deadline.count() << " ms)");
      return;
    }
    if (a == Attempt::Held) valid_until_ = (start + options_.renew_deadline).time_since_epoch().count();
  }
}

bool LeaderElector::leading() const {
  return !lost_ && std::chrono::steady_clock::now().time_since_epoch().count() < valid_until_.load();
}

bool LeaderElector::wait_while_leading(const std::atomic<bool>& stop) const {
  while (!stop) {
    if (!leading()) {
      if (!stop) LOCKSTEP_LOG(Error, "leader-election", "no longer leading: every write is refused from now on");
      return stop;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void LeaderElector::stop_renewing() {
  stop_renewing_ = true;
  if (renewer_.joinable()) renewer_.join();
}

void LeaderElector::release() {
  stop_renewing();
  const auto& res = resources::kLeases;
  Response r = client_.get(res.path(options_.ns, options_.name));
  if (!r.ok() || r.body["spec"].value("holderIdentity", "") != options_.identity) return;
  json lease = r.body;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = micro_time();
  if (client_.replace(res.path(options_.ns, options_.name), lease).ok())
    LOCKSTEP_LOG(Info, "leader-election", "released the lease");
}

}  // namespace lockstep::kube
