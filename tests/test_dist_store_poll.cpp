// A look at the rendezvous store for another rank's key: its answer counts even when
// that rank set it and then aborted while this rank was looking.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>

#include "src/dist/store_poll.h"

namespace tiergen::dist {
namespace {

constexpr const char* kKey = "agree/job/1";
constexpr const char* kAbort = "abort";

// A store that another rank writes to right after this rank's first read of it.
struct RacedStore {
  std::set<std::string> keys;
  std::function<void(std::set<std::string>&)> other_rank_acts;
  bool read_once = false;
  bool has(const char* name) {
    const bool found = keys.count(name) > 0;
    if (!read_once && other_rank_acts) other_rank_acts(keys);
    read_once = true;
    return found;
  }
};

StoreLook look(RacedStore& store) {
  return look_for_key([&](const char* name) { return store.has(name); }, kKey, kAbort);
}

TEST(StorePoll, AnAnswerSetJustBeforeTheRankAbortedIsReadAsTheAnswer) {
  RacedStore store;
  store.other_rank_acts = [](std::set<std::string>& keys) {
    keys.insert(kKey);    // rank 1 gives its job ...
    keys.insert(kAbort);  // ... finds that rank 0's differs, and fails
  };
  EXPECT_EQ(look(store), StoreLook::KeyPresent);
}

TEST(StorePoll, AnAbortWithoutTheKeyEndsTheWait) {
  RacedStore store;
  store.keys = {kAbort, "agree/job/2"};
  EXPECT_EQ(look(store), StoreLook::Aborted);
}

TEST(StorePoll, NothingYetKeepsWaitingAndAPresentKeyWinsOverAnAbort) {
  RacedStore empty;
  EXPECT_EQ(look(empty), StoreLook::NeitherYet);
  RacedStore both;
  both.keys = {kKey, kAbort};
  EXPECT_EQ(look(both), StoreLook::KeyPresent);
}

}  // namespace
}  // namespace tiergen::dist
