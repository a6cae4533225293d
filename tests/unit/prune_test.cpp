// parse_pruned (Note [Pruned parsing]): the document json::parse builds, less the dropped
// subtrees, wherever the objects sit in the response.
#include <gtest/gtest.h>

#include <random>

#include "kube/prune.hpp"

using lockstep::kube::parse_pruned;
using lockstep::kube::Prune;
using lockstep::kube::PruneRoot;
using nlohmann::json;

namespace {

json pod(const std::string& name) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"labels", {{"app", "x"}}},
            {"managedFields", {{{"manager", "kubectl"}, {"fieldsV1", {{"f:spec", {{"f:containers", json::object()}}}}}}}}}},
          {"spec", {{"containers", {{{"name", "c"}, {"env", {{{"name", "A"}, {"value", "1"}}}}}}}, {"nodeName", "n1"}}},
          {"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}, {"spec", "kept"}}}};
}

json without(json obj) {
  obj.erase("spec");
  obj["metadata"].erase("managedFields");
  return obj;
}

const Prune kPodPrune{{{"spec"}, {"metadata", "managedFields"}}};

}  // namespace

TEST(Prune, NoRulesParsesEverything) {
  std::string text = pod("a").dump();
  EXPECT_EQ(parse_pruned(text, nullptr, PruneRoot::Document), json::parse(text));
  Prune none;
  EXPECT_EQ(parse_pruned(text, &none, PruneRoot::ListItems), json::parse(text));
}

TEST(Prune, DropsSubtreesOfTheDocument) {
  // status.spec is not the object's spec: rules are paths from the object's root.
  EXPECT_EQ(parse_pruned(pod("a").dump(), &kPodPrune, PruneRoot::Document), without(pod("a")));
}

TEST(Prune, DropsSubtreesOfAWatchEventsObjectOnly) {
  json event = {{"type", "MODIFIED"}, {"object", pod("a")}, {"spec", "outside the object"}};
  json want = event;
  want["object"] = without(pod("a"));
  EXPECT_EQ(parse_pruned(event.dump(), &kPodPrune, PruneRoot::WatchObject), want);
}

TEST(Prune, DropsSubtreesOfEveryListItem) {
  json list = {{"kind", "PodList"},
               {"metadata", {{"resourceVersion", "42"}, {"managedFields", "the list's own"}}},
               {"items", {pod("a"), pod("b"), json::object(), pod("c")}}};
  json want = list;
  want["items"] = {without(pod("a")), without(pod("b")), json::object(), without(pod("c"))};
  EXPECT_EQ(parse_pruned(list.dump(), &kPodPrune, PruneRoot::ListItems), want);
}

TEST(Prune, AStarMatchesAnyKey) {
  Prune p{{{"status", "*"}}};
  json want = pod("a");
  want["status"] = json::object();
  EXPECT_EQ(parse_pruned(pod("a").dump(), &p, PruneRoot::Document), want);
  Prune deep{{{"metadata", "labels", "app"}}};
  want = pod("a");
  want["metadata"]["labels"] = json::object();
  EXPECT_EQ(parse_pruned(pod("a").dump(), &deep, PruneRoot::Document), want);
}

TEST(Prune, NotJsonIsDiscardedAsByParse) {
  for (const char* bad : {"", "{", "{\"a\": }", "[1, 2", "{\"spec\": {\"x\": [1, 2}}"}) {
    EXPECT_TRUE(parse_pruned(bad, &kPodPrune, PruneRoot::Document).is_discarded()) << bad;
    EXPECT_TRUE(json::parse(bad, nullptr, false).is_discarded()) << bad;
  }
}

TEST(Prune, ScalarsAndArraysAtTheRootAndEverywhere) {
  for (const char* text : {"3", "\"s\"", "null", "[1, {\"spec\": 2}, [true, false]]", "{\"a\": [[], {}, [{}]]}",
                           "{\"spec\": [1, [2, {\"x\": 3}]], \"b\": 1.5, \"c\": -7, \"d\": 18446744073709551615}"}) {
    json full = json::parse(text);
    json want = full;
    if (want.is_object()) want.erase("spec");
    EXPECT_EQ(parse_pruned(text, &kPodPrune, PruneRoot::Document), want) << text;
  }
}

// Random documents: the pruned parse equals the full parse with the rules' subtrees erased.
TEST(Prune, MatchesParseThenEraseOnRandomDocuments) {
  std::mt19937 rng(7);
  const std::vector<std::string> keys = {"spec", "status", "metadata", "managedFields", "a", "b"};
  std::function<json(int)> gen = [&](int depth) -> json {
    int kind = std::uniform_int_distribution<int>(0, depth > 4 ? 3 : 5)(rng);
    switch (kind) {
      case 0: return nullptr;
      case 1: return std::uniform_int_distribution<int>(-5, 5)(rng);
      case 2: return std::string(std::uniform_int_distribution<int>(0, 20)(rng), 'x');
      case 3: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
      case 4: {
        json a = json::array();
        for (int i = std::uniform_int_distribution<int>(0, 3)(rng); i > 0; --i) a.push_back(gen(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = std::uniform_int_distribution<int>(0, 4)(rng); i > 0; --i)
          o[keys[std::uniform_int_distribution<size_t>(0, keys.size() - 1)(rng)]] = gen(depth + 1);
        return o;
      }
    }
  };
  auto erase_rules = [](json doc) {
    if (!doc.is_object()) return doc;
    doc.erase("spec");
    if (doc.contains("metadata") && doc["metadata"].is_object()) doc["metadata"].erase("managedFields");
    return doc;
  };
  for (int i = 0; i < 500; ++i) {
    json doc = gen(0);
    EXPECT_EQ(parse_pruned(doc.dump(), &kPodPrune, PruneRoot::Document), erase_rules(doc)) << doc.dump();
    json list = {{"items", json::array({doc, gen(1)})}};
    json want = list;
    for (auto& item : want["items"]) item = erase_rules(item);
    EXPECT_EQ(parse_pruned(list.dump(), &kPodPrune, PruneRoot::ListItems), want) << list.dump();
  }
}

TEST(Prune, DiscardBodyReadsNothing) {
  // Not even whether it is JSON: the caller reads only the status code.
  EXPECT_EQ(parse_pruned(pod("a").dump(), &lockstep::kube::kDiscardBody, PruneRoot::Document), json::object());
  EXPECT_EQ(parse_pruned("not json", &lockstep::kube::kDiscardBody, PruneRoot::Document), json::object());
}
