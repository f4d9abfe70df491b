// A fleet sharing one key on one node: 4 instances with 2,000 acquisitions in flight each against a
// limit of 500 admit exactly 500, for every algorithm.
#include <gtest/gtest.h>

#include "fleet.h"

namespace sluice::testing {
namespace {

class Accuracy : public RedisTest {};

TEST_F(Accuracy, FourInstancesAdmitExactlyTheLimitForEveryAlgorithm) {
  for (const Limit& limit : limits_of_500()) {
    const FleetOutcome o = run_fleet(server_->address(), limit, "shared:" + limit.to_string());
    EXPECT_EQ(o.errors, 0) << limit.to_string() << ": " << o.first_error;
    EXPECT_EQ(o.admitted, 500) << limit.to_string();
    EXPECT_EQ(o.rejected, 8000 - 500) << limit.to_string();
  }
}

}  // namespace
}  // namespace sluice::testing
