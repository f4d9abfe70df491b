// A fleet sharing one key on one node: 4 instances with 2,000 acquisitions in flight each against a
// limit of 500 admit exactly 500, for every algorithm.
#include <gtest/gtest.h>

#include "fleet.h"

namespace sluice::testing {
namespace {

class Accuracy : public RedisTest {};

TEST_F(Accuracy, FourInstancesAdmitExactlyTheLimitForEveryAlgorithm) {
  expect_exactly_500_admitted(server_->address());
}

}  // namespace
}  // namespace sluice::testing
