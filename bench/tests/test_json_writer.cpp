// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "bench/json_writer.hpp"

namespace epc::bench {
namespace {

TEST(JsonWriter, NestedDocument) {
  JsonWriter j;
  j.begin_object();
  j.field("a", 1);
  j.key("b");
  j.begin_array(true);
  j.value(1.5);
  j.value(2.0);
  j.end_array();
  j.key("c");
  j.begin_object();
  j.end_object();
  j.key("d");
  j.begin_array();
  j.value(true);
  j.null();
  j.end_array();
  j.end_object();
  EXPECT_EQ(j.str(), "{\n  \"a\": 1,\n  \"b\": [1.5, 2],\n  \"c\": {},\n  \"d\": [\n    true,\n    null\n  ]\n}");
}

TEST(JsonWriter, StringsAreEscaped) { EXPECT_EQ(json_escape("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\""); }

TEST(JsonWriter, NumbersRoundTripAndNonFiniteIsNull) {
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(123.25), "123.25");
  EXPECT_EQ(json_number(1e-7), "1e-07");
  EXPECT_EQ(std::stod(json_number(1.0 / 3.0)), 1.0 / 3.0);
  EXPECT_EQ(json_number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(json_number(INFINITY), "null");
}

TEST(JsonWriter, MisuseThrows) {
  {
    JsonWriter j;
    j.begin_object();
    EXPECT_THROW(j.value(1), std::logic_error);
  }
  {
    JsonWriter j;
    j.begin_array();
    EXPECT_THROW(j.key("x"), std::logic_error);
  }
  {
    JsonWriter j;
    j.begin_object();
    EXPECT_THROW(j.str(), std::logic_error);
    EXPECT_THROW(j.end_array(), std::logic_error);
  }
}

}  // namespace
}  // namespace epc::bench
