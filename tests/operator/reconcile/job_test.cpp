// What the operator keeps of a job and of a pod (reconcile/job.hpp): a template's nodeName
// (Note [Pods placed by hand]); what a pod's view reads (why it waits, its trainer's end, its
// rank, attempt and deletion) and a pod's messages, cut at a character boundary.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/contract.hpp"
#include "pod_text.hpp"
#include "reconcile/job.hpp"
#include "reconcile/time.hpp"
#include "utf8_samples.hpp"

using namespace lockstep::reconcile;
using json = nlohmann::json;
using lockstep::test::dumps;
using lockstep::test::kCharacters;
using lockstep::test::valid;

// See Note [Pods placed by hand]: a template's nodeName is read from the job (bounded, as a node's
// name), also from a job whose cached view keeps no template (Note [Cached templates]).
TEST(PlacedByHand, TheTemplatesNodeNameIsReadApartFromTheTemplate) {
  json job = {{"metadata", {{"name", "tj"}, {"namespace", "ns"}}},
              {"spec", {{"nodes", 2}, {"template", {{"spec", {{"nodeName", "worker-9"}, {"containers", json::array()}}}}}}}};
  EXPECT_EQ(JobView::from_json(job).template_node_name, "worker-9");
  job["status"] = {{"phase", "Failed"}};
  JobRecord finished = JobRecord::from_json(job);
  EXPECT_TRUE(finished.view.tmpl.empty());
  EXPECT_EQ(finished.view.template_node_name, "worker-9");
  job["spec"]["template"]["spec"]["nodeName"] = std::string(1000, 'n');
  EXPECT_EQ(JobView::from_json(job).template_node_name.size(), kMaxNodeName);
  job["spec"]["template"]["spec"].erase("nodeName");
  EXPECT_EQ(JobView::from_json(job).template_node_name, "");
  job["spec"]["template"]["spec"]["nodeName"] = 7;  // not a string: none (the API server would refuse it)
  EXPECT_EQ(JobView::from_json(job).template_node_name, "");
}

// The texts the pod informer keeps of a pod (Note [Lean caches]): the termination message's
// last 1 KiB, the waiting and scheduling messages' first, each cut at a character boundary, so
// a status or Event that quotes them can be dumped.
TEST(PodRecord, KeepsEachMessageCutAtACharacterBoundary) {
  for (const auto& c : kCharacters) {
    for (size_t shift = 0; shift < c.bytes.size(); ++shift) {
      SCOPED_TRACE(std::string(c.name) + ", shift " + std::to_string(shift));
      // The character straddles the 1,024-byte bound from each side, at each of its offsets.
      const std::string long_head = std::string(1023 - shift, 'h') + c.bytes + std::string(600, 'h');
      const std::string long_tail = std::string(600, 't') + c.bytes + std::string(1023 - shift, 't');
      const json pod = {
          {"metadata", {{"name", "tj-0"}, {"namespace", "ns"}}},
          {"status",
           {{"phase", "Pending"},
            {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                                          {"message", long_head}}})},
            {"containerStatuses",
             json::array({{{"name", "trainer"},
                           {"state", {{"waiting", {{"reason", "ErrImagePull"}, {"message", long_head}}}}}},
                          {{"name", "side"},
                           {"state", {{"terminated", {{"exitCode", 1}, {"message", long_tail}}}}}}})}}}};
      const auto record = lockstep::test::pod_record(pod);
      for (const std::string* kept : {&record.view.unschedulable_message.str(), &record.view.waiting_message.str()}) {
        EXPECT_LE(kept->size(), 1024u);
        EXPECT_GE(kept->size(), 1021u);
        EXPECT_EQ(long_head.compare(0, kept->size(), *kept), 0);
        EXPECT_TRUE(valid(*kept));
        EXPECT_TRUE(dumps(*kept));
      }
      const std::string& tail = record.view.termination_message;
      EXPECT_LE(tail.size(), 1024u);
      EXPECT_GE(tail.size(), 1021u);
      EXPECT_EQ(long_tail.compare(long_tail.size() - tail.size(), tail.size(), tail), 0);
      EXPECT_TRUE(valid(tail));
    }
  }
}

// A cached pod's messages are RareText (8 bytes each, a heap block only when set): a running
// pod's six hold nothing, a set one reads as its string, a copy is a text of its own, and an
// empty string assigned holds nothing.
TEST(RareText, HoldsNothingWhenEmptyAndReadsAsItsStringWhenSet) {
  RareText none, set("ErrImagePull"), cleared("x");
  cleared = std::string();
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(cleared.empty());
  EXPECT_EQ(none, cleared);
  EXPECT_EQ(none.str(), "");
  EXPECT_EQ(none.size(), 0u);
  EXPECT_FALSE(set.empty());
  EXPECT_EQ(set, "ErrImagePull");
  EXPECT_EQ(set, std::string("ErrImagePull"));
  EXPECT_EQ(set.size(), 12u);
  RareText copy = set;
  EXPECT_EQ(copy, set);
  copy = "ImagePullBackOff";
  EXPECT_EQ(set, "ErrImagePull");
  EXPECT_NE(copy, set);
  EXPECT_EQ("cannot start: " + set + ", " + copy, "cannot start: ErrImagePull, ImagePullBackOff");
  const std::string& read = set;
  EXPECT_EQ(read, "ErrImagePull");
  RareText moved = std::move(copy);
  EXPECT_EQ(moved, "ImagePullBackOff");

  const json running = {
      {"metadata", {{"name", "tj-0"}, {"namespace", "ns"}}},
      {"status",
       {{"phase", "Running"},
        {"containerStatuses",
         json::array({{{"name", lockstep::contract::kTrainerContainer},
                       {"state", {{"running", {{"startedAt", "2026-11-30T10:00:00Z"}}}}}}})}}}};
  const auto record = lockstep::test::pod_record(running);
  const PodView& v = record.view;
  for (const RareText* text :
       {&v.finalizers, &v.reason, &v.termination_message, &v.unschedulable_message, &v.waiting_reason, &v.waiting_message})
    EXPECT_TRUE(text->empty()) << *text;
}

TEST(PodView, ReadsWhyAPendingPodWaitsAndTheCacheKeepsIt) {
  nlohmann::json pod = {
      {"metadata", {{"name", "tj-0"}}},
      {"status",
       {{"phase", "Pending"},
        {"conditions",
         {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}, {"message", "0/1 nodes"}}}},
        {"containerStatuses",
         {{{"name", lockstep::contract::kTrainerContainer},
           {"state", {{"waiting", {{"reason", "ErrImagePull"}, {"message", std::string(5000, 'm')}}}}}}}}}}};
  for (const auto& p : {lockstep::test::pod_view(pod), lockstep::test::pod_record(pod).view}) {
    EXPECT_EQ(p.unschedulable_message, "0/1 nodes");
    EXPECT_EQ(p.waiting_reason, "ErrImagePull");
    EXPECT_GE(p.waiting_message.size(), 1024u);
  }
  EXPECT_EQ(lockstep::test::pod_record(pod).view.waiting_message.size(), 1024u);  // the cache keeps a bounded message
}

TEST(PodView, ReadsTheTrainerContainersTerminationTimeAndTheCacheKeepsIt) {
  nlohmann::json pod = {
      {"metadata", {{"name", "tj-1"}, {"labels", {{lockstep::contract::kLabelNodeRank, "1"}}}}},
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses",
         {{{"name", "sidecar"}, {"state", {{"terminated", {{"exitCode", 2}, {"finishedAt", "2026-11-22T10:00:09Z"}}}}}},
          {{"name", lockstep::contract::kTrainerContainer},
           {"state",
            {{"terminated",
              {{"exitCode", 137}, {"reason", "OOMKilled"}, {"finishedAt", "2026-11-22T10:00:05Z"}}}}}}}}}}};
  for (const auto& p : {lockstep::test::pod_view(pod), lockstep::test::pod_record(pod).view}) {
    EXPECT_EQ(p.exit_code, 137);
    EXPECT_EQ(p.reason, "OOMKilled");
    ASSERT_TRUE(p.finished_at.has_value());
    EXPECT_EQ(format_time(*p.finished_at), "2026-11-22T10:00:05Z");
  }
}

// What PodView reads of a pod: its rank and attempt labels, and for a deleted one when it is
// due to be gone and what holds it (Note [Pods that do not terminate]).
TEST(PodView, ReadsRankAttemptDeletionAndFinalizers) {
  nlohmann::json pod = {{"metadata",
                         {{"name", "tj-1"}, {"namespace", "ns"}, {"uid", "u"},
                          {"deletionTimestamp", "2027-01-15T08:00:00Z"},
                          {"finalizers", {"example.com/hold", "example.com/other"}},
                          {"labels", {{lockstep::contract::kLabelNodeRank, "1"}, {lockstep::contract::kLabelRestartAttempt, "2"}}}}},
                        {"status", {{"phase", "Running"}}}};
  PodView p = lockstep::test::pod_view(pod);
  EXPECT_EQ(p.index, 1);
  EXPECT_EQ(p.attempt, 2);
  EXPECT_TRUE(p.deleting);
  ASSERT_TRUE(p.deletion_due.has_value());
  EXPECT_EQ(format_time(*p.deletion_due), "2027-01-15T08:00:00Z");
  EXPECT_EQ(p.finalizers, "example.com/hold, example.com/other");
}
