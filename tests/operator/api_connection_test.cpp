// operator_test, the operator's link to the apiserver: health and metrics, an apiserver
// restart, resync, the client's CA and environment, informers.
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "kube/informer.hpp"
#include "operator_fixture.hpp"

TEST_F(OperatorTest, ServesHealthReadinessAndMetrics) {
  EXPECT_NE(operator_->http("/healthz").find("ok\n200"), std::string::npos);
  EXPECT_NE(operator_->http("/readyz").find("ok\n200"), std::string::npos);
  std::string m = operator_->http("/metrics");
  for (const char* series : {"lockstep_operator_reconcile_duration_seconds_bucket", "lockstep_operator_reconcile_errors_total",
                             "lockstep_operator_workqueue_depth", "lockstep_operator_api_requests_total{code=\"201\",verb=\"POST\"}",
                             "lockstep_operator_trainingjobs{phase=\"Running\"}", "lockstep_operator_pods_created_total",
                             "lockstep_operator_gang_restarts_total", "lockstep_operator_leader 1",
                             "lockstep_operator_node_watch 1"})
    EXPECT_NE(m.find(series), std::string::npos) << series << " missing from:\n" << m.substr(0, 3000);
}

TEST_F(OperatorTest, SurvivesAnApiserverRestartMidWatch) {
  // The suite's operator's lease (renew deadline 240 s) outlasts an apiserver restart, as the
  // default one (10 s) does in a cluster.
  create_job("before", 1);
  ASSERT_TRUE(wait_pods("before", 1));
  control_plane()->restart_apiserver();
  // The watches reconnect: a job created after the restart is acted on, and pod updates of
  // the earlier job are still seen.
  create_job("after", 2);
  EXPECT_TRUE(wait_pods("after", 2, 0)) << operator_->log().substr(0, 4000);
  set_pod("before-0", "Succeeded", 0);
  EXPECT_TRUE(wait_phase("before", "Succeeded"));
}

TEST_F(OperatorTest, ResyncReconcilesAnIdleJobWithoutWritingIt) {
  Paused paused(operator_);
  OperatorProcess op(control_plane()->kubeconfig(),
                     {"--namespace", ns_, "--leader-elect=false", "--resync-period=1s"});
  ASSERT_TRUE(op.wait_log("caches synced")) << op.log();
  create_job("idle", 1);
  ASSERT_TRUE(wait_pods("idle", 1));
  ASSERT_TRUE(wait_phase("idle", "Pending"));
  std::this_thread::sleep_for(1500ms);  // settled: no event will come for this job now
  std::string rv = job("idle")["metadata"]["resourceVersion"];
  const std::string series = "lockstep_operator_reconcile_duration_seconds_count";
  double before = metric(op.http("/metrics"), series);
  ASSERT_GE(before, 1) << op.http("/metrics");
  std::this_thread::sleep_for(3500ms);
  double after = metric(op.http("/metrics"), series);
  EXPECT_GE(after - before, 2) << "no periodic reconcile of an idle job in 3.5 s with --resync-period=1s";
  EXPECT_EQ(job("idle")["metadata"]["resourceVersion"], rv) << "a resync wrote the unchanged job";
}

// The process environment, as NAME=value lines.
std::set<std::string> environment() {
  std::set<std::string> out;
  for (char** e = environ; *e; ++e) out.insert(*e);
  return out;
}
// As it was before main(), before the suite's first Client.
const std::set<std::string> kStartEnvironment = environment();

TEST_F(OperatorTest, AClientTrustsItsClusterCaAloneAndLeavesTheEnvironmentAlone) {
  EXPECT_EQ(environment(), kStartEnvironment) << "the suite's Client changed the process environment";
  RestConfig config = RestConfig::from_kubeconfig(control_plane()->kubeconfig());
  ASSERT_FALSE(config.ca_pem.empty());
  {
    Client client(config);
    auto r = client.get("/version");
    EXPECT_TRUE(r.ok()) << "TLS with the cluster CA: " << r.message();
  }
  EXPECT_EQ(environment(), kStartEnvironment) << "constructing a Client changed the process environment";

  // Who the API server takes each user for: the token's, and the client certificate's
  // (kubeconfig context lockstep-test-cert), both through our TLS transport.
  auto whoami = [](const RestConfig& c) {
    Client client(c);
    auto r = client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}});
    EXPECT_TRUE(r.ok()) << r.message();
    return r.body.value("/status/userInfo"_json_pointer, nlohmann::json::object());
  };
  EXPECT_EQ(whoami(config).value("username", ""), "lockstep-admin");
  RestConfig cert = RestConfig::from_kubeconfig(control_plane()->kubeconfig(), "lockstep-test-cert");
  ASSERT_FALSE(cert.client_cert_pem.empty());
  auto cert_user = whoami(cert);
  EXPECT_NE(cert_user.value("groups", nlohmann::json::array()).dump().find("system:masters"), std::string::npos)
      << cert_user.dump();
  RestConfig bad_token = config;
  bad_token.token = "not-the-token";
  EXPECT_EQ(Client(bad_token).get("/api/v1/namespaces").status, 401);

  // Another CA: the API server's certificate must not verify.
  std::string dir = ::testing::TempDir() + "/other-ca-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto gen = lockstep::run_capture({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                                    "-subj", "/CN=not-the-cluster-ca", "-keyout", dir + "/ca.key", "-out", dir + "/ca.crt"});
  ASSERT_TRUE(gen.status.success()) << gen.output;
  RestConfig wrong = config;
  wrong.ca_pem = lockstep::test::read_text(dir + "/ca.crt");
  Client other(wrong);
  auto r = other.get("/version");
  EXPECT_EQ(r.status, 0) << "verified against a CA that did not sign the API server's certificate";
  EXPECT_FALSE(r.error.empty());
  std::filesystem::remove_all(dir);
}

TEST_F(OperatorTest, AnInformerDestroyedMidWatchEndsItsThreadAtOnce) {
  // The watch is open for 240 s (the informer's default); destroying the informer must
  // cancel it and join its thread rather than leave a detached thread using the object.
  auto cycle = [&] {
    lockstep::kube::InformerBase::Options options;
    options.ns = ns_;
    using PodNames = lockstep::kube::Informer<std::string>;
    auto inf = std::make_unique<PodNames>(*client_, res::kPods, options,
                                          PodNames::Typed{[](nlohmann::json& p) { return lockstep::kube::object_key(p); }, {}, {}, {}},
                                          nullptr);
    inf->start();
    ASSERT_TRUE(eventually([&] { return inf->synced(); }, 10s));
    std::this_thread::sleep_for(300ms);  // blocked in the watch's read by now
    auto t0 = std::chrono::steady_clock::now();
    inf.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the destructor waited for the watch to end by itself";
  };
  cycle();  // warm-up: the HTTP client's thread pool starts on first use
  long before = lockstep::test::proc_status(0, "Threads");
  for (int i = 0; i < 5; ++i) cycle();
  EXPECT_EQ(lockstep::test::proc_status(0, "Threads"), before) << "an informer's thread outlived it";
}

TEST_F(OperatorTest, AnInformerReadsEventsOfAnySizeAndNeverParsesWhatItPrunes) {
  // Note [Reading a watch] and [Pruned parsing]: events are read in chunks of whatever has
  // arrived, so one larger than a chunk (64 KiB) spans reads; a small one after it must come
  // out whole and at once. The conversion sees the object without its pruned parts.
  struct Seen {
    std::string name, note;
    bool spec = false, managed_fields = false;
    size_t note_size = 0;
  };
  using Pods = lockstep::kube::Informer<Seen>;
  lockstep::kube::InformerBase::Options options;
  options.ns = ns_;
  options.prune = {{{"spec"}, {"metadata", "managedFields"}}};
  std::mutex mu;
  std::map<std::string, Seen> seen;
  auto convert = [](nlohmann::json& p) {
    Seen s;
    s.name = p["metadata"].value("name", "");
    s.spec = p.contains("spec");
    s.managed_fields = p["metadata"].contains("managedFields");
    s.note = p["metadata"].value("annotations", json::object()).value("note", "");
    s.note_size = s.note.size();
    s.note = s.note.substr(0, 8) + s.note.substr(s.note.size() > 8 ? s.note.size() - 8 : 0);
    return s;
  };
  auto pods = std::make_unique<Pods>(*client_, res::kPods, options, Pods::Typed{convert, {}, {}, {}},
                                     [&](const Pods::Ptr&, const Pods::Ptr& now) {
                                       std::lock_guard<std::mutex> lock(mu);
                                       if (now) seen[now->name] = *now;
                                     });
  pods->start();
  ASSERT_TRUE(eventually([&] { return pods->synced(); }, 10s));
  auto make = [&](const std::string& name, size_t note_size) {
    std::string note(note_size, 'n');
    note.front() = '<';
    note.back() = '>';
    json pod = {{"apiVersion", "v1"}, {"kind", "Pod"},
                {"metadata", {{"name", name}, {"annotations", {{"note", note}}}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
    auto r = client_->create(res::kPods.path(ns_), pod);
    ASSERT_TRUE(r.ok()) << r.message();
  };
  make("big", 200 * 1024);  // one event of three chunks and more
  make("small", 10);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.count("big") && seen.count("small");
  }, 10s));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen["big"].note_size, 200u * 1024);
    EXPECT_EQ(seen["big"].note, "<nnnnnnnnnnnnnn>");  // its first and last 8 bytes
    EXPECT_EQ(seen["small"].note_size, 10u);
    for (const auto& name : {"big", "small"}) {
      EXPECT_FALSE(seen[name].spec) << name << ": the pruned spec was parsed";
      EXPECT_FALSE(seen[name].managed_fields) << name << ": the pruned managedFields were parsed";
    }
  }
  // A list is pruned the same way: a fresh informer fills from a list of these two.
  std::map<std::string, Seen> listed;
  auto again = std::make_unique<Pods>(*client_, res::kPods, options, Pods::Typed{convert, {}, {}, {}},
                                      [&](const Pods::Ptr&, const Pods::Ptr& now) {
                                        std::lock_guard<std::mutex> lock(mu);
                                        if (now) listed[now->name] = *now;
                                      });
  again->start();
  ASSERT_TRUE(eventually([&] { return again->synced(); }, 10s));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["big"].note_size, 200u * 1024);
  EXPECT_FALSE(listed["big"].spec);
  EXPECT_FALSE(listed["big"].managed_fields);
  EXPECT_EQ(again->get(ns_, "small")->name, "small");
}

// An informer's secondary index (the pods of a job, by their job-name label) follows each object
// through a relabel and a delete, in key order, from the watch and from a fresh informer's list;
// its entries point at the cache's own keys (Informer::index_), so an object erased before its
// entry would leave one dangling.
TEST_F(OperatorTest, AnInformersIndexFollowsRelabelsAndDeletes) {
  struct Labelled {
    std::string name, group;
  };
  using Pods = lockstep::kube::Informer<Labelled>;
  lockstep::kube::InformerBase::Options options;
  options.ns = ns_;
  auto typed = [] {
    return Pods::Typed{[](nlohmann::json& p) {
                         return Labelled{p["metadata"].value("name", ""),
                                         p["metadata"].value("labels", json::object()).value("group", "")};
                       },
                       [](const Labelled& l) { return l.group; }, {}, {}};
  };
  auto names = [](const std::vector<Pods::Ptr>& pods) {
    std::vector<std::string> out;
    for (const auto& p : pods) out.push_back(p->name);
    return out;
  };
  using V = std::vector<std::string>;
  auto pods = std::make_unique<Pods>(*client_, res::kPods, options, typed(), nullptr);
  pods->start();
  ASSERT_TRUE(eventually([&] { return pods->synced(); }, 10s));
  for (const auto& [name, group] : std::vector<std::pair<std::string, std::string>>{
           {"ix-c", "a"}, {"ix-a", "a"}, {"ix-b", "a"}, {"ix-d", "b"}}) {
    auto r = client_->create(res::kPods.path(ns_),
                             json{{"apiVersion", "v1"}, {"kind", "Pod"},
                                  {"metadata", {{"name", name}, {"labels", {{"group", group}}}}},
                                  {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}});
    ASSERT_TRUE(r.ok()) << r.message();
  }
  // Both groups awaited: "ix-d", created last, may reach the watch after the other three.
  ASSERT_TRUE(eventually([&] {
    return names(pods->by_index("a")) == V{"ix-a", "ix-b", "ix-c"} && names(pods->by_index("b")) == V{"ix-d"};
  }, 10s)) << testing::PrintToString(names(pods->by_index("a"))) << " "
             << testing::PrintToString(names(pods->by_index("b")));
  auto relabel = client_->patch(res::kPods.path(ns_, "ix-b"), {{"metadata", {{"labels", {{"group", "b"}}}}}});
  ASSERT_TRUE(relabel.ok()) << relabel.message();
  ASSERT_TRUE(eventually([&] { return names(pods->by_index("b")) == V{"ix-b", "ix-d"}; }, 10s))
      << testing::PrintToString(names(pods->by_index("b")));
  EXPECT_EQ(names(pods->by_index("a")), (V{"ix-a", "ix-c"}));
  for (const auto& name : {"ix-a", "ix-c"}) {
    auto gone = client_->remove(res::kPods.path(ns_, name), json{{"gracePeriodSeconds", 0}});
    ASSERT_TRUE(gone.ok()) << gone.message();
  }
  ASSERT_TRUE(eventually([&] { return pods->by_index("a").empty() && pods->size() == 2; }, 10s))
      << testing::PrintToString(names(pods->by_index("a")));
  EXPECT_EQ(names(pods->by_index("b")), (V{"ix-b", "ix-d"}));
  // A fresh informer fills its index from the list.
  auto listed = std::make_unique<Pods>(*client_, res::kPods, options, typed(), nullptr);
  listed->start();
  ASSERT_TRUE(eventually([&] { return listed->synced(); }, 10s));
  EXPECT_EQ(names(listed->by_index("b")), (V{"ix-b", "ix-d"}));
  EXPECT_TRUE(listed->by_index("a").empty());
}

// See Note [Metadata answers]: a write whose answer the prune reads only the metadata of (or none of)
// asks for the metadata alone, and the real API server sends just that, for a pod create, a
// pod patch, and a status write on the TrainingJob CRD's subresource (what write_status does);
// without such a prune the answer is the whole object, and an error is still a Status read whole.
TEST_F(OperatorTest, WritesWhoseAnswerIsNotReadAskForTheMetadataAlone) {
  lockstep::kube::Prune metadata{{{"metadata", "managedFields"}}};
  metadata.metadata_only = true;
  auto pod = [&](const std::string& name) {
    return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
  };
  auto whole = client_->create(res::kPods.path(ns_), pod("answer-whole"));
  ASSERT_TRUE(whole.ok()) << whole.message();
  EXPECT_EQ(whole.body.value("kind", ""), "Pod");
  EXPECT_TRUE(whole.body.contains("spec"));
  auto meta = client_->create(res::kPods.path(ns_), pod("answer-metadata"), &metadata);
  ASSERT_TRUE(meta.ok()) << meta.message();
  EXPECT_EQ(meta.body.value("kind", ""), "PartialObjectMetadata") << meta.body;
  EXPECT_FALSE(meta.body.contains("spec")) << meta.body;
  EXPECT_EQ(meta.body["metadata"].value("name", ""), "answer-metadata");
  EXPECT_FALSE(meta.body["metadata"].value("resourceVersion", "").empty()) << meta.body;
  EXPECT_FALSE(meta.body["metadata"].contains("managedFields")) << "pruned";
  auto patched = client_->patch(res::kPods.path(ns_, "answer-metadata"), {{"metadata", {{"labels", {{"a", "b"}}}}}},
                                lockstep::kube::PatchType::Merge, &metadata);
  ASSERT_TRUE(patched.ok()) << patched.message();
  EXPECT_EQ(patched.body.value("kind", ""), "PartialObjectMetadata") << patched.body;
  EXPECT_EQ(patched.body["metadata"]["labels"].value("a", ""), "b");
  auto discarded = client_->create(res::kPods.path(ns_), pod("answer-discarded"), &lockstep::kube::kDiscardBody);
  EXPECT_TRUE(discarded.ok()) << discarded.message();
  create_job("answer", 1);
  auto status = client_->patch(res::kTrainingJobs.path(ns_, "answer", "status"), json::object(),
                               lockstep::kube::PatchType::Merge, &metadata);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(status.body.value("kind", ""), "PartialObjectMetadata") << status.body;
  EXPECT_FALSE(status.body.contains("status")) << status.body;
  EXPECT_FALSE(status.body["metadata"].value("resourceVersion", "").empty()) << status.body;
  auto missing = client_->patch(res::kPods.path(ns_, "no-such-pod"), {{"metadata", {{"labels", {{"a", "b"}}}}}},
                                lockstep::kube::PatchType::Merge, &metadata);
  EXPECT_TRUE(missing.not_found()) << missing.status;
  EXPECT_EQ(missing.reason(), "NotFound");
}
