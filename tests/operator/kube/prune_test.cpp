// parse_pruned (Note [Pruned parsing]): the document json::parse builds, less the dropped
// subtrees, wherever the objects sit in the response.
#include <gtest/gtest.h>

#include <limits>
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

// Keep rules are exceptions to the drop rules: a pod's spec.nodeName and spec.tolerations are
// read while the rest of its spec is not, in a parse and a list alike.
TEST(Prune, AKeepRuleReadsAMemberThatADropRuleWouldSkip) {
  json doc = pod("a");
  doc["spec"]["tolerations"] = {{{"key", "k"}, {"operator", "Exists"}, {"effect", "NoExecute"}}};
  doc["status"]["nodeName"] = "not-kept";  // the same key elsewhere is untouched by the rules
  Prune p{{{"spec", "*"}, {"status", "nodeName"}}, false, {{"spec", "nodeName"}, {"spec", "tolerations"}}};
  json want = doc;
  want["spec"].erase("containers");
  want["status"].erase("nodeName");
  EXPECT_EQ(parse_pruned(doc.dump(), &p, PruneRoot::Document), want);
  EXPECT_EQ(parse_pruned(json{{"type", "ADDED"}, {"object", doc}}.dump(), &p, PruneRoot::WatchObject)["object"], want);
  EXPECT_EQ(parse_pruned(json{{"items", {doc}}}.dump(), &p, PruneRoot::ListItems)["items"][0], want);
  // A keep rule alone drops nothing.
  Prune keep_only{{}, false, {{"spec", "nodeName"}}};
  EXPECT_EQ(parse_pruned(doc.dump(), &keep_only, PruneRoot::Document), doc);
  // A keep rule deeper than the drop rule that matches does not bring back what is under it.
  Prune deeper{{{"spec"}}, false, {{"spec", "nodeName"}}};
  json no_spec = doc;
  no_spec.erase("spec");
  EXPECT_EQ(parse_pruned(doc.dump(), &deeper, PruneRoot::Document), no_spec);
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
      case 1:
        switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
          case 0: return std::uniform_int_distribution<std::int64_t>(std::numeric_limits<std::int64_t>::min(), 5)(rng);
          case 1: return std::uniform_int_distribution<std::uint64_t>(0, std::numeric_limits<std::uint64_t>::max())(rng);
          default: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
        }
      case 2: {  // quotes, backslashes, control characters and multi-byte characters among plain ones
        static const std::vector<std::string> parts = {"x", "\"", "\\", "\n", "\t", "\x01", "}", "]", "\u00e9", "\u20ac", "\U0001F600", "/"};
        std::string str;
        for (int i = std::uniform_int_distribution<int>(0, 12)(rng); i > 0; --i)
          str += parts[std::uniform_int_distribution<size_t>(0, parts.size() - 1)(rng)];
        return str;
      }
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

TEST(Prune, StringsAndNumbersAsParseReadsThem) {
  // Escapes (surrogate pairs included), numbers at the edges of each type, and dropped
  // subtrees holding the same: the pruned parse builds what json::parse builds.
  std::string text = R"({"s": "a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00 \u0000x", "k\u00e9y": 1,
    "u": 18446744073709551615, "big": 18446744073709551616, "i": -9223372036854775808,
    "small": -9223372036854775809, "z": -0, "f": 1.5e-3, "e": 2E+2, "tiny": 1e-400,
    "spec": {"s": "}\"]", "a": [1, {"b": "\\"}], "n": -1.5e3},
    "metadata": {"managedFields": [{"x": "\"{["}], "name": "n"},
    "arr": [true, false, null, [], {}, "", 0]})";
  json full = json::parse(text);
  json pruned = parse_pruned(text, &kPodPrune, PruneRoot::Document);
  json want = without(full);
  EXPECT_EQ(pruned, want);
  EXPECT_EQ(pruned.dump(), want.dump());  // the same types: unsigned, signed, double
  EXPECT_EQ(pruned["u"].type(), json::value_t::number_unsigned);
  EXPECT_EQ(pruned["i"].type(), json::value_t::number_integer);
  EXPECT_EQ(pruned["small"].type(), json::value_t::number_float);
  EXPECT_EQ(pruned["s"].get<std::string>(), full["s"].get<std::string>());
}

TEST(Prune, MalformedTextIsDiscardedWhereParseRefusesIt) {
  for (const char* bad : {"{\"a\": tru}", "{\"a\": 01}", "{\"a\": 1.}", "{\"a\": -}", "{\"a\": \"\\x\"}",
                          "{\"a\": \"\\ud800\"}", "{\"a\": \"\\udc00\"}", "{\"a\": 1,}", "[1,]", "{\"a\" 1}",
                          "{a: 1}", "{\"a\": 1} x", "{\"a\": \"tab\there\"}", "{\"spec\": {\"a\": \"x}", "{\"a\": 1e400}"}) {
    EXPECT_TRUE(json::parse(bad, nullptr, false).is_discarded()) << bad;
    EXPECT_TRUE(parse_pruned(bad, &kPodPrune, PruneRoot::Document).is_discarded()) << bad;
  }
}

