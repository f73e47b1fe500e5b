// nn/hf_config: typed getters, fallbacks, nested objects, the dtype fields of transformers 4 and
// 5, and errors naming the source, the field and the value.
#include <gtest/gtest.h>

#include <functional>

#include "core/tensor.h"
#include "nn/hf_config.h"
#include "support/errors.h"

using loom::test::expect_error;
using namespace loom;
using namespace loom::nn;

namespace {

const char* kText = R"({"n_layer": 2, "eps": 1e-05, "half": 0.5, "name": "gpt2", "tie": true,
  "nothing": null, "rope_scaling": {"factor": 8, "rope_type": "llama3"}, "torch_dtype": "float16"})";

}  // namespace

TEST(HfConfig, Getters) {
  HfConfig c = HfConfig::parse(kText, "dir/config.json");
  EXPECT_EQ(c.source(), "dir/config.json");
  EXPECT_EQ(c.integer("n_layer"), 2);
  EXPECT_EQ(c.number("n_layer"), 2.0);  // an integer is a number
  EXPECT_EQ(c.number("eps"), 1e-5);
  EXPECT_EQ(c.string("name"), "gpt2");
  EXPECT_TRUE(c.boolean("tie"));
  EXPECT_TRUE(c.has("n_layer"));
  EXPECT_FALSE(c.has("nothing"));  // null counts as absent
  EXPECT_FALSE(c.has("absent"));
  EXPECT_EQ(c.integer("nothing", 7), 7);
  EXPECT_EQ(c.number("absent", 0.1), 0.1);
  EXPECT_EQ(c.string("absent", "x"), "x");
  EXPECT_FALSE(c.boolean("absent", false));
  EXPECT_EQ(c.text("half"), "0.5");
  EXPECT_EQ(c.text("absent"), "null");
  HfConfig rope = c.object("rope_scaling");
  EXPECT_EQ(rope.source(), "dir/config.json: rope_scaling");
  EXPECT_EQ(rope.number("factor"), 8.0);
  EXPECT_EQ(c.keys().size(), 8u);
  EXPECT_EQ(c.dtype(), kF16);  // transformers 4's "torch_dtype"
}

TEST(HfConfig, Dtypes) {
  EXPECT_EQ(HfConfig::parse(R"({"dtype": "bfloat16", "torch_dtype": "float32"})", "c").dtype(),
            kBF16);  // transformers 5's "dtype" first
  EXPECT_EQ(HfConfig::parse("{}", "c").dtype(), std::nullopt);
  expect_error([] { HfConfig::parse(R"({"dtype": "int8"})", "c.json").dtype(); },
               {"c.json", "\"dtype\"", "\"int8\""});
  EXPECT_STREQ(torch_dtype_name(kBF16), "bfloat16");
  EXPECT_STREQ(torch_dtype_name(kF32), "float32");
  EXPECT_THROW(torch_dtype_name(kI64), Error);
}

TEST(HfConfig, ErrorsNameTheFieldAndValue) {
  HfConfig c = HfConfig::parse(kText, "dir/config.json");
  expect_error([&] { c.integer("eps"); }, {"dir/config.json", "\"eps\"", "1e-05", "an integer"});
  expect_error([&] { c.integer("absent"); }, {"dir/config.json", "\"absent\"", "missing"});
  expect_error([&] { c.number("name"); }, {"\"name\"", "\"gpt2\"", "a number"});
  expect_error([&] { c.boolean("n_layer"); }, {"\"n_layer\"", "true or false"});
  expect_error([&] { c.string("tie"); }, {"\"tie\"", "a string"});
  expect_error([&] { c.object("name"); }, {"\"name\"", "an object"});
  expect_error([&] { c.object("rope_scaling").integer("rope_type"); },
               {"dir/config.json: rope_scaling", "\"rope_type\""});
  expect_error([] { HfConfig::parse("[1, 2]", "a.json"); }, {"a.json", "JSON object"});
  expect_error([] { HfConfig::parse("{\"a\": ", "a.json"); }, {"a.json", "not valid JSON"});
  expect_error([] { HfConfig::read("/nonexistent/config.json"); },
               {"/nonexistent/config.json", "cannot open"});
}

// generation_config.json's eos_token_id is one id or a list of them.
TEST(HfConfig, IntegersReadOneOrAList) {
  HfConfig c =
      HfConfig::parse(R"({"one": 2, "list": [128001, 128009], "bad": [1, "x"]})", "g.json");
  EXPECT_EQ(c.integers("one"), (std::vector<int64_t>{2}));
  EXPECT_EQ(c.integers("list"), (std::vector<int64_t>{128001, 128009}));
  expect_error([&] { c.integers("bad"); },
               {"g.json", "\"bad\"", "an integer or a list of integers"});
}
