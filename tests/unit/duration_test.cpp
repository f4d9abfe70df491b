// Durations as written in configuration: parsing and the shortest exact spelling.
#include "core/duration.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(Duration, ParsesEveryUnit) {
  EXPECT_EQ(parse_duration("250ms"), Nanos{250ms});
  EXPECT_EQ(parse_duration("15s"), Nanos{15s});
  EXPECT_EQ(parse_duration("1m"), Nanos{1min});
  EXPECT_EQ(parse_duration("2h"), Nanos{2h});
  EXPECT_EQ(parse_duration("7d"), Nanos{168h});
  EXPECT_EQ(parse_duration("5us"), Nanos{5us});
  EXPECT_EQ(parse_duration("5ns"), Nanos{5});
}

TEST(Duration, RefusesWhatIsNotADuration) {
  EXPECT_FALSE(parse_duration(""));
  EXPECT_FALSE(parse_duration("s"));
  EXPECT_FALSE(parse_duration("10"));
  EXPECT_FALSE(parse_duration("-1s"));
  EXPECT_FALSE(parse_duration("1.5s"));
  EXPECT_FALSE(parse_duration("1 s"));
  EXPECT_FALSE(parse_duration("10sec"));
  EXPECT_FALSE(parse_duration("99999999999999999d"));
}

TEST(Duration, FormatsWithTheLargestExactUnit) {
  EXPECT_EQ(format_duration(60s), "1m");
  EXPECT_EQ(format_duration(1500ms), "1500ms");
  EXPECT_EQ(format_duration(48h), "2d");
  EXPECT_EQ(format_duration(0s), "0s");
  EXPECT_EQ(format_duration(Nanos{7}), "7ns");
}

}  // namespace
}  // namespace sluice
